//! Many requests at once through a real server on a multi-threaded runtime:
//! however they interleave, a policy admits no more than its quota, whether
//! its limiter answers at once (decided in `Service::call`, no future) or
//! the engine asks several policies in turn. The clock is frozen, so nothing
//! comes back during a burst and the bound is exact.

use crate::common;

use std::net::IpAddr;

use axum::Router;
use axum::routing::get;
use common::{localhost, other_peer, send, serve};
use ratelab_core::{Direct, Keyed, ManualClock, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{Policy, RateLimitLayer};
use ratelab_token_bucket::TokenBucket;

/// Requests in one burst, all in flight at once.
const BURST: usize = 240;

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer)
}

/// Sends [`BURST`] requests at once, from `peers` in turn, and counts the
/// statuses: for each peer, (200s, 429s).
async fn burst(app: Router, peers: &[IpAddr]) -> Vec<(usize, usize)> {
    let addr = serve(app).await;
    let replies = futures::future::join_all((0..BURST).map(|i| {
        let peer = i % peers.len();
        let from = peers[peer];
        tokio::spawn(async move { (peer, send(addr, from, "GET", "/", &[]).await) })
    }))
    .await;
    let mut counts = vec![(0, 0); peers.len()];
    for reply in replies {
        let (peer, reply) = reply.unwrap();
        match reply.status {
            200 => counts[peer].0 += 1,
            429 => counts[peer].1 += 1,
            other => panic!("only 200 and 429, not {other}: {reply:?}"),
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_policy_decided_at_once_admits_exactly_its_quota() {
    let clock = ManualClock::new();
    let quota = Quota::per_hour(50).unwrap();
    // A keyed and a single-bucket limiter, GCRA and the token bucket: each
    // answers at once, on its own lock or compare-and-swap.
    let policies = [
        Policy::new("gcra", Keyed::with_clock(Gcra::new(quota), clock.clone())),
        Policy::new(
            "bucket",
            Keyed::with_clock(TokenBucket::new(quota), clock.clone()),
        ),
        Policy::new(
            "direct",
            Direct::with_clock(Gcra::new(quota), clock.clone()),
        ),
    ];
    for policy in policies {
        let layer = RateLimitLayer::builder().policy(policy).build().unwrap();
        assert_eq!(burst(app(layer), &[localhost()]).await, [(50, BURST - 50)]);
    }
}

/// A layer of two policies: each client `per_client` an hour, all of them
/// together `everyone`.
fn two_policies(clock: &ManualClock, per_client: u32, everyone: u32) -> RateLimitLayer {
    let gcra = |n| Gcra::new(Quota::per_hour(n).unwrap());
    RateLimitLayer::builder()
        .policy(Policy::new(
            "client",
            Keyed::with_clock(gcra(per_client), clock.clone()),
        ))
        .policy(Policy::new(
            "everyone",
            Direct::with_clock(gcra(everyone), clock.clone()),
        ))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_policies_each_hold_their_quota() {
    let clock = ManualClock::new();
    let peers = [localhost(), other_peer()];
    let half = BURST / 2;
    // The global quota binds: 100 between the two clients, whatever the
    // split (each sends 120, under its own 150).
    let counts = burst(app(two_policies(&clock, 150, 100)), &peers).await;
    assert_eq!(counts[0].0 + counts[1].0, 100, "{counts:?}");
    // Each client's quota binds: 50 each, under the global 1,000.
    assert_eq!(
        burst(app(two_policies(&clock, 50, 1_000)), &peers).await,
        [(50, half - 50), (50, half - 50)]
    );
}
