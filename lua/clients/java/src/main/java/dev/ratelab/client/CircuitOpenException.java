package dev.ratelab.client;

import java.time.Duration;
import java.util.Optional;

/** Redis failed repeatedly and is not called for a while: the circuit breaker is open. */
public class CircuitOpenException extends UnavailableException {
    private static final long serialVersionUID = 1L;
    private final Duration retryAfter;

    public CircuitOpenException(Duration retryAfter) {
        super("the rate limiter backend is failing; next attempt in " + retryAfter.toMillis() + " ms");
        this.retryAfter = retryAfter;
    }

    @Override
    public Optional<Duration> retryAfter() {
        return Optional.of(retryAfter);
    }
}
