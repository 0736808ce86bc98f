package dev.ratelab.client.servlet;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.ratelab.client.Limiter;
import dev.ratelab.client.Quota;
import dev.ratelab.client.Redis;
import dev.ratelab.client.RedisServerHandle;

import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A policy on a route counts every request the container runs that route's servlet for, however its path
 * is spelled, and only those: the servlet that answered is the oracle. The list says which spellings are
 * expected to reach it on Jetty, so that a change in the container shows here, not as a silent bypass.
 */
class RoutingTest {
    /** Spellings of the path within the context, and the servlet Jetty runs for each (null: none, refused). */
    private static final Map<String, String> SPELLINGS = new LinkedHashMap<>();

    static {
        SPELLINGS.put("/login", "login");
        SPELLINGS.put("/log%69n", "login");
        SPELLINGS.put("/%6C%6F%67%69%6E", "login");
        SPELLINGS.put("/login;x=1", "login");
        SPELLINGS.put("/login;jsessionid=x?next=/y", "login");
        SPELLINGS.put("/./login", "login");
        SPELLINGS.put("/x/../login", "login");
        SPELLINGS.put("/LOGIN", "other");
        SPELLINGS.put("/login/", "other");
        SPELLINGS.put("/logins", "other");
        SPELLINGS.put("/login%20", "other");
        SPELLINGS.put("/users/7/reset", "reset");
        SPELLINGS.put("/users/7;a=b/reset", "reset");
        SPELLINGS.put("/%75sers/7/res%65t", "reset");
        SPELLINGS.put("/users/7/reset/", "reset-other");
        SPELLINGS.put("/users//reset", null);
        SPELLINGS.put("/users/a%2Fb/reset", null);
        SPELLINGS.put("/login%2F", null);
        SPELLINGS.put("/%2e%2e/login", null);
    }

    private static HttpServlet answer(String name) {
        return new HttpServlet() {
            @Override
            protected void service(HttpServletRequest request, HttpServletResponse response) {
                response.setHeader("x-servlet", name);
            }
        };
    }

    @ParameterizedTest
    @ValueSource(strings = {"/", "/app"})
    void aRoutesPolicyCountsEverySpellingTheContainerRoutesToItsServlet(String contextPath) throws Exception {
        try (RedisServerHandle server = RedisServerHandle.start(); Redis redis = Redis.connect(server.url())) {
            RateLimitFilter.Builder filter = RateLimitFilter.builder();
            for (String[] route : new String[][] {{"login", "/login"}, {"reset", "/users/{id}/reset"}}) {
                Limiter limiter = Limiter.builder(redis, "gcra", Quota.perHour(1000)).prefix("routing")
                        .clock(() -> 1_700_000_000_000_000L).timeout(Duration.ofSeconds(5)).build();
                filter.policy(Policy.builder(route[0], limiter).route("POST", route[1])
                        .timeout(Duration.ofSeconds(5)).build());
            }
            // Servlet mappings have no {id}: the reset servlet is /users/* and answers "reset" for the
            // paths /users/{id}/reset matches, "reset-other" for the others under /users/.
            Map<String, HttpServlet> servlets = Map.of(
                    "/login", answer("login"),
                    "/users/*", new HttpServlet() {
                        @Override
                        protected void service(HttpServletRequest request, HttpServletResponse response) {
                            boolean reset = request.getPathInfo() != null
                                    && request.getPathInfo().matches("/[^/]+/reset");
                            response.setHeader("x-servlet", reset ? "reset" : "reset-other");
                        }
                    },
                    "/", answer("other"));
            String base = contextPath.equals("/") ? "" : contextPath;
            try (HttpFixture http = new HttpFixture(filter.build(), contextPath, servlets)) {
                Map<String, Integer> counted = new LinkedHashMap<>(Map.of("login", 0, "reset", 0));
                Map<String, Integer> reached = new LinkedHashMap<>(Map.of("login", 0, "reset", 0));
                for (Map.Entry<String, String> spelling : SPELLINGS.entrySet()) {
                    String target = base + spelling.getKey();
                    HttpFixture.Response r = http.send("POST", target, "127.0.0.1", List.of());
                    String servlet = r.headers().get("x-servlet");
                    assertEquals(spelling.getValue(), servlet, "POST " + target + ": Jetty answered " + r.status());
                    String fields = r.headers().getOrDefault("ratelimit-policy", "");
                    for (String name : List.of("login", "reset")) {
                        boolean applied = fields.contains("\"" + name + "\"");
                        assertEquals(name.equals(servlet), applied,
                                "POST " + target + ": reached " + servlet + "; counted on " + name);
                        if (applied) {
                            // One unit more taken on the policy's one key.
                            counted.merge(name, 1, Integer::sum);
                            String left = r.headers().getOrDefault("ratelimit", "");
                            assertTrue(left.startsWith("\"" + name + "\";r=" + (1000 - counted.get(name)) + ";"),
                                    "POST " + target + ": RateLimit " + left);
                        }
                        if (name.equals(servlet)) {
                            reached.merge(name, 1, Integer::sum);
                        }
                    }
                }
                assertEquals(reached, counted);
                assertTrue(reached.get("login") >= 5 && reached.get("reset") >= 3, reached.toString());
                // GET is not the POST route's method.
                HttpFixture.Response get = http.send("GET", base + "/log%69n", "127.0.0.1", List.of());
                assertEquals(List.of("login", ""), List.of(get.headers().get("x-servlet"),
                        get.headers().getOrDefault("ratelimit-policy", "")));
            }
        }
    }
}
