package dev.ratelab.client.servlet;

import dev.ratelab.client.Limiter;
import dev.ratelab.client.Quota;

import jakarta.servlet.http.HttpServletRequest;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.function.BiFunction;
import java.util.function.IntPredicate;
import java.util.function.ToLongBiFunction;

/**
 * One quota policy of the {@link RateLimitFilter}: a name (1 to 64 of
 * {@code A-Z a-z 0-9 _ . -}, what clients see in the {@code RateLimit}
 * fields), a {@link Limiter} (built with the default
 * {@code FailurePolicy.ERROR}: the policy's own {@link Failure} decides), the
 * routes and plans it applies to, the key it counts under, what a request
 * costs, and which responses count. The limiter sees {@code <name>:<key>}.
 */
public final class Policy {
    /** What a request gets when the policy's limiter cannot decide. */
    public enum Failure {
        /** Pass unchecked, with an alert. The default. */
        OPEN,
        /** Refuse with {@code 503} and {@code Retry-After}. */
        CLOSED
    }

    /** Which responses count against the quota. */
    public enum Count {
        /** Every request. The default. */
        ALL,
        /** Only failures (failed logins): the cost is taken before the request and refunded when the response is not one. */
        FAILURES,
        /** Only successes. */
        SUCCESSES
    }

    /** The default bound on one policy's limiter calls for a request. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofMillis(100);
    /** The largest structured-field Integer: values past it are clamped. */
    static final long INTEGER_MAX = 999_999_999_999_999L;

    final String name;
    final Limiter limiter;
    final List<Route> routes;
    final List<String> plans;
    final BiFunction<HttpServletRequest, Client, String> key;
    final ToLongBiFunction<HttpServletRequest, Client> cost;
    final Failure failure;
    final Duration timeout;
    final Count count;
    final IntPredicate failedWhen;
    final long q;
    final long w;
    /** One unit back every interval µs (a debt: GCRA, token bucket, leaky buckets), or -1. */
    final long interval;
    /** Units come back on a schedule only the limiter knows (the sliding log and counter): t is asked with a peek. */
    final boolean sliding;
    final String item;

    private Policy(Builder b) {
        this.name = b.name;
        this.limiter = b.limiter;
        this.routes = List.copyOf(b.routes);
        this.plans = List.copyOf(b.plans);
        this.key = b.key;
        this.cost = b.cost;
        this.failure = b.failure;
        this.timeout = b.timeout;
        this.count = b.count;
        this.failedWhen = b.failedWhen;
        Quota quota = limiter.quota();
        // Rounded up, at least 1 s: the advertised rate is never faster.
        this.q = quota.burst();
        this.w = Math.max(1, -Math.floorDiv(-quota.windowMicros(), 1_000_000));
        this.interval = limiter.algorithm().debt() ? quota.emissionIntervalMicros() : -1;
        String algorithm = limiter.algorithm().name();
        this.sliding = algorithm.equals("sliding-log") || algorithm.equals("sliding-counter");
        this.item = "\"" + name + "\";q=" + Math.min(q, INTEGER_MAX) + ";w=" + Math.min(w, INTEGER_MAX);
    }

    /** A builder for the policy {@code name} on {@code limiter}. */
    public static Builder builder(String name, Limiter limiter) {
        return new Builder(name, limiter);
    }

    public String name() {
        return name;
    }

    /** Something about a request is decided once its response is known (whether it counts). */
    boolean afterResponse() {
        return count != Count.ALL;
    }

    /** Whether a response of {@code status} counts. */
    boolean counts(int status) {
        if (count == Count.ALL) {
            return true;
        }
        boolean failed = failedWhen.test(status);
        return count == Count.FAILURES ? failed : !failed;
    }

    /** The limiter key and cost, when the policy applies to the request; null otherwise. */
    Report applies(HttpServletRequest request, String method, String path, Client client) {
        if (!routes.isEmpty() && routes.stream().noneMatch(r -> r.matches(method, path))) {
            return null;
        }
        if (!plans.isEmpty() && (client.plan().isEmpty() || !plans.contains(client.plan().get()))) {
            return null;
        }
        String k = key == null ? client.key() : key.apply(request, client);
        if (k == null) {
            return null;
        }
        long c = cost == null ? 1 : cost.applyAsLong(request, client);
        return new Report(this, name + ":" + k, c);
    }

    /** The options of a {@link Policy}. */
    public static final class Builder {
        private final String name;
        private final Limiter limiter;
        private final List<Route> routes = new ArrayList<>();
        private final List<String> plans = new ArrayList<>();
        private BiFunction<HttpServletRequest, Client, String> key;
        private ToLongBiFunction<HttpServletRequest, Client> cost;
        private Failure failure = Failure.OPEN;
        private Duration timeout = DEFAULT_TIMEOUT;
        private Count count = Count.ALL;
        private IntPredicate failedWhen = status -> status >= 400;

        private Builder(String name, Limiter limiter) {
            if (name == null || !name.matches("[A-Za-z0-9_.-]{1,64}")) {
                throw new IllegalArgumentException("policy name " + name + " is not 1 to 64 characters among "
                        + "A-Z a-z 0-9 _ . - (it appears in the RateLimit headers and the limiter keys)");
            }
            this.name = name;
            this.limiter = Objects.requireNonNull(limiter, "limiter");
        }

        /** A route it applies to ({@code method} null: any); none: every route. */
        public Builder route(String method, String pattern) {
            routes.add(new Route(method, pattern));
            return this;
        }

        /** The plans it applies to; none: every client. */
        public Builder plans(String... names) {
            plans.addAll(List.of(names));
            return this;
        }

        /** The key it counts under (default: the client's); null from the function: the policy does not apply. */
        public Builder key(BiFunction<HttpServletRequest, Client, String> key) {
            this.key = Objects.requireNonNull(key);
            return this;
        }

        /** What a request costs (default 1). */
        public Builder cost(long units) {
            if (units < 0) {
                throw new IllegalArgumentException("cost must not be negative, not " + units);
            }
            this.cost = (request, client) -> units;
            return this;
        }

        /** What a request costs, from the request. */
        public Builder cost(ToLongBiFunction<HttpServletRequest, Client> cost) {
            this.cost = Objects.requireNonNull(cost);
            return this;
        }

        /** What a request gets when the limiter cannot decide (default {@link Failure#OPEN}). */
        public Builder failure(Failure failure) {
            this.failure = Objects.requireNonNull(failure);
            return this;
        }

        /** The most its limiter calls for one request take (default 100 ms). */
        public Builder timeout(Duration timeout) {
            if (timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("a policy's timeout must be positive, not " + timeout);
            }
            this.timeout = timeout;
            return this;
        }

        /** Which responses count (default {@link Count#ALL}). */
        public Builder count(Count count) {
            this.count = Objects.requireNonNull(count);
            return this;
        }

        /** Which statuses are failures (default: 400 or more). */
        public Builder failedWhen(IntPredicate failed) {
            this.failedWhen = Objects.requireNonNull(failed);
            return this;
        }

        public Policy build() {
            return new Policy(this);
        }
    }
}
