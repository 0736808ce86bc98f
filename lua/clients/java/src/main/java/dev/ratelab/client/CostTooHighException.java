package dev.ratelab.client;

/** A cost (or a settlement's actual) above the capacity: it could never pass, even on a fresh key. An error, not a refusal. */
public class CostTooHighException extends RatelabException {
    private static final long serialVersionUID = 1L;

    public CostTooHighException(String message) {
        super(message);
    }
}
