package dev.ratelab.client;

import java.util.List;

/**
 * The offset between this process's monotonic clock ({@link System#nanoTime()},
 * in µs) and Redis's {@code TIME}, measured, to place a caller's give-up
 * instant on Redis's clock (lua/README.md, "The deadline").
 *
 * <p>One sample: read the monotonic clock ({@code before}), send {@code TIME},
 * read it again when the reply is in ({@code after}). Redis read its clock in
 * between, so {@code redis − local} lies in {@code [redis − after, redis −
 * before]}; the lower bound is kept, so that a deadline is never later on
 * Redis's clock than the caller's own give-up instant. A sample {@code age}
 * old is widened by {@code driftPpm × age} (500 ppm: the most NTP slews a
 * clock), and one older than {@code maxAge} (5 s) is measured again, as after
 * every reconnection. The deadline sent is {@code giveUp + offset − drift −
 * rtt / 2}: the reply must also have the time to fly back. On a Cluster every
 * master is sampled and the lowest bound kept. Thread-safe; limiters on one
 * {@link Redis} share one.
 */
public final class RedisClock {
    /** How far the two clocks may drift apart, in parts per million. */
    public static final long DEFAULT_DRIFT_PPM = 500;
    /** A sample older than this (µs) is measured again before the next call. */
    public static final long DEFAULT_MAX_SAMPLE_AGE_MICROS = 5_000_000;

    /** One {@code TIME} round trip: local µs before sending, Redis's µs, local µs after the reply. */
    public record Sample(long before, long redis, long after) {}

    private record State(long offset, long rtt, long taken) {}

    private final long driftPpm;
    private final long maxAgeMicros;
    private volatile State state;

    public RedisClock() {
        this(DEFAULT_DRIFT_PPM, DEFAULT_MAX_SAMPLE_AGE_MICROS);
    }

    public RedisClock(long driftPpm, long maxAgeMicros) {
        if (driftPpm < 0 || maxAgeMicros <= 0) {
            throw new IllegalArgumentException("driftPpm must be >= 0 and maxAgeMicros > 0");
        }
        this.driftPpm = driftPpm;
        this.maxAgeMicros = maxAgeMicros;
    }

    /** This process's monotonic clock, µs. */
    public static long monotonicMicros() {
        return System.nanoTime() / 1000;
    }

    /** A sample exists and is younger than the maximum age at {@code now} (monotonic µs). */
    public boolean fresh(long now) {
        State s = state;
        return s != null && now - s.taken >= 0 && now - s.taken <= maxAgeMicros;
    }

    /** Forget the sample (a reconnection: maybe another server). */
    public void invalidate() {
        state = null;
    }

    /** Samples taken together (one per master of a cluster): the lowest offset and the longest round trip are kept. */
    public void record(List<Sample> samples) {
        if (samples.isEmpty()) {
            throw new IllegalArgumentException("no TIME sample");
        }
        long offset = Long.MAX_VALUE;
        long rtt = 0;
        long taken = Long.MIN_VALUE;
        for (Sample s : samples) {
            offset = Math.min(offset, s.redis - s.after);
            rtt = Math.max(rtt, s.after - s.before);
            taken = Math.max(taken, s.after);
        }
        state = new State(offset, rtt, taken);
    }

    /** The offset kept (Redis − local, its lower bound), µs, or null before the first sample. */
    public Long offsetMicros() {
        State s = state;
        return s == null ? null : s.offset;
    }

    /**
     * {@code giveUp} (local monotonic µs) on Redis's clock (µs since the Unix
     * epoch), less the uncertainty the sample's age adds and half its round
     * trip. Call {@link #record} first.
     */
    public long deadline(long giveUp, long now) {
        State s = state;
        if (s == null) {
            throw new IllegalStateException("no TIME sample yet");
        }
        long age = Math.max(0, now - s.taken);
        long drift = Quota.ceilDiv(age * driftPpm, 1_000_000);
        return Math.max(0, giveUp + s.offset - drift - (s.rtt + 1) / 2);
    }

    /** Redis {@code TIME} ({@code [seconds, microseconds]}) in µs since the epoch. */
    static long parseTime(List<?> reply) {
        if (reply == null || reply.size() != 2) {
            throw new IllegalArgumentException("TIME answered " + reply + ", not two integers");
        }
        long seconds = parseDigits(reply.get(0));
        long micros = parseDigits(reply.get(1));
        if (micros >= 1_000_000 || seconds > 9_000_000_000L) {
            throw new IllegalArgumentException("TIME answered " + reply);
        }
        return seconds * 1_000_000 + micros;
    }

    private static long parseDigits(Object o) {
        String s = o instanceof byte[] b ? new String(b, java.nio.charset.StandardCharsets.US_ASCII) : String.valueOf(o);
        if (!s.matches("[0-9]{1,16}")) {
            throw new IllegalArgumentException("TIME answered " + s + ", not an integer");
        }
        return Long.parseLong(s);
    }
}
