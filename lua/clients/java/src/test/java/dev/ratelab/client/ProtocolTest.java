package dev.ratelab.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The pure protocol: the shared test vectors (lua/clients/vectors.json, which
 * the Rust, Python and Node tests check too), the scripts the jar ships equal
 * to lua/ byte for byte, and quotas validated as Rust validates them.
 */
class ProtocolTest {
    static final Map<String, Object> VECTORS = Repo.json("clients/vectors.json");
    static final Map<String, Object> SPEC = Repo.json("clients/algorithms.json");

    @Test
    void versionKeyLengthAndSlackAreTheVectors() {
        assertEquals(Repo.n(VECTORS.get("protocol_version")), Protocol.version());
        assertEquals(Repo.n(SPEC.get("protocol_version")), Protocol.version());
        assertEquals(Repo.n(VECTORS.get("max_key_len")), Protocol.MAX_KEY_LEN);
        assertEquals(Repo.n(VECTORS.get("max_ttl_slack_ms")), Protocol.MAX_TTL_SLACK_MS);
    }

    static Stream<Map<String, Object>> algorithmVectors() {
        return Repo.list(VECTORS.get("algorithms")).stream();
    }

    @ParameterizedTest
    @MethodSource("algorithmVectors")
    void parametersAndFingerprintsAreTheVectors(Map<String, Object> v) {
        Map<String, Object> q = Repo.map(v.get("quota"));
        Algorithm a = Algorithm.of((String) v.get("algorithm"), Quota.of(Repo.n(q.get("limit")), Repo.n(q.get("period_us")), Repo.n(q.get("burst"))));
        assertEquals(v.get("code"), a.code());
        assertEquals(v.get("script"), a.scriptFile());
        assertEquals(v.get("params"), a.params());
        assertEquals(Repo.n(v.get("capacity")), a.capacity());
        assertEquals(Repo.n(v.get("max_wait_us")), a.maxWaitMicros());
        assertEquals(v.get("debt"), a.debt());
        assertEquals(v.get("fingerprint_input"), a.fingerprintInput());
        assertEquals(v.get("key_suffix"), a.keySuffix());
    }

    @Test
    void everyAlgorithmHasVectorsAndTheSpecIsReadInRustsOrder() {
        List<String> names = new ArrayList<>();
        for (Map<String, Object> a : Repo.list(SPEC.get("algorithms"))) {
            names.add((String) a.get("name"));
        }
        assertEquals(names, Protocol.algorithms());
        assertEquals(java.util.Set.copyOf(names),
                algorithmVectors().map(v -> (String) v.get("algorithm")).collect(java.util.stream.Collectors.toSet()));
    }

    static Stream<Map<String, Object>> keyVectors() {
        return Repo.list(VECTORS.get("keys")).stream();
    }

    @ParameterizedTest
    @MethodSource("keyVectors")
    void keysAreTheVectors(Map<String, Object> v) {
        HexFormat hex = HexFormat.of();
        byte[] expected = hex.parseHex((String) v.get("redis_key_hex"));
        assertArrayEquals(expected, Protocol.redisKey((String) v.get("prefix"), hex.parseHex((String) v.get("key_hex")), (String) v.get("suffix")));
        if (v.containsKey("key")) {
            // A String key is its UTF-8 bytes.
            assertArrayEquals(expected, Protocol.redisKey((String) v.get("prefix"), ((String) v.get("key")).getBytes(StandardCharsets.UTF_8), (String) v.get("suffix")));
            assertArrayEquals(expected, ((String) v.get("redis_key")).getBytes(StandardCharsets.UTF_8));
        }
    }

    @Test
    void theScriptsAreTheFilesInLuaByteForByte() {
        byte[] prologue = Repo.bytes("prologue.lua");
        for (Map<String, Object> a : Repo.list(SPEC.get("algorithms"))) {
            byte[] body = Repo.bytes((String) a.get("script"));
            byte[] expected = new byte[prologue.length + body.length];
            System.arraycopy(prologue, 0, expected, 0, prologue.length);
            System.arraycopy(body, 0, expected, prologue.length, body.length);
            assertArrayEquals(expected, Protocol.scriptSource((String) a.get("name")), (String) a.get("name"));
        }
        // The jar's own copy of the spec is lua/'s too.
        assertArrayEquals(Repo.bytes("clients/algorithms.json"), Protocol.read("clients/algorithms.json"));
    }

    @Test
    void invalidQuotasAreRefusedWithTheReason() {
        Object[][] cases = {
                {0L, 1_000_000L, 0L, "limit must be at least 1"},
                {1L, 0L, 1L, "period must be longer than zero"},
                {1L, 1_000_000L, 0L, "burst must be at least 1"},
                {2_000_000L, 1_000_000L, 2_000_000L, "finer than the time resolution"},
                {1L, (1L << 50) + 1, 1L, "longer than the longest"},
                {1L, 1L << 40, 2_000L, "takes longer to refill"},
                {1L << 33, 1L << 40, 1L, "fit in 32 bits"},
                {-1L, 1_000_000L, 1L, "must not be negative"},
        };
        for (Object[] c : cases) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> Quota.of((long) c[0], (long) c[1], (long) c[2]));
            assertTrue(e.getMessage().contains((String) c[3]), e.getMessage());
        }
        assertThrows(IllegalArgumentException.class, () -> Quota.of(1, java.time.Duration.ofNanos(1500)));
    }

    @Test
    void theReferenceQuota() {
        Quota q = Quota.perSecond(5).withBurst(10);
        assertEquals(List.of(200_000L, 2_000_000L, 2_000_000L),
                List.of(q.emissionIntervalMicros(), q.burstToleranceMicros(), q.windowMicros()));
        assertEquals(10, Quota.perMinute(10).burst());
        assertEquals(Quota.of(5, 3_600_000_000L), Quota.perHour(5));
        assertEquals(Quota.of(5, 900_000_000L), Quota.of(5, java.time.Duration.ofMinutes(15)));
    }

    @Test
    void aSlidingLogOnRedisTakesAtMostTheCap() {
        assertEquals(10_000, Algorithm.of("sliding-log", Quota.perHour(10_000)).capacity());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> Algorithm.of("sliding-log", Quota.perHour(10_001)));
        assertTrue(e.getMessage().contains("sliding counter"), e.getMessage());
        assertEquals(1_000_000, Algorithm.of("sliding-counter", Quota.perHour(1_000_000)).capacity());
        e = assertThrows(IllegalArgumentException.class, () -> Algorithm.of("leaky", Quota.perHour(1)));
        assertTrue(e.getMessage().contains("gcra"), e.getMessage());
    }

    @Test
    void jsonIsReadStrictly() {
        assertEquals(Map.of("a", List.of(1L, "x", true)), Json.parse(" {\"a\": [1, \"x\", true]} "));
        for (String bad : List.of("{", "[1,]", "{\"a\":1,\"a\":2}", "01", "\"\\x\"", "1 2", "{\"a\" 1}")) {
            assertThrows(IllegalArgumentException.class, () -> Json.parse(bad), bad);
        }
        assertEquals("\"a\\\"b\\\\\\u0001\"", Json.quote("a\"b\\\u0001"));
    }
}
