package dev.ratelab.client;

/**
 * Every error of this client, unchecked. Its subclasses say what to do:
 * {@link UnavailableException} (an outage: the failure policy applies),
 * {@link DataException} (Redis answered something that needs repair),
 * {@link CostTooHighException} (a cost that can never pass) and
 * {@link ReceiptException} (a receipt that cannot be settled here).
 */
public class RatelabException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public RatelabException(String message) {
        super(message);
    }

    public RatelabException(String message, Throwable cause) {
        super(message, cause);
    }
}
