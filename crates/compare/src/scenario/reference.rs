//! The reference article's result table: capacity 10, refilled 5 per
//! second; a burst of 20 simultaneous requests; one second later, 10 more;
//! the wait a refusal indicates, in whole seconds (`Retry-After`).
//!
//! The table rows run on a clock moved by hand (the Redis rows pass `now` to
//! the script), starting at a window boundary, so that every row is
//! deterministic and memory and Redis decide at the same instants. Two more
//! rows run the token bucket as the article did, on a real clock with a real
//! one-second wait (Redis `TIME` for Redis).

pub mod report;

use std::sync::Arc;
use std::time::Duration;

use ratelab::{AlgorithmKind, AsyncRateLimiter, Decision, ManualClock, Quota, SystemClock};
use serde::Serialize;

use super::{ScenarioName, admitted, release_together};
use crate::algorithms;
use crate::atomic::{self, Time};
use crate::{CompareError, Context};

/// Requests in the burst.
pub const BURST: usize = 20;
/// Requests one second later.
pub const LATER: usize = 10;
/// Where the manual clock starts: a multiple of every window (2 s here).
const START_MICROS: u64 = 10_000_000;

/// The article's quota: capacity 10, 5 per second.
pub fn quota() -> Quota {
    Quota::per_second(5)
        .and_then(|q| q.with_burst(10))
        .expect("a valid quota")
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The algorithm.
    pub algorithm: String,
    /// `memory` or `redis`.
    pub backend: String,
    /// The clock it decided on.
    pub clock: String,
    /// Of the burst of 20, how many passed.
    pub burst_admitted: usize,
    /// Of the 10 one second later, how many passed.
    pub later_admitted: usize,
    /// The wait the burst's refusals indicated, whole seconds (the largest).
    pub burst_wait_secs: Option<u64>,
    /// The wait the later refusals indicated, whole seconds (the largest).
    pub later_wait_secs: Option<u64>,
    /// The exact wait of the burst's refusals, ms (the smallest).
    pub burst_retry_ms: Option<f64>,
}

impl Row {
    /// "1 s", or "2 s, then 1 s" when the two rounds differ.
    pub fn wait_text(&self) -> String {
        let secs = |w: Option<u64>| w.map_or("none refused".to_owned(), |w| format!("{w} s"));
        if self.burst_wait_secs == self.later_wait_secs {
            secs(self.burst_wait_secs)
        } else {
            format!(
                "{}, then {}",
                secs(self.burst_wait_secs),
                secs(self.later_wait_secs)
            )
        }
    }
}

/// The table.
#[derive(Debug, Clone, Serialize)]
pub struct Reference {
    /// The quota, as text.
    pub quota: String,
    /// One row per algorithm and backend, on the manual clock.
    pub rows: Vec<Row>,
    /// The token bucket as the article ran it: real clock, real wait.
    pub real_time_rows: Vec<Row>,
}

fn row(name: &str, backend: &str, clock: &str, burst: &[Decision], later: &[Decision]) -> Row {
    let wait = |ds: &[Decision]| {
        ds.iter()
            .filter(|d| !d.allowed)
            .map(Decision::retry_after_secs)
            .max()
    };
    Row {
        algorithm: name.into(),
        backend: backend.into(),
        clock: clock.into(),
        burst_admitted: admitted(burst),
        later_admitted: admitted(later),
        burst_wait_secs: wait(burst),
        later_wait_secs: wait(later),
        burst_retry_ms: burst
            .iter()
            .filter(|d| !d.allowed)
            .map(|d| d.retry_after.as_secs_f64() * 1e3)
            .min_by(f64::total_cmp),
    }
}

/// The burst, the wait, the second round, on `limiter`.
async fn rounds(
    limiter: Arc<dyn AsyncRateLimiter>,
    key: &str,
    wait: impl AsyncFnOnce(),
) -> Result<(Vec<Decision>, Vec<Decision>), CompareError> {
    let limiters = [limiter];
    let burst = release_together(&limiters, BURST, key).await?;
    wait().await;
    let later = release_together(&limiters, LATER, key).await?;
    Ok((burst, later))
}

/// Runs the table.
pub async fn run(ctx: &Context<'_>) -> Result<Reference, CompareError> {
    let quota = quota();
    let redis = ctx.atomic_or_skip(ScenarioName::Reference, "the Redis rows");
    ctx.bar
        .set_length((AlgorithmKind::ALL.len() * (1 + usize::from(redis.is_some())) + 2) as u64);
    let mut rows = Vec::new();
    for kind in AlgorithmKind::ALL {
        let name = kind.name();
        let clock = ManualClock::starting_at(START_MICROS);
        let limiter = algorithms::keyed_shared(kind, quota, clock.clone());
        let (burst, later) = rounds(limiter, "client", async || {
            clock.advance(Duration::from_secs(1));
        })
        .await?;
        rows.push(row(name, "memory", "manual", &burst, &later));
        ctx.tick();
        if let Some(redis) = redis {
            let clock = ManualClock::starting_at(START_MICROS);
            let limiter: Arc<dyn AsyncRateLimiter> =
                Arc::from(atomic::limiter(redis, kind, quota, &Time::Manual(clock.clone())).await?);
            let key = format!("{}:reference:{name}", ctx.nonce);
            let (burst, later) = rounds(limiter, &key, async || {
                clock.advance(Duration::from_secs(1));
            })
            .await?;
            rows.push(row(name, "redis", "manual", &burst, &later));
            ctx.tick();
        }
    }

    // As the article ran it: the token bucket on a real clock, a real wait.
    let mut real_time_rows = Vec::new();
    let sleep = async || tokio::time::sleep(Duration::from_secs(1)).await;
    let memory = algorithms::keyed_shared(AlgorithmKind::TokenBucket, quota, SystemClock);
    let memory_run = rounds(memory, "client", sleep);
    if let Some(redis) = redis {
        let limiter: Arc<dyn AsyncRateLimiter> = Arc::from(
            atomic::limiter(redis, AlgorithmKind::TokenBucket, quota, &Time::Redis).await?,
        );
        let key = format!("{}:reference-real:token-bucket", ctx.nonce);
        let (m, r) = tokio::join!(memory_run, rounds(limiter, &key, sleep));
        let (burst, later) = m?;
        real_time_rows.push(row(
            "token-bucket",
            "memory",
            "system clock",
            &burst,
            &later,
        ));
        let (burst, later) = r?;
        real_time_rows.push(row("token-bucket", "redis", "Redis TIME", &burst, &later));
    } else {
        let (burst, later) = memory_run.await?;
        real_time_rows.push(row(
            "token-bucket",
            "memory",
            "system clock",
            &burst,
            &later,
        ));
    }
    ctx.bar.inc(2);
    Ok(Reference {
        quota: format!("capacity {}, {} per second", quota.burst(), quota.limit()),
        rows,
        real_time_rows,
    })
}
