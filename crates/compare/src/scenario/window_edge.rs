//! The window edge: at 10 per second, 10 requests at 0.95 s and 10 at
//! 1.05 s. A fixed window resets between them and admits all 20 within
//! 0.11 s; the others keep their own bound. Same instants on every algorithm
//! and backend (the Redis scripts get `now` from the same manual clock).
//! Then the same edge through `ratelab-server` over gRPC, on the real clock
//! ([`server`]).

pub mod report;
pub mod server;

use ratelab::{AlgorithmKind, ManualClock, Quota};
use ratelab_testkit::oracle::Oracle;
use serde::Serialize;

use super::ScenarioName;
use crate::atomic::{self, Time};
use crate::{CompareError, Context};

/// The two instants, µs.
pub const INSTANTS: [u64; 2] = [950_000, 1_050_000];
/// Requests at each instant.
pub const PER_INSTANT: usize = 10;

/// The quota: 10 per second.
pub fn quota() -> Quota {
    Quota::per_second(10).expect("a valid quota")
}

/// One algorithm on one backend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The algorithm.
    pub algorithm: String,
    /// `memory` or `redis`.
    pub backend: String,
    /// Admitted at 0.95 s.
    pub first: usize,
    /// Admitted at 1.05 s.
    pub second: usize,
    /// Admitted within the 0.1 s between them.
    pub total: usize,
    /// What the algorithm's own bound allows within 0.1 s.
    pub own_bound: u64,
}

/// The scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct WindowEdge {
    /// The limit per second.
    pub limit: u32,
    /// One row per algorithm and backend.
    pub rows: Vec<Row>,
    /// Fixed window and GCRA through `ratelab-server`, on the real clock
    /// (not deterministic: left out of [`crate::Results::deterministic_json`]).
    pub server_rows: Vec<server::ServerRow>,
}

fn row(kind: AlgorithmKind, backend: &str, counts: [usize; 2], quota: Quota) -> Row {
    let span = INSTANTS[1] - INSTANTS[0];
    Row {
        algorithm: kind.name().into(),
        backend: backend.into(),
        first: counts[0],
        second: counts[1],
        total: counts[0] + counts[1],
        own_bound: kind.bound(quota).allowed_within(span).unwrap_or(u64::MAX),
    }
}

/// Runs the scenario.
pub async fn run(ctx: &Context<'_>) -> Result<WindowEdge, CompareError> {
    let quota = quota();
    let redis = ctx.atomic_or_skip(ScenarioName::WindowEdge, "the Redis rows");
    let backends = 1 + usize::from(redis.is_some());
    ctx.bar
        .set_length(((AlgorithmKind::ALL.len() + 1) * backends) as u64);
    let mut rows = Vec::new();
    for kind in AlgorithmKind::ALL {
        let name = kind.name();
        let clock = ManualClock::new();
        let limiter = kind.keyed(quota, clock.clone());
        let mut counts = [0; 2];
        for (count, at) in counts.iter_mut().zip(INSTANTS) {
            clock.set(at);
            for _ in 0..PER_INSTANT {
                *count += usize::from(limiter.check(b"edge", 1)?.allowed);
            }
        }
        rows.push(row(kind, "memory", counts, quota));
        ctx.tick();
        if let Some(redis) = redis {
            let clock = ManualClock::new();
            let limiter = atomic::limiter(redis, kind, quota, &Time::Manual(clock.clone())).await?;
            let key = format!("{}:window-edge:{name}", ctx.nonce);
            let mut counts = [0; 2];
            for (count, at) in counts.iter_mut().zip(INSTANTS) {
                clock.set(at);
                for _ in 0..PER_INSTANT {
                    *count += usize::from(limiter.check_async(key.as_bytes(), 1).await?.allowed);
                }
            }
            rows.push(row(kind, "redis", counts, quota));
            ctx.tick();
        }
    }
    let server_rows = server::run(ctx, quota, redis).await?;
    Ok(WindowEdge {
        limit: quota.limit(),
        rows,
        server_rows,
    })
}
