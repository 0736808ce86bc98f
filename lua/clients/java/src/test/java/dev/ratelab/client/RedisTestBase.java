package dev.ratelab.client;

import io.lettuce.core.RedisClient;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.sync.RedisCommands;
import io.lettuce.core.codec.ByteArrayCodec;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;

/** One redis-server for a test class, a plain Lettuce client to look at it, and a prefix per test. */
abstract class RedisTestBase {
    static final Quota QUOTA = Quota.perSecond(5).withBurst(10);
    /** An arbitrary instant on the caller's clock, µs. */
    static final long T0 = 1_700_000_000_000_000L;
    private static final AtomicInteger PREFIXES = new AtomicInteger();

    static RedisServer server;
    static Redis redis;
    static RedisClient plainClient;
    static StatefulRedisConnection<byte[], byte[]> plain;
    static RedisCommands<byte[], byte[]> raw;

    final List<AutoCloseable> closeAfter = new ArrayList<>();
    final String prefix = getClass().getSimpleName() + ProcessHandle.current().pid() + "-" + PREFIXES.incrementAndGet();

    @BeforeAll
    static void startServer() {
        server = RedisServer.start();
        redis = Redis.connect(server.url());
        plainClient = RedisClient.create(server.url());
        plain = plainClient.connect(ByteArrayCodec.INSTANCE);
        raw = plain.sync();
    }

    @AfterAll
    static void stopServer() {
        plain.close();
        plainClient.shutdown();
        redis.close();
        server.close();
    }

    @AfterEach
    void closeOwn() throws Exception {
        for (AutoCloseable c : closeAfter) {
            c.close();
        }
    }

    /** A settable clock, µs. */
    static final class Clock implements LongSupplier {
        final AtomicLong now;

        Clock(long now) {
            this.now = new AtomicLong(now);
        }

        Clock() {
            this(T0);
        }

        void set(long micros) {
            now.set(micros);
        }

        @Override
        public long getAsLong() {
            return now.get();
        }
    }

    /** A limiter on the class's server; a loaded machine's slow answer is not what these tests test: 5 s. */
    Limiter.Builder limiter(String algorithm, Quota quota) {
        return Limiter.builder(redis, algorithm, quota).prefix(prefix).timeout(java.time.Duration.ofSeconds(5));
    }

    static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
