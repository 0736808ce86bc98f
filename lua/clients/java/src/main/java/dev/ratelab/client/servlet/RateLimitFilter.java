package dev.ratelab.client.servlet;

import jakarta.servlet.AsyncEvent;
import jakarta.servlet.AsyncListener;
import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletOutputStream;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.WriteListener;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import jakarta.servlet.http.HttpServletResponseWrapper;

import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;

/**
 * Rate limiting for any Jakarta Servlet container (Tomcat, Jetty, Undertow;
 * Spring Boot picks it up as a bean), behaving as the Rust
 * {@code ratelab-http} layer and the Python and Node middlewares: the same
 * client identity, policies, all-or-nothing decisions, responses and fields.
 *
 * <pre>{@code
 * RateLimitFilter filter = RateLimitFilter.builder()
 *     .policy(Policy.builder("default", Limiter.builder(redis, "gcra", Quota.perMinute(100)).build()).build())
 *     .policy(Policy.builder("login", Limiter.builder(redis, "gcra", Quota.of(5, Duration.ofMinutes(15))).build())
 *         .route("POST", "/login").failure(Policy.Failure.CLOSED)
 *         .key((request, client) -> request.getHeader("x-account")).build())
 *     .identify(Identify.builder().trustedProxies("10.0.0.0/8").build())
 *     .build();
 * }</pre>
 *
 * <ul>
 *   <li>A refusal is {@code 429} with {@code Retry-After} (whole seconds,
 *       rounded up) and an {@code application/problem+json} body (RFC 9457);
 *       a policy that fails closed answers {@code 503} with
 *       {@code Retry-After} when its limiter cannot decide; every response
 *       carries {@code RateLimit-Policy} and {@code RateLimit}
 *       (draft-ietf-httpapi-ratelimit-headers).</li>
 *   <li>Several policies on one request are all or nothing: every policy
 *       takes the cost with a receipt, all at once; if one refuses (or fails
 *       closed, or can never fit the cost), every receipt is refunded before
 *       the answer.</li>
 *   <li>A policy that counts only failures (or successes) takes the cost
 *       with a receipt before the request runs, and refunds it once the
 *       response's status says it does not count: the response is held from
 *       its first byte until then (at most the policy's timeout).</li>
 *   <li>A request that passes carries its {@link Verdict} and {@link Client}
 *       in the request attributes {@link #VERDICT} and {@link #CLIENT}. A
 *       leaky queue's slot is waited for (its delay) before the request
 *       runs.</li>
 * </ul>
 */
public final class RateLimitFilter implements Filter {
    /** The request attribute holding the {@link Verdict} of a request that passed. */
    public static final String VERDICT = "dev.ratelab.verdict";
    /** The request attribute holding its {@link Client}. */
    public static final String CLIENT = "dev.ratelab.client";

    private static final System.Logger LOG = System.getLogger("dev.ratelab.client.servlet");

    private final List<Policy> policies;
    private final Identify identify;
    private final Consumer<Verdict.Failure> onFailure;
    private final Map<String, Long> logged = new ConcurrentHashMap<>();

    private RateLimitFilter(Builder b) {
        this.policies = List.copyOf(b.policies);
        this.identify = b.identify;
        this.onFailure = b.onFailure;
    }

    public static Builder builder() {
        return new Builder();
    }

    /** The options of a {@link RateLimitFilter}. */
    public static final class Builder {
        private final List<Policy> policies = new ArrayList<>();
        private final Set<String> names = new HashSet<>();
        private Identify identify = Identify.byIp();
        private Consumer<Verdict.Failure> onFailure;

        /** A policy; names are unique, and the fields list them in this order. */
        public Builder policy(Policy policy) {
            if (!names.add(policy.name())) {
                throw new IllegalArgumentException("two policies are named " + policy.name());
            }
            policies.add(policy);
            return this;
        }

        /** Who the client is (default: by IP, no trusted proxy). */
        public Builder identify(Identify identify) {
            this.identify = Objects.requireNonNull(identify);
            return this;
        }

        /** Called with every limiter failure (a warning is also logged, at most once a second per policy). */
        public Builder onFailure(Consumer<Verdict.Failure> hook) {
            this.onFailure = Objects.requireNonNull(hook);
            return this;
        }

        public RateLimitFilter build() {
            return new RateLimitFilter(this);
        }
    }

    @Override
    public void doFilter(ServletRequest req, ServletResponse res, FilterChain chain) throws IOException, ServletException {
        if (!(req instanceof HttpServletRequest request) || !(res instanceof HttpServletResponse response)) {
            chain.doFilter(req, res);
            return;
        }
        Client client = identify.client(request);
        String method = request.getMethod().toUpperCase(Locale.ROOT);
        // The path the container routes by (decoded, normalized, path parameters removed, within the
        // application): `/login;x=1` or `/log%69n` reach the login servlet, and its policy too.
        String path = request.getServletPath() + (request.getPathInfo() == null ? "" : request.getPathInfo());
        List<Report> reports = new ArrayList<>();
        for (Policy p : policies) {
            Report r = p.applies(request, method, path == null || path.isEmpty() ? "/" : path, client);
            if (r != null) {
                reports.add(r);
            }
        }
        Verdict verdict = Verdict.decide(reports, client);
        alert(verdict);
        if (verdict.outcome != Verdict.Outcome.PASS) {
            Map.Entry<Integer, String> problem = verdict.problem();
            byte[] body = problem.getValue().getBytes(StandardCharsets.UTF_8);
            response.setStatus(problem.getKey());
            response.setContentType("application/problem+json");
            Long retry = verdict.retryAfterSeconds();
            if (retry != null) {
                response.setHeader("Retry-After", String.valueOf(retry));
            }
            for (Map.Entry<String, String> field : verdict.fields()) {
                response.addHeader(field.getKey(), field.getValue());
            }
            response.setContentLength(body.length);
            response.getOutputStream().write(body);
            return;
        }
        request.setAttribute(VERDICT, verdict);
        request.setAttribute(CLIENT, client);
        if (verdict.delayMicros > 0) {
            // A queueing policy (leaky queue) gave the request a later slot.
            try {
                Thread.sleep(verdict.delayMicros / 1000, (int) (verdict.delayMicros % 1000) * 1000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new ServletException("interrupted while waiting for the request's slot", e);
            }
        }
        if (!verdict.pending()) {
            for (Map.Entry<String, String> field : verdict.fields()) {
                response.addHeader(field.getKey(), field.getValue());
            }
            chain.doFilter(request, response);
            return;
        }
        // Whether the response counts is known with its status: a refund first, then the fields as it left the key.
        HeldResponse held = new HeldResponse(response, verdict);
        chain.doFilter(request, held);
        if (request.isAsyncStarted()) {
            request.getAsyncContext().addListener(new AsyncListener() {
                @Override
                public void onComplete(AsyncEvent event) {
                    held.beforeCommit(held.getStatus());
                }

                @Override
                public void onTimeout(AsyncEvent event) {}

                @Override
                public void onError(AsyncEvent event) {}

                @Override
                public void onStartAsync(AsyncEvent event) {}
            });
        } else {
            held.beforeCommit(held.getStatus());
        }
    }

    private void alert(Verdict verdict) {
        for (Verdict.Failure failure : verdict.failures) {
            if (onFailure != null) {
                try {
                    onFailure.accept(failure);
                } catch (RuntimeException e) {
                    LOG.log(System.Logger.Level.WARNING, "ratelab: the failure hook threw", e);
                }
            }
            long now = System.nanoTime();
            Long last = logged.get(failure.policy());
            if (last == null || now - last >= 1_000_000_000L) {
                logged.put(failure.policy(), now);
                LOG.log(System.Logger.Level.WARNING, "rate limiter of policy {0} failed for {1}: {2}; the policy fails {3}",
                        failure.policy(), failure.client().key(), failure.error().getMessage(),
                        failure.mode().name().toLowerCase(Locale.ROOT));
            }
        }
    }

    /**
     * The response, held from its first byte (or its commit) until the
     * verdict's refunds for its status are done, then given its fields.
     */
    static final class HeldResponse extends HttpServletResponseWrapper {
        private final Verdict verdict;
        private boolean done;
        private ServletOutputStream stream;
        private PrintWriter writer;

        HeldResponse(HttpServletResponse response, Verdict verdict) {
            super(response);
            this.verdict = verdict;
        }

        synchronized void beforeCommit(int status) {
            if (done) {
                return;
            }
            done = true;
            verdict.settleAfterResponse(status);
            HttpServletResponse response = (HttpServletResponse) getResponse();
            if (!response.isCommitted()) {
                for (Map.Entry<String, String> field : verdict.fields()) {
                    response.addHeader(field.getKey(), field.getValue());
                }
            }
        }

        @Override
        public void sendError(int sc, String msg) throws IOException {
            beforeCommit(sc);
            super.sendError(sc, msg);
        }

        @Override
        public void sendError(int sc) throws IOException {
            beforeCommit(sc);
            super.sendError(sc);
        }

        @Override
        public void sendRedirect(String location) throws IOException {
            beforeCommit(HttpServletResponse.SC_FOUND);
            super.sendRedirect(location);
        }

        @Override
        public void flushBuffer() throws IOException {
            beforeCommit(getStatus());
            super.flushBuffer();
        }

        @Override
        public synchronized ServletOutputStream getOutputStream() throws IOException {
            if (stream == null) {
                ServletOutputStream inner = super.getOutputStream();
                stream = new ServletOutputStream() {
                    @Override
                    public void write(int b) throws IOException {
                        beforeCommit(getStatus());
                        inner.write(b);
                    }

                    @Override
                    public void write(byte[] b, int off, int len) throws IOException {
                        beforeCommit(getStatus());
                        inner.write(b, off, len);
                    }

                    @Override
                    public void flush() throws IOException {
                        beforeCommit(getStatus());
                        inner.flush();
                    }

                    @Override
                    public void close() throws IOException {
                        beforeCommit(getStatus());
                        inner.close();
                    }

                    @Override
                    public boolean isReady() {
                        return inner.isReady();
                    }

                    @Override
                    public void setWriteListener(WriteListener listener) {
                        inner.setWriteListener(listener);
                    }
                };
            }
            return stream;
        }

        @Override
        public synchronized PrintWriter getWriter() throws IOException {
            if (writer == null) {
                PrintWriter inner = super.getWriter();
                writer = new PrintWriter(inner) {
                    @Override
                    public void write(int c) {
                        beforeCommit(getStatus());
                        super.write(c);
                    }

                    @Override
                    public void write(char[] buf, int off, int len) {
                        beforeCommit(getStatus());
                        super.write(buf, off, len);
                    }

                    @Override
                    public void write(String s, int off, int len) {
                        beforeCommit(getStatus());
                        super.write(s, off, len);
                    }

                    @Override
                    public void flush() {
                        beforeCommit(getStatus());
                        super.flush();
                    }

                    @Override
                    public void close() {
                        beforeCommit(getStatus());
                        super.close();
                    }
                };
            }
            return writer;
        }
    }
}
