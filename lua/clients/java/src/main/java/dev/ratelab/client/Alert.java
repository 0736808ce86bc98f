package dev.ratelab.client;

import java.util.Optional;

/**
 * One failure (or a quota mismatch), as the alert hook sees it.
 *
 * @param algorithm the limiter's algorithm ({@code gcra}, ...)
 * @param error what went wrong: an {@link UnavailableException}, a {@link DataException} or a {@link QuotaMismatchException}
 * @param policy what the limiter did about it (empty for a quota mismatch, which changes no decision, and for settlements and resets, which have no policy)
 * @param key the user key of the call
 */
public record Alert(String algorithm, RatelabException error, Optional<FailurePolicy> policy, byte[] key) {}
