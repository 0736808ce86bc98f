package dev.ratelab.client;

/** The connection was refused, lost or reset; the server is loading, busy or read-only; a cluster slot is moving or down. */
public class BackendException extends UnavailableException {
    private static final long serialVersionUID = 1L;

    public BackendException(String message) {
        super(message);
    }

    public BackendException(String message, Throwable cause) {
        super(message, cause);
    }
}
