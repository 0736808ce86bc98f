package dev.ratelab.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.sentinel.api.StatefulRedisSentinelConnection;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.function.BooleanSupplier;

import org.junit.jupiter.api.Test;

/**
 * The limiter through Sentinel: a primary, its replica and a sentinel, all
 * real processes. The primary is killed; the sentinel promotes the replica;
 * the limiter, asking the sentinel where the primary is on reconnecting,
 * carries on against it with the state the replica holds. While there is no
 * primary, checks fail as outages (never as data errors).
 */
class SentinelTest {
    static final String SERVICE = "ratelab-primary";

    @Test
    void aFailoverThroughTheSentinelKeepsTheReplicatedState() throws Exception {
        try (RedisServer primary = RedisServer.start("--repl-diskless-sync-delay", "0");
             RedisServer replica = RedisServer.start("--replicaof", "127.0.0.1", String.valueOf(primary.port))) {
            Path dir = Files.createTempDirectory("ratelab-java-sentinel-");
            int port = RedisServer.freePort();
            Path config = dir.resolve("sentinel.conf");
            Files.writeString(config, "port " + port + "\nbind 127.0.0.1\ndir " + dir + "\nlogfile " + dir.resolve("sentinel.log")
                    + "\nsentinel monitor " + SERVICE + " 127.0.0.1 " + primary.port + " 1\n"
                    + "sentinel down-after-milliseconds " + SERVICE + " 300\n"
                    + "sentinel failover-timeout " + SERVICE + " 2000\n");
            Process sentinel = new ProcessBuilder(RedisServer.binary(), config.toString(), "--sentinel")
                    .redirectErrorStream(true).redirectOutput(dir.resolve("out.log").toFile()).start();
            try {
                waitFor(() -> primaryPort(port) == primary.port, "the sentinel did not see the primary");
                waitFor(() -> String.valueOf(replicaInfo(replica)).contains("master_link_status:up"), "the replica did not sync");
                try (Redis redis = Redis.sentinel(SERVICE, "127.0.0.1:" + port).build()) {
                    Limiter limiter = Limiter.builder(redis, "gcra", Quota.perHour(10)).prefix("sentinel")
                            .timeout(Duration.ofSeconds(1)).breaker(0, Duration.ZERO).build();
                    for (long left : new long[] {9, 8, 7}) {
                        assertEquals(left, limiter.check("k", 1).remaining());
                    }
                    // Every admission on the replica before the primary goes: this test is about finding
                    // the new primary, not about what asynchronous replication may lose.
                    long offset = replicationOffset(primary, "master_repl_offset");
                    waitFor(() -> replicationOffset(replica, "slave_repl_offset") >= offset, "the replica did not catch up");
                    primary.kill();
                    int outages = 0;
                    long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
                    Decision decision;
                    while (true) {
                        try {
                            decision = limiter.check("k", 1);
                            break;
                        } catch (UnavailableException e) {
                            outages++;
                        }
                        if (System.nanoTime() > deadline) {
                            fail("no new primary within 30 s (" + outages + " outages)");
                        }
                        RedisServer.sleep(50);
                    }
                    assertEquals(replica.port, primaryPort(port));
                    assertEquals(6, decision.remaining());
                    assertEquals(6, limiter.peek("k", 0).remaining());
                    System.out.println(outages + " checks failed as outages during the failover, then served");
                }
            } finally {
                sentinel.destroyForcibly().waitFor();
            }
        }
    }

    private static String replicaInfo(RedisServer replica) {
        try (RedisClient c = RedisClient.create(replica.url()); StatefulRedisConnection<String, String> conn = c.connect()) {
            return conn.sync().info("replication");
        } catch (RuntimeException e) {
            return null;
        }
    }

    /** A field of {@code INFO replication}, or -1. */
    private static long replicationOffset(RedisServer server, String field) {
        String info = replicaInfo(server);
        if (info != null) {
            for (String line : info.split("\r?\n")) {
                if (line.startsWith(field + ":")) {
                    return Long.parseLong(line.substring(field.length() + 1).trim());
                }
            }
        }
        return -1;
    }

    private static int primaryPort(int sentinelPort) {
        try (RedisClient c = RedisClient.create(RedisURI.create("redis://127.0.0.1:" + sentinelPort));
             StatefulRedisSentinelConnection<String, String> conn = c.connectSentinel()) {
            java.net.SocketAddress address = conn.sync().getMasterAddrByName(SERVICE);
            return address == null ? -1 : ((InetSocketAddress) address).getPort();
        } catch (RuntimeException e) {
            return -1;
        }
    }

    private static void waitFor(BooleanSupplier ready, String what) {
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (!ready.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail(what);
            }
            RedisServer.sleep(50);
        }
    }

}
