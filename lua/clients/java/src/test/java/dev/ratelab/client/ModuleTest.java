package dev.ratelab.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.api.Test;

/**
 * The native module ({@code RATELAB_MODULE_PATH}): where the server has it,
 * {@link Limiter.Backend#AUTO} sends its commands, peeks go to the read-only
 * twins, and module and scripts decide alike on one key; where it has not,
 * the scripts run, and {@link Limiter.Backend#MODULE} is a clear data error.
 */
class ModuleTest {
    static RedisServer withModule;
    static Redis redis;
    static final Quota QUOTA = Quota.perSecond(5).withBurst(10);
    static final long T0 = 1_700_000_000_000_000L;

    @BeforeAll
    static void start() {
        withModule = RedisServer.withModule();
        redis = Redis.connect(withModule.url());
    }

    @AfterAll
    static void stop() {
        redis.close();
        withModule.close();
    }

    static List<String> algorithms() {
        return Protocol.algorithms();
    }

    @ParameterizedTest
    @MethodSource("algorithms")
    void moduleAndScriptsDecideAlikeOnOneKey(String name) {
        long[] now = {T0};
        Limiter module = Limiter.builder(redis, name, QUOTA).prefix("module").clock(() -> now[0])
                .timeout(Duration.ofSeconds(5)).build();
        Limiter script = Limiter.builder(redis, name, QUOTA).prefix("module").clock(() -> now[0])
                .timeout(Duration.ofSeconds(5)).backend(Limiter.Backend.SCRIPT).build();
        List<Decision> alternating = new ArrayList<>();
        List<Decision> scriptAlone = new ArrayList<>();
        long[] costs = {3, 2, 4, 1, 2, 3, 1};
        for (int i = 0; i < costs.length; i++) {
            now[0] = T0 + i * 150_000L;
            alternating.add((i % 2 == 0 ? module : script).check("shared", costs[i]));
            scriptAlone.add(script.check("alone", costs[i]));
        }
        assertEquals(scriptAlone, alternating);
        Receipt r = module.check("shared", 1).receipt().orElse(null);
        Decision peeked = module.peek("shared", 0);
        assertEquals(script.peek("shared", 0), peeked);
        if (r != null) {
            // A receipt of the module's check, settled by the module; the scripts see it.
            assertEquals(module.refund(r), script.peek("shared", 0));
        }
        assertTrue(module.stats().moduleCalls() > 0);
        assertEquals(0, module.stats().scriptCalls());
    }

    @Test
    void withoutTheModuleTheScriptsRunAndModuleOnlyIsAClearError() {
        try (RedisServer plain = RedisServer.start(); Redis r = Redis.connect(plain.url())) {
            Limiter auto = Limiter.builder(r, "gcra", QUOTA).timeout(Duration.ofSeconds(5)).build();
            assertEquals(9, auto.check("k", 1).remaining());
            assertEquals(List.of(0L, 1L), List.of(auto.stats().moduleCalls(), auto.stats().scriptCalls()));
            Limiter only = Limiter.builder(r, "gcra", QUOTA).timeout(Duration.ofSeconds(5)).backend(Limiter.Backend.MODULE).build();
            DataException e = assertThrows(DataException.class, () -> only.check("k", 1));
            assertTrue(e.getMessage().contains("is not loaded"), e.getMessage());
        }
    }
}
