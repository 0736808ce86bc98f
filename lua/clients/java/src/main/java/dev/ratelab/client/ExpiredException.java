package dev.ratelab.client;

/** The call reached Redis after its deadline ({@code ratelab expired}): nothing was charged. */
public class ExpiredException extends BackendException {
    private static final long serialVersionUID = 1L;

    public ExpiredException(String message) {
        super(message);
    }
}
