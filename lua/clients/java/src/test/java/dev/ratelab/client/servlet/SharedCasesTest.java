package dev.ratelab.client.servlet;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.ratelab.client.Json;
import dev.ratelab.client.Limiter;
import dev.ratelab.client.Quota;
import dev.ratelab.client.Redis;

import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The shared HTTP cases (lua/clients/http/cases.json, which the Python, Node
 * and Rust middlewares run too) through the filter in a real Jetty, over
 * real sockets from the peer addresses the cases name: the same statuses,
 * {@code Retry-After}, {@code RateLimit-Policy}, {@code RateLimit} and
 * problem members, byte for byte.
 */
class SharedCasesTest {
    static final Map<String, Object> CASES = read();
    static final AtomicInteger SUITES = new AtomicInteger();
    static dev.ratelab.client.RedisServerHandle server;
    static Redis up;
    static Redis down;

    @SuppressWarnings("unchecked")
    private static Map<String, Object> read() {
        String dir = System.getProperty("ratelab.repo.lua", "../..");
        try {
            return (Map<String, Object>) Json.parse(Files.readString(Path.of(dir, "clients", "http", "cases.json"), StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    @BeforeAll
    static void start() throws IOException {
        server = dev.ratelab.client.RedisServerHandle.start();
        up = Redis.connect(server.url());
        int free;
        try (ServerSocket s = new ServerSocket(0)) {
            free = s.getLocalPort();
        }
        // Nothing listens there: every call fails (connection refused).
        down = Redis.builder("redis://127.0.0.1:" + free).connectTimeout(Duration.ofMillis(500)).build();
    }

    @AfterAll
    static void stop() {
        up.close();
        down.close();
        server.close();
    }

    @SuppressWarnings("unchecked")
    static Stream<Map<String, Object>> suites() {
        return ((List<Map<String, Object>>) CASES.get("suites")).stream();
    }

    @SuppressWarnings("unchecked")
    @ParameterizedTest(name = "{index}")
    @MethodSource("suites")
    void theSharedCase(Map<String, Object> suite) throws Exception {
        long t0 = (Long) CASES.get("t0_us");
        AtomicLong now = new AtomicLong(t0);
        String prefix = "servlet" + ProcessHandle.current().pid() + "-" + SUITES.incrementAndGet();
        RateLimitFilter.Builder filter = RateLimitFilter.builder();
        for (Map<String, Object> spec : (List<Map<String, Object>>) suite.get("policies")) {
            Map<String, Object> q = (Map<String, Object>) spec.get("quota");
            Limiter limiter = Limiter.builder("down".equals(spec.get("redis")) ? down : up, (String) spec.get("algorithm"),
                            Quota.of((Long) q.get("limit"), (Long) q.get("period_us"), (Long) q.get("burst")))
                    .prefix(prefix).clock(now::get).noQuotaCheck()
                    // A loaded machine: a slow answer is not what is tested.
                    .timeout(Duration.ofSeconds(2)).build();
            Policy.Builder policy = Policy.builder((String) spec.get("name"), limiter).timeout(Duration.ofSeconds(2));
            for (List<String> route : (List<List<String>>) spec.getOrDefault("routes", List.of())) {
                policy.route(route.get(0), route.get(1));
            }
            Map<String, Object> key = (Map<String, Object>) spec.get("key");
            if (key != null) {
                String header = (String) key.get("header");
                policy.key((request, client) -> request.getHeader(header));
            }
            if (spec.containsKey("cost")) {
                policy.cost((Long) spec.get("cost"));
            }
            policy.failure("closed".equals(spec.get("failure")) ? Policy.Failure.CLOSED : Policy.Failure.OPEN);
            policy.count(switch (String.valueOf(spec.getOrDefault("count", "all"))) {
                case "failures" -> Policy.Count.FAILURES;
                case "successes" -> Policy.Count.SUCCESSES;
                default -> Policy.Count.ALL;
            });
            filter.policy(policy.build());
        }
        Map<String, Object> identify = (Map<String, Object>) suite.get("identify");
        if (identify != null) {
            TrustedProxies.Header header = "forwarded".equals(identify.get("header"))
                    ? TrustedProxies.Header.FORWARDED : TrustedProxies.Header.X_FORWARDED_FOR;
            filter.identify(Identify.builder().trustedProxies(TrustedProxies.of(header,
                    (List<String>) identify.getOrDefault("trusted_proxies", List.of()))).build());
        }
        try (HttpFixture http = new HttpFixture(filter.build())) {
            int i = 0;
            for (Map<String, Object> step : (List<Map<String, Object>>) suite.get("steps")) {
                i++;
                now.set(t0 + (Long) step.get("at_us"));
                Map<String, Object> request = (Map<String, Object>) step.get("request");
                HttpFixture.Response got = http.send((String) request.get("method"), (String) request.get("path"),
                        (String) request.get("peer"), (List<List<String>>) request.get("headers"));
                String where = suite.get("name") + ", step " + i + " (" + step.getOrDefault("note", "") + ")";
                Map<String, Object> expected = (Map<String, Object>) step.get("response");
                Map<String, Object> expectedHeaders = (Map<String, Object>) expected.get("headers");
                Map<String, Object> gotHeaders = new LinkedHashMap<>();
                for (String name : expectedHeaders.keySet()) {
                    gotHeaders.put(name, got.headers().get(name));
                }
                assertEquals(List.of(expected.get("status"), expectedHeaders), List.of((long) got.status(), gotHeaders), where);
                if (expected.containsKey("body")) {
                    assertEquals(expected.get("body"), got.body(), where);
                }
                if (expected.containsKey("problem")) {
                    assertEquals("application/problem+json", got.headers().get("content-type"), where);
                    assertEquals(expected.get("problem"), Json.parse(got.body()), where);
                }
            }
        }
    }
}
