package dev.ratelab.client;

/**
 * What a check (or a peek) answers when Redis is unavailable (an outage: a
 * timeout, a failed connection, a cluster slot moving or down, an open
 * breaker). Data errors are not outages: they are thrown whatever the policy
 * (unless {@link Limiter.Builder#policyOnDataErrors(boolean)}).
 */
public enum FailurePolicy {
    /** Throw the {@link UnavailableException}, and let the caller decide. The default. */
    ERROR,
    /** Fail open: admit, as a fresh key would ({@code remaining} = capacity − cost), {@link Decision#degraded()}, with an alert. */
    ALLOW,
    /**
     * Fail closed: refuse, {@code retryAfter} the breaker's remaining
     * cool-down when it is open, else the timeout; degraded, with an alert.
     */
    DENY
}
