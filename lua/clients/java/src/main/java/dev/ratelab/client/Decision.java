package dev.ratelab.client;

import java.time.Duration;
import java.util.Objects;
import java.util.Optional;

/**
 * One call's answer, the fields of the Rust {@code Decision}: whether the
 * request passed, the capacity, what remains, and three waits (µs, and as
 * {@link Duration}s). Immutable; two decisions are equal whatever their
 * receipts.
 *
 * <p>{@link #receipt()} holds, for a check that Redis admitted with a cost
 * above 0, the {@link Receipt} of the admission, to settle or refund once;
 * it is empty for everything else: a refusal, a peek, a settlement's or
 * reset's answer, a cost of 0, and a decision the failure policy made
 * ({@link #degraded()}: nothing was charged on Redis, so there is nothing to
 * settle).
 */
public final class Decision {
    private final boolean allowed;
    private final long limit;
    private final long remaining;
    private final long retryAfterMicros;
    private final long resetAfterMicros;
    private final long delayMicros;
    private final boolean degraded;
    private final Receipt receipt;

    Decision(boolean allowed, long limit, long remaining, long retryAfterMicros, long resetAfterMicros,
             long delayMicros, boolean degraded, Receipt receipt) {
        this.allowed = allowed;
        this.limit = limit;
        this.remaining = remaining;
        this.retryAfterMicros = retryAfterMicros;
        this.resetAfterMicros = resetAfterMicros;
        this.delayMicros = delayMicros;
        this.degraded = degraded;
        this.receipt = receipt;
    }

    Decision withReceipt(Receipt receipt) {
        return new Decision(allowed, limit, remaining, retryAfterMicros, resetAfterMicros, delayMicros, degraded, receipt);
    }

    /** The request passed (and was charged, when its cost was above 0). */
    public boolean allowed() {
        return allowed;
    }

    /** The capacity: the quota's burst. */
    public long limit() {
        return limit;
    }

    /** Unit-cost requests still admissible now, after this one. */
    public long remaining() {
        return remaining;
    }

    /** 0 when allowed; when refused, the earliest time from now at which a retry of the same cost can pass, µs. */
    public long retryAfterMicros() {
        return retryAfterMicros;
    }

    /** The time from now until the key is back to full capacity, µs. */
    public long resetAfterMicros() {
        return resetAfterMicros;
    }

    /** The leaky queue's wait before the admitted request's slot, µs (0 for every other algorithm). */
    public long delayMicros() {
        return delayMicros;
    }

    public Duration retryAfter() {
        return micros(retryAfterMicros);
    }

    public Duration resetAfter() {
        return micros(resetAfterMicros);
    }

    public Duration delay() {
        return micros(delayMicros);
    }

    /** {@link #retryAfter()} in whole seconds, rounded up: {@code Retry-After}. */
    public long retryAfterSeconds() {
        return Quota.ceilDiv(retryAfterMicros, 1_000_000);
    }

    /** {@link #resetAfter()} in whole seconds, rounded up. */
    public long resetAfterSeconds() {
        return Quota.ceilDiv(resetAfterMicros, 1_000_000);
    }

    /** No script decided it: the failure policy answered for an unavailable Redis. */
    public boolean degraded() {
        return degraded;
    }

    /** The receipt of an admission of a positive cost (see the class's documentation). */
    public Optional<Receipt> receipt() {
        return Optional.ofNullable(receipt);
    }

    private static Duration micros(long micros) {
        return Duration.ofSeconds(micros / 1_000_000, micros % 1_000_000 * 1000);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Decision d && d.allowed == allowed && d.limit == limit && d.remaining == remaining
                && d.retryAfterMicros == retryAfterMicros && d.resetAfterMicros == resetAfterMicros
                && d.delayMicros == delayMicros && d.degraded == degraded;
    }

    @Override
    public int hashCode() {
        return Objects.hash(allowed, limit, remaining, retryAfterMicros, resetAfterMicros, delayMicros, degraded);
    }

    @Override
    public String toString() {
        return "Decision(allowed=" + allowed + ", limit=" + limit + ", remaining=" + remaining + ", retryAfter="
                + retryAfterMicros + "µs, resetAfter=" + resetAfterMicros + "µs, delay=" + delayMicros + "µs"
                + (degraded ? ", degraded" : "") + (receipt != null ? ", " + receipt : "") + ")";
    }
}
