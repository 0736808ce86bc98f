package dev.ratelab.client;

/** A receipt already settled or refunded (or handed to a settlement that failed): an admission is settled at most once. */
public class ReceiptSpentException extends ReceiptException {
    private static final long serialVersionUID = 1L;

    public ReceiptSpentException(String message) {
        super(message);
    }
}
