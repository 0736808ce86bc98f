//! Several policies on one request are all or nothing, under concurrency,
//! through a real server: requests sent all at once over several policies
//! (each its own algorithm, key, cost and quota, one of them maybe without
//! receipts, one maybe failing closed), against an oracle of what each
//! policy kept. The clock is frozen, so nothing comes back during a run and
//! the oracle is exact:
//!
//! - every policy's key holds exactly what the requests that passed cost it
//!   (a refused or unavailable request leaves every policy as if it never
//!   came: whatever one policy took for it was given back);
//! - that never exceeds the policy's quota.

use crate::common;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use common::{localhost, send, serve};
use proptest::prelude::*;
use ratelab_core::{
    AsyncRateLimiter, CheckFuture, Decision, Error, Keyed, Limiter, ManualClock, Quota, RateLimiter,
};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_http::{Policy, RateLimitLayer};
use ratelab_leaky_bucket::LeakyMeter;
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_token_bucket::TokenBucket;

/// One policy of a run.
#[derive(Debug, Clone)]
struct Spec {
    algorithm: usize,
    burst: u32,
    cost: u32,
    /// Keyed by client (else one key for everyone).
    per_client: bool,
    /// On a limiter without receipts (peeked, then charged last).
    without_receipts: bool,
}

/// One request of a run.
#[derive(Debug, Clone)]
struct Request {
    client: u8,
    /// Also under the policy whose limiter is down (fail closed).
    down: bool,
}

fn limiter(algorithm: usize, quota: Quota, clock: &ManualClock) -> Arc<dyn RateLimiter> {
    let clock = clock.clone();
    match algorithm {
        0 => Arc::new(Keyed::with_clock(Gcra::new(quota), clock)),
        1 => Arc::new(Keyed::with_clock(TokenBucket::new(quota), clock)),
        2 => Arc::new(Keyed::with_clock(FixedWindow::new(quota), clock)),
        3 => Arc::new(Keyed::with_clock(SlidingLog::new(quota), clock)),
        4 => Arc::new(Keyed::with_clock(SlidingCounter::new(quota), clock)),
        _ => Arc::new(Keyed::with_clock(LeakyMeter::new(quota), clock)),
    }
}

/// `L`, issuing no receipts.
struct NoReceipts(Arc<dyn RateLimiter>);

impl Limiter for NoReceipts {
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

impl RateLimiter for NoReceipts {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.0.check(key, cost)
    }
}

/// A limiter whose backend is down.
struct Down;

impl Limiter for Down {
    fn quota(&self) -> Quota {
        Quota::per_hour(100).unwrap()
    }
    fn algorithm_name(&self) -> &'static str {
        "gcra"
    }
    fn backend(&self) -> &'static str {
        "down"
    }
    fn bound(&self) -> ratelab_core::Bound {
        ratelab_core::Bound::rate(&self.quota())
    }
    fn refunds(&self) -> bool {
        true
    }
}

impl AsyncRateLimiter for Down {
    fn check_async<'a>(&'a self, _: &'a [u8], _: u32) -> CheckFuture<'a> {
        Box::pin(std::future::ready(Err(Error::backend(
            "connection refused",
        ))))
    }
    fn check_with_receipt_async<'a>(
        &'a self,
        _: &'a [u8],
        _: u32,
    ) -> ratelab_core::ReceiptFuture<'a> {
        Box::pin(std::future::ready(Err(Error::backend(
            "connection refused",
        ))))
    }
}

fn key_of(spec: &Spec, client: u8) -> String {
    if spec.per_client {
        format!("client-{client}")
    } else {
        "everyone".to_owned()
    }
}

/// Sends `requests` all at once through a layer with `specs`, and checks
/// the oracle.
async fn run(specs: Vec<Spec>, requests: Vec<Request>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let limiters: Vec<Arc<dyn RateLimiter>> = specs
        .iter()
        .map(|s| limiter(s.algorithm, Quota::per_hour(s.burst).unwrap(), &clock))
        .collect();
    let mut builder = RateLimitLayer::builder();
    for (i, (spec, limiter)) in specs.iter().zip(&limiters).enumerate() {
        let per_client = spec.per_client;
        let policy = if spec.without_receipts {
            Policy::new(format!("p{i}"), NoReceipts(limiter.clone()))
        } else {
            Policy::new(format!("p{i}"), limiter.clone())
        };
        builder = builder.policy(policy.cost(spec.cost).key(move |request, _| {
            let client = request.headers.get("x-client")?.to_str().ok()?;
            Some(if per_client {
                format!("client-{client}")
            } else {
                "everyone".to_owned()
            })
        }));
    }
    let layer = builder
        .policy(
            Policy::new("down", Down)
                .when(|request, _| request.headers.contains_key("x-down"))
                .fail_closed(),
        )
        .build()
        .unwrap();
    let addr = serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await;

    let replies = futures::future::join_all(requests.iter().cloned().map(|request| {
        tokio::spawn(async move {
            let client = request.client.to_string();
            let mut headers: Vec<(&str, &[u8])> = vec![("x-client", client.as_bytes())];
            if request.down {
                headers.push(("x-down", b"1"));
            }
            send(addr, localhost(), "GET", "/", &headers).await.status
        })
    }))
    .await;

    // What each policy's key should hold: the cost of every request that
    // passed under it, nothing of the others.
    let mut kept = std::collections::HashMap::<(usize, String), u64>::new();
    for (request, reply) in requests.iter().zip(replies) {
        let status = reply.unwrap();
        prop_assert!(matches!(status, 200 | 429 | 503), "{status}");
        prop_assert!(
            !(request.down && status == 200),
            "the down policy fails closed"
        );
        if status == 200 {
            for (i, spec) in specs.iter().enumerate() {
                *kept.entry((i, key_of(spec, request.client))).or_default() += u64::from(spec.cost);
            }
        }
    }
    for (i, (spec, limiter)) in specs.iter().zip(&limiters).enumerate() {
        for client in 0..3 {
            let key = key_of(spec, client);
            let held = kept.get(&(i, key.clone())).copied().unwrap_or(0);
            prop_assert!(
                held <= u64::from(spec.burst),
                "policy {i} ({spec:?}) kept {held} for {key}"
            );
            let remaining = limiter
                .check(format!("p{i}:{key}").as_bytes(), 0)
                .unwrap()
                .remaining;
            prop_assert_eq!(
                remaining,
                u64::from(spec.burst) - held,
                "policy {} ({:?}) under {}: refused requests left units behind",
                i,
                spec,
                key
            );
        }
    }
    Ok(())
}

fn spec() -> impl Strategy<Value = Spec> {
    (0..6usize, 1..=6u32, 1..=3u32, any::<bool>()).prop_map(
        |(algorithm, burst, cost, per_client)| Spec {
            algorithm,
            burst,
            cost,
            per_client,
            without_receipts: false,
        },
    )
}

fn request() -> impl Strategy<Value = Request> {
    (0..3u8, prop::bool::weighted(0.15)).prop_map(|(client, down)| Request { client, down })
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: Some(ratelab_testkit::props::regressions()),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_refused_request_leaves_every_policy_as_if_it_never_came(
        mut specs in prop::collection::vec(spec(), 2..=4),
        // One policy on a limiter without receipts, maybe: it is charged
        // only once every other admitted.
        plain in prop::option::of(0..4usize),
        requests in prop::collection::vec(request(), 10..=40),
    ) {
        if let Some(plain) = plain
            && let Some(spec) = specs.get_mut(plain)
        {
            spec.without_receipts = true;
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(run(specs, requests))?;
    }
}
