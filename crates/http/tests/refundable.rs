//! A ratelab limiter counts only failures through its own refund: the
//! in-memory keyed limiter and single bucket as they are, a Redis limiter
//! through `Refundable`.

mod common;

use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use common::{get as fetch, serve};
use http::StatusCode;
use ratelab_core::{Direct, Keyed, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{Count, Policy, RateLimitLayer, Refundable};
use ratelab_redis::{Connection, RedisLimiter};
use ratelab_testkit::redis::RedisServer;

/// `/ok` answers 200, `/fail` 401.
fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route(
            "/{outcome}",
            get(|Path(outcome): Path<String>| async move {
                if outcome == "ok" {
                    StatusCode::OK
                } else {
                    StatusCode::UNAUTHORIZED
                }
            }),
        )
        .layer(layer)
}

/// Three failures an hour: successes are given back, failures count.
///
/// A success gets back what its admission surely still holds: all but the
/// layer's margin, or on Redis `TIME` the longest the refund may take to
/// run (`settle`). The failures come after that has drained.
async fn failures_only(policy: Policy, settle: Duration) {
    let layer = RateLimitLayer::builder()
        .policy(policy.count(Count::Failures))
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let mut statuses = Vec::new();
    for path in ["/ok", "/ok", "/ok", "/ok"] {
        statuses.push(fetch(addr, path).await.status);
    }
    tokio::time::sleep(settle).await;
    for path in ["/fail", "/fail", "/fail", "/fail"] {
        statuses.push(fetch(addr, path).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 401, 401, 401, 429]);
}

fn quota() -> Quota {
    Quota::per_hour(3).unwrap()
}

/// On the system clock: the layer measures the time since a check on real
/// time, so a limiter's clock must keep real time for its refunds to be
/// exact (a frozen `ManualClock` keeps the margin each refund leaves).
#[tokio::test]
async fn memory_limiters_refund_as_they_are() {
    let settle = ratelab_http::REFUND_MARGIN * 50;
    failures_only(
        Policy::refundable("login", Keyed::new(Gcra::new(quota()))),
        settle,
    )
    .await;
    failures_only(
        Policy::refundable("login", Direct::new(Gcra::new(quota()))),
        settle,
    )
    .await;
}

#[tokio::test]
async fn a_redis_limiter_refunds_through_refundable() {
    let server = RedisServer::start();
    let connection = Connection::single(&server.url()).await.unwrap();
    let timeout = Duration::from_millis(500);
    let limiter = RedisLimiter::builder(connection, Gcra::new(quota()))
        .timeout(timeout)
        .clock_skew(Duration::ZERO)
        .build();
    let settle = timeout + Duration::from_millis(100);
    failures_only(Policy::refundable("login", Refundable(limiter)), settle).await;
}

/// A success that straddles a window's end gets nothing back: its unit was
/// the old window's, and giving it to the new one would let a fourth failure
/// count there. The layer measures how long the admission still weighs from
/// before its check (real time, as the limiter's clock).
#[tokio::test]
async fn a_slow_success_across_a_window_end_gives_the_new_window_nothing() {
    use ratelab_core::{Clock, SystemClock};
    use ratelab_fixed_window::FixedWindow;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    const WINDOW: u64 = 2_000_000;
    let now = || SystemClock.now_micros();
    let sleep_until = |at: u64| tokio::time::sleep(Duration::from_micros(at.saturating_sub(now())));
    let quota = Quota::new(3, Duration::from_micros(WINDOW)).unwrap();
    let limiter = Keyed::new(FixedWindow::new(quota));
    let layer = RateLimitLayer::builder()
        .policy(Policy::refundable("login", limiter).count(Count::Failures))
        .build()
        .unwrap();
    // `/slow` succeeds when the next window is 400 ms old.
    let boundary = Arc::new(AtomicU64::new(0));
    let until = boundary.clone();
    let app = Router::new()
        .route(
            "/slow",
            get(move || {
                let until = until.load(Ordering::Relaxed) + 400_000;
                async move {
                    tokio::time::sleep(Duration::from_micros(until.saturating_sub(now()))).await;
                    StatusCode::OK
                }
            }),
        )
        .route("/fail", get(|| async { StatusCode::UNAUTHORIZED }))
        .layer(layer);
    let addr = serve(app).await;

    // In the second half of a window.
    if now() % WINDOW < WINDOW / 2 {
        sleep_until(now() - now() % WINDOW + WINDOW / 2).await;
    }
    let next = (now() / WINDOW + 1) * WINDOW;
    boundary.store(next, Ordering::Relaxed);
    let slow = tokio::spawn(async move { fetch(addr, "/slow").await.status });
    sleep_until(next + 100_000).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(fetch(addr, "/fail").await.status);
    }
    assert_eq!(statuses, [401, 401, 401, 429]);
    assert_eq!(slow.await.unwrap(), 200);
    // Still in the window that began at `next`: the success's refund went
    // nowhere.
    assert_eq!(fetch(addr, "/fail").await.status, 429);
    assert!(now() < next + WINDOW, "the test ran past its window");
}
