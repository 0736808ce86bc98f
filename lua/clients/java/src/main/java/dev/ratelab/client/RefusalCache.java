package dev.ratelab.client;

import java.nio.ByteBuffer;
import java.util.HashMap;
import java.util.Map;

/**
 * Refusals remembered locally: a key refused with {@code retry_after = d} is
 * refused again without a round trip until {@code d} has passed, for a
 * request of the same cost; at most {@code maxKeys} keys. It only ever
 * refuses what Redis would refuse: nothing but time makes a refused request
 * pass. Times in µs (the caller's clock, or the local monotonic one).
 */
final class RefusalCache {
    private record Refusal(long cost, long until, long fullAt, long limit, long remaining) {}

    private final int maxKeys;
    private final Map<ByteBuffer, Refusal> entries = new HashMap<>();

    RefusalCache(int maxKeys) {
        if (maxKeys < 1) {
            throw new IllegalArgumentException("cacheRefusals must be a positive number of keys, not " + maxKeys);
        }
        this.maxKeys = maxKeys;
    }

    /** A cached refusal of {@code cost} for {@code key} at {@code now}, if any. */
    synchronized Decision refusal(byte[] key, long cost, long now) {
        if (cost == 0) {
            return null;
        }
        ByteBuffer id = ByteBuffer.wrap(key);
        Refusal r = entries.get(id);
        if (r == null) {
            return null;
        }
        if (now >= r.until) {
            entries.remove(id);
            return null;
        }
        if (r.cost != cost) {
            return null;
        }
        return new Decision(false, r.limit, r.remaining, r.until - now, Math.max(0, r.fullAt - now), 0, false, null);
    }

    synchronized void forget(byte[] key) {
        entries.remove(ByteBuffer.wrap(key));
    }

    /** {@code now} was read before the request was sent: {@code now + retryAfter} is never later than Redis said. */
    synchronized void remember(byte[] key, long cost, long now, Decision d) {
        if (entries.size() >= maxKeys) {
            entries.values().removeIf(r -> r.until <= now);
            if (entries.size() >= maxKeys) {
                return;
            }
        }
        entries.put(ByteBuffer.wrap(key.clone()), new Refusal(cost, now + d.retryAfterMicros(),
                now + d.resetAfterMicros(), d.limit(), d.remaining()));
    }
}
