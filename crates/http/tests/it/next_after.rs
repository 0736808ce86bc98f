//! `t` in `RateLimit` is when more than `r` is available
//! (draft-ietf-httpapi-ratelimit-headers: "the number of seconds until
//! additional quota ... is made available"), for every algorithm, through
//! real HTTP on a manual clock. After each response, the limiter itself
//! says when `r + 1` units pass (a peek): `t` is that, rounded up to the
//! second; one second earlier they do not pass, at `t` they do.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use common::{get as fetch, serve};
use ratelab_core::{Keyed, ManualClock, Quota, RateLimiter, ceil_secs};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_http::{Policy, RateLimitLayer};
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_token_bucket::TokenBucket;

const KEY: &[u8] = b"api:ip:127.0.0.1";

/// A server with one policy on `limiter`, and the limiter for peeks.
async fn server(limiter: Arc<dyn RateLimiter>) -> std::net::SocketAddr {
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("api", limiter))
        .build()
        .unwrap();
    serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await
}

/// When `r + 1` units pass, as the limiter says now: zero if they do.
fn exact(limiter: &dyn RateLimiter, r: u64) -> Duration {
    let peek = limiter.peek(KEY, u32::try_from(r + 1).unwrap()).unwrap();
    peek.retry_after()
}

/// Requests at the instants `steps` (each an advance of the clock, in
/// twentieths of the period, before the request); after each, `t` is the
/// limiter's own answer, rounded up. Then, from the last response: one
/// second before `t`, `r + 1` units do not pass; at `t` they do. Returns
/// every (status, r, t).
async fn check(
    limiter: Arc<dyn RateLimiter>,
    clock: &ManualClock,
    period: Duration,
    steps: &[u32],
) -> Vec<(u16, u64, u64)> {
    let addr = server(limiter.clone()).await;
    let mut seen = Vec::new();
    for &step in steps {
        clock.advance(period / 20 * step);
        let reply = fetch(addr, "/").await;
        let (r, t) = (
            reply.remaining("api").unwrap(),
            reply.next_after("api").unwrap(),
        );
        let wanted = if r >= 4 {
            0
        } else {
            ceil_secs(exact(&*limiter, r))
        };
        assert_eq!(
            t,
            wanted,
            "{} at {step}: {reply:?}",
            limiter.algorithm_name()
        );
        if reply.status == 429 {
            assert_eq!(reply.header("retry-after"), t.to_string(), "{reply:?}");
        }
        seen.push((reply.status, r, t));
    }
    let &(_, r, t) = seen.last().unwrap();
    assert!(t > 0 && r < 4, "{seen:?}");
    let units = u32::try_from(r + 1).unwrap();
    clock.advance(Duration::from_secs(t - 1));
    assert!(
        !limiter.peek(KEY, units).unwrap().allowed,
        "{}: {units} pass before t",
        limiter.algorithm_name()
    );
    clock.advance(Duration::from_secs(1));
    assert!(
        limiter.peek(KEY, units).unwrap().allowed,
        "{}: {units} do not pass at t",
        limiter.algorithm_name()
    );
    seen
}

/// 4 per 20 s, in every algorithm: bursts, pauses, a refusal.
const STEPS: &[u32] = &[0, 0, 3, 7, 0, 0, 1];

fn quota(period: Duration) -> Quota {
    Quota::new(4, period).unwrap()
}

#[tokio::test]
async fn steady_refills() {
    let period = Duration::from_secs(20);
    let clock = ManualClock::new();
    let c = || clock.clone();
    check(
        Arc::new(Keyed::with_clock(Gcra::new(quota(period)), c())),
        &clock,
        period,
        STEPS,
    )
    .await;
    let clock = ManualClock::new();
    let c = || clock.clone();
    check(
        Arc::new(Keyed::with_clock(TokenBucket::new(quota(period)), c())),
        &clock,
        period,
        STEPS,
    )
    .await;
    let clock = ManualClock::new();
    let c = || clock.clone();
    check(
        Arc::new(Keyed::with_clock(LeakyMeter::new(quota(period)), c())),
        &clock,
        period,
        STEPS,
    )
    .await;
}

/// The queue admits into later slots, which the layer waits out in real
/// time: a short period.
#[tokio::test]
async fn the_leaky_queue() {
    let period = Duration::from_secs(4);
    let clock = ManualClock::new();
    let queue = Keyed::with_clock(LeakyQueue::new(quota(period)), clock.clone());
    check(Arc::new(queue), &clock, period, STEPS).await;
}

#[tokio::test]
async fn the_fixed_window() {
    let period = Duration::from_secs(20);
    let clock = ManualClock::new();
    let window = Keyed::with_clock(FixedWindow::new(quota(period)), clock.clone());
    check(Arc::new(window), &clock, period, STEPS).await;
}

#[tokio::test]
async fn the_sliding_log() {
    let period = Duration::from_secs(20);
    let clock = ManualClock::new();
    let log = Keyed::with_clock(SlidingLog::new(quota(period)), clock.clone());
    let seen = check(Arc::new(log), &clock, period, STEPS).await;
    // The first two units (at 0 s) are back at 20 s, not when the last
    // (at 10 s) is: after the burst at 0 s, t is 20 - 0.
    assert_eq!(seen[1], (200, 2, 20));
}

/// The reviewers' case: 4 per 20 s on the sliding counter, a burst at the
/// start of a window, answered `r=0;t=40` (until full: two windows), when a
/// unit is back after 25 s (the previous window's weight has decayed to 3):
/// now `t=26`, the exact wait rounded up.
#[tokio::test]
async fn the_sliding_counter() {
    let period = Duration::from_secs(20);
    let clock = ManualClock::new();
    let counter = Arc::new(Keyed::with_clock(
        SlidingCounter::new(quota(period)),
        clock.clone(),
    ));
    let addr = server(counter.clone()).await;
    let mut last = None;
    for _ in 0..4 {
        last = Some(fetch(addr, "/").await);
    }
    let last = last.unwrap();
    // 25 s and 40 µs: the counter weighs the previous window in steps of
    // 306 µs (20 s / 65,536, rounded up), and 16,340 of them are 5.00004 s.
    // Rounded up to whole seconds, as a client that waits `t` is never early.
    assert_eq!(exact(&*counter, 0), Duration::from_micros(25_000_040));
    assert_eq!(last.header("ratelimit"), r#""api";r=0;t=26"#);
    clock.advance(Duration::from_secs(25));
    assert!(!counter.peek(KEY, 1).unwrap().allowed);
    clock.advance(Duration::from_micros(40));
    assert!(counter.peek(KEY, 1).unwrap().allowed);

    let clock = ManualClock::new();
    let counter = Keyed::with_clock(SlidingCounter::new(quota(period)), clock.clone());
    check(Arc::new(counter), &clock, period, STEPS).await;
}
