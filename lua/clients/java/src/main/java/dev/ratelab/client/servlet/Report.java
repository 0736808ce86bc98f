package dev.ratelab.client.servlet;

import dev.ratelab.client.Decision;
import dev.ratelab.client.RatelabException;
import dev.ratelab.client.Receipt;

import java.util.Optional;

/** One applicable policy's part of a {@link Verdict}. */
public final class Report {
    /** Where the policy's decision stands. */
    public enum State {
        PENDING,
        DECIDED,
        /** Admitted, then refunded: another policy refused the request. */
        GIVEN_BACK,
        /** A cost above the policy's burst: it can never pass. */
        NEVER,
        FAILED_OPEN,
        FAILED_CLOSED
    }

    final Policy policy;
    final String key;
    final long cost;
    State state = State.PENDING;
    Decision decision;
    RatelabException error;
    /** A failed-closed policy's hint: ms until its limiter may decide again. */
    Long retryAfterMs;
    /** What the admission took, while something may give it back: another policy's refusal, or the response. */
    Receipt receipt;
    /** t, when a peek said it (the sliding log and counter), µs. */
    Long nextMicros;

    Report(Policy policy, String key, long cost) {
        this.policy = policy;
        this.key = key;
        this.cost = cost;
    }

    public String policy() {
        return policy.name;
    }

    /** The limiter key: {@code <policy>:<key>}. */
    public String key() {
        return key;
    }

    public long cost() {
        return cost;
    }

    public State state() {
        return state;
    }

    /** The limiter's decision (after a refund: the key as the refund left it), if it decided. */
    public Optional<Decision> decision() {
        return Optional.ofNullable(decision);
    }

    public Optional<RatelabException> error() {
        return Optional.ofNullable(error);
    }

    /** A new state: t is for the decision it came with. */
    void set(State state, Decision decision) {
        this.state = state;
        this.decision = decision;
        this.nextMicros = null;
    }

    boolean violated() {
        return (state == State.DECIDED && decision != null && !decision.allowed()) || state == State.NEVER;
    }

    boolean admitted() {
        return state == State.DECIDED && decision != null && decision.allowed();
    }

    boolean waitsForResponse() {
        return policy.afterResponse() && cost != 0 && admitted() && receipt != null;
    }

    /** t: µs until more quota is available than remaining; null without a decision. */
    Long nextAfterMicros() {
        Decision d = decision;
        if (d == null) {
            return null;
        }
        if (nextMicros != null) {
            return nextMicros;
        }
        if (d.remaining() >= d.limit()) {
            return 0L;
        }
        if (!d.allowed() && cost == 1 && d.retryAfterMicros() > 0) {
            return d.retryAfterMicros();
        }
        return waitFor(d, policy.interval, d.remaining() + 1);
    }

    /** The units to peek for when t needs the limiter (the sliding log and counter): r + 1; else null. */
    Long wanted() {
        Decision d = decision;
        if (!policy.sliding || nextMicros != null || d == null) {
            return null;
        }
        if (d.remaining() >= d.limit() || (!d.allowed() && cost == 1 && d.retryAfterMicros() > 0)) {
            return null;
        }
        return d.remaining() + 1;
    }

    /** µs until {@code units} are available: exact for a steady refill, else until full. */
    static long waitFor(Decision d, long interval, long units) {
        if (d.remaining() >= units) {
            return 0;
        }
        if (interval >= 0) {
            return Math.max(0, d.resetAfterMicros() - Math.max(0, d.limit() - units) * interval);
        }
        return d.resetAfterMicros();
    }
}
