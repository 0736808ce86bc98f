package dev.ratelab.client;

/**
 * Redis did not answer before the call's deadline. A check that timed out is
 * not charged: its deadline on Redis's clock had passed before the caller
 * gave up, so a script that starts later writes nothing, and an admission
 * whose reply comes after the caller gave up is given back when the reply
 * arrives (see the limiter's documentation for the one case that remains).
 */
public class TimedOutException extends UnavailableException {
    private static final long serialVersionUID = 1L;

    public TimedOutException(String message) {
        super(message);
    }
}
