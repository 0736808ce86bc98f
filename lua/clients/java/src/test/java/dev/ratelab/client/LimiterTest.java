package dev.ratelab.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.ScriptOutputType;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The limiter against a real Redis, on the caller's clock: the reference
 * table, every algorithm's peeks, receipts, settlements and resets, every
 * error reply, replies and stamps never trusted, replayed receipts bounded.
 */
class LimiterTest extends RedisTestBase {
    static List<String> algorithms() {
        return Protocol.algorithms();
    }

    @ParameterizedTest
    @ValueSource(strings = {"token-bucket", "gcra", "leaky-meter", "leaky-queue"})
    void theReferenceTable(String name) {
        // Capacity 10, 5 per second: 20 at t admit 10; 10 at t + 1 s admit 5; a refusal says retry in 1 s.
        Clock clock = new Clock();
        Limiter limiter = limiter(name, QUOTA).clock(clock).build();
        List<Decision> first = new ArrayList<>();
        for (int i = 0; i < 20; i++) {
            first.add(limiter.check("table"));
        }
        clock.set(T0 + 1_000_000);
        List<Decision> second = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            second.add(limiter.check("table"));
        }
        assertEquals(10, first.stream().filter(Decision::allowed).count());
        assertEquals(5, second.stream().filter(Decision::allowed).count());
        List<Decision> refused = new ArrayList<>(first);
        refused.addAll(second);
        refused.removeIf(Decision::allowed);
        assertEquals(List.of(1L), refused.stream().map(Decision::retryAfterSeconds).distinct().toList());
    }

    @Test
    void theReviewersCase() {
        // GCRA 1 per second, burst 3: a, b, c at t, refund a; d, e, f at t + 2 s, refund c: nothing back; a 7th refused.
        Clock clock = new Clock();
        Limiter gcra = limiter("gcra", Quota.perSecond(1).withBurst(3)).clock(clock).build();
        Receipt a = gcra.check("k").receipt().orElseThrow();
        gcra.check("k");
        Receipt c = gcra.check("k").receipt().orElseThrow();
        gcra.refund(a);
        clock.set(T0 + 2_000_000);
        for (int i = 0; i < 3; i++) {
            assertTrue(gcra.check("k").allowed(), "admission " + (4 + i));
        }
        assertEquals(0, gcra.refund(c).remaining());
        assertFalse(gcra.check("k").allowed());
    }

    @ParameterizedTest
    @MethodSource("algorithms")
    void aFreshKeyOnTheRedisClockAndItsTtl(String name) {
        Limiter limiter = limiter(name, QUOTA).build();
        Decision d = limiter.check("fresh", 3);
        assertTrue(d.allowed());
        assertEquals(7, d.remaining());
        assertEquals(10, d.limit());
        long pttl = raw.pttl(limiter.redisKey("fresh"));
        assertTrue(pttl > 0 && pttl <= limiter.algorithm().maxWaitMicros() / 1000 + 1, "pttl " + pttl);
        assertEquals(0, limiter.ttlSlackMs());
        assertEquals(Protocol.sha1Hex(Protocol.scriptSource(name)), limiter.scriptSha());
    }

    @Test
    void aFlushedScriptIsLoadedAgain() {
        Limiter limiter = limiter("gcra", QUOTA).clock(new Clock()).backend(Limiter.Backend.SCRIPT).build();
        limiter.warming().join();
        limiter.check("k");
        raw.scriptFlush();
        assertEquals(8, limiter.check("k").remaining());
        assertEquals(1, limiter.stats().reloads());
        assertEquals(2, limiter.stats().scriptCalls());
    }

    @Test
    void aCostOverTheCapacityIsAnErrorNotARefusal() {
        Limiter limiter = limiter("gcra", QUOTA).clock(new Clock()).build();
        CostTooHighException e = assertThrows(CostTooHighException.class, () -> limiter.check("k", 11));
        assertTrue(e.getMessage().contains("capacity is 10"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> limiter.check("k", -1));
        assertEquals(0L, raw.exists(limiter.redisKey("k")));
    }

    @Test
    void corruptStateAndWrongTypesAreDataErrors() {
        Limiter limiter = limiter("gcra", QUOTA).clock(new Clock()).onFailure(FailurePolicy.ALLOW).build();
        raw.set(limiter.redisKey("text"), b("not a timestamp"));
        DataException e = assertThrows(DataException.class, () -> limiter.check("text"));
        assertTrue(e.getMessage().startsWith("ratelab gcra: corrupt state at "), e.getMessage());
        raw.lpush(limiter.redisKey("list"), b("x"));
        e = assertThrows(DataException.class, () -> limiter.check("list"));
        assertTrue(e.getMessage().contains("a list, not a string"), e.getMessage());
        assertEquals(2, limiter.stats().dataErrors());
        // A data error is an answer: the breaker stays closed.
        assertFalse(limiter.stats().breakerOpen());
    }

    @Test
    void anotherProtocolVersionGetsAClearError() {
        Limiter limiter = limiter("token-bucket", QUOTA).clock(new Clock()).build();
        raw.scriptLoad(limiter.scriptSource());
        List<String> args = new ArrayList<>(limiter.arguments(1, T0, "check", null));
        args.set(0, "999");
        RedisCommandExecutionException e = assertThrows(RedisCommandExecutionException.class, () -> raw.evalsha(
                limiter.scriptSha(), ScriptOutputType.MULTI, new byte[][] {limiter.redisKey("k")},
                args.stream().map(LimiterTest::b).toArray(byte[][]::new)));
        assertEquals("ratelab: protocol version " + Protocol.version() + " expected, got 999", e.getMessage());
        assertEquals(0L, raw.exists(limiter.redisKey("k")));
    }

    @Test
    void argumentsAreTheProtocolLayout() {
        Limiter limiter = limiter("gcra", QUOTA).clock(new Clock()).build();
        String v = String.valueOf(Protocol.version());
        assertEquals(List.of(v, String.valueOf(T0), "1", "60000", "", "check", "200000", "2000000", "10"),
                limiter.arguments(1, T0, "check", null));
        assertEquals(List.of(v, "", "2", "60000", "1234", "peek", "200000", "10"),
                limiter("token-bucket", QUOTA).clock(new Clock()).build().arguments(2, null, "peek", 1234L));
        assertEquals(List.of("2000000", "10", "31", "64517"),
                limiter("sliding-counter", QUOTA).build().arguments(1, null, "check", null).subList(6, 10));
    }

    static final Object[][] BAD_REPLIES = {
            {1L, 10L, 9L, 0L, 200_000L, 0L, 0L},
            {1L, 11L, 9L, 0L, 0L, 0L, 0L, 0L},
            {1L, 10L, 11L, 0L, 0L, 0L, 0L, 0L},
            {2L, 10L, 9L, 0L, 0L, 0L, 0L, 0L},
            {1L, 10L, 9L, 5L, 0L, 0L, 0L, 0L},
            {0L, 10L, 9L, 5L, 0L, 5L, 0L, 0L},
            {0L, 10L, 9L, (1L << 52) + (1L << 51) + 1, 0L, 0L, 0L, 0L},
            {1L, 10L, -1L, 0L, 0L, 0L, 0L, 0L},
            {"1", 10L, 9L, 0L, 0L, 0L, 0L, 0L},
            {1L, 10L, 9L, 0L, 200_000L, 0L},
            {1L, 10L, 9L, 0L, 200_000L, 0L, T0 + 200_000, 0L},
    };

    @Test
    void repliesAndStampsAreNeverTrusted() {
        Limiter gcra = limiter("gcra", QUOTA).build();
        for (Object[] reply : BAD_REPLIES) {
            DataException e = assertThrows(DataException.class, () -> gcra.decision(List.of(reply), Limiter.Op.PEEK, 0, null));
            assertTrue(e.getMessage().startsWith("ratelab gcra: invalid reply"), e.getMessage());
        }
        assertThrows(DataException.class, () -> gcra.decision(null, Limiter.Op.PEEK, 0, null));
        Limiter clocked = limiter("gcra", QUOTA).clock(new Clock()).build();
        Object[][] stamps = {
                {1L, 10L, 9L, 0L, 200_000L, 0L, 0L, 0L},
                {0L, 10L, 0L, 200_000L, 2_000_000L, 0L, T0 + 2_000_000, 0L},
                {1L, 10L, 9L, 0L, 200_000L, 0L, T0, 0L},
                {1L, 10L, 9L, 0L, 200_000L, 0L, T0 + 63_000_001, 0L},
                {1L, 10L, 0L, 0L, 63_000_001L, 0L, T0 + 200_000, 0L},
        };
        for (Object[] reply : stamps) {
            assertThrows(DataException.class, () -> clocked.decision(List.of(reply), Limiter.Op.CHECK, 1, T0), List.of(reply).toString());
        }
        Limiter window = limiter("fixed-window", QUOTA).clock(new Clock()).build();
        // A window's stamp without a mark (version 4's); with one, an admission.
        assertThrows(DataException.class, () -> window.decision(
                List.of(1L, 10L, 9L, 0L, 2_000_000L, 0L, 850_000_000L, 0L), Limiter.Op.CHECK, 1, T0));
        assertTrue(window.decision(
                List.of(1L, 10L, 9L, 0L, 2_000_000L, 0L, 850_000_000L, 1L), Limiter.Op.CHECK, 1, T0).allowed());
        // A debt's waits run to the protocol's ceiling outside an admission; a window's never.
        long ceiling = (1L << 52) + (1L << 51);
        assertEquals(ceiling, clocked.decision(List.of(0L, 10L, 0L, ceiling, ceiling, 0L, 0L, 0L), Limiter.Op.PEEK, 1, T0).retryAfterMicros());
        assertThrows(DataException.class, () -> window.decision(List.of(0L, 10L, 0L, 63_000_001L, 0L, 0L, 0L, 0L), Limiter.Op.PEEK, 1, T0));
        assertTrue(clocked.decision(List.of(1L, 10L, 9L, 0L, 200_000L, 0L, T0 + 200_000, 7L), Limiter.Op.CHECK, 1, T0).allowed());
    }

    @ParameterizedTest
    @MethodSource("algorithms")
    void aPeekDecidesAsACheckAndWritesNothing(String name) {
        Clock clock = new Clock();
        Limiter limiter = limiter(name, QUOTA).clock(clock).build();
        int step = 0;
        for (long cost : new long[] {4, 3, 2, 3, 1, 5, 2}) {
            clock.set(T0 + step++ * 150_000L);
            byte[] before = raw.dump(limiter.redisKey("k"));
            Decision peeked = limiter.peek("k", cost);
            assertArrayEquals(before, raw.dump(limiter.redisKey("k")), "a peek wrote");
            assertEquals(peeked, limiter.check("k", cost));
            assertTrue(peeked.receipt().isEmpty());
        }
    }

    @ParameterizedTest
    @MethodSource("algorithms")
    void aRefundGivesBackWhatWasTaken(String name) {
        Limiter limiter = limiter(name, QUOTA).clock(new Clock()).build();
        Decision taken = limiter.check("k", 7);
        assertEquals(3, taken.remaining());
        Receipt receipt = taken.receipt().orElseThrow();
        assertArrayEquals(b("k"), receipt.key());
        assertEquals(7, receipt.cost());
        Decision after = limiter.settle(receipt, 3);
        assertEquals(List.of(true, 7L), List.of(after.allowed(), after.remaining()));
        assertTrue(after.receipt().isEmpty());
        assertEquals(limiter.peek("k", 0), after);
        ReceiptSpentException spent = assertThrows(ReceiptSpentException.class, () -> limiter.refund(receipt));
        assertTrue(spent.getMessage().contains("settled once"));
        assertTrue(receipt.spent());
        Receipt more = limiter.check("j", 4).receipt().orElseThrow();
        assertEquals(10, limiter.refund(more).remaining());
        // The key full again keeps what the receipt gave back (so that it gives nothing more), with a TTL.
        assertTrue(raw.pttl(limiter.redisKey("j")) > 0);
        assertTrue(limiter.check("j", 10).allowed());
        limiter.reset("j");
        assertEquals(10, limiter.peek("j", 0).remaining());
        limiter.reset("never-seen");
        assertEquals(0L, raw.exists(limiter.redisKey("never-seen")));
    }

    @ParameterizedTest
    @MethodSource("algorithms")
    void aSettlementAboveTheCostChargesTheDifference(String name) {
        Limiter limiter = limiter(name, QUOTA).clock(new Clock()).build();
        Decision d = limiter.check("k", 2);
        Decision after = limiter.settle(d.receipt().orElseThrow(), 9);
        assertEquals(List.of(true, 1L), List.of(after.allowed(), after.remaining()));
        assertFalse(limiter.peek("k", 2).allowed());
    }

    @ParameterizedTest
    @MethodSource("algorithms")
    void noReceiptGivesAnythingBackAfterAReset(String name) {
        Limiter limiter = limiter(name, QUOTA).clock(new Clock()).build();
        Receipt old = limiter.check("k", 6).receipt().orElseThrow();
        limiter.reset("k");
        assertEquals(10, limiter.peek("k", 0).remaining());
        assertEquals(6, limiter.check("k", 4).remaining());
        assertEquals(6, limiter.refund(old).remaining());
        assertTrue(raw.pttl(limiter.redisKey("k")) > 0);
    }

    @Test
    void aReceiptGoesBackOnlyToItsLimiterAndIsSpentOnce() {
        Limiter one = limiter("gcra", QUOTA).clock(new Clock()).build();
        Limiter other = limiter("gcra", QUOTA).clock(new Clock()).build();
        Receipt r = one.check("k", 2).receipt().orElseThrow();
        assertThrows(ForeignReceiptException.class, () -> other.refund(r));
        assertFalse(r.spent());
        // A view of the same limiter (another timeout) is the same limiter.
        assertEquals(10, one.withTimeout(java.time.Duration.ofSeconds(1)).refund(r).remaining());
        assertThrows(ReceiptSpentException.class, () -> one.refund(r));
        assertThrows(NullPointerException.class, () -> one.refund(null));
        for (Decision d : List.of(one.peek("k", 3), one.check("k", 0))) {
            assertTrue(d.receipt().isEmpty());
        }
        Receipt big = one.check("k", 2).receipt().orElseThrow();
        assertThrows(CostTooHighException.class, () -> one.settle(big, 11));
        assertTrue(big.spent());
        assertFalse(java.io.Serializable.class.isAssignableFrom(Receipt.class));
    }

    @Test
    void aSerializedReceiptIsLoadedByALimiterOfTheSameQuotaOnly() {
        Limiter one = limiter("gcra", QUOTA).clock(new Clock()).build();
        String json = one.check("job", 4).receipt().orElseThrow().toJson();
        Map<String, Object> fields = Repo.map(Json.parse(json));
        assertEquals(Map.of("ratelab_receipt", 1L, "prefix", prefix, "fingerprint", "v3:gcra:200000,2000000,10",
                "key_hex", "6a6f62", "cost", 4L, "stamp_at", fields.get("stamp_at"), "stamp_mark", 0L), fields);
        Limiter worker = limiter("gcra", QUOTA).clock(new Clock()).build();
        assertEquals(10, worker.refund(worker.receiptFromJson(json)).remaining());
        Limiter otherQuota = limiter("gcra", Quota.perSecond(5)).clock(new Clock()).build();
        assertThrows(ForeignReceiptException.class, () -> otherQuota.receiptFromJson(json));
        for (String bad : List.of("{}", "[1]", "nope", json.replace("\"cost\":4", "\"cost\":0"),
                json.replace("6a6f62", "zz"), json.replace("\"cost\":4", "\"cost\":-4"))) {
            assertThrows(IllegalArgumentException.class, () -> worker.receiptFromJson(bad), bad);
        }
    }

    @Test
    void aReplayedReceiptGivesBackItsOwnUnitsOnce() {
        long second = 1_000_000;
        Clock clock = new Clock();
        Limiter gcra = limiter("gcra", Quota.of(1, second, 10)).clock(clock).build();
        List<String> texts = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            texts.add(gcra.check("k").receipt().orElseThrow().toJson());
        }
        assertEquals(0, gcra.peek("k", 0).remaining());
        // The third, replayed 50 times: its own unit back, once; the last one's too.
        for (int i = 0; i < 50; i++) {
            assertEquals(1, gcra.refund(gcra.receiptFromJson(texts.get(2))).remaining());
        }
        for (int i = 0; i < 50; i++) {
            assertEquals(2, gcra.refund(gcra.receiptFromJson(texts.get(9))).remaining());
        }
        for (int s = 0; s < 20; s++) {
            String forged = texts.get(0).replaceAll("\"cost\":\\d+", "\"cost\":10")
                    .replaceAll("\"stamp_at\":\\d+", "\"stamp_at\":" + (T0 + s * second))
                    .replaceAll("\"stamp_mark\":\\d+", "\"stamp_mark\":" + (s % 3));
            assertTrue(gcra.refund(gcra.receiptFromJson(forged)).remaining() <= 10);
        }
        Limiter window = limiter("fixed-window", Quota.perSecond(3)).clock(clock).build();
        clock.set(T0 + 10 * second);
        String text = window.check("w").receipt().orElseThrow().toJson();
        window.check("w");
        window.check("w");
        for (int i = 0; i < 50; i++) {
            assertEquals(1, window.refund(window.receiptFromJson(text)).remaining());
        }
        clock.set(T0 + 11 * second);
        for (int i = 0; i < 3; i++) {
            assertTrue(window.check("w").allowed());
        }
        assertEquals(0, window.refund(window.receiptFromJson(text)).remaining());
    }

    @Test
    void oneReceiptDeliveredThirtyTimesLetsNoMorePass() {
        // A job queue delivers one serialized receipt of a refunded job thirty times, while other
        // jobs check the same key (5 an hour): no more than the 5 pass, for every algorithm.
        for (String name : Protocol.algorithms()) {
            Limiter limiter = limiter(name, Quota.perHour(5).withBurst(5)).clock(new Clock()).build();
            String text = limiter.check("jobs").receipt().orElseThrow().toJson();
            limiter.refund(limiter.receiptFromJson(text));
            int passed = 0;
            for (int i = 0; i < 30; i++) {
                if (limiter.check("jobs").allowed()) {
                    passed++;
                }
                limiter.refund(limiter.receiptFromJson(text));
            }
            assertEquals(5, passed, name);
        }
    }

    @Test
    void asyncCallsDecideAsTheSyncOnes() {
        Limiter limiter = limiter("token-bucket", QUOTA).clock(new Clock()).build();
        List<CompletableFuture<Decision>> burst = new ArrayList<>();
        for (int i = 0; i < 20; i++) {
            burst.add(limiter.checkAsync("async", 1));
        }
        List<Decision> decisions = burst.stream().map(CompletableFuture::join).toList();
        assertEquals(10, decisions.stream().filter(Decision::allowed).count());
        Decision peeked = limiter.peekAsync("async", 0).join();
        assertEquals(0, peeked.remaining());
        assertEquals(1, limiter.refundAsync(decisions.get(0).receipt().orElseThrow()).join().remaining());
        limiter.resetAsync(b("async")).join();
        assertEquals(10, limiter.peek("async", 0).remaining());
    }

    @Test
    void binaryAndLongKeysNameTheKeysTheSchemeSays() {
        Limiter limiter = limiter("gcra", QUOTA).clock(new Clock()).build();
        byte[] binary = {0, (byte) 0xff, '{', '}', '%'};
        limiter.check(binary, 1);
        String longKey = "a".repeat(200);
        limiter.check(longKey, 1);
        assertEquals(1L, raw.exists(Protocol.redisKey(prefix, binary, limiter.algorithm().keySuffix())));
        String expected = prefix + ":{%H" + Protocol.sha1Hex(longKey.getBytes(StandardCharsets.UTF_8)) + "}:" + limiter.algorithm().keySuffix();
        assertEquals(1L, raw.exists(b(expected)));
    }

    @Test
    void badOptionsAreClearErrors() {
        assertThrows(IllegalArgumentException.class, () -> limiter("nope", QUOTA).build());
        assertThrows(IllegalArgumentException.class, () -> limiter("gcra", QUOTA).ttlSlackMs(Protocol.MAX_TTL_SLACK_MS + 1).build());
        assertThrows(IllegalArgumentException.class, () -> limiter("gcra", QUOTA).timeout(java.time.Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> limiter("gcra", QUOTA).timeout(java.time.Duration.ofHours(2)));
        assertThrows(IllegalArgumentException.class, () -> limiter("gcra", QUOTA).breaker(-1, java.time.Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> limiter("gcra", QUOTA).cacheRefusals(0));
        assertThrows(IllegalArgumentException.class, () -> limiter("gcra", QUOTA).quotaCheckEvery(0));
        assertThrows(IllegalArgumentException.class, () -> limiter("gcra", QUOTA).clock(() -> -5).build().check("k"));
    }
}
