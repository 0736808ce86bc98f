//! Policies over real connections: per route, per plan, per account, with a
//! cost; a refusal by one policy consumes nothing from the others; every
//! algorithm fits behind the layer.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use common::{Reply, localhost, other_peer, send, serve};
use http::{HeaderName, Method};
use ratelab_core::{AsyncRateLimiter, Keyed, ManualClock, Quota, RateLimiter};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_http::{Identify, Identity, Policy, RateLimitLayer};
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_token_bucket::TokenBucket;
use serde_json::json;

fn gcra(quota: Quota, clock: &ManualClock) -> Keyed<Gcra, ManualClock> {
    Keyed::with_clock(Gcra::new(quota), clock.clone())
}

fn routes(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "home" }))
        .route("/login", post(|| async { "welcome" }))
        .route("/sms", post(|| async { "sent" }))
        .layer(layer)
}

async fn call(addr: SocketAddr, method: &str, path: &str) -> Reply {
    send(addr, localhost(), method, path, &[]).await
}

fn violated(reply: &Reply) -> serde_json::Value {
    assert_eq!(reply.status, 429, "{reply:#?}");
    reply.json()["violated-policies"].clone()
}

#[tokio::test]
async fn per_route_limits_apply_independently_and_a_refusal_consumes_nothing_elsewhere() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::builder()
        .policy(Policy::new(
            "default",
            gcra(Quota::per_minute(5).unwrap(), &clock),
        ))
        .policy(
            Policy::new("login", gcra(Quota::per_minute(1).unwrap(), &clock))
                .route(Method::POST, "/login"),
        )
        .build()
        .unwrap();
    let addr = serve(routes(layer)).await;

    let login = call(addr, "POST", "/login").await;
    assert_eq!(login.status, 200);
    assert_eq!(
        login.header("ratelimit"),
        r#""default";r=4;t=12, "login";r=0;t=60"#
    );

    // Hammering the login route: refused by "login" alone, and "default" is
    // only peeked, never consumed.
    for _ in 0..5 {
        let refused = call(addr, "POST", "/login").await;
        assert_eq!(violated(&refused), json!(["login"]));
        assert_eq!(
            refused.header("ratelimit"),
            r#""default";r=4;t=12, "login";r=0;t=60"#
        );
    }

    // The other routes are not under "login": 4 more pass, then "default" refuses.
    for expected_r in [3, 2, 1, 0] {
        let home = call(addr, "GET", "/").await;
        assert_eq!(home.status, 200);
        assert_eq!(home.header("ratelimit-policy"), r#""default";q=5;w=60"#);
        assert!(
            home.header("ratelimit")
                .starts_with(&format!("\"default\";r={expected_r};"))
        );
    }
    let refused = call(addr, "GET", "/").await;
    assert_eq!(violated(&refused), json!(["default"]));

    // Another client is untouched by all of this.
    let other = send(addr, other_peer(), "POST", "/login", &[]).await;
    assert_eq!(other.status, 200);
}

#[tokio::test]
async fn several_violated_policies_are_all_named_and_retry_after_waits_for_the_last() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::builder()
        .policy(Policy::new(
            "minute",
            gcra(Quota::per_minute(1).unwrap(), &clock),
        ))
        .policy(Policy::new(
            "hour",
            gcra(Quota::per_hour(1).unwrap(), &clock),
        ))
        .build()
        .unwrap();
    let addr = serve(routes(layer)).await;
    assert_eq!(call(addr, "GET", "/").await.status, 200);
    let refused = call(addr, "GET", "/").await;
    assert_eq!(violated(&refused), json!(["minute", "hour"]));
    assert_eq!(refused.header("retry-after"), "3600");
    assert_eq!(
        refused.header("ratelimit"),
        r#""minute";r=0;t=60, "hour";r=0;t=3600"#
    );
    // After a minute, only "hour" still refuses, and "minute" is not consumed.
    clock.advance(Duration::from_secs(60));
    let refused = call(addr, "GET", "/").await;
    assert_eq!(violated(&refused), json!(["hour"]));
    assert_eq!(refused.header("retry-after"), "3540");
    assert_eq!(
        refused.header("ratelimit"),
        r#""minute";r=1;t=0, "hour";r=0;t=3540"#
    );
}

#[tokio::test]
async fn per_plan_limits_apply_independently() {
    let clock = ManualClock::new();
    let identify = Identify::new()
        .api_key(HeaderName::from_static("x-api-key"), |key| match key {
            "k-free-1" => Some(Identity::new("one").with_plan("free")),
            "k-free-2" => Some(Identity::new("two").with_plan("free")),
            "k-pro" => Some(Identity::new("three").with_plan("pro")),
            _ => None,
        })
        .anonymous_plan("anonymous");
    let layer = RateLimitLayer::builder()
        .identify(identify)
        .policy(
            Policy::new("anonymous", gcra(Quota::per_minute(1).unwrap(), &clock)).plan("anonymous"),
        )
        .policy(Policy::new("free", gcra(Quota::per_minute(2).unwrap(), &clock)).plan("free"))
        .policy(Policy::new("pro", gcra(Quota::per_minute(4).unwrap(), &clock)).plan("pro"))
        .build()
        .unwrap();
    let addr = serve(routes(layer)).await;
    let with_key = |key: &'static str| async move {
        send(
            addr,
            localhost(),
            "GET",
            "/",
            &[("x-api-key", key.as_bytes())],
        )
        .await
    };

    let mut free = Vec::new();
    for _ in 0..3 {
        free.push(with_key("k-free-1").await);
    }
    assert_eq!(
        free.iter().map(|r| r.status).collect::<Vec<_>>(),
        [200, 200, 429]
    );
    assert_eq!(free[0].header("ratelimit-policy"), r#""free";q=2;w=60"#);
    assert_eq!(violated(&free[2]), json!(["free"]));

    // Another free account has its own quota; pro has a bigger one.
    assert_eq!(with_key("k-free-2").await.status, 200);
    for expected_r in [3, 2, 1, 0] {
        let pro = with_key("k-pro").await;
        assert_eq!(pro.header("ratelimit-policy"), r#""pro";q=4;w=60"#);
        assert!(
            pro.header("ratelimit")
                .starts_with(&format!("\"pro\";r={expected_r};"))
        );
    }
    assert_eq!(with_key("k-pro").await.status, 429);

    // Anonymous callers (and forged keys) share the anonymous plan per IP.
    assert_eq!(call(addr, "GET", "/").await.status, 200);
    let forged = with_key("k-forged").await;
    assert_eq!(violated(&forged), json!(["anonymous"]));
}

#[tokio::test]
async fn login_attempts_are_counted_per_account_whoever_makes_them() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new(
                "login",
                gcra(Quota::new(2, Duration::from_secs(900)).unwrap(), &clock),
            )
            .route(Method::POST, "/login")
            .key(|request, _| {
                let account = request.headers.get("x-account")?.to_str().ok()?;
                Some(account.trim().to_lowercase())
            }),
        )
        .build()
        .unwrap();
    let addr = serve(routes(layer)).await;
    let attempt = |peer, account: &'static str| async move {
        send(
            addr,
            peer,
            "POST",
            "/login",
            &[("x-account", account.as_bytes())],
        )
        .await
        .status
    };
    // Two addresses guessing alice's password share alice's 2 attempts.
    assert_eq!(attempt(localhost(), "alice").await, 200);
    assert_eq!(attempt(other_peer(), "Alice").await, 200);
    assert_eq!(attempt(localhost(), "alice").await, 429);
    assert_eq!(attempt(other_peer(), "ALICE ").await, 429);
    // Bob's account is unaffected.
    assert_eq!(attempt(other_peer(), "bob").await, 200);
    // No account, no key: the policy does not apply (nothing to log in to).
    let anonymous = call(addr, "POST", "/login").await;
    assert_eq!(anonymous.status, 200);
    assert!(!anonymous.has("ratelimit-policy"));
}

#[tokio::test]
async fn cost_is_honoured() {
    let clock = ManualClock::new();
    // 5 messages per hour: one comes back every 720 s.
    let sms = Arc::new(gcra(Quota::per_hour(5).unwrap(), &clock));
    let shared: Arc<dyn AsyncRateLimiter> = sms.clone();
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::shared("sms", shared)
                .route(Method::POST, "/sms")
                .cost_with(|request, _| {
                    let query = request.uri.query().unwrap_or("");
                    let to = query
                        .split('&')
                        .find_map(|p| p.strip_prefix("to="))
                        .unwrap_or("");
                    u32::try_from(to.split(',').filter(|n| !n.is_empty()).count())
                        .unwrap_or(u32::MAX)
                }),
        )
        .build()
        .unwrap();
    let addr = serve(routes(layer)).await;

    let three = call(addr, "POST", "/sms?to=1,2,3").await;
    assert_eq!(three.status, 200);
    assert_eq!(three.header("ratelimit"), r#""sms";r=2;t=720"#);

    // 3 more do not fit in the 2 left: refused, nothing consumed, and the
    // wait is until 3 fit (one more unit: 720 s).
    let refused = call(addr, "POST", "/sms?to=4,5,6").await;
    assert_eq!(violated(&refused), json!(["sms"]));
    assert_eq!(refused.header("retry-after"), "720");
    assert_eq!(refused.header("ratelimit"), r#""sms";r=2;t=720"#);
    let decision = sms.check(b"sms:ip:127.0.0.1", 3).unwrap();
    assert_eq!(
        (decision.allowed, decision.retry_after_secs()),
        (false, 720)
    );

    // 2 do fit.
    let two = call(addr, "POST", "/sms?to=4,5").await;
    assert_eq!(two.status, 200);
    assert_eq!(two.header("ratelimit"), r#""sms";r=0;t=720"#);

    // 6 can never fit in a burst of 5: refused without Retry-After.
    clock.advance(Duration::from_secs(3600));
    let never = call(addr, "POST", "/sms?to=1,2,3,4,5,6").await;
    assert_eq!(violated(&never), json!(["sms"]));
    assert!(!never.has("retry-after"));
    assert!(!never.has("ratelimit"));
    let detail = never.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("can never pass"), "{detail}");
    // ... and it consumed nothing: a full burst still passes.
    assert_eq!(call(addr, "POST", "/sms?to=1,2,3,4,5").await.status, 200);
}

#[tokio::test]
async fn every_algorithm_fits_behind_the_layer() {
    let clock = ManualClock::new();
    let quota = Quota::per_minute(2).unwrap();
    let limiters: Vec<Arc<dyn RateLimiter>> = vec![
        Arc::new(Keyed::with_clock(Gcra::new(quota), clock.clone())),
        Arc::new(Keyed::with_clock(TokenBucket::new(quota), clock.clone())),
        Arc::new(Keyed::with_clock(LeakyMeter::new(quota), clock.clone())),
        Arc::new(Keyed::with_clock(FixedWindow::new(quota), clock.clone())),
        Arc::new(Keyed::with_clock(SlidingLog::new(quota), clock.clone())),
        Arc::new(Keyed::with_clock(SlidingCounter::new(quota), clock.clone())),
    ];
    for limiter in limiters {
        let name = limiter.algorithm_name();
        let shared: Arc<dyn AsyncRateLimiter> = Arc::new(limiter.clone());
        let layer = RateLimitLayer::builder()
            .policy(Policy::shared("default", shared))
            .build()
            .unwrap();
        let addr = serve(routes(layer)).await;
        for _ in 0..2 {
            let ok = call(addr, "GET", "/").await;
            assert_eq!(ok.status, 200, "{name}");
            assert_eq!(
                ok.header("ratelimit-policy"),
                r#""default";q=2;w=60"#,
                "{name}"
            );
        }
        let refused = call(addr, "GET", "/").await;
        assert_eq!(refused.status, 429, "{name}");
        let decision = limiter.check(b"default:ip:127.0.0.1", 1).unwrap();
        assert!(!decision.allowed, "{name}");
        assert_eq!(
            refused.header("retry-after"),
            decision.retry_after_secs().max(1).to_string(),
            "{name}"
        );
        assert_eq!(
            refused.header("ratelimit"),
            format!("\"default\";r=0;t={}", decision.retry_after_secs()),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_queueing_policy_holds_the_request_until_its_slot() {
    // The leaky bucket queue admits 3 at once into a queue draining one per
    // 100 ms: the third waits two slots.
    let layer = RateLimitLayer::builder()
        .policy(Policy::new(
            "queue",
            Keyed::new(LeakyQueue::new(
                Quota::per_second(10).unwrap().with_burst(3).unwrap(),
            )),
        ))
        .build()
        .unwrap();
    let addr = serve(routes(layer)).await;
    let started = tokio::time::Instant::now();
    let replies = futures::future::join_all((0..3).map(|_| call(addr, "GET", "/"))).await;
    assert!(replies.iter().all(|r| r.status == 200));
    // A lower bound only: the layer slept for the slot it was given.
    assert!(
        started.elapsed() >= Duration::from_millis(199),
        "{:?}",
        started.elapsed()
    );
}
