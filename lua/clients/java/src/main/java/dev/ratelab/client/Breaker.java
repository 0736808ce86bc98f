package dev.ratelab.client;

import java.util.function.LongSupplier;

/**
 * After {@code threshold} consecutive outage failures, Redis is not called
 * for {@code coolDown}; then one call at a time probes it (a probe that takes
 * longer than {@code probeTimeout} lets another through), and the first
 * answer closes it. A threshold of 0 never opens. Times in ns.
 */
final class Breaker {
    /** What {@link #permit()} says. */
    static final long CALL = -1;
    static final long PROBE = -2;

    private final int threshold;
    private final long coolDownNanos;
    private final long probeTimeoutNanos;
    private final LongSupplier clock;
    private int consecutive;
    private long openUntil;
    private boolean open;
    private long probingUntil;
    private boolean probing;
    private long opened;
    private long shortCircuited;

    Breaker(int threshold, long coolDownNanos, long probeTimeoutNanos, LongSupplier clock) {
        if (threshold < 0) {
            throw new IllegalArgumentException("the breaker threshold must not be negative, not " + threshold);
        }
        if (coolDownNanos < 0) {
            throw new IllegalArgumentException("the breaker cool-down must not be negative");
        }
        this.threshold = threshold;
        this.coolDownNanos = coolDownNanos;
        this.probeTimeoutNanos = probeTimeoutNanos;
        this.clock = clock;
    }

    /** {@link #CALL}, {@link #PROBE} (this call is the one probe), or the ns to wait (open: do not call). */
    synchronized long permit() {
        if (!open) {
            return CALL;
        }
        long now = clock.getAsLong();
        if (now - openUntil < 0) {
            shortCircuited++;
            return openUntil - now;
        }
        if (probing && now - probingUntil < 0) {
            shortCircuited++;
            return probingUntil - now;
        }
        probing = true;
        probingUntil = now + probeTimeoutNanos;
        return PROBE;
    }

    /** Redis answered (a decision or a data error: it is up either way). */
    synchronized void success() {
        consecutive = 0;
        open = false;
        probing = false;
    }

    /** An outage failure. */
    synchronized void failure(boolean probe) {
        if (threshold == 0) {
            return;
        }
        consecutive++;
        if (probe || (!open && consecutive >= threshold)) {
            open = true;
            openUntil = clock.getAsLong() + coolDownNanos;
            probing = false;
            opened++;
        }
    }

    synchronized boolean isOpen() {
        return open;
    }

    /** Ns of cool-down left (0 when closed). */
    synchronized long coolDownLeft() {
        return open ? Math.max(0, openUntil - clock.getAsLong()) : 0;
    }

    synchronized long opened() {
        return opened;
    }

    synchronized long shortCircuited() {
        return shortCircuited;
    }
}
