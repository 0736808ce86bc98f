//! Settling from the response, through real HTTP on a frozen clock: a
//! request reserves its cost and is settled with what its response says it
//! used. Less gives back, more charges debt that the next requests wait out.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::RawQuery;
use axum::routing::get;
use common::{get as fetch, serve};
use http::{HeaderMap, HeaderName, StatusCode};
use proptest::prelude::*;
use ratelab_core::{Decision, Error, Keyed, Limiter, ManualClock, Quota, RateLimiter};
use ratelab_gcra::Gcra;
use ratelab_http::{ConfigError, Count, Policy, RateLimitLayer};

const USED: HeaderName = HeaderName::from_static("x-used");

fn param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

/// `GET /work?reserve=N&used=M&status=S`: reserves N under `policy`
/// (settled from `x-used` unless `settle` is false), answers S (200 by
/// default) with `x-used: M` when M is given (as it is: garbage too).
async fn server(policy: Policy, settle: bool) -> std::net::SocketAddr {
    let policy = policy.cost_with(|request, _| {
        param(request.uri.query().unwrap_or(""), "reserve").map_or(1, |n| n.parse().unwrap())
    });
    let policy = if settle {
        policy.settle_from_header(USED)
    } else {
        policy
    };
    let layer = RateLimitLayer::builder().policy(policy).build().unwrap();
    let app = Router::new()
        .route(
            "/work",
            get(|RawQuery(query): RawQuery| async move {
                let query = query.unwrap_or_default();
                let mut headers = HeaderMap::new();
                if let Some(used) = param(&query, "used") {
                    headers.insert(USED, used.parse().unwrap());
                }
                let status = param(&query, "status").map_or(200, |s| s.parse().unwrap());
                (StatusCode::from_u16(status).unwrap(), headers)
            }),
        )
        .layer(layer);
    serve(app).await
}

fn tokens(clock: &ManualClock) -> Arc<Keyed<Gcra, ManualClock>> {
    // 100 an hour: nothing comes back unless the clock is moved.
    Arc::new(Keyed::with_clock(
        Gcra::new(Quota::per_hour(100).unwrap()),
        clock.clone(),
    ))
}

/// Requests that each reserve 50 and use 10, until one is refused: how many
/// passed.
async fn until_refused(addr: std::net::SocketAddr) -> u64 {
    let mut passed = 0;
    while fetch(addr, "/work?reserve=50&used=10").await.status == 200 {
        passed += 1;
        assert!(passed < 100, "never refused");
    }
    passed
}

#[tokio::test]
async fn using_less_than_reserved_passes_more_within_the_quota_in_used_units() {
    let clock = ManualClock::new();
    let settled = tokens(&clock);
    let addr = server(Policy::shared("tokens", settled.clone()), true).await;
    // Each keeps 10: the sixth fits (50 + 50), the seventh does not.
    assert_eq!(until_refused(addr).await, 6);
    let left = settled.peek(b"tokens:ip:127.0.0.1", 0).unwrap().remaining;
    assert_eq!(left, 40, "60 used of 100");

    let reserved = tokens(&clock);
    let addr = server(Policy::shared("tokens", reserved.clone()), false).await;
    assert_eq!(until_refused(addr).await, 2, "reservations alone");
}

#[tokio::test]
async fn the_response_fields_show_the_key_as_settled() {
    let clock = ManualClock::new();
    let addr = server(Policy::shared("tokens", tokens(&clock)), true).await;
    let reply = fetch(addr, "/work?reserve=50&used=10").await;
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=90;t=36"#);
}

#[tokio::test]
async fn using_more_than_reserved_is_debt_waited_out() {
    let clock = ManualClock::new();
    let addr = server(Policy::shared("tokens", tokens(&clock)), true).await;
    let first = fetch(addr, "/work?reserve=10&used=70").await;
    assert_eq!((first.status, first.remaining("tokens")), (200, Some(30)));
    let second = fetch(addr, "/work?reserve=10&used=70").await;
    // 140 held, beyond the quota: the debt a settlement may charge.
    assert_eq!((second.status, second.remaining("tokens")), (200, Some(0)));
    let refused = fetch(addr, "/work?reserve=10&used=70").await;
    assert_eq!(refused.status, 429);
    // 10 fit once 140 + 10 - 100 = 50 units are back: 50 × 36 s.
    assert_eq!(refused.header("retry-after"), "1800");
    clock.advance(Duration::from_secs(1799));
    assert_eq!(fetch(addr, "/work?reserve=10&used=10").await.status, 429);
    clock.advance(Duration::from_secs(1));
    assert_eq!(fetch(addr, "/work?reserve=10&used=10").await.status, 200);
}

#[tokio::test]
async fn a_response_that_does_not_say_keeps_the_charge() {
    let clock = ManualClock::new();
    let addr = server(Policy::shared("tokens", tokens(&clock)), true).await;
    for path in [
        "/work?reserve=10",
        "/work?reserve=10&used=ten",
        "/work?reserve=10&used=-5",
        "/work?reserve=10&used=99999999999",
    ] {
        let reply = fetch(addr, path).await;
        assert_eq!(reply.status, 200, "{path}");
    }
    let reply = fetch(addr, "/work?reserve=10&used=10").await;
    assert_eq!(reply.remaining("tokens"), Some(50), "{reply:?}");
}

#[tokio::test]
async fn more_than_the_burst_is_charged_as_the_burst() {
    let clock = ManualClock::new();
    let addr = server(Policy::shared("tokens", tokens(&clock)), true).await;
    let reply = fetch(addr, "/work?reserve=10&used=4000000000").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.remaining("tokens"), Some(0));
    let refused = fetch(addr, "/work?reserve=1&used=1").await;
    // 100 held: one unit back after 36 s.
    assert_eq!(refused.header("retry-after"), "36");
}

#[tokio::test]
async fn counting_failures_refunds_successes_and_settles_failures() {
    let clock = ManualClock::new();
    let policy = Policy::shared("tokens", tokens(&clock)).count(Count::Failures);
    let addr = server(policy, true).await;
    let ok = fetch(addr, "/work?reserve=50&used=30").await;
    assert_eq!((ok.status, ok.remaining("tokens")), (200, Some(100)));
    let failed = fetch(addr, "/work?reserve=50&used=30&status=500").await;
    assert_eq!((failed.status, failed.remaining("tokens")), (500, Some(70)));
}

/// A limiter without receipts.
struct NoReceipts(Keyed<Gcra>);

impl Limiter for NoReceipts {
    fn quota(&self) -> Quota {
        self.0.quota()
    }
    fn algorithm_name(&self) -> &'static str {
        "gcra"
    }
    fn backend(&self) -> &'static str {
        "memory"
    }
    fn bound(&self) -> ratelab_core::Bound {
        self.0.bound()
    }
}

impl RateLimiter for NoReceipts {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.0.check(key, cost)
    }
}

#[test]
fn settling_needs_a_limiter_with_receipts() {
    let limiter = NoReceipts(Keyed::new(Gcra::new(Quota::per_hour(10).unwrap())));
    let error = RateLimitLayer::builder()
        .policy(Policy::new("tokens", limiter).settle_from_header(USED))
        .build()
        .unwrap_err();
    assert_eq!(error, ConfigError::CannotSettle("tokens".into()));
    assert!(error.to_string().contains("issues no receipts"), "{error}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Whatever each request reserves and then uses (never more), the units
    /// used by the requests that passed stay within the quota, and the key
    /// holds exactly them.
    #[test]
    fn used_units_stay_within_the_quota(
        requests in prop::collection::vec((1..=100u32, 0..=100u32), 1..30),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let clock = ManualClock::new();
            let limiter = tokens(&clock);
            let addr = server(Policy::shared("tokens", limiter.clone()), true).await;
            let mut used = 0;
            for (reserve, actual) in requests {
                let actual = actual.min(reserve);
                let path = format!("/work?reserve={reserve}&used={actual}");
                if fetch(addr, &path).await.status == 200 {
                    used += u64::from(actual);
                }
            }
            prop_assert!(used <= 100);
            let left = limiter.peek(b"tokens:ip:127.0.0.1", 0).unwrap().remaining;
            prop_assert_eq!(left, 100 - used);
            Ok(())
        })?;
    }
}
