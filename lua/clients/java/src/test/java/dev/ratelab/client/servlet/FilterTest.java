package dev.ratelab.client.servlet;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.ratelab.client.Limiter;
import dev.ratelab.client.Quota;
import dev.ratelab.client.Redis;
import dev.ratelab.client.RedisServerHandle;

import java.time.Duration;
import java.util.List;

import org.junit.jupiter.api.Test;

/** The filter over real HTTP, beyond the shared cases: what an attacker would try on a servlet container. */
class FilterTest {
    @Test
    void aPathSpelledOtherwiseStillMeetsItsRoutesPolicy() throws Exception {
        // The container routes /login;x=1 and /log%69n to the login servlet: the login policy counts them.
        try (RedisServerHandle server = RedisServerHandle.start(); Redis redis = Redis.connect(server.url())) {
            Limiter limiter = Limiter.builder(redis, "gcra", Quota.perHour(1)).prefix("spelled")
                    .timeout(Duration.ofSeconds(5)).build();
            RateLimitFilter filter = RateLimitFilter.builder()
                    .policy(Policy.builder("login", limiter).route("POST", "/login").timeout(Duration.ofSeconds(5)).build())
                    .build();
            try (HttpFixture http = new HttpFixture(filter)) {
                assertEquals(200, http.send("POST", "/login", "127.0.0.1", List.of()).status());
                for (String spelled : List.of("/login;jsessionid=x", "/log%69n", "/./login", "/x/../login")) {
                    HttpFixture.Response r = http.send("POST", spelled, "127.0.0.1", List.of());
                    assertEquals(429, r.status(), spelled + ": " + r);
                }
                // Another route is not the login policy's.
                assertEquals(200, http.send("POST", "/logins", "127.0.0.1", List.of()).status());
            }
        }
    }
}
