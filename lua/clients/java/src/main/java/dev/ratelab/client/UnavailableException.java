package dev.ratelab.client;

import java.time.Duration;
import java.util.Optional;

/**
 * An outage: Redis could not decide (it did not answer before the caller's
 * deadline, the connection failed, a cluster slot is moving or down, the
 * server is loading or busy, the circuit breaker is open). This is where the
 * failure policy applies.
 */
public class UnavailableException extends RatelabException {
    private static final long serialVersionUID = 1L;

    public UnavailableException(String message) {
        super(message);
    }

    public UnavailableException(String message, Throwable cause) {
        super(message, cause);
    }

    /** When known, the wait until Redis is tried again (an open breaker's cool-down). */
    public Optional<Duration> retryAfter() {
        return Optional.empty();
    }
}
