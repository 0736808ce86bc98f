package dev.ratelab.client;

import io.lettuce.core.RedisNoScriptException;
import io.lettuce.core.ScriptOutputType;
import io.lettuce.core.SetArgs;
import io.lettuce.core.api.StatefulConnection;
import io.lettuce.core.cluster.api.async.RedisClusterAsyncCommands;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.output.IntegerOutput;
import io.lettuce.core.output.NestedMultiOutput;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Consumer;
import java.util.function.LongSupplier;

/**
 * One algorithm on one quota, any number of keys, state on Redis: the same
 * keys, arguments and decisions as the Rust {@code RedisLimiter} and the
 * Python and Node clients, so that services in every language share one
 * limit; and the same timeout, failure policy, circuit breaker, alerts,
 * stats and refusal cache, so that they fail alike.
 *
 * <pre>{@code
 * Limiter limiter = Limiter.builder(redis, "token-bucket", Quota.perSecond(5).withBurst(10)).build();
 * Decision d = limiter.check("client-42");          // cost 1
 * if (!d.allowed()) reply429(d.retryAfterSeconds());
 * }</pre>
 *
 * <p>Every call has a synchronous form and an asynchronous one
 * ({@code checkAsync}, ...: a {@link CompletableFuture} completed on Lettuce's
 * threads, or by the deadline's timer). Thread-safe and immutable: share one.
 *
 * <h2>The deadline</h2>
 * Each call is bounded by the limiter's timeout (default 100 ms), or by
 * {@link #withTimeout(Duration)} / {@link #withDeadline(Instant)} for some
 * calls: the caller has its answer (or the failure policy's) by then. The
 * script receives the instant the caller gives up, on Redis's clock, from a
 * measured offset ({@link RedisClock}), and refuses to run after it
 * ({@code ratelab expired}: nothing charged). A check whose script ran in time
 * but whose reply arrives after its caller gave up (Redis stalled between the
 * two) is given back by its stamp as soon as the reply arrives; only a reply
 * that never arrives (the connection lost after the script ran) leaves its
 * charge standing.
 */
public final class Limiter {
    /** The default per-call timeout. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofMillis(100);
    /** Consecutive outage failures that open the circuit breaker. */
    public static final int DEFAULT_BREAKER_THRESHOLD = 5;
    /** How long an open breaker keeps Redis uncalled before one probe. */
    public static final Duration DEFAULT_BREAKER_COOL_DOWN = Duration.ofMillis(500);
    /** By default every 100th check (and the first) also records the quota for its key. */
    public static final int DEFAULT_QUOTA_CHECK_EVERY = 100;
    /** How long "the module is missing" is trusted before the module is tried again. */
    public static final Duration MODULE_RECHECK = Duration.ofSeconds(30);

    /** What runs the decisions on Redis. */
    public enum Backend {
        /**
         * The native module where the server has it ({@code RATELAB.PROTOCOL}
         * answers this version), the scripts otherwise, as the Rust client
         * chooses. The default.
         */
        AUTO,
        /** Always the module: a server without it answers every call with a {@link DataException}. */
        MODULE,
        /** Always the Lua scripts ({@code EVALSHA}, reloaded on {@code NOSCRIPT}). */
        SCRIPT
    }

    private final Core core;
    /** This view's bound: a timeout (µs, -1 for none), or a fixed deadline. */
    private final long timeoutMicros;
    private final Instant deadline;

    private Limiter(Core core, long timeoutMicros, Instant deadline) {
        this.core = core;
        this.timeoutMicros = timeoutMicros;
        this.deadline = deadline;
    }

    /** A builder for {@code algorithm} (one of {@link Protocol#algorithms()}) on {@code quota}, state on {@code redis}. */
    public static Builder builder(Redis redis, String algorithm, Quota quota) {
        return new Builder(redis, algorithm, quota);
    }

    /** This limiter, its calls bounded by {@code timeout} instead (same state, breaker, stats and receipts). */
    public Limiter withTimeout(Duration timeout) {
        return new Limiter(core, Builder.timeoutMicros(timeout), null);
    }

    /** This limiter, its calls bounded by {@code deadline} (wall clock) instead: for the calls of one request. */
    public Limiter withDeadline(Instant deadline) {
        return new Limiter(core, -1, Objects.requireNonNull(deadline, "deadline"));
    }

    // -- the calls ---------------------------------------------------------------------

    /** {@link #check(String, long)} of cost 1. */
    public Decision check(String key) {
        return check(key, 1);
    }

    /**
     * Decides a request of weight {@code cost} for {@code key} (its UTF-8
     * bytes): all or nothing; cost 0 reports without consuming. One round
     * trip (none for a cached refusal or an open breaker), plus a {@code TIME}
     * when the clock sample is stale.
     *
     * <p>An admission of a cost above 0 carries its receipt ({@link
     * Decision#receipt()}): give it to {@link #settle} or {@link #refund}
     * when what the request really counts for is known, or drop it to keep
     * the charge.
     *
     * @throws CostTooHighException a cost above the capacity
     * @throws DataException Redis answered something that needs repair
     * @throws UnavailableException an outage, under {@link FailurePolicy#ERROR}
     */
    public Decision check(String key, long cost) {
        return join(checkAsync(key, cost));
    }

    /** {@link #check(String, long)} of a binary key. */
    public Decision check(byte[] key, long cost) {
        return join(checkAsync(key, cost));
    }

    public CompletableFuture<Decision> checkAsync(String key, long cost) {
        return checkAsync(bytes(key), cost);
    }

    public CompletableFuture<Decision> checkAsync(byte[] key, long cost) {
        return decide(start(Op.CHECK, key, cost));
    }

    /** {@link #peek(String, long)} of cost 1. */
    public Decision peek(String key) {
        return peek(key, 1);
    }

    /**
     * The decision a check of {@code cost} would get now, writing nothing: a
     * check at the same instant, with nothing consumed in between, decides the
     * same. The refusal cache is neither read nor filled. Throws as {@link
     * #check(String, long)}; the failure policy answers as for a check.
     */
    public Decision peek(String key, long cost) {
        return join(peekAsync(bytes(key), cost));
    }

    public Decision peek(byte[] key, long cost) {
        return join(peekAsync(key, cost));
    }

    public CompletableFuture<Decision> peekAsync(String key, long cost) {
        return peekAsync(bytes(key), cost);
    }

    public CompletableFuture<Decision> peekAsync(byte[] key, long cost) {
        return decide(start(Op.PEEK, key, cost));
    }

    /**
     * Settles the admission {@code receipt} stands for: it finally counts
     * for {@code actual} units instead of the cost it was charged. Less gives
     * back what the key provably still holds of it (nothing once its time has
     * passed, nothing after a reset); more charges the difference as debt
     * that later requests wait out, whatever the room. Never takes the key
     * above its capacity. Answers what a peek of cost 0 would after it.
     *
     * <p>The receipt is spent by the call, whatever happens to it.
     *
     * @throws ReceiptSpentException a second use
     * @throws ForeignReceiptException a receipt of another limiter (it stays unspent)
     * @throws CostTooHighException an {@code actual} above the capacity (spent: the admission counts as charged)
     * @throws UnavailableException an outage: no failure policy applies, and the admission counts as charged
     */
    public Decision settle(Receipt receipt, long actual) {
        return join(settleAsync(receipt, actual));
    }

    public CompletableFuture<Decision> settleAsync(Receipt receipt, long actual) {
        return decide(startSettle(receipt, actual));
    }

    /** Gives back what the admission {@code receipt} stands for still holds: {@link #settle} to 0. */
    public Decision refund(Receipt receipt) {
        return settle(receipt, 0);
    }

    public CompletableFuture<Decision> refundAsync(Receipt receipt) {
        return settleAsync(receipt, 0);
    }

    /**
     * Puts {@code key} back to full capacity, as if never seen; no receipt
     * issued for it before gives anything back afterwards. One round trip; an
     * outage throws (no failure policy).
     */
    public void reset(String key) {
        join(resetAsync(bytes(key)));
    }

    public void reset(byte[] key) {
        join(resetAsync(key));
    }

    public CompletableFuture<Void> resetAsync(byte[] key) {
        return decide(start(Op.RESET, key, 0)).thenApply(d -> null);
    }

    /**
     * A receipt serialized by {@link Receipt#toJson()} (here, in another
     * process, or by the Python or Node client), as a receipt of this
     * limiter, usable once. Each load is a new receipt: the scripts bound
     * what replays give back.
     *
     * @throws ForeignReceiptException a receipt of another prefix, algorithm or quota
     * @throws IllegalArgumentException text that is not a receipt
     */
    public Receipt receiptFromJson(String json) {
        Receipt.Fields f = Receipt.Fields.parse(json);
        if (!f.prefix().equals(core.prefix) || !f.fingerprint().equals(core.algorithm.fingerprintInput())) {
            throw new ForeignReceiptException("a receipt of another limiter (prefix " + Json.quote(f.prefix()) + ", "
                    + f.fingerprint() + "); this one is prefix " + Json.quote(core.prefix) + ", "
                    + core.algorithm.fingerprintInput());
        }
        if (f.cost() > core.algorithm.capacity()) {
            throw new IllegalArgumentException("not a receipt of this limiter: a cost of " + f.cost() + " is above its capacity");
        }
        return new Receipt(this, f.key(), f.cost(), f.stampAt(), f.stampMark());
    }

    // -- what it is ----------------------------------------------------------------------

    public Algorithm algorithm() {
        return core.algorithm;
    }

    public Quota quota() {
        return core.quota;
    }

    public String prefix() {
        return core.prefix;
    }

    /** The TTL slack sent with every call, ms. */
    public long ttlSlackMs() {
        return core.ttlSlackMs;
    }

    /** The script sent to Redis (prologue and algorithm). */
    public byte[] scriptSource() {
        return core.source.clone();
    }

    /** Its SHA-1, as {@code EVALSHA} names it. */
    public String scriptSha() {
        return core.sha;
    }

    /** The Redis key holding {@code key}'s state. */
    public byte[] redisKey(String key) {
        return core.redisKey(bytes(key));
    }

    public byte[] redisKey(byte[] key) {
        return core.redisKey(key);
    }

    /** {@code ARGV} of one call, as strings: version, now or "", cost, slack, deadline or "", the operation, the parameters. */
    public List<String> arguments(long cost, Long now, String op, Long deadline) {
        List<String> out = new ArrayList<>();
        for (byte[] b : core.arguments(cost, now, op, deadline)) {
            out.add(new String(b, StandardCharsets.US_ASCII));
        }
        return out;
    }

    /** A script's reply to {@code op} of {@code cost} (at the caller's {@code now}, if sent) as a decision, trusting nothing in it. */
    Decision decision(Object reply, Op op, long cost, Long now) {
        return core.validate(reply, op, cost, now).decision;
    }

    /** The background warm-up of {@link Builder#build()}, completed either way. */
    CompletableFuture<Void> warming() {
        return core.warming;
    }

    /** Commands sent and not answered yet, late ones and their give-backs included. */
    long pending() {
        return core.pending.get();
    }

    /** What this limiter has done so far (shared by its views). */
    public Stats stats() {
        return core.stats();
    }

    @Override
    public String toString() {
        return "Limiter(" + core.algorithm + ", " + core.quota + ", prefix " + core.prefix + ")";
    }

    // -- the call's life -----------------------------------------------------------------

    enum Op {
        CHECK("check"), PEEK("peek"), SETTLE("settle"), RESET("reset");

        final String wire;

        Op(String wire) {
            this.wire = wire;
        }
    }

    /** One call in progress. */
    static final class Call {
        static final int PENDING = 0;
        static final int ARRIVED = 1;
        static final int ABANDONED = 2;

        final Op op;
        final byte[] key;
        final byte[] redisKey;
        /** The request's cost; a settlement's: the cost the admission was charged; a reset's: 0. */
        final long cost;
        /** The caller's now, µs, or null for Redis TIME. */
        final Long now;
        /** The local monotonic µs at which the caller gives up, or Long.MAX_VALUE for never. */
        final long giveUp;
        /** The refusal cache's clock, read before the call. */
        final long localNow;
        boolean probe;
        boolean registry;
        long actual;
        long stampAt;
        long stampMark;
        /** Who has the reply: the caller (arrived in time) or nobody (abandoned: the caller gave up). */
        final AtomicInteger state = new AtomicInteger(PENDING);

        Call(Op op, byte[] key, byte[] redisKey, long cost, Long now, long giveUp, long localNow) {
            this.op = op;
            this.key = key;
            this.redisKey = redisKey;
            this.cost = cost;
            this.now = now;
            this.giveUp = giveUp;
            this.localNow = localNow;
        }

        boolean bounded() {
            return giveUp != Long.MAX_VALUE;
        }

        boolean abandon() {
            return state.compareAndSet(PENDING, ABANDONED);
        }

        boolean arrive() {
            return state.compareAndSet(PENDING, ARRIVED);
        }

        boolean abandoned() {
            return state.get() == ABANDONED;
        }
    }

    private static byte[] bytes(String key) {
        return Objects.requireNonNull(key, "key").getBytes(StandardCharsets.UTF_8);
    }

    private Call start(Op op, byte[] key, long cost) {
        Objects.requireNonNull(key, "key");
        if (cost < 0 || cost > 0xFFFF_FFFFL) {
            throw new IllegalArgumentException("cost must be an integer from 0 to 2^32 - 1, not " + cost);
        }
        if (cost > core.algorithm.capacity()) {
            throw new CostTooHighException("a cost of " + cost + " can never fit: the capacity is " + core.algorithm.capacity());
        }
        Call call = newCall(op, key.clone(), cost);
        if (op == Op.CHECK && core.quotaCheckEvery > 0) {
            call.registry = core.checks.getAndIncrement() % core.quotaCheckEvery == 0;
        }
        return call;
    }

    private Call startSettle(Receipt receipt, long actual) {
        if (receipt == null) {
            throw new NullPointerException("settle and refund take the Receipt of an admission (decision.receipt()): only "
                    + "a check that Redis admitted with a cost above 0 has one; a refusal, a peek, a cost of 0 and a "
                    + "decision the failure policy made (degraded: nothing was charged on Redis) have none, and there "
                    + "is nothing to settle");
        }
        if (receipt.issuer().core != core) {
            throw new ForeignReceiptException("a receipt of another limiter (" + receipt.issuer().core.describe()
                    + "): only the limiter whose check issued it settles it (another process: send receipt.toJson() "
                    + "and load it there with receiptFromJson)");
        }
        if (actual < 0 || actual > 0xFFFF_FFFFL) {
            throw new IllegalArgumentException("actual must be an integer from 0 to 2^32 - 1, not " + actual);
        }
        if (!receipt.spend()) {
            throw new ReceiptSpentException("this receipt (key " + Receipt.printable(receipt.key()) + ", cost "
                    + receipt.cost() + ") was settled or refunded already: an admission is settled once");
        }
        if (actual > core.algorithm.capacity()) {
            throw new CostTooHighException("a settlement to " + actual + " units can never fit: the capacity is "
                    + core.algorithm.capacity() + " (the receipt is spent; the admission counts as charged)");
        }
        Call call = newCall(Op.SETTLE, receipt.key(), receipt.cost());
        call.actual = actual;
        call.stampAt = receipt.stampAt();
        call.stampMark = receipt.stampMark();
        return call;
    }

    private Call newCall(Op op, byte[] key, long cost) {
        Long now = null;
        if (core.clock != null) {
            long n = core.clock.getAsLong();
            if (n < 0) {
                throw new IllegalArgumentException("the clock must answer a non-negative number of µs, not " + n);
            }
            now = Math.min(n, 1L << 52);
        }
        long started = RedisClock.monotonicMicros();
        long giveUp;
        if (deadline != null) {
            Duration left = Duration.between(Instant.now(), deadline);
            giveUp = started + (left.isNegative() ? 0 : Math.min(left.toNanos() / 1000, 3_600_000_000L));
        } else {
            giveUp = timeoutMicros < 0 ? Long.MAX_VALUE : started + timeoutMicros;
        }
        return new Call(op, key, core.redisKey(key), cost, now, giveUp, now != null ? now : started);
    }

    private CompletableFuture<Decision> decide(Call call) {
        Core c = core;
        if (call.op == Op.CHECK && c.refusals != null) {
            Decision hit = c.refusals.refusal(call.key, call.cost, call.localNow);
            if (hit != null) {
                c.cachedRefusals.increment();
                return CompletableFuture.completedFuture(hit);
            }
        }
        if (c.refusals != null && (call.op == Op.SETTLE || call.op == Op.RESET)) {
            c.refusals.forget(call.key);
        }
        long permit = c.breaker.permit();
        if (permit >= 0) {
            return policy(call, new CircuitOpenException(Duration.ofNanos(permit)));
        }
        call.probe = permit == Breaker.PROBE;
        if (call.registry) {
            c.recordQuota(call);
        }
        CompletableFuture<Decision> out = new CompletableFuture<>();
        bounded(call).whenComplete((reply, error) -> {
            if (error == null) {
                try {
                    out.complete(answered(call, reply));
                    return;
                } catch (RuntimeException e) {
                    // A reply no script sends (classified as a data error): never a call left hanging.
                    error = e;
                }
            }
            RatelabException failure = failed(call, error);
            policy(call, failure).whenComplete((d, e) -> {
                if (e != null) {
                    out.completeExceptionally(Errors.unwrap(e));
                } else {
                    out.complete(d);
                }
            });
        });
        return out;
    }

    /**
     * The call's reply, by its caller's give-up instant at the latest: then
     * the caller is answered a timeout, and the command, if already sent, is
     * left to finish: an admission whose reply comes after that is given back
     * by its stamp.
     */
    private CompletableFuture<List<Object>> bounded(Call call) {
        CompletableFuture<List<Object>> out = new CompletableFuture<>();
        ScheduledFuture<?> timer = null;
        if (call.bounded()) {
            long left = call.giveUp - RedisClock.monotonicMicros();
            if (left <= 0) {
                call.abandon();
                out.completeExceptionally(core.timedOut());
                return out;
            }
            timer = core.redis.timer().schedule(() -> {
                if (call.abandon()) {
                    out.completeExceptionally(core.timedOut());
                }
            }, left, TimeUnit.MICROSECONDS);
        }
        ScheduledFuture<?> cancel = timer;
        CompletableFuture<List<Object>> work;
        core.pending.incrementAndGet();
        try {
            work = core.send(call);
        } catch (RuntimeException e) {
            work = CompletableFuture.failedFuture(e);
        }
        work.whenComplete((reply, error) -> {
            if (cancel != null) {
                cancel.cancel(false);
            }
            if (call.arrive()) {
                if (error != null) {
                    out.completeExceptionally(Errors.unwrap(error));
                } else {
                    out.complete(reply);
                }
            } else if (error == null) {
                core.lateReply(call, reply);
            }
            core.pending.decrementAndGet();
        });
        return out;
    }

    private Decision answered(Call call, List<Object> reply) {
        Core c = core;
        Validated v = c.validate(reply, call.op, call.cost, call.now);
        c.breaker.success();
        c.answered.increment();
        Decision d = v.decision;
        if (call.op == Op.CHECK && c.refusals != null && !d.allowed()) {
            c.refusals.remember(call.key, call.cost, call.localNow, d);
        }
        if (call.op == Op.CHECK && call.cost > 0 && d.allowed()) {
            return d.withReceipt(new Receipt(this, call.key, call.cost, v.stampAt, v.stampMark));
        }
        return d;
    }

    private RatelabException failed(Call call, Throwable error) {
        Core c = core;
        RatelabException e = Errors.classify(error);
        if (e instanceof TimedOutException) {
            c.timeouts.increment();
        } else if (e instanceof DataException) {
            c.dataErrors.increment();
        } else {
            c.errors.increment();
        }
        if (e instanceof UnavailableException) {
            c.breaker.failure(call.probe);
        } else {
            // Redis answered: it is up, whatever it said.
            c.breaker.success();
        }
        return e;
    }

    /**
     * The failure policy's answer for a check or a peek (after an alert), or
     * {@code error}. Settlements and resets have none: there is nothing to
     * give back on a store that is not there (the settled admission counts
     * as charged).
     */
    private CompletableFuture<Decision> policy(Call call, RatelabException error) {
        Core c = core;
        if (call.op == Op.SETTLE || call.op == Op.RESET) {
            c.alerts.raise(new Alert(c.algorithm.name(), error, Optional.empty(), call.key), c.stats());
            return CompletableFuture.failedFuture(error);
        }
        FailurePolicy policy = error instanceof UnavailableException || c.policyOnDataErrors ? c.failure : FailurePolicy.ERROR;
        c.alerts.raise(new Alert(c.algorithm.name(), error, Optional.of(policy), call.key), c.stats());
        long capacity = c.algorithm.capacity();
        switch (policy) {
            case ALLOW -> {
                // As a fresh key would answer: full iff nothing is missing.
                long reset = call.cost > 0 ? Math.max(1, c.algorithm.maxWaitMicros()) : 0;
                return CompletableFuture.completedFuture(new Decision(true, capacity, capacity - call.cost, 0, reset, 0, true, null));
            }
            case DENY -> {
                // An open breaker says when Redis is tried again; else the next check may find it after a timeout.
                long wait = error instanceof CircuitOpenException open
                        ? Quota.ceilDiv(open.retryAfter().orElseThrow().toNanos(), 1000)
                        : (c.timeoutMicros > 0 ? c.timeoutMicros : 1_000_000);
                long retry = Math.max(1, wait);
                return CompletableFuture.completedFuture(new Decision(false, capacity, 0, retry, retry, 0, true, null));
            }
            default -> {
                return CompletableFuture.failedFuture(error);
            }
        }
    }

    private static <T> T join(CompletableFuture<T> future) {
        try {
            return future.join();
        } catch (CompletionException e) {
            Throwable cause = Errors.unwrap(e);
            if (cause instanceof RuntimeException r) {
                throw r;
            }
            if (cause instanceof Error err) {
                throw err;
            }
            throw new RatelabException(String.valueOf(cause), cause);
        }
    }

    record Validated(Decision decision, long stampAt, long stampMark) {}

    // -- the shared state ----------------------------------------------------------------

    /** What every view of one limiter shares. */
    static final class Core {
        final Redis redis;
        final Algorithm algorithm;
        final Quota quota;
        final String prefix;
        final LongSupplier clock;
        final long ttlSlackMs;
        final long timeoutMicros;
        final FailurePolicy failure;
        final boolean policyOnDataErrors;
        final Breaker breaker;
        final Alerts alerts;
        final RefusalCache refusals;
        final int quotaCheckEvery;
        final Backend backend;
        final byte[] source;
        final String sha;
        final long maxWait;
        final List<byte[]> params;
        final Detection detection = new Detection();
        final Detection peekTwin = new Detection();
        final AtomicLong checks = new AtomicLong();
        final AtomicLong pending = new AtomicLong();
        final LongAdder answered = new LongAdder();
        final LongAdder timeouts = new LongAdder();
        final LongAdder errors = new LongAdder();
        final LongAdder dataErrors = new LongAdder();
        final LongAdder scriptCalls = new LongAdder();
        final LongAdder moduleCalls = new LongAdder();
        final LongAdder reloads = new LongAdder();
        final LongAdder cachedRefusals = new LongAdder();
        final LongAdder clockSamples = new LongAdder();
        final LongAdder quotaMismatches = new LongAdder();
        final LongAdder lateRefunds = new LongAdder();
        final Keyword command;
        final Keyword peekCommand;

        Core(Builder b) {
            this.redis = b.redis;
            this.algorithm = Algorithm.of(b.algorithm, b.quota);
            this.quota = b.quota;
            this.prefix = b.prefix;
            this.clock = b.clock;
            this.ttlSlackMs = b.ttlSlackMs != null ? b.ttlSlackMs : (b.clock == null ? 0 : 60_000);
            if (ttlSlackMs < 0 || ttlSlackMs > Protocol.MAX_TTL_SLACK_MS) {
                throw new IllegalArgumentException("ttlSlackMs must be from 0 to " + Protocol.MAX_TTL_SLACK_MS
                        + " (2^52 µs, the whole range of instants), which the scripts refuse past, not " + ttlSlackMs);
            }
            this.timeoutMicros = b.timeoutMicros;
            this.failure = b.failure;
            this.policyOnDataErrors = b.policyOnDataErrors;
            // A probe may take as long as a call: then another caller may probe.
            this.breaker = new Breaker(b.breakerThreshold, b.breakerCoolDown.toNanos(),
                    (timeoutMicros > 0 ? timeoutMicros : 1_000_000) * 1000, System::nanoTime);
            this.alerts = new Alerts(b.onAlert);
            this.refusals = b.cacheRefusals > 0 ? new RefusalCache(b.cacheRefusals) : null;
            this.quotaCheckEvery = b.quotaCheckEvery;
            this.backend = b.backend;
            this.source = Protocol.scriptSource(algorithm.name());
            this.sha = Protocol.sha1Hex(source);
            // Replies may wait up to 1 s plus the slack longer than from fresh state.
            this.maxWait = algorithm.maxWaitMicros() + 1_000_000 + ttlSlackMs * 1000;
            List<byte[]> p = new ArrayList<>();
            for (long param : algorithm.params()) {
                p.add(ascii(param));
            }
            this.params = List.copyOf(p);
            this.command = new Keyword(algorithm.moduleCommand());
            this.peekCommand = new Keyword(algorithm.moduleCommand() + "_RO");
        }

        String describe() {
            return "prefix " + Json.quote(prefix) + ", " + algorithm.fingerprintInput();
        }

        byte[] redisKey(byte[] key) {
            return Protocol.redisKey(prefix, key, algorithm.keySuffix());
        }

        /** The quota registry's key: the state key's hash tag (same cluster slot), then {@code <code>:quota}. */
        byte[] registryKey(byte[] key) {
            byte[] state = redisKey(key);
            byte[] tail = (algorithm.code() + ":quota").getBytes(StandardCharsets.US_ASCII);
            int head = state.length - algorithm.keySuffix().length();
            byte[] out = new byte[head + tail.length];
            System.arraycopy(state, 0, out, 0, head);
            System.arraycopy(tail, 0, out, head, tail.length);
            return out;
        }

        TimedOutException timedOut() {
            return new TimedOutException("the rate limiter backend did not answer before the call's deadline"
                    + (timeoutMicros > 0 ? " (timeout " + timeoutMicros / 1000 + " ms)" : ""));
        }

        static byte[] ascii(long n) {
            return Long.toString(n).getBytes(StandardCharsets.US_ASCII);
        }

        List<byte[]> arguments(long cost, Long now, String op, Long deadline) {
            List<byte[]> args = new ArrayList<>(6 + params.size());
            args.add(ascii(Protocol.version()));
            args.add(now == null ? new byte[0] : ascii(now));
            args.add(ascii(cost));
            args.add(ascii(ttlSlackMs));
            args.add(deadline == null ? new byte[0] : ascii(deadline));
            args.add(op.getBytes(StandardCharsets.US_ASCII));
            args.addAll(params);
            return args;
        }

        static String operation(Call call) {
            if (call.op == Op.SETTLE) {
                return "settle:" + call.actual + ":" + call.stampAt + ":" + call.stampMark;
            }
            return call.op.wire;
        }

        /** The call's commands: a {@code TIME} sample when stale, then the script or the module's command. */
        CompletableFuture<List<Object>> send(Call call) {
            return redis.connection().thenCompose(connection -> {
                if (call.abandoned()) {
                    // The caller gave up while the connection was set up: nothing is sent.
                    return CompletableFuture.failedFuture(timedOut());
                }
                CompletableFuture<Void> ready = CompletableFuture.completedFuture(null);
                RedisClock clock = redis.clock();
                if (call.bounded() && !clock.fresh(RedisClock.monotonicMicros())) {
                    ready = sampleTime(connection);
                }
                return ready.thenCompose(v -> {
                    if (call.abandoned()) {
                        return CompletableFuture.failedFuture(timedOut());
                    }
                    Long deadline = call.bounded() ? clock.deadline(call.giveUp, RedisClock.monotonicMicros()) : null;
                    List<byte[]> args = arguments(call.cost, call.now, operation(call), deadline);
                    return route(connection, call.op == Op.PEEK, call.redisKey, args);
                });
            });
        }

        /** {@code work}, counted in {@link #pending} until it completes (counted in by the caller). */
        private <T> CompletableFuture<T> tracked(CompletableFuture<T> work) {
            return work.whenComplete((v, e) -> pending.decrementAndGet());
        }

        private CompletableFuture<Void> sampleTime(StatefulConnection<byte[], byte[]> connection) {
            List<CompletableFuture<RedisClock.Sample>> samples = new ArrayList<>();
            for (CompletableFuture<RedisClusterAsyncCommands<byte[], byte[]>> node : Redis.primaries(connection)) {
                samples.add(node.thenCompose(commands -> {
                    long before = RedisClock.monotonicMicros();
                    return commands.time().toCompletableFuture().thenApply(reply -> {
                        long after = RedisClock.monotonicMicros();
                        try {
                            return new RedisClock.Sample(before, RedisClock.parseTime(reply), after);
                        } catch (IllegalArgumentException e) {
                            throw new DataException("invalid reply to TIME: " + e.getMessage());
                        }
                    });
                }));
            }
            return CompletableFuture.allOf(samples.toArray(CompletableFuture[]::new)).thenRun(() -> {
                clockSamples.increment();
                redis.clock().record(samples.stream().map(CompletableFuture::join).toList());
            });
        }

        /** The module's command when the backend says so, else (or when it turns out missing) the script. */
        CompletableFuture<List<Object>> route(StatefulConnection<byte[], byte[]> connection, boolean peek,
                                              byte[] key, List<byte[]> args) {
            RedisClusterAsyncCommands<byte[], byte[]> commands = Redis.commands(connection);
            return moduleFirst(commands).thenCompose(module -> {
                if (!module) {
                    return script(commands, key, args);
                }
                return module(commands, peek && peekTwin.route() != Detection.Route.SCRIPT, key, args);
            });
        }

        private CompletableFuture<Boolean> moduleFirst(RedisClusterAsyncCommands<byte[], byte[]> commands) {
            switch (backend) {
                case SCRIPT:
                    return CompletableFuture.completedFuture(false);
                case MODULE:
                    return CompletableFuture.completedFuture(true);
                default:
                    switch (detection.route()) {
                        case MODULE:
                            return CompletableFuture.completedFuture(true);
                        case SCRIPT:
                            return CompletableFuture.completedFuture(false);
                        default:
                            if (redis.isCluster()) {
                                // A keyless probe would reach one random node: the command itself, routed by key, tells.
                                return CompletableFuture.completedFuture(true);
                            }
                            return commands.dispatch(new Keyword("RATELAB.PROTOCOL"),
                                            new IntegerOutput<>(ByteArrayCodec.INSTANCE))
                                    .toCompletableFuture()
                                    .handle((version, error) -> {
                                        if (error != null && !Errors.unknownCommand(error)) {
                                            throw new CompletionException(Errors.unwrap(error));
                                        }
                                        boolean found = error == null && version != null && version == Protocol.version();
                                        if (found) {
                                            detection.found();
                                        } else {
                                            detection.missing();
                                        }
                                        return found;
                                    });
                    }
            }
        }

        private CompletableFuture<List<Object>> module(RedisClusterAsyncCommands<byte[], byte[]> commands, boolean twin,
                                                       byte[] key, List<byte[]> args) {
            moduleCalls.increment();
            CommandArgs<byte[], byte[]> cmdArgs = new CommandArgs<>(ByteArrayCodec.INSTANCE).addKey(key);
            for (byte[] a : args) {
                cmdArgs.add(a);
            }
            Keyword name = twin ? peekCommand : command;
            CompletableFuture<List<Object>> reply = commands
                    .dispatch(name, new NestedMultiOutput<>(ByteArrayCodec.INSTANCE), cmdArgs)
                    .toCompletableFuture();
            return reply.handle((value, error) -> {
                if (error == null) {
                    if (backend == Backend.AUTO && detection.route() != Detection.Route.MODULE) {
                        detection.found();
                    }
                    return CompletableFuture.completedFuture(value);
                }
                if (twin && Errors.unknownCommand(error)) {
                    // A module older than the twins, or none: the command itself says which.
                    peekTwin.missing();
                    return module(commands, false, key, args);
                }
                if (Errors.unknownCommand(error) || Errors.otherVersion(error)) {
                    if (backend != Backend.AUTO) {
                        return CompletableFuture.<List<Object>>failedFuture(new DataException("the ratelab module "
                                + (Errors.otherVersion(error) ? "speaks another protocol version" : "is not loaded")
                                + " on this Redis (" + name + " answered \"" + Errors.unwrap(error).getMessage()
                                + "\"): load this version's (redis-server --loadmodule libratelab_redis_module.so) "
                                + "or use Backend.AUTO or Backend.SCRIPT"));
                    }
                    // Gone (a restart or failover onto a node without it), never there, or of another version.
                    detection.missing();
                    return script(commands, key, args);
                }
                return CompletableFuture.<List<Object>>failedFuture(Errors.unwrap(error));
            }).thenCompose(f -> f);
        }

        /** {@code EVALSHA}; on {@code NOSCRIPT}, {@code SCRIPT LOAD} (every primary of a cluster) and the same again. */
        private CompletableFuture<List<Object>> script(RedisClusterAsyncCommands<byte[], byte[]> commands,
                                                       byte[] key, List<byte[]> args) {
            scriptCalls.increment();
            byte[][] keys = {key};
            byte[][] values = args.toArray(byte[][]::new);
            CompletableFuture<List<Object>> first = commands
                    .<List<Object>>evalsha(sha, ScriptOutputType.MULTI, keys, values)
                    .toCompletableFuture();
            return first.handle((reply, error) -> {
                if (error == null) {
                    return CompletableFuture.completedFuture(reply);
                }
                if (!(Errors.unwrap(error) instanceof RedisNoScriptException)) {
                    return CompletableFuture.<List<Object>>failedFuture(Errors.unwrap(error));
                }
                reloads.increment();
                return commands.scriptLoad(source).toCompletableFuture().thenCompose(loaded -> commands
                        .<List<Object>>evalsha(sha, ScriptOutputType.MULTI, keys, values).toCompletableFuture());
            }).thenCompose(f -> f);
        }

        /**
         * What a first call would do before its script, done now in the
         * background, so that no caller's deadline pays for it: the module
         * detected, the script loaded, Redis's clock sampled. Failures are
         * left for the calls to meet.
         */
        void warm() {
            warming = redis.connection().thenCompose(connection -> {
                RedisClusterAsyncCommands<byte[], byte[]> commands = Redis.commands(connection);
                CompletableFuture<Boolean> module = moduleFirst(commands);
                CompletableFuture<?> script = commands.scriptLoad(source).toCompletableFuture();
                CompletableFuture<Void> clock = redis.clock().fresh(RedisClock.monotonicMicros())
                        ? CompletableFuture.completedFuture(null) : sampleTime(connection);
                return CompletableFuture.allOf(module, script, clock);
            }).handle((done, error) -> null);
        }

        /** The warm-up, done or not (tests wait for it before flushing scripts). */
        volatile CompletableFuture<Void> warming = CompletableFuture.completedFuture(null);

        /**
         * A reply that came after its caller gave up: an admission it made is
         * given back by its stamp at once (a refund, with no deadline: giving
         * back is safe whenever it runs).
         */
        void lateReply(Call call, List<Object> reply) {
            if (call.op != Op.CHECK || call.cost == 0 || reply == null || reply.size() != Protocol.REPLY_LEN
                    || !Long.valueOf(1).equals(reply.get(0)) || !(reply.get(6) instanceof Long at)
                    || !(reply.get(7) instanceof Long mark)) {
                return;
            }
            List<byte[]> args = arguments(call.cost, call.now, "settle:0:" + at + ":" + mark, null);
            pending.incrementAndGet();
            tracked(redis.connection().thenCompose(connection -> route(connection, false, call.redisKey, args)))
                    .whenComplete((refund, error) -> {
                        if (error == null) {
                            lateRefunds.increment();
                        } else {
                            alerts.raise(new Alert(algorithm.name(), new BackendException(
                                    "an admission whose reply came after its caller gave up could not be given back: "
                                            + Errors.classify(error).getMessage()), Optional.empty(), call.key), stats());
                        }
                    });
        }

        /** {@code SET <registry key> <fingerprint> PX <ttl> GET}, not waited for; a mismatch is alerted. */
        void recordQuota(Call call) {
            String ours = algorithm.fingerprintInput();
            long ttl = Math.max(60_000, Quota.ceilDiv(algorithm.maxWaitMicros(), 1000));
            redis.connection()
                    .thenCompose(connection -> Redis.commands(connection)
                            .setGet(registryKey(call.key), ours.getBytes(StandardCharsets.US_ASCII), SetArgs.Builder.px(ttl))
                            .toCompletableFuture())
                    .whenComplete((theirs, error) -> {
                        // A warning system: it never fails a decision.
                        if (error != null || theirs == null) {
                            return;
                        }
                        String previous = new String(theirs, StandardCharsets.UTF_8);
                        if (!previous.equals(ours)) {
                            quotaMismatches.increment();
                            alerts.raise(new Alert(algorithm.name(), new QuotaMismatchException(
                                    Receipt.printable(call.key), ours, previous), Optional.empty(), call.key), stats());
                        }
                    });
        }

        Stats stats() {
            return new Stats(answered.sum(), timeouts.sum(), errors.sum(), dataErrors.sum(), scriptCalls.sum(),
                    moduleCalls.sum(), reloads.sum(), cachedRefusals.sum(), breaker.shortCircuited(), breaker.opened(),
                    breaker.isOpen(), Duration.ofNanos(breaker.coolDownLeft()), clockSamples.sum(),
                    quotaMismatches.sum(), lateRefunds.sum());
        }

        /**
         * A script's reply to {@code op} of {@code cost}, trusting nothing in
         * it: eight integers, allowed 0 or 1, limit the capacity, remaining at
         * most the limit, no wait to retry an admitted request and no delay
         * for a refused one; waits within the longest this quota produces
         * (plus 1 s and the slack), but for a debt's refusals, peeks,
         * settlements and resets (up to {@link Protocol#MAX_END}); a stamp
         * exactly for a check admitted with a cost above 0.
         */
        Validated validate(Object reply, Op op, long cost, Long now) {
            if (!(reply instanceof List<?> list) || list.size() != Protocol.REPLY_LEN) {
                throw invalid(reply, "not eight integers");
            }
            long[] n = new long[Protocol.REPLY_LEN];
            for (int i = 0; i < n.length; i++) {
                if (!(list.get(i) instanceof Long value)) {
                    throw invalid(reply, "not eight integers");
                }
                n[i] = value;
                if (value < 0) {
                    throw invalid(reply, "a negative integer");
                }
            }
            long allowed = n[0], limit = n[1], remaining = n[2], retry = n[3], reset = n[4], delay = n[5], at = n[6], mark = n[7];
            if (limit != algorithm.capacity()) {
                throw invalid(reply, "limit is not this limiter's capacity");
            }
            if (remaining > limit) {
                throw invalid(reply, "remaining above the limit");
            }
            boolean admission = op == Op.CHECK && cost > 0 && allowed == 1;
            // A settlement's debt lengthens a debt's waits, never an admission's: it needed the room.
            long longest = algorithm.debt() && !admission ? Math.max(maxWait, Protocol.MAX_END) : maxWait;
            if (Math.max(retry, Math.max(reset, delay)) > longest) {
                throw invalid(reply, "a wait longer than this quota can produce");
            }
            if (allowed != 0 && allowed != 1) {
                throw invalid(reply, "allowed is neither 0 nor 1");
            }
            if ((allowed == 1 && retry != 0) || (allowed == 0 && delay != 0)) {
                throw invalid(reply, "a retry wait when admitted, or a delay when refused");
            }
            if (admission) {
                boolean ok;
                if (algorithm.debt()) {
                    // The key is full again after the admission, at most the longest wait after the instant sent.
                    ok = now != null ? at > now && at - now <= maxWait : at >= 1 && at <= Protocol.MAX_END;
                } else {
                    // A window's mark counts at least the admission's own units.
                    ok = mark >= 1 && at <= Protocol.MAX_END;
                }
                if (!ok || mark > Protocol.MAX_EXACT) {
                    throw invalid(reply, "a stamp out of bounds");
                }
            } else if (at != 0 || mark != 0) {
                throw invalid(reply, "a stamp for no admission");
            }
            return new Validated(new Decision(allowed == 1, limit, remaining, retry, reset, delay, false, null), at, mark);
        }

        private DataException invalid(Object reply, String why) {
            return new DataException("ratelab " + algorithm.name() + ": invalid reply " + reply + ": " + why);
        }
    }

    /** A command name Lettuce sends as is (the module's). */
    static final class Keyword implements ProtocolKeyword {
        private final String command;
        private final byte[] bytes;

        Keyword(String command) {
            this.command = command;
            this.bytes = command.getBytes(StandardCharsets.US_ASCII);
        }

        @Override
        public byte[] getBytes() {
            return bytes.clone();
        }

        @Override
        public String toString() {
            return command;
        }
    }

    /** What a limiter under {@link Backend#AUTO} knows of its server: the module found, missing (re-checked), or unknown. */
    static final class Detection {
        enum Route { MODULE, SCRIPT, UNKNOWN }

        private volatile Route state = Route.UNKNOWN;
        private volatile long recheckAt;

        Route route() {
            Route s = state;
            if (s == Route.SCRIPT && System.nanoTime() - recheckAt >= 0) {
                return Route.UNKNOWN;
            }
            return s;
        }

        void found() {
            state = Route.MODULE;
        }

        void missing() {
            recheckAt = System.nanoTime() + MODULE_RECHECK.toNanos();
            state = Route.SCRIPT;
        }
    }

    // -- the builder ---------------------------------------------------------------------

    /** The options of a {@link Limiter}, with the Rust {@code RedisLimiterBuilder}'s defaults. */
    public static final class Builder {
        private final Redis redis;
        private final String algorithm;
        private final Quota quota;
        private String prefix = Protocol.DEFAULT_PREFIX;
        private LongSupplier clock;
        private Long ttlSlackMs;
        private long timeoutMicros = DEFAULT_TIMEOUT.toNanos() / 1000;
        private FailurePolicy failure = FailurePolicy.ERROR;
        private boolean policyOnDataErrors;
        private int breakerThreshold = DEFAULT_BREAKER_THRESHOLD;
        private Duration breakerCoolDown = DEFAULT_BREAKER_COOL_DOWN;
        private Consumer<Alert> onAlert;
        private int cacheRefusals;
        private int quotaCheckEvery = DEFAULT_QUOTA_CHECK_EVERY;
        private Backend backend = Backend.AUTO;

        private Builder(Redis redis, String algorithm, Quota quota) {
            this.redis = Objects.requireNonNull(redis, "redis");
            this.algorithm = Objects.requireNonNull(algorithm, "algorithm");
            this.quota = Objects.requireNonNull(quota, "quota");
        }

        static long timeoutMicros(Duration timeout) {
            Objects.requireNonNull(timeout, "timeout");
            if (timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("a timeout must be positive, not " + timeout);
            }
            if (timeout.compareTo(Duration.ofHours(1)) > 0) {
                throw new IllegalArgumentException("a timeout of " + timeout + " is longer than an hour: use noTimeout()");
            }
            return Math.max(1, timeout.toNanos() / 1000);
        }

        /** The key prefix (default {@code ratelab}). */
        public Builder prefix(String prefix) {
            this.prefix = Objects.requireNonNull(prefix, "prefix");
            return this;
        }

        /**
         * The caller's clock, µs (any epoch every caller of a key shares),
         * sent as {@code now}: for deterministic tests and simulations. By
         * default the scripts read Redis {@code TIME}, the one clock every
         * instance shares: what production uses.
         */
        public Builder clock(LongSupplier micros) {
            this.clock = Objects.requireNonNull(micros, "clock");
            return this;
        }

        /** Keys live this much longer than their state needs, ms (default 0, or 60 000 with a caller's clock). */
        public Builder ttlSlackMs(long ms) {
            this.ttlSlackMs = ms;
            return this;
        }

        /** The most a call waits for Redis, connecting included (default 100 ms; at most an hour). */
        public Builder timeout(Duration timeout) {
            this.timeoutMicros = timeoutMicros(timeout);
            return this;
        }

        /** Calls wait for Redis as long as it takes (and carry no deadline). */
        public Builder noTimeout() {
            this.timeoutMicros = -1;
            return this;
        }

        /** What a check or a peek answers on an outage (default {@link FailurePolicy#ERROR}). */
        public Builder onFailure(FailurePolicy policy) {
            this.failure = Objects.requireNonNull(policy, "policy");
            return this;
        }

        /** Apply the failure policy to data errors too (default false: they are thrown). */
        public Builder policyOnDataErrors(boolean apply) {
            this.policyOnDataErrors = apply;
            return this;
        }

        /** The circuit breaker: consecutive outages that open it (0: never) and its cool-down. Default 5 and 500 ms. */
        public Builder breaker(int threshold, Duration coolDown) {
            if (threshold < 0) {
                throw new IllegalArgumentException("the breaker threshold must not be negative, not " + threshold);
            }
            if (coolDown.isNegative()) {
                throw new IllegalArgumentException("the breaker cool-down must not be negative, not " + coolDown);
            }
            this.breakerThreshold = threshold;
            this.breakerCoolDown = coolDown;
            return this;
        }

        /** Called with every failure and quota mismatch (a warning is also logged, at most once a second). */
        public Builder onAlert(Consumer<Alert> hook) {
            this.onAlert = Objects.requireNonNull(hook, "hook");
            return this;
        }

        /** Remember refusals locally for at most {@code keys} keys (off by default). */
        public Builder cacheRefusals(int keys) {
            if (keys < 1) {
                throw new IllegalArgumentException("cacheRefusals must be a positive number of keys, not " + keys);
            }
            this.cacheRefusals = keys;
            return this;
        }

        /** Every {@code n}-th check (and the first) records this quota for its key, and alerts on another (default 100). */
        public Builder quotaCheckEvery(int n) {
            if (n < 1) {
                throw new IllegalArgumentException("quotaCheckEvery must be positive, not " + n + " (noQuotaCheck() turns it off)");
            }
            this.quotaCheckEvery = n;
            return this;
        }

        /** Never records the quota. */
        public Builder noQuotaCheck() {
            this.quotaCheckEvery = 0;
            return this;
        }

        /** What runs the decisions (default {@link Backend#AUTO}). */
        public Builder backend(Backend backend) {
            this.backend = Objects.requireNonNull(backend, "backend");
            return this;
        }

        /**
         * The limiter. An unknown algorithm, a quota its store cannot hold or
         * a slack the scripts refuse is an {@link IllegalArgumentException}.
         */
        public Limiter build() {
            Core core = new Core(this);
            core.warm();
            return new Limiter(core, core.timeoutMicros, null);
        }
    }
}
