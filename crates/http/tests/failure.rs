//! Limiter failures over real connections: fail open (pass, with alerts) or
//! fail closed (503), per policy; a stuck limiter never holds a request past
//! the policy's timeout. (With a real Redis killed mid-run: `redis.rs`.)

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use common::{get as fetch, localhost, send, serve};
use http::Method;
use ratelab_core::{
    AsyncRateLimiter, CheckFuture, Error, FloodPolicy, Keyed, Limiter, ManualClock, Quota,
};
use ratelab_gcra::Gcra;
use ratelab_http::{FailureMode, Policy, RateLimitLayer};
use serde_json::json;

/// A limiter whose backend never answers.
#[derive(Debug)]
struct Stuck;

/// A limiter whose backend refuses connections.
#[derive(Debug)]
struct Broken;

impl Limiter for Stuck {
    fn quota(&self) -> Quota {
        Quota::per_minute(10).unwrap()
    }
    fn algorithm_name(&self) -> &'static str {
        "gcra"
    }
    fn backend(&self) -> &'static str {
        "stuck"
    }
    fn bound(&self) -> ratelab_core::Bound {
        ratelab_core::Bound::rate(&self.quota())
    }
}

impl AsyncRateLimiter for Stuck {
    fn check_async<'a>(&'a self, _key: &'a [u8], _cost: u32) -> CheckFuture<'a> {
        Box::pin(std::future::pending())
    }
}

impl Limiter for Broken {
    fn quota(&self) -> Quota {
        Quota::per_minute(10).unwrap()
    }
    fn algorithm_name(&self) -> &'static str {
        "gcra"
    }
    fn backend(&self) -> &'static str {
        "broken"
    }
    fn bound(&self) -> ratelab_core::Bound {
        ratelab_core::Bound::rate(&self.quota())
    }
}

impl AsyncRateLimiter for Broken {
    fn check_async<'a>(&'a self, _key: &'a [u8], _cost: u32) -> CheckFuture<'a> {
        Box::pin(async { Err(Error::backend("connection refused")) })
    }
}

type Seen = Arc<Mutex<Vec<(String, String, FailureMode)>>>;

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "home" }))
        .route("/sms", post(|| async { "sent" }))
        .layer(layer)
}

/// Collects what the layer logs.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What every test of this binary logs. A process-wide subscriber, set before
/// any event: a scoped one would miss the events whose callsites another test
/// thread registered first.
fn log() -> &'static Log {
    static LOG: OnceLock<Log> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Log::default();
        let writer = log.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .init();
        log
    })
}

#[tokio::test]
async fn a_stuck_limiter_never_holds_a_request_past_its_timeout() {
    let log = log();

    let seen: Seen = Arc::default();
    let record = seen.clone();
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("stuck-open", Stuck)
                .timeout(Duration::from_millis(50))
                .fail_open(),
        )
        .policy(
            Policy::new("stuck-closed", Stuck)
                .route(Method::POST, "/sms")
                .timeout(Duration::from_millis(80))
                .fail_closed(),
        )
        .on_limiter_failure(move |failure| {
            record.lock().unwrap().push((
                failure.policy.to_owned(),
                failure.error.to_string(),
                failure.mode,
            ));
        })
        .build()
        .unwrap();
    let stats = layer.stats().clone();
    let addr = serve(app(layer)).await;

    // Each exchange is bounded by common::EXCHANGE_BOUND: a request held by
    // the stuck limiter would fail the test instead of hanging it.
    let open = fetch(addr, "/").await;
    assert_eq!(open.status, 200);
    assert_eq!(open.text(), "home");
    assert_eq!(open.header("ratelimit-policy"), r#""stuck-open";q=10;w=60"#);
    // No decision, so nothing to report in RateLimit.
    assert!(!open.has("ratelimit"));
    assert_eq!((stats.allowed(), stats.failed_open()), (1, 1));

    let closed = send(addr, localhost(), "POST", "/sms", &[]).await;
    assert_eq!(closed.status, 503);
    assert_eq!(closed.header("content-type"), "application/problem+json");
    assert_eq!(
        closed.header("ratelimit-policy"),
        r#""stuck-open";q=10;w=60, "stuck-closed";q=10;w=60"#
    );
    let body = closed.json();
    assert_eq!(body["type"], "about:blank");
    assert_eq!(body["title"], "Service Unavailable");
    assert_eq!(body["status"], 503);
    assert_eq!(body["unavailable-policies"], json!(["stuck-closed"]));
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("could not decide")
    );
    // The backend error is logged, not sent.
    assert!(!closed.text().contains("did not answer"));
    assert_eq!((stats.unavailable(), stats.failed_closed()), (1, 1));

    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            (
                "stuck-open".to_owned(),
                "the rate limiter backend did not answer within 50ms".to_owned(),
                FailureMode::Open
            ),
            (
                "stuck-open".to_owned(),
                "the rate limiter backend did not answer within 50ms".to_owned(),
                FailureMode::Open
            ),
            (
                "stuck-closed".to_owned(),
                "the rate limiter backend did not answer within 80ms".to_owned(),
                FailureMode::Closed
            ),
        ]
    );
    let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    let line = |policy: &str| {
        log.lines()
            .find(|l| l.contains(&format!("policy={policy} ")))
            .unwrap_or_else(|| panic!("no event for {policy} in {log}"))
            .to_owned()
    };
    let open = line("stuck-open");
    assert!(
        open.contains(" WARN ") && open.contains("fails open"),
        "{open}"
    );
    assert!(open.contains("client=ip:127.0.0.1"), "{open}");
    let closed = line("stuck-closed");
    assert!(
        closed.contains(" ERROR ") && closed.contains("fails closed"),
        "{closed}"
    );
}

#[tokio::test]
async fn failures_follow_each_policy_and_a_refusal_wins() {
    log();
    let clock = ManualClock::new();
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("backend", Broken).fail_open())
        .policy(Policy::new(
            "healthy",
            Keyed::with_clock(Gcra::new(Quota::per_minute(2).unwrap()), clock.clone()),
        ))
        .policy(
            Policy::new("sms", Broken)
                .route(Method::POST, "/sms")
                .fail_closed(),
        )
        .build()
        .unwrap();
    let stats = layer.stats().clone();
    let addr = serve(app(layer)).await;

    // The broken policy passes the request; the healthy one still counts.
    let home = fetch(addr, "/").await;
    assert_eq!(home.status, 200);
    assert_eq!(home.header("ratelimit"), r#""healthy";r=1;t=30"#);

    // A fail-closed failure answers 503 and consumes nothing elsewhere.
    let sms = send(addr, localhost(), "POST", "/sms", &[]).await;
    assert_eq!(sms.status, 503);
    assert_eq!(sms.header("ratelimit"), r#""healthy";r=1;t=30"#);
    let home = fetch(addr, "/").await;
    assert_eq!(home.header("ratelimit"), r#""healthy";r=0;t=30"#);

    // Over the healthy quota, the answer is 429, not 503.
    let sms = send(addr, localhost(), "POST", "/sms", &[]).await;
    assert_eq!(sms.status, 429);
    assert_eq!(sms.json()["violated-policies"], json!(["healthy"]));
    assert_eq!(stats.refused(), 1);
    assert_eq!(stats.unavailable(), 1);
}

#[tokio::test]
async fn a_limiter_full_of_keys_refuses_new_clients_even_when_failing_open() {
    log();
    let clock = ManualClock::new();
    // Room for one client only.
    let limiter = Keyed::builder(Gcra::new(Quota::per_minute(2).unwrap()))
        .clock(clock.clone())
        .shards(1)
        .max_keys(1)
        .flood_policy(FloodPolicy::Refuse)
        .build();
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("tiny", limiter).fail_open())
        .build()
        .unwrap();
    let stats = layer.stats().clone();
    let addr = serve(app(layer)).await;

    assert_eq!(fetch(addr, "/").await.status, 200);
    // A new client while the only slot is taken: refused, not let through.
    let newcomer = send(addr, common::other_peer(), "GET", "/", &[]).await;
    assert_eq!(newcomer.status, 503);
    assert_eq!(newcomer.json()["unavailable-policies"], json!(["tiny"]));
    // The slot frees when the first client is back to full: 30 s from now.
    assert_eq!(newcomer.header("retry-after"), "30");
    assert_eq!((stats.failed_open(), stats.failed_closed()), (0, 1));
    // The tracked client is still limited as usual.
    assert_eq!(fetch(addr, "/").await.status, 200);
    assert_eq!(fetch(addr, "/").await.status, 429);

    clock.advance(Duration::from_secs(60));
    assert_eq!(
        send(addr, common::other_peer(), "GET", "/", &[])
            .await
            .status,
        200
    );
}
