package dev.ratelab.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * What the limiter does when Redis fails, is slow, restarts or stalls:
 * policies, breaker, alerts, stats, the refusal cache, the quota registry,
 * and the promises of lua/README.md's deadline (a check that timed out is
 * never charged) on servers these tests pause, stall and kill.
 */
class ResilienceTest extends RedisTestBase {
    /** One unit back every 6 minutes: on Redis's clock, a unit taken stays taken for the whole test. */
    static final Quota SLOW = Quota.perHour(10);

    static List<String> algorithms() {
        return Protocol.algorithms();
    }

    private Redis own(String url) {
        Redis r = Redis.builder(url).connectTimeout(Duration.ofSeconds(2)).build();
        closeAfter.add(r);
        return r;
    }

    /** Waits (bounded) until {@code limiter} has no command in flight: late replies and their give-backs are in. */
    static void settled(Limiter limiter) {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (limiter.pending() > 0) {
            if (System.nanoTime() > deadline) {
                fail("commands still in flight after 30 s: " + limiter.pending());
            }
            RedisServer.sleep(10);
        }
    }

    @Test
    void redisDownFailsFastAndThePoliciesAnswer() throws Exception {
        Redis down = own("redis://127.0.0.1:" + RedisServer.freePort());
        List<Alert> alerts = new CopyOnWriteArrayList<>();
        Limiter error = Limiter.builder(down, "gcra", QUOTA).onAlert(alerts::add).build();
        UnavailableException e = assertThrows(UnavailableException.class, () -> error.check("k"));
        assertTrue(e instanceof BackendException, e.toString());
        Limiter allow = Limiter.builder(down, "gcra", QUOTA).onFailure(FailurePolicy.ALLOW).build();
        Decision open = allow.check("k", 3);
        assertTrue(open.allowed() && open.degraded() && open.receipt().isEmpty());
        assertEquals(List.of(10L, 7L), List.of(open.limit(), open.remaining()));
        assertTrue(allow.peek("k", 0).allowed());
        Limiter deny = Limiter.builder(down, "gcra", QUOTA).onFailure(FailurePolicy.DENY).build();
        Decision closed = deny.check("k");
        assertTrue(!closed.allowed() && closed.degraded() && closed.retryAfterMicros() > 0);
        // No policy for settlements and resets.
        assertThrows(UnavailableException.class, () -> deny.reset("k"));
        assertEquals(1, alerts.size());
        assertEquals(FailurePolicy.ERROR, alerts.get(0).policy().orElseThrow());
        assertEquals("k", new String(alerts.get(0).key(), StandardCharsets.UTF_8));
    }

    @Test
    void theBreakerOpensAfterFiveOutagesThenOneProbeClosesIt() {
        try (RedisServer s = RedisServer.start()) {
            Redis r = own(s.url());
            Limiter limiter = Limiter.builder(r, "gcra", QUOTA).prefix(prefix).onFailure(FailurePolicy.DENY)
                    .breaker(5, Duration.ofMillis(300)).timeout(Duration.ofSeconds(2)).build();
            assertTrue(limiter.check("k").allowed());
            s.kill();
            for (int i = 0; i < 5; i++) {
                assertTrue(limiter.check("k").degraded());
            }
            Stats stats = limiter.stats();
            assertTrue(stats.breakerOpen());
            assertEquals(1, stats.breakerOpened());
            Decision shortCircuited = limiter.check("k");
            assertTrue(shortCircuited.degraded() && shortCircuited.retryAfterMicros() <= 300_000);
            assertEquals(1, limiter.stats().shortCircuited());
            s.restart();
            Decision back = pollUntilDecided(limiter, Duration.ofSeconds(10));
            assertFalse(back.degraded());
            assertFalse(limiter.stats().breakerOpen());
        }
    }

    /** Checks every 20 ms until one is decided by Redis; fails past {@code bound}. Answers the decision. */
    private static Decision pollUntilDecided(Limiter limiter, Duration bound) {
        long deadline = System.nanoTime() + bound.toNanos();
        while (true) {
            Decision d = limiter.check("probe", 0);
            if (!d.degraded()) {
                return d;
            }
            if (System.nanoTime() > deadline) {
                fail("the limiter did not decide with Redis again within " + bound + ": " + limiter.stats());
            }
            RedisServer.sleep(20);
        }
    }

    @Test
    void afterARestartTheLimiterDecidesWithRedisAgainWithinTwoSeconds() {
        // Whatever its connection held: 20 concurrent checks first, then Redis killed and started again.
        try (RedisServer s = RedisServer.start()) {
            Redis r = own(s.url());
            Limiter limiter = Limiter.builder(r, "gcra", QUOTA).prefix(prefix).onFailure(FailurePolicy.DENY).build();
            List<CompletableFuture<Decision>> burst = new ArrayList<>();
            for (int i = 0; i < 20; i++) {
                burst.add(limiter.withTimeout(Duration.ofSeconds(5)).checkAsync("k" + i, 1));
            }
            burst.forEach(f -> assertFalse(f.join().degraded()));
            s.kill();
            // Sparse traffic through the outage: the breaker opens.
            for (int i = 0; i < 8; i++) {
                assertTrue(limiter.check("k").degraded());
                RedisServer.sleep(50);
            }
            s.restart();
            long back = System.nanoTime();
            Decision d = pollUntilDecided(limiter, Duration.ofSeconds(2));
            long ms = (System.nanoTime() - back) / 1_000_000;
            System.out.println("decided with Redis " + ms + " ms after it answered again: " + d);
            assertEquals(10, d.remaining());
        }
    }

    @Test
    void aBusyRedisAtConnectIsNotAnOutage() {
        // The limiter connects once, with a connect timeout of its own, and every call shares that
        // connection: 20 concurrent first checks never open a connection each.
        try (RedisServer s = RedisServer.start()) {
            long before = connectionsReceived(s);
            s.pause();
            Thread resume = new Thread(() -> {
                RedisServer.sleep(300);
                s.resume();
            });
            resume.start();
            // Connecting waits for the busy server (300 ms), longer than any call's timeout.
            Redis r = own(s.url());
            List<CompletableFuture<Decision>> first = new ArrayList<>();
            Limiter limiter = Limiter.builder(r, "token-bucket", QUOTA).prefix(prefix).clock(new Clock())
                    .timeout(Duration.ofSeconds(2)).build();
            for (int i = 0; i < 20; i++) {
                first.add(limiter.checkAsync("burst", 1));
            }
            List<Decision> decisions = first.stream().map(CompletableFuture::join).toList();
            assertEquals(10, decisions.stream().filter(Decision::allowed).count());
            assertTrue(decisions.stream().noneMatch(Decision::degraded));
            // One connection for the limiter (the INFO of this test opens one of its own each).
            assertEquals(1, connectionsReceived(s) - before - 1);
        }
    }

    private static long connectionsReceived(RedisServer s) {
        try (io.lettuce.core.RedisClient c = io.lettuce.core.RedisClient.create(s.url());
             var conn = c.connect()) {
            String info = conn.sync().info("stats");
            for (String line : info.split("\r?\n")) {
                if (line.startsWith("total_connections_received:")) {
                    return Long.parseLong(line.substring(line.indexOf(':') + 1).trim());
                }
            }
            throw new AssertionError("no total_connections_received in INFO stats");
        }
    }

    @ParameterizedTest
    @MethodSource("algorithms")
    void anAdmissionWhoseReplyComesAfterItsCallerGaveUpIsGivenBack(String name) throws Exception {
        try (StallingProxy proxy = new StallingProxy(server.port)) {
            Redis r = own(proxy.url());
            Limiter limiter = Limiter.builder(r, name, SLOW).prefix(prefix).timeout(Duration.ofSeconds(1))
                    .breaker(0, Duration.ZERO).noQuotaCheck().build();
            // Warm: the script loaded, the module detected, the clock sampled.
            limiter.withTimeout(Duration.ofSeconds(5)).check("warm", 0);
            proxy.hold();
            CompletableFuture<Decision> late = limiter.checkAsync("k", 3);
            // The script runs on Redis; its reply waits in the proxy.
            byte[] key = limiter.redisKey("k");
            long until = System.nanoTime() + Duration.ofSeconds(10).toNanos();
            while (raw.exists(key) == 0) {
                assertTrue(System.nanoTime() < until, "the check never ran");
                RedisServer.sleep(5);
            }
            TimedOutException timedOut = assertThrows(TimedOutException.class, () -> Errors.unwrapJoin(late));
            assertTrue(timedOut.getMessage().contains("deadline"), timedOut.getMessage());
            Limiter peek = limiter(name, SLOW).build();
            assertEquals(7, peek.peek("k", 0).remaining(), "the check ran: charged while its reply is held");
            proxy.release();
            settled(limiter);
            assertEquals(10, peek.peek("k", 0).remaining(), "the late admission was given back");
            Stats stats = limiter.stats();
            assertEquals(List.of(1L, 1L), List.of(stats.timeouts(), stats.lateRefunds()));
        }
    }

    @Test
    void aReplyLostWithItsConnectionLeavesTheChargeStanding() throws Exception {
        // What the README says remains: the script ran, its reply never arrives (the connection is lost).
        try (StallingProxy proxy = new StallingProxy(server.port)) {
            Redis r = own(proxy.url());
            Limiter limiter = Limiter.builder(r, "gcra", SLOW).prefix(prefix).timeout(Duration.ofSeconds(1))
                    .breaker(0, Duration.ZERO).noQuotaCheck().build();
            limiter.withTimeout(Duration.ofSeconds(5)).check("warm", 0);
            proxy.hold();
            CompletableFuture<Decision> lost = limiter.checkAsync("k", 3);
            long until = System.nanoTime() + Duration.ofSeconds(10).toNanos();
            while (raw.exists(limiter.redisKey("k")) == 0) {
                assertTrue(System.nanoTime() < until, "the check never ran");
                RedisServer.sleep(5);
            }
            assertThrows(TimedOutException.class, () -> Errors.unwrapJoin(lost));
            proxy.dropConnections();
            proxy.release();
            settled(limiter);
            assertEquals(7, limiter("gcra", SLOW).build().peek("k", 0).remaining());
            assertEquals(0, limiter.stats().lateRefunds());
            // And the connection comes back by itself.
            assertEquals(7, pollUntilDecidedPeek(limiter));
        }
    }

    private static long pollUntilDecidedPeek(Limiter limiter) {
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (true) {
            try {
                return limiter.peek("k", 0).remaining();
            } catch (UnavailableException e) {
                if (System.nanoTime() > deadline) {
                    throw e;
                }
                RedisServer.sleep(20);
            }
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"SIGSTOP", "DEBUG SLEEP"})
    void checksThatTimedOutThroughStallsAreNeverCharged(String stall) {
        // Checks (timeout 100 ms) every 10 ms while the server stalls for 150, 300 and 450 ms: stopped
        // (SIGSTOP), or asleep on a command of another connection (DEBUG SLEEP). A stall may fall
        // before a script runs (it expires) or after it ran and before its reply is written (the
        // reply comes late, and the admission is given back).
        boolean stop = stall.equals("SIGSTOP");
        try (RedisServer s = RedisServer.start()) {
            Redis r = own(s.url());
            Limiter limiter = Limiter.builder(r, "gcra", SLOW).prefix(prefix).breaker(0, Duration.ZERO)
                    .noQuotaCheck().build();
            limiter.withTimeout(Duration.ofSeconds(5)).check("warm", 0);
            Limiter peek = Limiter.builder(r, "gcra", SLOW).prefix(prefix).noTimeout().build();
            int key = 0;
            int timedOutTotal = 0;
            for (long pause : new long[] {150, 300, 450}) {
                List<String> keys = new ArrayList<>();
                List<CompletableFuture<Decision>> calls = new ArrayList<>();
                long start = System.nanoTime();
                boolean paused = false;
                boolean resumed = false;
                // Checks from 50 ms before the stop to 150 ms after it ends.
                long span = (pause + 200) * 1_000_000;
                while (System.nanoTime() - start < span) {
                    long at = (System.nanoTime() - start) / 1_000_000;
                    if (!paused && at >= 50) {
                        if (stop) {
                            s.pause();
                        } else {
                            String seconds = String.valueOf(pause / 1000.0);
                            Thread sleeper = new Thread(() -> s.command("DEBUG", "SLEEP", seconds));
                            sleeper.start();
                        }
                        paused = true;
                    }
                    if (paused && !resumed && at >= 50 + pause) {
                        if (stop) {
                            s.resume();
                        }
                        resumed = true;
                    }
                    String k = "p" + key++;
                    keys.add(k);
                    calls.add(limiter.checkAsync(k, 1));
                    RedisServer.sleep(10);
                }
                if (!resumed && stop) {
                    s.resume();
                }
                List<String> timedOut = new ArrayList<>();
                List<String> answered = new ArrayList<>();
                for (int i = 0; i < keys.size(); i++) {
                    try {
                        calls.get(i).join();
                        answered.add(keys.get(i));
                    } catch (java.util.concurrent.CompletionException e) {
                        Throwable cause = Errors.unwrap(e);
                        assertTrue(cause instanceof TimedOutException || cause instanceof ExpiredException, cause.toString());
                        timedOut.add(keys.get(i));
                    }
                }
                settled(limiter);
                List<String> charged = timedOut.stream().filter(k -> peek.peek(k, 0).remaining() != 10).toList();
                assertEquals(List.of(), charged, stall + " " + pause + " ms: checks charged after their caller gave up");
                assertEquals(List.of(), answered.stream().filter(k -> peek.peek(k, 0).remaining() != 9).toList());
                timedOutTotal += timedOut.size();
                System.out.println(stall + " " + pause + " ms: " + timedOut.size() + " timed out (none charged), "
                        + answered.size() + " answered; " + limiter.stats().lateRefunds() + " late admissions given back so far");
            }
            // The stalls outlast the timeout: the test reaches what it is for.
            assertTrue(timedOutTotal >= 10, stall + ": " + timedOutTotal + " timed out in all");
        }
    }

    @Test
    void aCallPastItsDeadlineOnRedisIsExpiredAndChargesNothing() {
        // A clock sample that puts Redis's clock an hour behind: the deadline sent is an hour early.
        try (RedisServer s = RedisServer.start()) {
            Redis r = own(s.url());
            Limiter limiter = Limiter.builder(r, "token-bucket", QUOTA).prefix(prefix).breaker(0, Duration.ZERO)
                    .timeout(Duration.ofSeconds(2)).build();
            limiter.check("warm", 0);
            long now = RedisClock.monotonicMicros();
            long offset = r.clock().offsetMicros();
            r.clock().record(List.of(new RedisClock.Sample(now, now + offset - 3_600_000_000L, now)));
            ExpiredException e = assertThrows(ExpiredException.class, () -> limiter.check("k", 5));
            assertTrue(e.getMessage().startsWith("ratelab expired: ") && e.getMessage().contains("nothing was charged"), e.getMessage());
            r.clock().invalidate();
            assertEquals(5, limiter.check("k", 5).remaining());
        }
    }

    @Test
    void aSettlementDuringAnOutageThrowsAndTheAdmissionStaysCharged() {
        try (RedisServer s = RedisServer.start()) {
            Redis r = own(s.url());
            Limiter limiter = Limiter.builder(r, "gcra", QUOTA).prefix(prefix).onFailure(FailurePolicy.ALLOW)
                    .timeout(Duration.ofSeconds(2)).build();
            Receipt receipt = limiter.check("k", 4).receipt().orElseThrow();
            s.pause();
            try {
                assertThrows(UnavailableException.class, () -> limiter.withTimeout(Duration.ofMillis(200)).refund(receipt));
            } finally {
                s.resume();
            }
            assertTrue(receipt.spent());
            assertThrows(ReceiptSpentException.class, () -> limiter.refund(receipt));
        }
    }

    @Test
    void statsCountCallsReloadsAndClockSamples() {
        Limiter limiter = limiter("token-bucket", QUOTA).backend(Limiter.Backend.SCRIPT).build();
        // The build loaded the script in the background: flushed after it.
        limiter.warming().join();
        raw.scriptFlush();
        for (int i = 0; i < 3; i++) {
            limiter.check("k");
        }
        raw.scriptFlush();
        limiter.peek("k", 1);
        Stats stats = limiter.stats();
        assertEquals(List.of(4L, 4L, 2L), List.of(stats.answered(), stats.scriptCalls(), stats.reloads()));
        assertTrue(stats.clockSamples() <= 1, "one TIME sample serves every call while it is fresh: " + stats);
        assertEquals(List.of(0L, 0L, 0L), List.of(stats.timeouts(), stats.errors(), stats.dataErrors()));
    }

    @Test
    void refusalsAreCachedUntilTheirRetryAfter() {
        Clock clock = new Clock();
        Limiter limiter = limiter("gcra", QUOTA).clock(clock).cacheRefusals(100).build();
        Decision last = null;
        for (int i = 0; i < 10; i++) {
            last = limiter.check("k");
            assertTrue(last.allowed());
        }
        Decision refused = limiter.check("k");
        assertEquals(List.of(false, 200_000L), List.of(refused.allowed(), refused.retryAfterMicros()));
        clock.set(T0 + 50_000);
        Decision cached = limiter.check("k");
        assertEquals(List.of(false, 150_000L, 0L), List.of(cached.allowed(), cached.retryAfterMicros(), cached.remaining()));
        assertEquals(1, limiter.stats().cachedRefusals());
        assertFalse(limiter.check("k", 2).allowed());
        assertEquals(1, limiter.refund(last.receipt().orElseThrow()).remaining());
        assertTrue(limiter.check("k").allowed());
        clock.set(T0 + 200_000);
        assertTrue(limiter.check("k").allowed());
    }

    @Test
    void aQuotaMismatchOnASharedKeyIsLoud() {
        List<Alert> seen = new CopyOnWriteArrayList<>();
        Limiter ours = limiter("gcra", QUOTA).quotaCheckEvery(1).onAlert(seen::add).build();
        Limiter same = limiter("gcra", QUOTA).quotaCheckEvery(1).onAlert(seen::add).build();
        Limiter other = limiter("gcra", Quota.perSecond(50)).quotaCheckEvery(1).onAlert(seen::add).build();
        ours.check("alice");
        same.check("alice");
        assertEquals(List.of(), seen);
        other.check("alice");
        assertEquals(1, seen.size());
        Alert alert = seen.get(0);
        assertTrue(alert.policy().isEmpty() && alert.error() instanceof QuotaMismatchException);
        QuotaMismatchException mismatch = (QuotaMismatchException) alert.error();
        assertEquals(List.of("v3:gcra:20000,1000000,50", "v3:gcra:200000,2000000,10"), List.of(mismatch.ours(), mismatch.theirs()));
        assertTrue(mismatch.getMessage().contains("different Redis keys"));
        ours.check("alice");
        assertEquals("v3:gcra:20000,1000000,50", ((QuotaMismatchException) seen.get(1).error()).theirs());
        assertEquals(List.of(1L, 1L), List.of(ours.stats().quotaMismatches(), other.stats().quotaMismatches()));
        byte[] registry = b(prefix + ":{alice}:gcra:quota");
        long pttl = raw.pttl(registry);
        assertTrue(pttl > 0 && pttl <= 60_000, "pttl " + pttl);
    }

    @Test
    void theQuotaIsRecordedOnASampleOfChecks() {
        Limiter limiter = limiter("gcra", QUOTA).quotaCheckEvery(3).build();
        byte[] registry = b(prefix + ":{k}:gcra:quota");
        List<Long> recorded = new ArrayList<>();
        for (int i = 0; i < 7; i++) {
            raw.del(registry);
            limiter.check("k");
            recorded.add(raw.exists(registry));
        }
        assertEquals(List.of(1L, 0L, 0L, 1L, 0L, 0L, 1L), recorded);
        Limiter never = limiter("gcra", QUOTA).noQuotaCheck().build();
        never.check("n");
        limiter.peek("z", 1);
        assertEquals(0L, raw.exists(b(prefix + ":{n}:gcra:quota")));
        assertEquals(0L, raw.exists(b(prefix + ":{z}:gcra:quota")));
    }

    @Test
    void aDeadlineViewBoundsItsCalls() {
        Limiter limiter = limiter("gcra", QUOTA).build();
        // A deadline already past: nothing is sent, and the caller has its timeout at once.
        assertThrows(TimedOutException.class, () -> limiter.withDeadline(java.time.Instant.now().minusSeconds(1)).check("gone"));
        assertEquals(0L, raw.exists(limiter.redisKey("gone")));
        assertEquals(9, limiter.withDeadline(java.time.Instant.now().plusSeconds(5)).check("k").remaining());
    }
}
