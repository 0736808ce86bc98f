package dev.ratelab.client;

/**
 * Redis answered, and the answer is about the key or the call, not Redis's
 * reachability: corrupt state, a key of another type ({@code WRONGTYPE}),
 * invalid arguments, another protocol version, a settlement or reset
 * {@code out of range} of the protocol's ceilings (nothing was written), a
 * reply no script could send, {@code OOM}. Retrying does not help, and no
 * failure policy hides it (unless asked to): someone has to look.
 */
public class DataException extends RatelabException {
    private static final long serialVersionUID = 1L;

    public DataException(String message) {
        super(message);
    }

    public DataException(String message, Throwable cause) {
        super(message, cause);
    }
}
