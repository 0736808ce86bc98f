//! The layer on a real Redis (a `redis-server` started by the test): shared
//! state, and fail open / fail closed when Redis is killed or frozen mid-run.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::{get, post};
use common::{get as fetch, localhost, send, serve};
use http::Method;
use ratelab_core::{Error, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{FailureMode, Policy, RateLimitLayer};
use ratelab_redis::{Connection, RedisStore};
use ratelab_testkit::redis::RedisServer;
use serde_json::json;

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "home" }))
        .route("/sms", post(|| async { "sent" }))
        .layer(layer)
}

type Failures = Arc<Mutex<Vec<(String, bool, FailureMode)>>>;

/// The timeout of a limiter (and of its policy) whose test is not about
/// timeouts: no healthy call reaches it, however loaded the machine. An
/// outage here is a killed server, which fails at once.
const PATIENT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_and_fail_closed_with_redis_killed_mid_run() {
    let mut redis = RedisServer::start();
    let connection = Connection::single(&redis.url()).await.unwrap();
    let limiter = |quota| {
        RedisStore::builder(connection.clone(), Gcra::new(quota))
            .timeout(PATIENT)
            .build()
    };
    let failures: Failures = Arc::default();
    let record = failures.clone();
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("global", limiter(Quota::per_minute(5).unwrap()))
                .timeout(PATIENT)
                .fail_open(),
        )
        .policy(
            Policy::new("sms", limiter(Quota::per_hour(10).unwrap()))
                .route(Method::POST, "/sms")
                .timeout(PATIENT)
                .fail_closed(),
        )
        .on_limiter_failure(move |failure| {
            record.lock().unwrap().push((
                failure.policy.to_owned(),
                matches!(failure.error, Error::Timeout(_)),
                failure.mode,
            ));
        })
        .build()
        .unwrap();
    let stats = layer.stats().clone();
    let addr = serve(app(layer)).await;

    // Redis up: decided on Redis.
    let home = fetch(addr, "/").await;
    assert_eq!(home.status, 200);
    assert_eq!(home.header("ratelimit"), r#""global";r=4;t=12"#);
    let sms = send(addr, localhost(), "POST", "/sms", &[]).await;
    assert_eq!(sms.status, 200);
    assert!(
        sms.header("ratelimit").starts_with(r#""global";r=3;"#),
        "{sms:?}"
    );
    assert_eq!(stats.failed_open() + stats.failed_closed(), 0);

    // Redis dies mid-run.
    redis.kill();

    // The fail-open policy lets the request through, unchecked, with alerts;
    // it has no decision to report.
    let home = fetch(addr, "/").await;
    assert_eq!(home.status, 200);
    assert_eq!(home.text(), "home");
    assert_eq!(home.header("ratelimit-policy"), r#""global";q=5;w=60"#);
    assert!(!home.has("ratelimit"));
    assert!(stats.failed_open() >= 1);

    // The fail-closed policy refuses with 503 and a problem body.
    let sms = send(addr, localhost(), "POST", "/sms", &[]).await;
    assert_eq!(sms.status, 503);
    assert_eq!(sms.header("content-type"), "application/problem+json");
    let body = sms.json();
    assert_eq!(body["status"], 503);
    assert_eq!(body["unavailable-policies"], json!(["sms"]));
    assert_eq!(stats.unavailable(), 1);
    assert!(stats.failed_closed() >= 1);
    {
        let failures = failures.lock().unwrap();
        assert!(
            failures
                .iter()
                .any(|(p, _, m)| p == "global" && *m == FailureMode::Open)
        );
        assert!(
            failures
                .iter()
                .any(|(p, _, m)| p == "sms" && *m == FailureMode::Closed)
        );
    }

    // Redis comes back (empty: no persistence); the connection is re-made on
    // its own and decisions resume. Poll for it, each poll a full exchange.
    redis.restart();
    let deadline = Instant::now() + PATIENT;
    let resumed = loop {
        let reply = fetch(addr, "/").await;
        if reply.has("ratelimit") {
            break reply;
        }
        assert!(
            Instant::now() < deadline,
            "decisions never resumed after Redis restarted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(resumed.status, 200);
    assert_eq!(resumed.header("ratelimit"), r#""global";r=4;t=12"#);
    let sms = send(addr, localhost(), "POST", "/sms", &[]).await;
    assert_eq!(sms.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_redis_never_holds_a_request_past_the_policy_timeout() {
    let redis = RedisServer::start();
    let connection = Connection::single(&redis.url()).await.unwrap();
    let failures: Failures = Arc::default();
    let record = failures.clone();
    // The Redis limiter's own timeout is long; the policy's, short, wins.
    let limiter = RedisStore::builder(connection, Gcra::new(Quota::per_minute(5).unwrap()))
        .timeout(Duration::from_secs(3600))
        .build();
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("global", limiter)
                .timeout(Duration::from_millis(100))
                .fail_open(),
        )
        .on_limiter_failure(move |failure| {
            record.lock().unwrap().push((
                failure.policy.to_owned(),
                matches!(failure.error, Error::Timeout(_)),
                failure.mode,
            ));
        })
        .build()
        .unwrap();
    let stats = layer.stats().clone();
    let addr = serve(app(layer)).await;
    // Decided on Redis once (a loaded machine may take longer than the
    // policy's 100 ms for the first calls: those failed open, and are
    // not counted below).
    let deadline = Instant::now() + PATIENT;
    while !fetch(addr, "/").await.has("ratelimit") {
        assert!(Instant::now() < deadline, "Redis never decided");
    }
    let failed_open = stats.failed_open();
    failures.lock().unwrap().clear();

    redis.pause();
    // Bounded by common::EXCHANGE_BOUND: a request held by the frozen Redis
    // (for the limiter's hour) would fail the test.
    let reply = fetch(addr, "/").await;
    redis.resume();
    assert_eq!(reply.status, 200);
    assert!(!reply.has("ratelimit"));
    assert_eq!(stats.failed_open() - failed_open, 1);
    assert_eq!(
        *failures.lock().unwrap(),
        [("global".to_owned(), true, FailureMode::Open)]
    );
}

/// One failure vocabulary: a limiter built to fail open (its own policy
/// admits while Redis is down) under a route marked fail-closed. The route's
/// mode wins: its requests get 503 with a Retry-After, not a silent pass;
/// a fail-open route above a limiter built to fail closed passes. A corrupt
/// key (a data error, not an outage) fails closed whatever the mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_route_failure_mode_wins_over_the_limiter_policy() {
    use ratelab_redis::FailurePolicy;

    // Nothing listens on port 1: every call fails at once (connection refused).
    let dead = Connection::single_lazy("redis://127.0.0.1:1/").unwrap();
    let limiter = |policy| {
        RedisStore::builder(dead.clone(), Gcra::new(Quota::per_minute(5).unwrap()))
            .timeout(Duration::from_millis(200))
            .on_failure(policy)
            .build()
    };
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("sms", limiter(FailurePolicy::Allow))
                .route(Method::POST, "/sms")
                .fail_closed(),
        )
        .policy(
            Policy::new("home", limiter(FailurePolicy::Deny))
                .route(Method::GET, "/")
                .fail_open(),
        )
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    for _ in 0..3 {
        let sms = send(addr, localhost(), "POST", "/sms", &[]).await;
        assert_eq!(
            sms.status, 503,
            "fail-closed route above a fail-open limiter"
        );
        let retry: u64 = sms.header("retry-after").parse().unwrap();
        assert!(retry >= 1, "a 503 says when to come back: {retry}");
        assert_eq!(fetch(addr, "/").await.status, 200, "fail-open route");
    }

    // A key holding what no script wrote: a data error, 503 even when the
    // route fails open.
    let redis = RedisServer::start();
    let connection = Connection::single(&redis.url()).await.unwrap();
    let limiter =
        RedisStore::builder(connection.clone(), Gcra::new(Quota::per_minute(5).unwrap()))
            .timeout(PATIENT)
            .on_failure(FailurePolicy::Allow)
            .build();
    let redis_key = limiter.store().redis_key(b"home:ip:127.0.0.1");
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("home", limiter).timeout(PATIENT).fail_open())
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    assert_eq!(fetch(addr, "/").await.status, 200);
    let _: () = connection
        .query(redis::cmd("SET").arg(&redis_key).arg("abc"))
        .await
        .unwrap();
    let corrupt = fetch(addr, "/").await;
    assert_eq!(corrupt.status, 503, "corrupt state is not let through");
}

/// A Redis limiter issues receipts: counting only failures consumes first
/// and refunds the successes, in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_limiter_counts_failures_by_receipt() {
    use ratelab_http::Count;

    let server = RedisServer::start();
    let connection = Connection::single(&server.url()).await.unwrap();
    let limiter = RedisStore::builder(connection, Gcra::new(Quota::per_hour(3).unwrap()))
        .timeout(PATIENT)
        .build();
    assert!(ratelab_core::Limiter::refunds(&limiter));
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("login", limiter)
                .timeout(PATIENT)
                .count(Count::Failures),
        )
        .build()
        .unwrap();
    let app = Router::new()
        .route("/ok", get(|| async { "ok" }))
        .route("/fail", get(|| async { http::StatusCode::UNAUTHORIZED }))
        .layer(layer);
    let addr = serve(app).await;
    let mut statuses = Vec::new();
    for path in [
        "/ok", "/ok", "/ok", "/ok", "/fail", "/fail", "/fail", "/fail",
    ] {
        statuses.push(fetch(addr, path).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 401, 401, 401, 429]);
}
