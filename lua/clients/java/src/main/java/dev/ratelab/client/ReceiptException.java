package dev.ratelab.client;

/** A receipt that cannot be settled here; nothing was sent to Redis. */
public class ReceiptException extends RatelabException {
    private static final long serialVersionUID = 1L;

    public ReceiptException(String message) {
        super(message);
    }
}
