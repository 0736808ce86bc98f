package dev.ratelab.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.ratelab.client.servlet.Identify;
import dev.ratelab.client.servlet.Policy;
import dev.ratelab.client.servlet.RateLimitFilter;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import org.junit.jupiter.api.Test;

/** The README's examples, as written there, against a real Redis (what a doctest is to Rust). */
class ReadmeExamplesTest {
    @Test
    void theSeedsExperiment() {
        try (RedisServer server = RedisServer.start()) {
            List<Long> retries = new ArrayList<>();
            int admitted = 0;
            try (Redis redis = Redis.connect(server.url())) {
                // As the README has it, with a timeout a loaded test machine keeps (the default is 100 ms).
                Limiter limiter = Limiter.builder(redis, "token-bucket", Quota.perSecond(5).withBurst(10))
                        .timeout(Duration.ofSeconds(5)).build();
                for (int i = 0; i < 20; i++) {
                    Decision d = limiter.check("client-42");
                    if (!d.allowed()) {
                        retries.add(d.retryAfterSeconds());
                    } else {
                        admitted++;
                    }
                }
            }
            assertEquals(10, admitted);
            assertEquals(List.of(1L), retries.stream().distinct().toList());
        }
    }

    @Test
    void receiptsAndTheFilterAsTheReadmeBuildsThem() {
        try (RedisServer server = RedisServer.start(); Redis redis = Redis.connect(server.url())) {
            Limiter limiter = Limiter.builder(redis, "gcra", Quota.perMinute(100)).timeout(Duration.ofSeconds(5)).build();
            Decision d = limiter.check("client-42", 8);
            long[] after = {-1};
            d.receipt().ifPresent(receipt -> after[0] = limiter.settle(receipt, 3).remaining());
            assertTrue(after[0] >= 96, "settled to 3: " + after[0]);
            RateLimitFilter filter = RateLimitFilter.builder()
                    .policy(Policy.builder("default", Limiter.builder(redis, "gcra", Quota.perMinute(100)).build()).build())
                    .policy(Policy.builder("login", Limiter.builder(redis, "gcra", Quota.of(5, Duration.ofMinutes(15))).build())
                            .route("POST", "/login")
                            .failure(Policy.Failure.CLOSED)
                            .count(Policy.Count.FAILURES)
                            .key((request, client) -> request.getHeader("x-account"))
                            .build())
                    .identify(Identify.builder().trustedProxies("10.0.0.0/8").build())
                    .build();
            // Policy names are unique: they name the fields' items and the limiters' keys.
            Policy again = Policy.builder("default", limiter).build();
            IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
                    () -> RateLimitFilter.builder().policy(again).policy(again));
            assertTrue(e.getMessage().contains("two policies are named default"), e.getMessage());
            assertEquals(RateLimitFilter.class, filter.getClass());
        }
    }
}
