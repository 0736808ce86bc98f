package dev.ratelab.client.servlet;

import dev.ratelab.client.CostTooHighException;
import dev.ratelab.client.DataException;
import dev.ratelab.client.Decision;
import dev.ratelab.client.Json;
import dev.ratelab.client.RatelabException;
import dev.ratelab.client.Receipt;
import dev.ratelab.client.UnavailableException;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.stream.Collectors;

/**
 * What happens to a request: {@link Outcome#PASS}, {@link Outcome#REFUSE}
 * (429) or {@link Outcome#UNAVAILABLE} (503), with every applicable policy's
 * {@link Report}, as ratelab-http decides it. A request that passes carries
 * its verdict in the request attribute {@link RateLimitFilter#VERDICT}.
 */
public final class Verdict {
    /** The problem type of a refusal (draft-ietf-httpapi-ratelimit-headers). */
    public static final String QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded";

    /** What the request gets. */
    public enum Outcome { PASS, REFUSE, UNAVAILABLE }

    /** A limiter that could not decide, and what its policy did about it. */
    public record Failure(String policy, Client client, RatelabException error, Policy.Failure mode) {}

    private static final System.Logger LOG = System.getLogger("dev.ratelab.client.servlet");

    final List<Report> reports;
    final Outcome outcome;
    final Client client;
    final List<Failure> failures;
    long delayMicros;

    Verdict(List<Report> reports, Outcome outcome, Client client, List<Failure> failures) {
        this.reports = reports;
        this.outcome = outcome;
        this.client = client;
        this.failures = failures;
    }

    public Outcome outcome() {
        return outcome;
    }

    public Client client() {
        return client;
    }

    public List<Report> reports() {
        return List.copyOf(reports);
    }

    public List<Failure> failures() {
        return List.copyOf(failures);
    }

    /** Some policy decides something from the response (it counts only failures or successes). */
    boolean pending() {
        return reports.stream().anyMatch(Report::waitsForResponse);
    }

    /** {@code Retry-After}, whole seconds rounded up, at least 1; null when no wait helps, or for a pass. */
    public Long retryAfterSeconds() {
        if (outcome == Outcome.REFUSE) {
            long wait = 0;
            for (Report r : reports) {
                if (!r.violated()) {
                    continue;
                }
                if (r.decision == null) {
                    return null;
                }
                wait = Math.max(wait, r.decision.retryAfterMicros());
            }
            return Math.max(1, ceil(wait, 1_000_000));
        }
        if (outcome == Outcome.UNAVAILABLE) {
            long hint = 0;
            for (Report r : reports) {
                if (r.state == Report.State.FAILED_CLOSED) {
                    hint = Math.max(hint, r.retryAfterMs == null ? 0 : r.retryAfterMs);
                }
            }
            return Math.max(1, ceil(hint, 1000));
        }
        return null;
    }

    private static long ceil(long a, long b) {
        return -Math.floorDiv(-a, b);
    }

    /** {@code RateLimit-Policy} (every policy that applied) and {@code RateLimit} (every one that decided). */
    public List<Map.Entry<String, String>> fields() {
        List<Map.Entry<String, String>> out = new ArrayList<>();
        if (!reports.isEmpty()) {
            out.add(Map.entry("RateLimit-Policy", reports.stream().map(r -> r.policy.item).collect(Collectors.joining(", "))));
        }
        List<String> items = new ArrayList<>();
        for (Report r : reports) {
            Long t = r.nextAfterMicros();
            if (t == null || r.decision == null) {
                continue;
            }
            items.add("\"" + r.policy.name + "\";r=" + Math.min(r.decision.remaining(), Policy.INTEGER_MAX)
                    + ";t=" + Math.min(ceil(t, 1_000_000), Policy.INTEGER_MAX));
        }
        if (!items.isEmpty()) {
            out.add(Map.entry("RateLimit", String.join(", ", items)));
        }
        return out;
    }

    /** The status and RFC 9457 body (members in ratelab-http's order) of a refusal or a 503. */
    Map.Entry<Integer, String> problem() {
        if (outcome == Outcome.UNAVAILABLE) {
            String names = reports.stream().filter(r -> r.state == Report.State.FAILED_CLOSED)
                    .map(r -> Json.quote(r.policy.name)).collect(Collectors.joining(","));
            return Map.entry(503, "{\"type\":\"about:blank\",\"title\":\"Service Unavailable\",\"status\":503,"
                    + "\"detail\":" + Json.quote("The rate limiter could not decide whether this request is within its quota, "
                    + "and refuses it rather than let it pass unchecked. Try again later.")
                    + ",\"unavailable-policies\":[" + names + "]}");
        }
        List<Report> violated = reports.stream().filter(Report::violated).toList();
        List<String> reasons = new ArrayList<>();
        for (Report r : violated) {
            reasons.add(r.state == Report.State.NEVER
                    ? "a request costing " + r.cost + " can never pass policy \"" + r.policy.name + "\", which admits at most " + r.policy.q + " at once"
                    : "policy \"" + r.policy.name + "\" allows " + r.policy.q + " per " + r.policy.w + " s");
        }
        Long retry = retryAfterSeconds();
        String detail = String.join("; ", reasons) + (retry != null ? "; retry in " + retry + " s." : ".");
        return Map.entry(429, "{\"type\":" + Json.quote(QUOTA_EXCEEDED)
                + ",\"title\":\"Request cannot be satisfied as assigned quota has been exceeded\",\"status\":429"
                + ",\"detail\":" + Json.quote(detail) + ",\"violated-policies\":["
                + violated.stream().map(r -> Json.quote(r.policy.name)).collect(Collectors.joining(",")) + "]}");
    }

    // -- deciding ------------------------------------------------------------------------

    /**
     * Decides one request against every policy that applies to it: one
     * policy is asked once, with its cost; with several, all or nothing:
     * every policy takes the cost with a receipt, all at once, and a request
     * refused (or failed closed) anywhere gives every receipt back before it
     * is answered, so that it leaves every policy as if it never came. A
     * policy that decides from the response takes its cost with a receipt
     * even alone, and keeps it for the response.
     */
    static Verdict decide(List<Report> reports, Client client) {
        List<Failure> failures = new ArrayList<>();
        if (reports.isEmpty()) {
            return new Verdict(reports, Outcome.PASS, client, failures);
        }
        boolean several = reports.size() > 1;
        List<CompletableFuture<Decision>> calls = new ArrayList<>();
        for (Report r : reports) {
            calls.add(call(r, () -> r.policy.limiter.withTimeout(r.policy.timeout).checkAsync(r.key, r.cost)));
        }
        for (int i = 0; i < reports.size(); i++) {
            Report r = reports.get(i);
            boolean receipted = r.cost > 0 && (several || r.policy.afterResponse());
            record(r, calls.get(i), receipted, client, failures);
        }
        Outcome outcome = Outcome.PASS;
        if (reports.stream().anyMatch(Report::violated)) {
            outcome = Outcome.REFUSE;
        } else if (reports.stream().anyMatch(r -> r.state == Report.State.FAILED_CLOSED)) {
            outcome = Outcome.UNAVAILABLE;
        }
        Verdict verdict = new Verdict(reports, outcome, client, failures);
        if (outcome == Outcome.PASS) {
            // Nothing will give these back: the charge stands.
            for (Report r : reports) {
                if (!r.policy.afterResponse()) {
                    r.receipt = null;
                }
            }
            verdict.delayMicros = reports.stream().filter(r -> r.state == Report.State.DECIDED && r.decision != null)
                    .mapToLong(r -> r.decision.delayMicros()).max().orElse(0);
        } else {
            giveBack(reports);
        }
        completeNext(reports);
        return verdict;
    }

    private static CompletableFuture<Decision> call(Report r, java.util.function.Supplier<CompletableFuture<Decision>> work) {
        try {
            return work.get();
        } catch (RuntimeException e) {
            return CompletableFuture.failedFuture(e);
        }
    }

    private static Throwable unwrap(Throwable e) {
        while (e instanceof CompletionException && e.getCause() != null) {
            e = e.getCause();
        }
        return e;
    }

    private static void record(Report report, CompletableFuture<Decision> call, boolean receipted, Client client,
                               List<Failure> failures) {
        Decision d = null;
        Throwable thrown = null;
        try {
            d = call.join();
        } catch (CompletionException | java.util.concurrent.CancellationException e) {
            thrown = unwrap(e);
        }
        if (d != null && !d.degraded()) {
            report.set(Report.State.DECIDED, d);
            if (receipted && d.allowed()) {
                report.receipt = d.receipt().orElse(null);
            }
            return;
        }
        report.set(report.state, null);
        RatelabException error;
        Long hint = null;
        if (d != null) {
            // The limiter's own failure policy answered: to the filter that is an outage, and the policy's mode wins.
            error = new UnavailableException("the limiter's backend is failing: its failure policy "
                    + (d.allowed() ? "admitted" : "refused") + " the request");
            hint = d.retryAfterMicros() > 0 ? d.retryAfterMicros() / 1000 : null;
        } else if (thrown instanceof CostTooHighException) {
            report.state = Report.State.NEVER;
            return;
        } else if (thrown instanceof RatelabException r) {
            error = r;
            if (r instanceof UnavailableException u) {
                hint = u.retryAfter().map(java.time.Duration::toMillis).orElse(null);
            }
        } else {
            error = new RatelabException(String.valueOf(thrown), thrown);
        }
        // Data errors fail closed whatever the mode: nothing repairs them by waiting.
        Policy.Failure mode = error instanceof DataException ? Policy.Failure.CLOSED : report.policy.failure;
        report.error = error;
        failures.add(new Failure(report.policy.name, client, error, mode));
        if (mode == Policy.Failure.OPEN) {
            report.state = Report.State.FAILED_OPEN;
        } else {
            report.state = Report.State.FAILED_CLOSED;
            report.retryAfterMs = hint;
        }
    }

    /**
     * Refunds, concurrently, every receipt held: the request is not served.
     * Each answer (the key as the refund left it) becomes its report's
     * decision. A refund that fails keeps its units taken.
     */
    private static void giveBack(List<Report> reports) {
        List<Report> held = reports.stream().filter(r -> r.receipt != null).toList();
        List<CompletableFuture<Decision>> refunds = new ArrayList<>();
        for (Report r : held) {
            Receipt receipt = r.receipt;
            r.receipt = null;
            refunds.add(call(r, () -> r.policy.limiter.withTimeout(r.policy.timeout).refundAsync(receipt)));
        }
        for (int i = 0; i < held.size(); i++) {
            Report r = held.get(i);
            try {
                Decision d = refunds.get(i).join();
                if (!d.degraded() && r.admitted()) {
                    r.set(Report.State.GIVEN_BACK, d);
                }
            } catch (CompletionException e) {
                LOG.log(System.Logger.Level.WARNING, "rate limiter of policy {0} failed to give back the units of a "
                        + "refused request: they stay taken: {1}", r.policy.name, unwrap(e).getMessage());
            }
        }
    }

    /**
     * t for the policies whose decision does not say it (the sliding log and
     * counter): a peek of r + 1 units, concurrently; a peek that fails leaves
     * t the wait until full: late, never early.
     */
    static void completeNext(List<Report> reports) {
        List<Report> wanting = new ArrayList<>();
        List<CompletableFuture<Decision>> peeks = new ArrayList<>();
        for (Report r : reports) {
            Long units = r.wanted();
            if (units != null) {
                wanting.add(r);
                peeks.add(call(r, () -> r.policy.limiter.withTimeout(r.policy.timeout).peekAsync(r.key, units)));
            }
        }
        for (int i = 0; i < wanting.size(); i++) {
            try {
                Decision d = peeks.get(i).join();
                if (!d.degraded()) {
                    // Units came back since the decision (another request's refund): none to wait for.
                    wanting.get(i).nextMicros = d.allowed() ? 0 : d.retryAfterMicros();
                }
            } catch (CompletionException e) {
                // t stays the wait until full.
            }
        }
    }

    /**
     * After the response head (its {@code status}): each policy that counts
     * only failures or successes and admitted the request refunds its receipt
     * if the response does not count; the refund's answer becomes the
     * policy's decision, so that the response's fields show the key as the
     * refund left it. A refund that fails keeps the charge.
     */
    void settleAfterResponse(int status) {
        List<Report> refunding = new ArrayList<>();
        List<CompletableFuture<Decision>> refunds = new ArrayList<>();
        for (Report r : reports) {
            if (!r.waitsForResponse()) {
                continue;
            }
            Receipt receipt = r.receipt;
            r.receipt = null;
            if (r.policy.counts(status)) {
                continue;
            }
            refunding.add(r);
            refunds.add(call(r, () -> r.policy.limiter.withTimeout(r.policy.timeout).refundAsync(receipt)));
        }
        if (refunding.isEmpty()) {
            return;
        }
        for (int i = 0; i < refunding.size(); i++) {
            Report r = refunding.get(i);
            try {
                Decision d = refunds.get(i).join();
                if (!d.degraded()) {
                    r.set(Report.State.DECIDED, d);
                }
            } catch (CompletionException e) {
                LOG.log(System.Logger.Level.WARNING, "rate limiter of policy {0} failed after the response: the "
                        + "request''s refund is lost: {1}", r.policy.name, unwrap(e).getMessage());
            }
        }
        completeNext(reports);
    }
}
