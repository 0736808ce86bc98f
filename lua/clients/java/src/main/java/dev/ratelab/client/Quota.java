package dev.ratelab.client;

import java.time.Duration;
import java.util.Objects;

/**
 * {@code limit} units per {@code period}, up to {@code burst} at once (by
 * default the limit): the same quota every ratelab client and the Rust
 * crates take, validated as the Rust {@code Quota} is. Immutable.
 *
 * <pre>{@code
 * Quota.perSecond(5).withBurst(10);   // the reference quota: 5 a second, 10 at once
 * Quota.perMinute(100);
 * Quota.of(5, Duration.ofMinutes(15)); // 5 per 15 minutes
 * }</pre>
 *
 * <p>Refused with an {@link IllegalArgumentException} that says why: a limit,
 * period or burst of zero, a limit or burst past 32 bits, a period longer
 * than 2^50 µs, more than one unit per microsecond, or a burst that takes
 * longer than 2^50 µs to refill.
 */
public final class Quota {
    /** The longest span the arithmetic carries exactly, µs (2^50). */
    public static final long MAX_SPAN_MICROS = 1L << 50;

    private final long limit;
    private final long periodMicros;
    private final long burst;

    private Quota(long limit, long periodMicros, long burst) {
        if (limit < 0 || periodMicros < 0 || burst < 0) {
            throw new IllegalArgumentException("a quota's limit, period and burst must not be negative");
        }
        if (limit == 0) {
            throw new IllegalArgumentException("the limit must be at least 1 per period, not 0");
        }
        if (limit > 0xFFFF_FFFFL || burst > 0xFFFF_FFFFL) {
            throw new IllegalArgumentException("the limit and the burst must fit in 32 bits");
        }
        if (periodMicros == 0) {
            throw new IllegalArgumentException("the period must be longer than zero (whole microseconds)");
        }
        if (burst == 0) {
            throw new IllegalArgumentException("the burst must be at least 1, not 0");
        }
        if (periodMicros > MAX_SPAN_MICROS) {
            throw new IllegalArgumentException(
                    "the period is longer than the longest supported, " + MAX_SPAN_MICROS + " µs (about 35 years)");
        }
        if (limit > periodMicros) {
            throw new IllegalArgumentException("more than one per microsecond, finer than the time resolution");
        }
        this.limit = limit;
        this.periodMicros = periodMicros;
        this.burst = burst;
        // burst and T are below 2^32 and 2^50 + 1: the products fit in a long only checked.
        long t = emissionIntervalMicros();
        long tolerance = Math.multiplyHigh(burst, t) != 0 ? Long.MAX_VALUE : burst * t;
        if (tolerance > Math.max(MAX_SPAN_MICROS, limit * t)) {
            throw new IllegalArgumentException("the burst takes longer to refill than the longest supported span");
        }
    }

    /** {@code limit} units per {@code periodMicros} µs, burst {@code limit}. */
    public static Quota of(long limit, long periodMicros) {
        return new Quota(limit, periodMicros, limit);
    }

    /** {@code limit} units per {@code periodMicros} µs, up to {@code burst} at once. */
    public static Quota of(long limit, long periodMicros, long burst) {
        return new Quota(limit, periodMicros, burst);
    }

    /** {@code limit} units per {@code period} (whole microseconds), burst {@code limit}. */
    public static Quota of(long limit, Duration period) {
        return of(limit, micros(period));
    }

    /** {@code limit} per second, burst {@code limit}. */
    public static Quota perSecond(long limit) {
        return of(limit, 1_000_000L);
    }

    /** {@code limit} per minute, burst {@code limit}. */
    public static Quota perMinute(long limit) {
        return of(limit, 60_000_000L);
    }

    /** {@code limit} per hour, burst {@code limit}. */
    public static Quota perHour(long limit) {
        return of(limit, 3_600_000_000L);
    }

    /** This quota with {@code burst} units at once. */
    public Quota withBurst(long burst) {
        return new Quota(limit, periodMicros, burst);
    }

    private static long micros(Duration period) {
        Objects.requireNonNull(period, "period");
        if (period.isNegative()) {
            throw new IllegalArgumentException("the period must be longer than zero, not " + period);
        }
        if (period.getNano() % 1000 != 0) {
            throw new IllegalArgumentException("the period is in whole microseconds, not " + period);
        }
        try {
            return Math.multiplyExact(period.getSeconds(), 1_000_000L) + period.getNano() / 1000;
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException("the period is longer than the longest supported, " + MAX_SPAN_MICROS + " µs");
        }
    }

    public long limit() {
        return limit;
    }

    public long periodMicros() {
        return periodMicros;
    }

    public Duration period() {
        return Duration.ofSeconds(periodMicros / 1_000_000, periodMicros % 1_000_000 * 1000);
    }

    public long burst() {
        return burst;
    }

    /** {@code T = ceil(period / limit)}: rounds up, never faster than asked. */
    public long emissionIntervalMicros() {
        return ceilDiv(periodMicros, limit);
    }

    /** {@code burst × T}: the time an empty bucket takes to refill. */
    public long burstToleranceMicros() {
        return burst * emissionIntervalMicros();
    }

    /** The window algorithms' window: {@code ceil(period × burst / limit)}. */
    public long windowMicros() {
        // period < 2^51 and burst < 2^32: the product may pass 2^63.
        java.math.BigInteger product = java.math.BigInteger.valueOf(periodMicros).multiply(java.math.BigInteger.valueOf(burst));
        java.math.BigInteger l = java.math.BigInteger.valueOf(limit);
        return product.add(l).subtract(java.math.BigInteger.ONE).divide(l).longValueExact();
    }

    static long ceilDiv(long a, long b) {
        return -Math.floorDiv(-a, b);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Quota q && q.limit == limit && q.periodMicros == periodMicros && q.burst == burst;
    }

    @Override
    public int hashCode() {
        return Objects.hash(limit, periodMicros, burst);
    }

    @Override
    public String toString() {
        return "Quota(" + limit + " per " + periodMicros + " µs, burst " + burst + ")";
    }
}
