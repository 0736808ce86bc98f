//! The race: 20 simultaneous requests for a limit of 10 on a real Redis,
//! from 20 app instances (one connection each). Each algorithm's atomic
//! script against a read-then-write version of the same algorithm (GET,
//! decide in the client, SET: [`crate::flawed::ReadThenWrite`]). Time is
//! frozen (the clients pass `now`), so the interleaving of the requests is
//! the only thing that varies; repeated, with the spread.

pub mod report;

use std::sync::Arc;

use ratelab::{AlgorithmKind, AsyncRateLimiter, ManualClock, Quota};
use serde::Serialize;

use super::{ScenarioName, admitted, release_together};

use crate::atomic::{self, Time};
use crate::flawed;
use crate::stats::Spread;
use crate::{CompareError, Context};

/// Simultaneous requests.
pub const REQUESTS: usize = 20;
/// The frozen instant, µs: inside a window, far from its edges.
const FROZEN_AT: u64 = 1_000_500_000;

/// The quota: 10 per second.
pub fn quota() -> Quota {
    Quota::per_second(10).expect("a valid quota")
}

/// One algorithm.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The algorithm.
    pub algorithm: String,
    /// Admitted per repeat by the atomic script, if it ran.
    pub atomic: Option<Spread>,
    /// Admitted per repeat by read-then-write.
    pub read_then_write: Spread,
    /// Every repeat's count, read-then-write.
    pub read_then_write_runs: Vec<usize>,
}

/// The scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct Concurrency {
    /// The limit.
    pub limit: u32,
    /// Simultaneous requests per repeat.
    pub requests: usize,
    /// Repeats per variant.
    pub repeats: usize,
    /// One row per algorithm.
    pub rows: Vec<Row>,
}

/// Runs the scenario; `None` without Redis.
pub async fn run(ctx: &Context<'_>) -> Result<Option<Concurrency>, CompareError> {
    let Some(redis) = ctx.redis_or_skip(
        ScenarioName::Concurrency,
        "the whole scenario (it needs a real Redis)",
    ) else {
        return Ok(None);
    };
    let atomic_ok = ctx
        .atomic_or_skip(ScenarioName::Concurrency, "the atomic-script rows")
        .is_some();
    let quota = quota();
    let repeats = ctx.config.repeats.max(1);
    ctx.bar.set_length(AlgorithmKind::ALL.len() as u64);
    let clock = ManualClock::starting_at(FROZEN_AT);
    let mut rows = Vec::new();
    for kind in AlgorithmKind::ALL {
        let name = kind.name();
        let mut racy: Vec<Arc<dyn AsyncRateLimiter>> = Vec::with_capacity(REQUESTS);
        for _ in 0..REQUESTS {
            racy.push(Arc::from(flawed::read_then_write(
                kind,
                quota,
                redis.connection().await?,
                clock.clone(),
                format!("{}:race:", ctx.nonce),
            )));
        }
        let mut atomic: Vec<Arc<dyn AsyncRateLimiter>> = Vec::new();
        if atomic_ok {
            for _ in 0..REQUESTS {
                atomic.push(Arc::from(
                    atomic::limiter(redis, kind, quota, &Time::Manual(clock.clone())).await?,
                ));
            }
        }
        let (mut racy_counts, mut atomic_counts) = (Vec::new(), Vec::new());
        for repeat in 0..repeats {
            let key = format!("{name}:{repeat}");
            racy_counts.push(admitted(&release_together(&racy, REQUESTS, &key).await?));
            if atomic_ok {
                let key = format!("{}:race-atomic:{name}:{repeat}", ctx.nonce);
                atomic_counts.push(admitted(&release_together(&atomic, REQUESTS, &key).await?));
            }
        }
        rows.push(Row {
            algorithm: name.into(),
            atomic: atomic_ok.then(|| Spread::of_counts(&atomic_counts)),
            read_then_write: Spread::of_counts(&racy_counts),
            read_then_write_runs: racy_counts,
        });
        ctx.tick();
    }
    Ok(Some(Concurrency {
        limit: quota.burst(),
        requests: REQUESTS,
        repeats,
        rows,
    }))
}
