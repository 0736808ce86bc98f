package dev.ratelab.client;

/**
 * A receipt another limiter issued (another instance, or a serialized receipt
 * of another prefix, algorithm or quota): only its issuer settles it. The
 * receipt is untouched.
 */
public class ForeignReceiptException extends ReceiptException {
    private static final long serialVersionUID = 1L;

    public ForeignReceiptException(String message) {
        super(message);
    }
}
