package dev.ratelab.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.lettuce.core.RedisClient;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.cluster.SlotHash;

import java.io.File;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The limiter on a real Redis Cluster (three masters joined by
 * {@code redis-cli --cluster create}): keys in every slot, the script loaded
 * on each master after {@code NOSCRIPT}, one clock sample of every master,
 * and a paused master timing its checks out uncharged.
 */
class ClusterTest {
    static final Quota QUOTA = Quota.perMinute(10);
    static final List<RedisServer> NODES = new ArrayList<>();

    @BeforeAll
    static void startCluster() throws IOException, InterruptedException {
        for (int i = 0; i < 3; i++) {
            NODES.add(RedisServer.start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"));
        }
        List<String> cmd = new ArrayList<>(List.of(cli(), "--cluster", "create"));
        for (RedisServer n : NODES) {
            cmd.add("127.0.0.1:" + n.port);
        }
        cmd.addAll(List.of("--cluster-replicas", "0", "--cluster-yes"));
        Process create = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(File.createTempFile("ratelab-cluster", ".log")).start();
        if (create.waitFor() != 0) {
            fail("redis-cli --cluster create failed");
        }
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (!NODES.stream().allMatch(n -> String.valueOf(n.command("CLUSTER", "INFO")).contains("cluster_state:ok")
                || clusterOk(n))) {
            if (System.nanoTime() > deadline) {
                fail("the cluster did not come up");
            }
            RedisServer.sleep(100);
        }
    }

    private static boolean clusterOk(RedisServer n) {
        try (RedisClient c = RedisClient.create(n.url()); StatefulRedisConnection<String, String> conn = c.connect()) {
            return conn.sync().clusterInfo().contains("cluster_state:ok");
        }
    }

    static String cli() {
        for (String dir : System.getenv().getOrDefault("PATH", "").split(":")) {
            if (new File(dir, "redis-cli").canExecute()) {
                return new File(dir, "redis-cli").getPath();
            }
        }
        fail("redis-cli not found: install it (Debian/Ubuntu: sudo apt-get install redis-tools)");
        return null;
    }

    @AfterAll
    static void stopCluster() {
        NODES.forEach(RedisServer::close);
    }

    static Redis connect() {
        return Redis.cluster(NODES.stream().map(RedisServer::url).toArray(String[]::new)).build();
    }

    @Test
    void checksOnEveryMaster() {
        try (Redis redis = connect()) {
            Limiter limiter = Limiter.builder(redis, "gcra", QUOTA).prefix("cluster").timeout(Duration.ofSeconds(5))
                    .backend(Limiter.Backend.SCRIPT).build();
            // The build loaded the script in the background: flushed after it.
            limiter.warming().join();
            for (RedisServer n : NODES) {
                n.command("SCRIPT", "FLUSH");
            }
            for (int i = 0; i < 30; i++) {
                assertEquals(7, limiter.check("user" + i, 3).remaining());
            }
            for (int i = 0; i < 30; i++) {
                assertEquals(7, limiter.peek("user" + i, 0).remaining());
            }
            Stats stats = limiter.stats();
            assertEquals(List.of(60L, 1L, 0L, 0L), List.of(stats.answered(), stats.clockSamples(), stats.timeouts(), stats.errors()));
            assertTrue(stats.reloads() >= 1 && stats.reloads() <= 3, stats.toString());
            for (RedisServer n : NODES) {
                assertTrue(Long.parseLong(n.command("DBSIZE").substring(1)) > 0, "every master holds some keys");
            }
        }
    }

    @Test
    void theModulelessClusterIsDetectedByTheCommandItself() {
        // Backend.AUTO on a cluster sends the module's command, routed by key; no node has it:
        // the call goes to the script, and the module is not tried again for a while.
        try (Redis redis = connect()) {
            Limiter limiter = Limiter.builder(redis, "token-bucket", QUOTA).prefix("clusterauto")
                    .timeout(Duration.ofSeconds(5)).build();
            for (int i = 0; i < 5; i++) {
                assertEquals(9, limiter.check("auto" + i, 1).remaining());
            }
            assertEquals(List.of(1L, 5L), List.of(limiter.stats().moduleCalls(), limiter.stats().scriptCalls()));
        }
    }

    @Test
    void aPausedMasterTimesOutUncharged() {
        try (Redis redis = connect()) {
            Limiter limiter = Limiter.builder(redis, "gcra", QUOTA).prefix("clusterpause")
                    .timeout(Duration.ofMillis(200)).breaker(0, Duration.ZERO).noQuotaCheck().build();
            // A key on the first master.
            int[] slots = slotsOf(NODES.get(0));
            String key = null;
            for (int i = 0; i < 10_000 && key == null; i++) {
                int slot = SlotHash.getSlot(limiter.redisKey("k" + i));
                if (slot >= slots[0] && slot <= slots[1]) {
                    key = "k" + i;
                }
            }
            String k = key;
            assertEquals(9, limiter.withTimeout(Duration.ofSeconds(5)).check(k, 1).remaining());
            NODES.get(0).pause();
            try {
                assertThrows(TimedOutException.class, () -> limiter.check(k, 1));
            } finally {
                NODES.get(0).resume();
            }
            ResilienceTest.settled(limiter);
            assertEquals(9, limiter.withTimeout(Duration.ofSeconds(5)).peek(k, 0).remaining());
        }
    }

    /** The first slot range a node serves. */
    private static int[] slotsOf(RedisServer node) {
        try (RedisClient c = RedisClient.create(node.url()); StatefulRedisConnection<String, String> conn = c.connect()) {
            String myId = conn.sync().clusterMyId();
            for (Object slot : conn.sync().clusterSlots()) {
                List<?> range = (List<?>) slot;
                List<?> master = (List<?>) range.get(2);
                if (master.size() > 2 && myId.equals(String.valueOf(master.get(2)))) {
                    return new int[] {((Long) range.get(0)).intValue(), ((Long) range.get(1)).intValue()};
                }
            }
        }
        throw new AssertionError("no slots on " + node.url());
    }
}
