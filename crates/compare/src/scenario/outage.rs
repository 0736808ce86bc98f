//! A Redis stall, on a real server: the latency of every check before,
//! during and after it, with the circuit breaker and without, and when the
//! breaker opens and closes.
//!
//! The scenario starts a `redis-server` of its own (so that stalling it
//! cannot disturb the other scenarios' server), checks one key every 10 ms
//! from each limiter, and freezes the server with SIGSTOP for the stall
//! (as a stuck host or a long fork would), then thaws it with SIGCONT.
//! Both limiters fail open ([`FailurePolicy::Allow`]) with the default
//! timeout: without a breaker every check during the stall waits the full
//! timeout; with one, a few do, then the breaker answers at once and
//! lets one probe through per cool-down.

pub mod report;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelab::redis::{Connection, FailurePolicy, RedisLimiter, RedisStore};
use ratelab::{Gcra, Quota};
use ratelab_testkit::redis::RedisServer;
use serde::Serialize;

use super::ScenarioName;
use crate::stats::{percentile_sorted, round};
use crate::{CompareError, Context};

/// The check timeout (the limiter's default).
pub const TIMEOUT: Duration = Duration::from_millis(100);
/// Consecutive failures that open the breaker (the default).
pub const THRESHOLD: u32 = 5;
/// How long an open breaker waits before a probe (the default).
pub const COOL_DOWN: Duration = Duration::from_millis(500);
/// Between two checks of one limiter.
const PACE: Duration = Duration::from_millis(10);

/// The phases, in ms from the start: stall from `BEFORE` to `BEFORE + STALL`.
pub const BEFORE_MS: u64 = 1_000;
/// How long the server is frozen.
pub const STALL_MS: u64 = 3_000;
/// After the stall.
pub const AFTER_MS: u64 = 2_000;

/// One check.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    /// When it started, ms from the start.
    pub at_ms: f64,
    /// How long it took, ms.
    pub latency_ms: f64,
    /// Answered by Redis (`false`: by the failure policy).
    pub by_redis: bool,
    /// The breaker was open after it.
    pub breaker_open: bool,
}

/// One limiter through the stall.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    /// `breaker` or `no breaker`.
    pub limiter: String,
    /// Every check.
    pub samples: Vec<Sample>,
    /// When the breaker opened, ms from the start.
    pub opened_ms: Vec<f64>,
    /// When it closed again, ms from the start.
    pub closed_ms: Vec<f64>,
    /// Checks made during the stall.
    pub stall_checks: usize,
    /// Of those, answered within 1 ms.
    pub stall_fast: usize,
    /// Median latency during the stall, ms.
    pub stall_p50_ms: f64,
    /// 99th percentile during the stall, ms.
    pub stall_p99_ms: f64,
    /// Median latency before the stall, ms.
    pub before_p50_ms: f64,
    /// The first check Redis answered after the thaw, ms after it.
    pub recovered_after_ms: Option<f64>,
}

/// The scenario's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outage {
    /// The stall, ms from the start: (from, to).
    pub stall_ms: (f64, f64),
    /// The check timeout, ms.
    pub timeout_ms: f64,
    /// Failures that open the breaker.
    pub threshold: u32,
    /// The breaker's cool-down, ms.
    pub cool_down_ms: f64,
    /// With and without the breaker.
    pub runs: Vec<Run>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The `p`th percentile (0–100) of `xs` (sorted in place).
fn quantile(xs: &mut [f64], p: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    percentile_sorted(xs, p)
}

/// Checks one key every [`PACE`] until `end`.
async fn drive(
    limiter: RedisLimiter<Gcra>,
    start: Instant,
    end: Duration,
) -> Result<Vec<Sample>, CompareError> {
    let mut samples = Vec::new();
    while start.elapsed() < end {
        let at = start.elapsed();
        let began = Instant::now();
        let decision = limiter.check(b"client", 1).await?;
        let latency = began.elapsed();
        samples.push(Sample {
            at_ms: round(ms(at), 2),
            latency_ms: round(ms(latency), 3),
            by_redis: !decision.degraded,
            breaker_open: limiter.stats().breaker_open,
        });
        tokio::time::sleep(PACE).await;
    }
    Ok(samples)
}

fn summarize(limiter: &str, samples: Vec<Sample>) -> Run {
    let (from, to) = (BEFORE_MS as f64, (BEFORE_MS + STALL_MS) as f64);
    let mut opened_ms = Vec::new();
    let mut closed_ms = Vec::new();
    let mut open = false;
    for s in &samples {
        if s.breaker_open != open {
            if s.breaker_open {
                opened_ms.push(s.at_ms);
            } else {
                closed_ms.push(s.at_ms);
            }
            open = s.breaker_open;
        }
    }
    let mut stall: Vec<f64> = samples
        .iter()
        .filter(|s| s.at_ms >= from && s.at_ms < to)
        .map(|s| s.latency_ms)
        .collect();
    let mut before: Vec<f64> = samples
        .iter()
        .filter(|s| s.at_ms < from)
        .map(|s| s.latency_ms)
        .collect();
    Run {
        limiter: limiter.into(),
        stall_checks: stall.len(),
        stall_fast: stall.iter().filter(|&&l| l < 1.0).count(),
        stall_p50_ms: round(quantile(&mut stall, 50.0), 3),
        stall_p99_ms: round(quantile(&mut stall, 99.0), 3),
        before_p50_ms: round(quantile(&mut before, 50.0), 3),
        recovered_after_ms: samples
            .iter()
            .find(|s| s.at_ms >= to && s.by_redis)
            .map(|s| round(s.at_ms + s.latency_ms - to, 1)),
        opened_ms,
        closed_ms,
        samples,
    }
}

/// Runs the scenario, or records why it could not.
pub async fn run(ctx: &Context<'_>) -> Result<Option<Outage>, CompareError> {
    let server = match RedisServer::try_start() {
        Ok(server) => server,
        Err(e) => {
            ctx.skip(
                ScenarioName::Outage,
                "the whole scenario (it freezes a redis-server of its own)",
                &format!("no redis-server could be started: {e}"),
                crate::backend::HOW_TO_ENABLE,
            );
            return Ok(None);
        }
    };
    ctx.bar.set_length(3);
    let connection = Connection::single(&server.url()).await?;
    let quota = Quota::per_second(1_000).expect("a valid quota");
    let build = |threshold: u32| {
        RedisStore::builder(connection.clone(), Gcra::new(quota))
            .prefix(format!("{}:outage:{threshold}", ctx.nonce))
            .timeout(TIMEOUT)
            .breaker(threshold, COOL_DOWN)
            .on_failure(FailurePolicy::Allow)
            .build()
    };
    let (with, without) = (build(THRESHOLD), build(0));
    // Warm up: scripts loaded, connection up.
    with.check(b"warm", 1).await?;
    without.check(b"warm", 1).await?;
    ctx.tick();
    let start = Instant::now();
    let end = Duration::from_millis(BEFORE_MS + STALL_MS + AFTER_MS);
    let a = tokio::spawn(drive(with, start, end));
    let b = tokio::spawn(drive(without, start, end));
    let server = Arc::new(server);
    tokio::time::sleep_until((start + Duration::from_millis(BEFORE_MS)).into()).await;
    server.pause();
    tokio::time::sleep_until((start + Duration::from_millis(BEFORE_MS + STALL_MS)).into()).await;
    server.resume();
    ctx.tick();
    let joined = |r: Result<Result<Vec<Sample>, CompareError>, tokio::task::JoinError>| {
        r.map_err(|e| CompareError::Unavailable(format!("a check task failed: {e}")))?
    };
    let with = joined(a.await)?;
    let without = joined(b.await)?;
    ctx.tick();
    Ok(Some(Outage {
        stall_ms: (BEFORE_MS as f64, (BEFORE_MS + STALL_MS) as f64),
        timeout_ms: ms(TIMEOUT),
        threshold: THRESHOLD,
        cool_down_ms: ms(COOL_DOWN),
        runs: vec![
            summarize(
                &format!(
                    "breaker ({THRESHOLD} failures, {} ms cool-down)",
                    ms(COOL_DOWN)
                ),
                with,
            ),
            summarize("no breaker", without),
        ],
    }))
}
