//! Counting after the response: only failures or only successes, with a
//! limiter that refunds (consume, then give back) and with one that does not
//! (peek, then consume).

mod common;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use common::{get as fetch, serve};
use http::StatusCode;
use ratelab_core::{Decision, Error, Keyed, Limiter, ManualClock, Quota, RateLimiter};
use ratelab_gcra::Gcra;
use ratelab_http::{Count, Policy, RateLimitLayer, Refund, RefundFuture};

/// `limit` units per key that never come back on their own, but can be
/// refunded (never above the limit): the smallest limiter with a refund.
#[derive(Debug)]
struct Allowance {
    limit: u64,
    used: Mutex<HashMap<Vec<u8>, u64>>,
}

impl Allowance {
    fn new(limit: u64) -> Self {
        Allowance {
            limit,
            used: Mutex::default(),
        }
    }

    fn used(&self, key: &[u8]) -> u64 {
        self.used.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

impl Limiter for Allowance {
    fn quota(&self) -> Quota {
        Quota::per_hour(u32::try_from(self.limit).unwrap()).unwrap()
    }
    fn algorithm_name(&self) -> &'static str {
        "allowance"
    }
    fn backend(&self) -> &'static str {
        "memory"
    }
}

impl RateLimiter for Allowance {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        let cost = ratelab_core::ensure_fits(cost, self.limit)?;
        let mut used = self.used.lock().unwrap();
        let used = used.entry(key.to_vec()).or_default();
        if *used + cost > self.limit {
            return Ok(Decision::refused(self.limit)
                .with_remaining(self.limit - *used)
                .with_retry_after_micros(3_600_000_000)
                .with_reset_after_micros(3_600_000_000));
        }
        *used += cost;
        Ok(Decision::admitted(self.limit)
            .with_remaining(self.limit - *used)
            .with_reset_after_micros(if *used == 0 { 0 } else { 3_600_000_000 }))
    }
}

impl Refund for Allowance {
    fn refund<'a>(&'a self, key: &'a [u8], cost: u32, owed: Duration) -> RefundFuture<'a> {
        // The admission's hour, less the time since its check and the
        // layer's margin: never more.
        let hour = Duration::from_secs(3600);
        assert!(owed <= hour - ratelab_http::REFUND_MARGIN, "{owed:?}");
        assert!(owed > hour - Duration::from_secs(10), "{owed:?}");
        let mut used = self.used.lock().unwrap();
        if let Some(used) = used.get_mut(key) {
            *used = used.saturating_sub(u64::from(cost));
        }
        // No answer: the response keeps the fields of the check.
        Box::pin(std::future::ready(Ok(None)))
    }
}

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

async fn statuses(addr: std::net::SocketAddr, path: &str, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(fetch(addr, path).await.status);
    }
    out
}

#[tokio::test]
async fn failures_only_with_a_refund() {
    let allowance = std::sync::Arc::new(Allowance::new(3));
    let layer = RateLimitLayer::builder()
        .policy(Policy::refundable("login", allowance.clone()).count(Count::Failures))
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let key = b"login:ip:127.0.0.1";

    // Successes are given back: any number pass.
    assert_eq!(statuses(addr, "/ok", 10).await, [200; 10]);
    assert_eq!(allowance.used(key), 0);
    // Failures count: 3, then refused.
    assert_eq!(statuses(addr, "/fail", 4).await, [401, 401, 401, 429]);
    assert_eq!(allowance.used(key), 3);
    // Once over, successes are refused too (the check comes first).
    assert_eq!(fetch(addr, "/ok").await.status, 429);
}

#[tokio::test]
async fn successes_only_with_a_refund() {
    let allowance = std::sync::Arc::new(Allowance::new(2));
    let layer = RateLimitLayer::builder()
        .policy(Policy::refundable("api", allowance.clone()).count(Count::Successes))
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    assert_eq!(statuses(addr, "/fail", 5).await, [401; 5]);
    assert_eq!(statuses(addr, "/ok", 3).await, [200, 200, 429]);
    assert_eq!(allowance.used(b"api:ip:127.0.0.1"), 2);
}

/// A limiter that checks and peeks through `L` but cannot give units back.
struct NoRefund<L>(L);

impl<L: RateLimiter> Limiter for NoRefund<L> {
    fn quota(&self) -> Quota {
        self.0.quota()
    }
    fn algorithm_name(&self) -> &'static str {
        self.0.algorithm_name()
    }
    fn backend(&self) -> &'static str {
        self.0.backend()
    }
}

impl<L: RateLimiter> RateLimiter for NoRefund<L> {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.0.check(key, cost)
    }
    fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.0.peek(key, cost)
    }
}

#[tokio::test]
async fn failures_only_without_a_refund_peeks_then_counts() {
    let clock = ManualClock::new();
    let limiter = std::sync::Arc::new(Keyed::with_clock(
        Gcra::new(Quota::per_hour(3).unwrap()),
        clock.clone(),
    ));
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("login", NoRefund(limiter.clone())).count(Count::Failures))
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let key = b"login:ip:127.0.0.1";

    assert_eq!(statuses(addr, "/ok", 10).await, [200; 10]);
    assert_eq!(limiter.check(key, 0).unwrap().remaining, 3);
    let fails = statuses(addr, "/fail", 4).await;
    assert_eq!(fails, [401, 401, 401, 429]);
    assert_eq!(limiter.check(key, 0).unwrap().remaining, 0);
    let refused = fetch(addr, "/ok").await;
    assert_eq!(refused.status, 429);
    // The wait is until one unit is back: 20 minutes after the first failure.
    assert_eq!(refused.header("retry-after"), "1200");
    assert_eq!(refused.header("ratelimit"), r#""login";r=0;t=1200"#);
    clock.advance(Duration::from_secs(1200));
    assert_eq!(fetch(addr, "/ok").await.status, 200);
}

/// A ratelab limiter refunds on its own: with `Policy::new`, failures are
/// consumed before the request runs, so twenty failures at once (each
/// answered 50 ms later) pass no more than the quota's three, and the
/// successes before them were given back.
#[tokio::test]
async fn a_ratelab_limiter_consumes_first_and_failures_at_once_keep_the_quota() {
    let limiter = std::sync::Arc::new(Keyed::new(Gcra::new(Quota::per_hour(3).unwrap())));
    assert!(limiter.refunds());
    let layer = RateLimitLayer::builder()
        .policy(Policy::shared("login", limiter.clone()).count(Count::Failures))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/ok", get(|| async { StatusCode::OK }))
        .route(
            "/fail",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                StatusCode::UNAUTHORIZED
            }),
        )
        .layer(layer);
    let addr = serve(app).await;
    assert_eq!(statuses(addr, "/ok", 5).await, [200; 5]);
    // Each success leaves what its refund could not be sure of: a margin.
    tokio::time::sleep(ratelab_http::REFUND_MARGIN * 50).await;
    let at_once: Vec<_> = (0..20)
        .map(|_| tokio::spawn(async move { fetch(addr, "/fail").await.status }))
        .collect();
    let mut statuses = Vec::new();
    for request in at_once {
        statuses.push(request.await.unwrap());
    }
    let failed = statuses.iter().filter(|&&s| s == 401).count();
    assert_eq!(failed, 3, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|&&s| s == 429).count(), 17);
}
