package dev.ratelab.client;

import java.util.function.Consumer;

/**
 * Every alert reaches the hook; a warning goes to the {@link System.Logger}
 * {@code dev.ratelab.client} at most once a second, with the count of those
 * suppressed since, so that an outage does not flood the logs.
 */
final class Alerts {
    private static final System.Logger LOG = System.getLogger("dev.ratelab.client");

    private final Consumer<Alert> hook;
    private long last = Long.MIN_VALUE;
    private boolean logged;
    private long suppressed;

    Alerts(Consumer<Alert> hook) {
        this.hook = hook;
    }

    void raise(Alert alert, Stats stats) {
        if (hook != null) {
            try {
                hook.accept(alert);
            } catch (RuntimeException e) {
                // A broken hook must not break the check.
                LOG.log(System.Logger.Level.WARNING, "ratelab: the alert hook threw", e);
            }
        }
        long suppressedNow;
        synchronized (this) {
            long now = System.nanoTime();
            if (logged && now - last < 1_000_000_000L) {
                suppressed++;
                return;
            }
            logged = true;
            last = now;
            suppressedNow = suppressed;
            suppressed = 0;
        }
        LOG.log(System.Logger.Level.WARNING, "ratelab {0}: {1} (policy {2}; timeouts {3}, errors {4}, {5} alerts suppressed)",
                alert.algorithm(), alert.error().getMessage(),
                alert.policy().map(p -> p.name().toLowerCase(java.util.Locale.ROOT)).orElse("none"),
                stats.timeouts(), stats.errors(), suppressedNow);
    }
}
