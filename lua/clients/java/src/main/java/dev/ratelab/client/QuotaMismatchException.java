package dev.ratelab.client;

/**
 * Another limiter used the same user key and algorithm with another quota:
 * the two count in different Redis keys, and each caller gets both quotas.
 * Never thrown by a check: it is what the alert hook receives.
 */
public class QuotaMismatchException extends RatelabException {
    private static final long serialVersionUID = 1L;
    private final String ours;
    private final String theirs;

    public QuotaMismatchException(String key, String ours, String theirs) {
        super("quota mismatch on key " + key + ": this limiter counts it as " + ours + ", another limiter as "
                + theirs + "; they use different Redis keys, so each caller gets both quotas");
        this.ours = ours;
        this.theirs = theirs;
    }

    /** This limiter's fingerprint input. */
    public String ours() {
        return ours;
    }

    /** The other limiter's. */
    public String theirs() {
        return theirs;
    }
}
