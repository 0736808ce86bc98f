//! Counting only failures or only successes, through real HTTP: by receipt
//! (consume, then refund what did not count) on ratelab limiters and on a
//! limiter of one's own that issues receipts, and by peeking then counting
//! on a limiter without receipts.

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use common::{get as fetch, serve};
use http::StatusCode;
use ratelab_core::toolkit::{Issuer, Stamp};
use ratelab_core::{
    Decision, Direct, Error, Keyed, Limiter, ManualClock, Quota, RateLimiter, Receipt,
};
use ratelab_gcra::Gcra;
use ratelab_http::{Count, Policy, RateLimitLayer};

/// `limit` units per key that never come back on their own, but can be
/// given back by receipt (never above the limit): the smallest limiter of
/// one's own with receipts, issued with `ratelab_core::toolkit::Issuer`.
#[derive(Debug)]
struct Allowance {
    limit: u64,
    used: Mutex<HashMap<Vec<u8>, u64>>,
    issuer: Issuer,
}

impl Allowance {
    fn new(limit: u64) -> Self {
        Allowance {
            limit,
            used: Mutex::default(),
            issuer: Issuer::new(),
        }
    }

    fn used(&self, key: &[u8]) -> u64 {
        self.used.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    fn decision(&self, used: u64, allowed: bool) -> Decision {
        let hour = if used == 0 { 0 } else { 3_600_000_000 };
        let decision = if allowed {
            Decision::admitted(self.limit)
        } else {
            Decision::refused(self.limit).with_retry_after_micros(3_600_000_000)
        };
        decision
            .with_remaining(self.limit - used)
            .with_reset_after_micros(hour)
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
    fn bound(&self) -> ratelab_core::Bound {
        ratelab_core::Bound::rate(&self.quota())
    }
    fn refunds(&self) -> bool {
        true
    }
}

impl RateLimiter for Allowance {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.check_with_receipt(key, cost)
            .map(|(decision, _)| decision)
    }

    fn check_with_receipt(
        &self,
        key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        let cost = ratelab_core::toolkit::ensure_fits(cost, self.limit)?;
        let mut used = self.used.lock().unwrap();
        let used = used.entry(key.to_vec()).or_default();
        if *used + cost > self.limit {
            return Ok((self.decision(*used, false), None));
        }
        *used += cost;
        let receipt = (cost > 0).then(|| {
            self.issuer
                .issue(key, u32::try_from(cost).unwrap(), Stamp::default())
        });
        Ok((self.decision(*used, true), receipt))
    }

    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        let redeemed = self
            .issuer
            .redeem(receipt)
            .map_err(|_| Error::ForeignReceipt)?;
        let mut used = self.used.lock().unwrap();
        let used = used.entry(redeemed.key.to_vec()).or_default();
        // Nothing comes back on its own: what the admission took is still
        // held, all of it.
        *used = (*used + u64::from(actual)).saturating_sub(u64::from(redeemed.cost));
        Ok(self.decision(*used, true))
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
async fn failures_only_by_receipt_on_a_limiter_of_ones_own() {
    let allowance = Arc::new(Allowance::new(3));
    let layer = RateLimitLayer::builder()
        .policy(Policy::shared("login", allowance.clone()).count(Count::Failures))
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let key = b"login:ip:127.0.0.1";

    // Successes are given back: any number pass, and each response shows
    // the key as the refund left it.
    for _ in 0..10 {
        let ok = fetch(addr, "/ok").await;
        assert_eq!(ok.status, 200);
        assert_eq!(ok.header("ratelimit"), r#""login";r=3;t=0"#);
    }
    assert_eq!(allowance.used(key), 0);
    // Failures count: 3, then refused.
    assert_eq!(statuses(addr, "/fail", 4).await, [401, 401, 401, 429]);
    assert_eq!(allowance.used(key), 3);
    // Once over, successes are refused too (the check comes first).
    assert_eq!(fetch(addr, "/ok").await.status, 429);
}

#[tokio::test]
async fn successes_only_by_receipt() {
    let allowance = Arc::new(Allowance::new(2));
    let layer = RateLimitLayer::builder()
        .policy(Policy::shared("api", allowance.clone()).count(Count::Successes))
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    assert_eq!(statuses(addr, "/fail", 5).await, [401; 5]);
    assert_eq!(statuses(addr, "/ok", 3).await, [200, 200, 429]);
    assert_eq!(allowance.used(b"api:ip:127.0.0.1"), 2);
}

/// A limiter that checks and peeks through `L` but issues no receipts.
struct NoReceipts<L>(L);

impl<L: RateLimiter> Limiter for NoReceipts<L> {
    fn quota(&self) -> Quota {
        self.0.quota()
    }
    fn algorithm_name(&self) -> &'static str {
        self.0.algorithm_name()
    }
    fn backend(&self) -> &'static str {
        self.0.backend()
    }
    fn bound(&self) -> ratelab_core::Bound {
        self.0.bound()
    }
}

impl<L: RateLimiter> RateLimiter for NoReceipts<L> {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.0.check(key, cost)
    }
    fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.0.peek(key, cost)
    }
}

#[tokio::test]
async fn failures_only_without_receipts_peeks_then_counts() {
    let clock = ManualClock::new();
    let limiter = Arc::new(Keyed::with_clock(
        Gcra::new(Quota::per_hour(3).unwrap()),
        clock.clone(),
    ));
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("login", NoReceipts(limiter.clone())).count(Count::Failures))
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

/// With receipts, failures are consumed before the request runs, so twenty
/// failures at once (each answered 50 ms later) pass no more than the
/// quota's three, and the successes before them were given back in full.
/// (Without receipts, all twenty would have passed the same peek.)
#[tokio::test]
async fn failures_at_once_keep_the_quota() {
    let limiter = Arc::new(Keyed::new(Gcra::new(Quota::per_hour(3).unwrap())));
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

/// Three failures an hour on the in-memory keyed limiter and the single
/// bucket, as they are: successes are given back in full (a receipt leaves
/// no margin), failures count.
#[tokio::test]
async fn memory_limiters_count_failures_by_receipt() {
    let quota = Quota::per_hour(3).unwrap();
    for policy in [
        Policy::new("login", Keyed::new(Gcra::new(quota))),
        Policy::new("login", Direct::new(Gcra::new(quota))),
    ] {
        let layer = RateLimitLayer::builder()
            .policy(policy.count(Count::Failures))
            .build()
            .unwrap();
        let addr = serve(app(layer)).await;
        let mut all = statuses(addr, "/ok", 4).await;
        all.extend(statuses(addr, "/fail", 4).await);
        assert_eq!(all, [200, 200, 200, 200, 401, 401, 401, 429]);
    }
}

/// A success that straddles a window's end gets nothing back: its unit was
/// the old window's, and giving it to the new one would let a fourth failure
/// count there. The limiter sees from the receipt which window the unit was
/// taken in. On a clock the test moves: the success is checked in one
/// window, answers in the next, whatever the machine's speed.
#[tokio::test]
async fn a_slow_success_across_a_window_end_gives_the_new_window_nothing() {
    use ratelab_core::Clock;
    use ratelab_fixed_window::FixedWindow;
    use tokio::sync::{Notify, mpsc};

    const WINDOW: u64 = 2_000_000;
    let quota = Quota::new(3, Duration::from_micros(WINDOW)).unwrap();
    // In the second half of a window.
    let clock = ManualClock::starting_at(1_000 * WINDOW + WINDOW * 3 / 4);
    let limiter = Keyed::with_clock(FixedWindow::new(quota), clock.clone());
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("login", limiter).count(Count::Failures))
        .build()
        .unwrap();
    // `/slow` says when it runs (its check made), and succeeds when let.
    let (running, mut runs) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let let_go = release.clone();
    let app = Router::new()
        .route(
            "/slow",
            get(move || {
                let (running, let_go) = (running.clone(), let_go.clone());
                async move {
                    running.send(()).unwrap();
                    let_go.notified().await;
                    StatusCode::OK
                }
            }),
        )
        .route("/fail", get(|| async { StatusCode::UNAUTHORIZED }))
        .layer(layer);
    let addr = serve(app).await;

    let slow = tokio::spawn(async move { fetch(addr, "/slow").await.status });
    runs.recv().await.expect("/slow runs");
    // The next window, 100 ms old: the success is still running.
    let next = (clock.now_micros() / WINDOW + 1) * WINDOW;
    clock.set(next + 100_000);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(fetch(addr, "/fail").await.status);
    }
    assert_eq!(statuses, [401, 401, 401, 429]);
    // It succeeds 400 ms into the window: its refund goes nowhere.
    clock.set(next + 400_000);
    release.notify_one();
    assert_eq!(slow.await.unwrap(), 200);
    assert_eq!(fetch(addr, "/fail").await.status, 429);
}
