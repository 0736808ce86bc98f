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
use crate::algorithms::{self, Simulated};
use crate::atomic::{self, Time};
use crate::peers::{GOVERNOR, Governor};
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

/// How a peer's decisions compare with ratelab gcra's on the same instants.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agreement {
    /// The peer.
    pub peer: String,
    /// Decisions compared (the burst and the later round).
    pub decisions: usize,
    /// Of those, admitted by one and refused by the other.
    pub differing: usize,
    /// Refusals whose exact wait differs by more than a microsecond (for
    /// a peer reporting whole seconds: whose whole seconds differ from
    /// ratelab's exact wait rounded by the peer's measured rule).
    pub differing_waits: usize,
    /// For a peer reporting whole seconds, its rounding as measured.
    pub rounding: Option<Rounding>,
}

/// How a peer rounds a wait to whole seconds, measured against ratelab's
/// exact wait at the same moment on the same server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rounding {
    /// Refusals by both.
    pub refusals: usize,
    /// Of those, the peer's seconds equal ratelab's exact wait rounded up.
    pub up: usize,
    /// Of those, equal to it rounded down (a whole-second wait counts in
    /// both).
    pub down: usize,
}

impl Rounding {
    /// `peer_secs` against `exact` for each refusal by both.
    pub fn measure(pairs: impl IntoIterator<Item = (u64, Duration)>) -> Self {
        let mut r = Rounding {
            refusals: 0,
            up: 0,
            down: 0,
        };
        for (peer, exact) in pairs {
            r.refusals += 1;
            r.up += usize::from(peer == round_up(exact));
            r.down += usize::from(peer == exact.as_secs());
        }
        r
    }

    /// Whether the measurements say the peer rounds up.
    pub fn rounds_up(&self) -> bool {
        self.up >= self.down
    }

    /// `exact` in whole seconds by the measured rule.
    pub fn apply(&self, exact: Duration) -> u64 {
        if self.rounds_up() {
            round_up(exact)
        } else {
            exact.as_secs()
        }
    }

    /// "rounded up" or "rounded down".
    pub fn text(&self) -> &'static str {
        if self.rounds_up() {
            "rounded up"
        } else {
            "rounded down"
        }
    }
}

/// Whole seconds, any fraction rounded up.
fn round_up(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The table.
#[derive(Debug, Clone, Serialize)]
pub struct Reference {
    /// The quota, as text.
    pub quota: String,
    /// One row per algorithm and backend, on the manual clock.
    pub rows: Vec<Row>,
    /// The peers on the same instants: governor in memory.
    pub peer_rows: Vec<Row>,
    /// Each peer's decisions against ratelab gcra's, one by one.
    pub agreement: Vec<Agreement>,
    /// redis-cell (`CL.THROTTLE`, whole-second waits) and
    /// ratelab gcra on Redis `TIME`, both on a real clock with a real
    /// one-second wait, side by side.
    pub redis_cell_rows: Vec<Row>,
    /// Why the redis-cell rows are missing, when they are.
    pub redis_cell_missing: Option<String>,
    /// Which redis-cell made the rows (`redis-cell 0.5.0 (upstream tree
    /// at ...)`), when there are any.
    pub redis_cell_version: Option<String>,
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
            .map(|d| d.retry_after().as_secs_f64() * 1e3)
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
        .set_length((AlgorithmKind::ALL.len() * (1 + usize::from(redis.is_some())) + 3) as u64);
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

    let (peer_rows, mut agreement) = governor_rows(quota)?;
    ctx.tick();
    let (redis_cell_rows, redis_cell_missing) = match ctx.redis {
        None => (Vec::new(), Some("no Redis server in this run".to_owned())),
        Some(env) => match env.redis_cell() {
            Err(why) => {
                ctx.skip(
                    ScenarioName::Reference,
                    "the redis-cell rows (CL.THROTTLE)",
                    why,
                    "let `ratelab_testkit::redis_cell::library()` build redis-cell (it needs cargo and crates.io the first time), or set $RATELAB_REDIS_CELL_PATH to its library, with `redis-server` on PATH",
                );
                (Vec::new(), Some(why.to_owned()))
            }
            Ok(()) => {
                let (rows, a) = redis_cell_rows(ctx, env, quota).await?;
                agreement.push(a);
                (rows, None)
            }
        },
    };

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
        peer_rows,
        agreement,
        redis_cell_version: ctx
            .redis
            .filter(|_| !redis_cell_rows.is_empty())
            .map(|env| env.redis_cell_version().to_owned()),
        redis_cell_rows,
        redis_cell_missing,
        real_time_rows,
    })
}

/// One `CL.THROTTLE` call: capacity `quota.burst()` (redis-cell's
/// `max_burst` is one less), `quota.limit()` per period.
async fn throttle(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    quota: Quota,
) -> Result<Decision, CompareError> {
    let reply: Vec<i64> = redis::cmd("CL.THROTTLE")
        .arg(key)
        .arg(quota.burst() - 1)
        .arg(quota.limit())
        .arg(quota.period().as_secs())
        .arg(1)
        .query_async(conn)
        .await?;
    let limited = reply.first().copied().unwrap_or(1) == 1;
    let limit = u64::try_from(reply.get(1).copied().unwrap_or(0)).unwrap_or(0);
    // Whole seconds, as redis-cell reports them (-1 when admitted).
    let retry = u64::try_from(reply.get(3).copied().unwrap_or(-1)).unwrap_or(0);
    Ok(if limited {
        Decision::refused(limit).with_retry_after_micros(retry * 1_000_000)
    } else {
        Decision::admitted(limit)
    })
}

/// redis-cell and ratelab gcra on Redis `TIME`, side by side on the run's
/// server: the burst, a real one-second sleep, the later round, one request
/// after another; and redis-cell's decisions against gcra's.
async fn redis_cell_rows(
    ctx: &Context<'_>,
    env: &crate::backend::RedisEnv,
    quota: Quota,
) -> Result<(Vec<Row>, Agreement), CompareError> {
    let mut conn = env.connection().await?;
    let gcra = atomic::limiter(env, AlgorithmKind::Gcra, quota, &Time::Redis).await?;
    let cell_key = format!("{}:reference:redis-cell", ctx.nonce);
    let gcra_key = format!("{}:reference-real:gcra", ctx.nonce);
    let (mut cell, mut ours) = (Vec::new(), Vec::new());
    for round in [BURST, LATER] {
        if round == LATER {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        for _ in 0..round {
            cell.push(throttle(&mut conn, &cell_key, quota).await?);
            ours.push(gcra.check_async(gcra_key.as_bytes(), 1).await?);
        }
    }
    let rounding = Rounding::measure(
        cell.iter()
            .zip(&ours)
            .filter(|(c, o)| !c.allowed && !o.allowed)
            .map(|(c, o)| (c.retry_after().as_secs(), o.retry_after())),
    );
    let agreement = Agreement {
        peer: "redis-cell".into(),
        decisions: BURST + LATER,
        differing: cell
            .iter()
            .zip(&ours)
            .filter(|(c, o)| c.allowed != o.allowed)
            .count(),
        // redis-cell's waits are whole seconds: compared with ratelab's
        // exact wait rounded as redis-cell was measured to round.
        differing_waits: cell
            .iter()
            .zip(&ours)
            .filter(|(c, o)| {
                !c.allowed
                    && !o.allowed
                    && c.retry_after().as_secs() != rounding.apply(o.retry_after())
            })
            .count(),
        rounding: Some(rounding),
    };
    let mut cell_row = row(
        "redis-cell",
        "redis",
        "server clock",
        &cell[..BURST],
        &cell[BURST..],
    );
    // Its waits, as it reports them: whole seconds.
    let whole = |ds: &[Decision]| {
        ds.iter()
            .filter(|d| !d.allowed)
            .map(|d| d.retry_after().as_secs())
            .max()
    };
    cell_row.burst_wait_secs = whole(&cell[..BURST]);
    cell_row.later_wait_secs = whole(&cell[BURST..]);
    cell_row.burst_retry_ms = None;
    let gcra_row = row(
        "gcra",
        "redis",
        "Redis TIME",
        &ours[..BURST],
        &ours[BURST..],
    );
    Ok((vec![cell_row, gcra_row], agreement))
}

/// The burst and the later round, one request after another, on `sim`
/// (one client): the instants every peer is compared on.
fn sequential(sim: &mut dyn Simulated) -> Result<(Vec<Decision>, Vec<Decision>), CompareError> {
    let burst = (0..BURST)
        .map(|_| sim.decide(0, START_MICROS, 1))
        .collect::<Result<Vec<_>, _>>()?;
    let later = (0..LATER)
        .map(|_| sim.decide(0, START_MICROS + 1_000_000, 1))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((burst, later))
}

/// governor's row, and its decisions against ratelab gcra's, call by call.
fn governor_rows(quota: Quota) -> Result<(Vec<Row>, Vec<Agreement>), CompareError> {
    let mut governor = Governor::new(quota, 1);
    let (g_burst, g_later) = sequential(&mut governor)?;
    let mut gcra = algorithms::simulated(AlgorithmKind::Gcra, quota, 1);
    let (r_burst, r_later) = sequential(gcra.as_mut())?;
    let pairs = || {
        g_burst
            .iter()
            .chain(&g_later)
            .zip(r_burst.iter().chain(&r_later))
    };
    let agreement = Agreement {
        peer: GOVERNOR.into(),
        decisions: BURST + LATER,
        differing: pairs().filter(|(g, r)| g.allowed != r.allowed).count(),
        differing_waits: pairs()
            .filter(|(g, r)| {
                !g.allowed
                    && !r.allowed
                    && g.retry_after().abs_diff(r.retry_after()) > Duration::from_micros(1)
            })
            .count(),
        rounding: None,
    };
    let row = row(GOVERNOR, "memory", "fake (governor's)", &g_burst, &g_later);
    Ok((vec![row], vec![agreement]))
}
