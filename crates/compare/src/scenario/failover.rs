//! What a failover costs, on real servers: a master with a replica, clients
//! hammering one key past its limit, the master killed in the middle of it,
//! the replica promoted (`REPLICAOF NO ONE`) and the clients going on
//! against it. Every algorithm, three ways: a healthy replica, a replica
//! lagging [`LAG_STEPS`] steps (its link cut through a relay, then the
//! kill), and strict mode (`.replicas(1, ..)`) with the same lag.
//!
//! The clients decide on a client [`ManualClock`] moved in 100 ms steps, so
//! what the master admitted during the lag is a deterministic count; what
//! was in flight at the kill (at most one check per client) is not. Then
//! the latency strict mode costs (sequential checks, real time, repeated),
//! and redis-cell's `CL.THROTTLE` through the same failover with a healthy
//! replica, beside ratelab's GCRA on the same quota.
//!
//! The logic is `crates/redis/tests/failover.rs`'s, which asserts the
//! bounds this scenario measures.

pub mod report;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ratelab::redis::{Connection, FailurePolicy, RedisStore, TimeSource};
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, Clock, KnownAlgorithm, ManualClock, Quota,
};
use ratelab_testkit::oracle::{Admitted, Bound, Oracle};
use ratelab_testkit::redis::RedisServer;
use ratelab_testkit::replication::Relay;
use serde::Serialize;

use super::ScenarioName;
use crate::stats::{Spread, percentile_sorted, round};
use crate::{CompareError, Context};

/// Concurrent clients, each with at most one check in flight: the most a
/// kill can catch in flight.
pub const CLIENTS: u64 = 6;
/// One step of the clients' clock, ms.
pub const STEP_MS: u64 = 100;
/// One step of the clients' clock.
pub const STEP: Duration = Duration::from_millis(STEP_MS);
/// Steps the replica lags behind in the lagging and strict cases: 700 ms,
/// over the start of a window.
pub const LAG_STEPS: u32 = 7;
/// The quota: 50 a second (a one-second window of 50, a burst of 50).
pub const RATE: u32 = 50;
/// How long strict mode waits for the replica.
pub const WAIT: Duration = Duration::from_millis(250);
/// The clock's start: a whole second, so that windows start on steps.
const START: u64 = 1_000_000_000_000;
const KEY: &[u8] = b"hammered";

/// The three ways a failover is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Case {
    /// The replica has everything but what is in flight at the kill.
    Healthy,
    /// The replica's link cut [`LAG_STEPS`] steps before the kill.
    Lagging,
    /// Strict mode (`.replicas(1, 250 ms)`), the same lag.
    Strict,
}

impl Case {
    /// Every case, in report order.
    pub const ALL: [Case; 3] = [Case::Healthy, Case::Lagging, Case::Strict];

    /// Its name in the report.
    pub fn label(self) -> &'static str {
        match self {
            Case::Healthy => "healthy replica",
            Case::Lagging => "replica 700 ms behind",
            Case::Strict => "strict mode, 700 ms behind",
        }
    }

    fn lag_steps(self) -> u32 {
        match self {
            Case::Healthy => 0,
            Case::Lagging | Case::Strict => LAG_STEPS,
        }
    }
}

/// One algorithm through one failover.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The algorithm.
    pub algorithm: String,
    /// How.
    pub case: Case,
    /// The bound it is measured against.
    pub bound: String,
    /// Units admitted over the whole run.
    pub admitted: u64,
    /// Of those, admitted by the master after the cut, the step of the kill
    /// included.
    pub after_cut: u64,
    /// Of those, admitted in the step of the kill: how many checks the
    /// kill let through depends on timing, so this part is not
    /// deterministic; the rest of `after_cut` is.
    pub in_kill_step: u64,
    /// Units admitted beyond the bound, in the worst interval of the run.
    pub beyond_bound: u64,
    /// Checks that failed (the kill; strict mode's unconfirmed ones).
    pub errors: u64,
    /// Admissions strict mode could not confirm on the master.
    pub unconfirmed: u64,
}

/// Sequential checks, with or without strict mode: one round's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LatencyRow {
    /// `without` or `strict mode (.replicas(1, 250 ms))`.
    pub mode: String,
    /// Checks per round.
    pub checks: usize,
    /// Each round's median, µs.
    pub p50_us: Vec<f64>,
    /// Each round's 99th percentile, µs.
    pub p99_us: Vec<f64>,
    /// The medians' spread over the rounds.
    pub p50: Spread,
    /// The 99th percentiles' spread.
    pub p99: Spread,
}

/// redis-cell's `CL.THROTTLE` and ratelab's GCRA through one failover with
/// a healthy replica, on Redis time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellRow {
    /// `redis-cell 0.5.0 (...)` or `ratelab gcra`.
    pub limiter: String,
    /// Units admitted: by the master, then by the promoted replica.
    pub admitted: u64,
    /// Admitted by the promoted replica.
    pub after_failover: u64,
    /// The most the quota allows over the run.
    pub bound: u64,
    /// Beyond it.
    pub beyond_bound: u64,
}

/// The scenario's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failover {
    /// Units a second (and a window's limit, and the burst).
    pub rate: u32,
    /// How far behind the lagging replica was, ms.
    pub lag_ms: u64,
    /// Concurrent clients.
    pub clients: u64,
    /// Every algorithm, every case.
    pub rows: Vec<Row>,
    /// Sequential checks' latency with and without strict mode.
    pub latency: Vec<LatencyRow>,
    /// redis-cell beside GCRA, when redis-cell was built.
    pub cell: Vec<CellRow>,
    /// Which redis-cell was built, or why none was.
    pub cell_version: String,
    /// The scenario's wall time, s.
    pub wall_s: f64,
}

/// What one run counted.
#[derive(Debug, Default)]
struct Outcome {
    admitted: Vec<Admitted>,
    after_cut: u64,
    in_kill_step: u64,
    errors: u64,
    unconfirmed: u64,
}

/// A limiter shared by the clients, and how many of its admissions strict
/// mode could not confirm.
struct Built {
    limiter: Arc<dyn AsyncRateLimiter>,
    checker: Arc<dyn Checker>,
    unconfirmed: Box<dyn Fn() -> u64 + Send + Sync>,
}

fn build(
    kind: AlgorithmKind,
    quota: Quota,
    connection: Connection,
    time: TimeSource,
    strict: bool,
) -> Built {
    struct Build {
        connection: Connection,
        time: TimeSource,
        strict: bool,
    }
    impl AlgorithmVisitor for Build {
        type Output = Built;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Built {
            let mut builder = RedisStore::builder(self.connection, algorithm)
                .time_source(self.time)
                // A loaded machine must not turn a slow answer into a
                // failure; no breaker, so that every check reaches Redis.
                .timeout(Duration::from_secs(5))
                .breaker(0, Duration::ZERO)
                .on_failure(FailurePolicy::Error);
            if self.strict {
                builder = builder.replicas(1, WAIT);
            }
            let limiter = builder.build();
            let stats = limiter.clone();
            let limiter: Arc<dyn AsyncRateLimiter> = Arc::new(limiter);
            Built {
                checker: Arc::new(limiter.clone()),
                limiter,
                unconfirmed: Box::new(move || stats.store().stats().unconfirmed),
            }
        }
    }
    kind.visit(
        quota,
        Build {
            connection,
            time,
            strict,
        },
    )
}

/// Every client checks [`KEY`] until it is refused or fails (at most
/// `cap` admissions each); admissions and errors.
async fn hammer(limiter: &Arc<dyn Checker>, answered: &Arc<AtomicU64>) -> (u64, u64) {
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let limiter = limiter.clone();
        let answered = answered.clone();
        tasks.push(tokio::spawn(async move {
            let (mut admitted, mut errors) = (0u64, 0u64);
            for _ in 0..1000 {
                let result = limiter.check().await;
                answered.fetch_add(1, Ordering::SeqCst);
                match result {
                    Ok(true) => admitted += 1,
                    Ok(_) => break,
                    Err(_) => {
                        errors += 1;
                        break;
                    }
                }
            }
            (admitted, errors)
        }));
    }
    let mut totals = (0, 0);
    for task in tasks {
        // A task that panicked counts as a failed check.
        let (admitted, errors) = task.await.unwrap_or((0, 1));
        totals.0 += admitted;
        totals.1 += errors;
    }
    totals
}

fn start_error(what: &str, e: impl std::fmt::Display) -> CompareError {
    CompareError::Unavailable(format!("failover: {what} did not start: {e}"))
}

/// A master, a replica fed through a relay (and, in strict mode, that
/// replica's own replica, to confirm after the promotion). Five healthy
/// steps; with a lag, the relay cut and `lag − 1` more steps; the master
/// killed in the middle of one more; the replica promoted and five steps
/// on it.
async fn failover(kind: AlgorithmKind, quota: Quota, case: Case) -> Result<Outcome, CompareError> {
    let strict = case == Case::Strict;
    let lag_steps = case.lag_steps();
    let mut master = RedisServer::try_start().map_err(|e| start_error("the master", e))?;
    let relay = Relay::start(master.port());
    let replica = RedisServer::try_start_replica_of(relay.port(), &[])
        .map_err(|e| start_error("the replica", e))?;
    let second = if strict {
        Some(
            RedisServer::try_start_replica_of(replica.port(), &[])
                .map_err(|e| start_error("the replica's replica", e))?,
        )
    } else {
        None
    };
    let clock = Arc::new(ManualClock::starting_at(START));
    let time = || TimeSource::Client(clock.clone());
    let on_master = build(
        kind,
        quota,
        Connection::single(&master.url()).await?,
        time(),
        strict,
    );
    let answered = Arc::new(AtomicU64::new(0));
    let mut outcome = Outcome::default();
    let record = |outcome: &mut Outcome, (admitted, errors): (u64, u64)| {
        outcome.admitted.push(Admitted {
            at: clock.now_micros(),
            units: admitted,
        });
        outcome.errors += errors;
        admitted
    };

    for step in 0..5 {
        if step > 0 {
            clock.advance(STEP);
        }
        let counts = hammer(&on_master.checker, &answered).await;
        record(&mut outcome, counts);
    }
    replica.wait_caught_up(master.port());
    if lag_steps > 0 {
        relay.cut();
        for _ in 1..lag_steps {
            clock.advance(STEP);
            let counts = hammer(&on_master.checker, &answered).await;
            outcome.after_cut += record(&mut outcome, counts);
        }
    }
    // The last step on the master: killed once a check has been answered.
    clock.advance(STEP);
    let before = answered.load(Ordering::SeqCst);
    let clients = {
        let limiter = on_master.checker.clone();
        let answered = answered.clone();
        tokio::spawn(async move { hammer(&limiter, &answered).await })
    };
    while answered.load(Ordering::SeqCst) == before {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    master.kill();
    let counts = clients.await.unwrap_or((0, CLIENTS));
    let admitted = record(&mut outcome, counts);
    if lag_steps > 0 {
        outcome.after_cut += admitted;
        outcome.in_kill_step = admitted;
    }
    outcome.unconfirmed = (on_master.unconfirmed)();

    replica.promote();
    if let Some(second) = &second {
        second.wait_caught_up(replica.port());
    }
    let on_replica = build(
        kind,
        quota,
        Connection::single(&replica.url()).await?,
        time(),
        strict,
    );
    for _ in 0..5 {
        clock.advance(STEP);
        let counts = hammer(&on_replica.checker, &answered).await;
        record(&mut outcome, counts);
    }
    Ok(outcome)
}

/// The bound each algorithm states for one key, and how to measure what
/// went beyond it.
/// Units admitted beyond a bound, from what was admitted.
type Beyond = Box<dyn Fn(&[Admitted]) -> u64>;

fn bound(kind: AlgorithmKind, quota: Quota) -> (String, Beyond) {
    let promise = kind.bound(quota);
    let beyond = move |a: &[Admitted]| excess(promise, a);
    match promise {
        Bound::AlignedWindow { limit, window } => (
            format!("{limit} per aligned window"),
            Box::new(move |a: &[Admitted]| window_excess(limit, window, a)),
        ),
        Bound::TrailingWindow { limit, .. } => (format!("{limit} in any window"), Box::new(beyond)),
        Bound::WeightedWindows { limit, .. } => {
            (format!("{} in any window", 2 * limit), Box::new(beyond))
        }
        Bound::Rate { burst, .. } => (
            format!("burst {burst} + {}/s × elapsed", quota.limit()),
            Box::new(beyond),
        ),
    }
}

/// Units admitted beyond `bound` in the worst interval of the run.
fn excess(bound: Bound, admitted: &[Admitted]) -> u64 {
    let mut worst = 0;
    for (i, first) in admitted.iter().enumerate() {
        let mut total = 0;
        for last in &admitted[i..] {
            total += last.units;
            let Some(allowed) = bound.allowed_within(last.at - first.at) else {
                break;
            };
            worst = worst.max(total.saturating_sub(allowed));
        }
    }
    worst
}

/// The fixed window: units beyond the limit, summed over the windows.
fn window_excess(limit: u64, window: u64, admitted: &[Admitted]) -> u64 {
    let mut per_window = BTreeMap::<u64, u64>::new();
    for a in admitted {
        *per_window.entry(a.at / window).or_default() += a.units;
    }
    per_window.values().map(|&n| n.saturating_sub(limit)).sum()
}

/// Sequential GCRA checks on a master with one healthy replica, rounds
/// alternating without and with strict mode, on Redis time.
async fn latency(rounds: usize, checks: usize) -> Result<Vec<LatencyRow>, CompareError> {
    let master = RedisServer::try_start().map_err(|e| start_error("the master", e))?;
    let _replica = RedisServer::try_start_replica_of(master.port(), &[])
        .map_err(|e| start_error("the replica", e))?;
    // Never refuses: every check is an admission, so every one waits in
    // strict mode.
    let quota = Quota::per_second(1_000_000).expect("a valid quota");
    let connection = Connection::single(&master.url()).await?;
    let modes = [
        ("without".to_owned(), false),
        (
            format!("strict mode (.replicas(1, {} ms))", WAIT.as_millis()),
            true,
        ),
    ];
    let limiters: Vec<Built> = modes
        .iter()
        .map(|(_, strict)| {
            build(
                AlgorithmKind::Gcra,
                quota,
                connection.clone(),
                TimeSource::Redis,
                *strict,
            )
        })
        .collect();
    let mut figures = vec![(Vec::new(), Vec::new()); modes.len()];
    for round in 0..=rounds {
        for (i, built) in limiters.iter().enumerate() {
            let mut samples = Vec::with_capacity(checks);
            for n in 0..checks {
                let key = format!("latency:{i}:{}", n % 64);
                let began = Instant::now();
                let decision = built.limiter.check_async(key.as_bytes(), 1).await?;
                samples.push(began.elapsed().as_secs_f64() * 1e6);
                if !decision.allowed {
                    return Err(CompareError::Unavailable(
                        "failover latency: a check was refused on a quota of a million a second"
                            .into(),
                    ));
                }
            }
            // Round 0 warms up (scripts loaded, connection up).
            if round > 0 {
                samples.sort_by(f64::total_cmp);
                figures[i]
                    .0
                    .push(round_us(percentile_sorted(&samples, 50.0)));
                figures[i]
                    .1
                    .push(round_us(percentile_sorted(&samples, 99.0)));
            }
        }
    }
    Ok(modes
        .into_iter()
        .zip(figures)
        .map(|((mode, _), (p50_us, p99_us))| LatencyRow {
            mode,
            checks,
            p50: Spread::of(&p50_us),
            p99: Spread::of(&p99_us),
            p50_us,
            p99_us,
        })
        .collect())
}

fn round_us(us: f64) -> f64 {
    round(us, 1)
}

/// What redis-cell's `CL.THROTTLE` (or ratelab's GCRA) admits through one
/// failover with a healthy replica: a burst of 50 at one unit an hour (so
/// nothing refills during the run), the clients hammering until refused,
/// the master killed once a check is answered, then the clients again on
/// the promoted replica. The bound is the burst.
async fn cell_failover(library: Option<&str>) -> Result<CellRow, CompareError> {
    let burst = u64::from(RATE);
    let load = library.map(|l| ["--loadmodule", l]);
    let extra: &[&str] = load.as_ref().map_or(&[], |l| &l[..]);
    let mut master =
        RedisServer::try_start_with(extra).map_err(|e| start_error("the master", e))?;
    let replica = RedisServer::try_start_replica_of(master.port(), extra)
        .map_err(|e| start_error("the replica", e))?;
    let quota = Quota::new(1, Duration::from_secs(3_600))
        .and_then(|q| q.with_burst(RATE))
        .expect("a valid quota");
    let check = |url: String| async move {
        let limiter: Arc<dyn Checker> = match library {
            Some(_) => Arc::new(Cell::connect(&url).await?),
            None => {
                let connection = Connection::single(&url).await?;
                build(
                    AlgorithmKind::Gcra,
                    quota,
                    connection,
                    TimeSource::Redis,
                    false,
                )
                .checker
            }
        };
        Ok::<_, CompareError>(limiter)
    };
    let on_master = check(master.url()).await?;
    // Scripts loaded and the key written: the replica has it all.
    let first = on_master
        .check()
        .await
        .map_err(|e| CompareError::Unavailable(format!("failover: the first check failed: {e}")))?;
    replica.wait_caught_up(master.port());
    let answered = Arc::new(AtomicU64::new(0));
    let clients = {
        let answered = answered.clone();
        tokio::spawn(async move { hammer(&on_master, &answered).await })
    };
    while answered.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    master.kill();
    let (on_master_admitted, _) = clients.await.unwrap_or((0, CLIENTS));
    replica.promote();
    let on_replica = check(replica.url()).await?;
    let (after, _) = hammer(&on_replica, &Arc::new(AtomicU64::new(0))).await;
    let admitted = u64::from(first) + on_master_admitted + after;
    Ok(CellRow {
        limiter: match library {
            Some(_) => ratelab_testkit::redis_cell::version(),
            None => "ratelab gcra (Lua script)".into(),
        },
        admitted,
        after_failover: after,
        bound: burst,
        beyond_bound: admitted.saturating_sub(burst),
    })
}

/// redis-cell's `CL.THROTTLE key 49 1 3600 1` (a burst of 50, one an
/// hour) as a limiter of one key.
struct Cell {
    connection: redis::aio::MultiplexedConnection,
}

impl Cell {
    async fn connect(url: &str) -> Result<Self, CompareError> {
        let client = redis::Client::open(url)?;
        Ok(Cell {
            connection: client.get_multiplexed_async_connection().await?,
        })
    }
}

/// One check of [`KEY`], by a ratelab limiter or by redis-cell: admitted,
/// or not, or failed.
type Check<'a> = Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>>;

/// What the clients check.
trait Checker: Send + Sync {
    fn check(&self) -> Check<'_>;
}

impl Checker for Arc<dyn AsyncRateLimiter> {
    fn check(&self) -> Check<'_> {
        Box::pin(async move {
            self.check_async(KEY, 1)
                .await
                .map(|d| d.allowed)
                .map_err(|e| e.to_string())
        })
    }
}

impl Checker for Cell {
    fn check(&self) -> Check<'_> {
        Box::pin(async move {
            let mut connection = self.connection.clone();
            let reply: Vec<i64> = redis::cmd("CL.THROTTLE")
                .arg(KEY)
                .arg(RATE - 1)
                .arg(1)
                .arg(3_600)
                .arg(1)
                .query_async(&mut connection)
                .await
                .map_err(|e| e.to_string())?;
            Ok(reply.first() == Some(&0))
        })
    }
}

/// Runs the scenario, or records why it could not.
pub async fn run(ctx: &Context<'_>) -> Result<Option<Failover>, CompareError> {
    let started = Instant::now();
    if ctx.redis.is_none() {
        ctx.skip(
            ScenarioName::Failover,
            "the whole scenario (it starts masters and replicas of its own)",
            "no Redis for this run (`--no-redis`, or none found)",
            crate::backend::HOW_TO_ENABLE,
        );
        return Ok(None);
    }
    if let Err(e) = RedisServer::try_start() {
        ctx.skip(
            ScenarioName::Failover,
            "the whole scenario (it starts masters and replicas of its own)",
            &format!("no redis-server could be started: {e}"),
            crate::backend::HOW_TO_ENABLE,
        );
        return Ok(None);
    }
    let kinds = AlgorithmKind::ALL;
    ctx.bar
        .set_length((kinds.len() * Case::ALL.len() + 3) as u64);
    let quota = Quota::per_second(RATE).expect("a valid quota");
    // Every failover at once, each on servers of its own: most of a run is
    // waiting for a replica's first acknowledgement, and what the clients
    // count does not depend on the machine's load (the in-flight part
    // aside, which is not deterministic anyway).
    let mut runs = tokio::task::JoinSet::new();
    for (i, kind) in kinds.into_iter().enumerate() {
        for (j, case) in Case::ALL.into_iter().enumerate() {
            runs.spawn(async move { ((i, j), failover(kind, quota, case).await) });
        }
    }
    let mut outcomes = Vec::new();
    while let Some(joined) = runs.join_next().await {
        let (at, outcome) =
            joined.map_err(|e| CompareError::Unavailable(format!("a failover run failed: {e}")))?;
        outcomes.push((at, outcome?));
        ctx.tick();
    }
    outcomes.sort_by_key(|(at, _)| *at);
    let rows = outcomes
        .into_iter()
        .map(|((i, j), outcome)| {
            let kind = kinds[i];
            let (bound_text, beyond) = bound(kind, quota);
            Row {
                algorithm: kind.name().into(),
                case: Case::ALL[j],
                bound: bound_text,
                admitted: outcome.admitted.iter().map(|a| a.units).sum(),
                after_cut: outcome.after_cut,
                in_kill_step: outcome.in_kill_step,
                beyond_bound: beyond(&outcome.admitted),
                errors: outcome.errors,
                unconfirmed: outcome.unconfirmed,
            }
        })
        .collect();
    let (rounds, checks) = if ctx.config.quick {
        (3, 200)
    } else {
        (ctx.config.repeats.clamp(3, 10), 500)
    };
    let latency = latency(rounds, checks).await?;
    ctx.tick();
    let mut cell = Vec::new();
    let cell_version = match ratelab_testkit::redis_cell::library() {
        Ok(path) => {
            let path = path.to_string_lossy().into_owned();
            cell.push(cell_failover(Some(&path)).await?);
            ctx.tick();
            cell.push(cell_failover(None).await?);
            ctx.tick();
            ratelab_testkit::redis_cell::version()
        }
        Err(why) => {
            ctx.skip(
                ScenarioName::Failover,
                "redis-cell through a failover",
                &format!("redis-cell could not be built: {why}"),
                "install cargo and let it reach crates.io, or set RATELAB_REDIS_CELL_PATH",
            );
            format!("none: {why}")
        }
    };
    Ok(Some(Failover {
        rate: RATE,
        lag_ms: u64::from(LAG_STEPS) * STEP_MS,
        clients: CLIENTS,
        rows,
        latency,
        cell,
        cell_version,
        wall_s: round(started.elapsed().as_secs_f64(), 1),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(at: u64, units: u64) -> Admitted {
        Admitted { at, units }
    }

    #[test]
    fn the_fixed_window_counts_beyond_its_limit_per_window() {
        // 50 in window 0, 50 + 30 in window 1: 30 beyond.
        let admitted = [at(0, 50), at(1_000_000, 50), at(1_500_000, 30)];
        assert_eq!(window_excess(50, 1_000_000, &admitted), 30);
        assert_eq!(window_excess(50, 1_000_000, &admitted[..2]), 0);
    }

    #[test]
    fn the_bucket_bound_allows_the_refill_and_no_more() {
        let bound = Bound::Rate {
            burst: 50,
            interval: 20_000,
        };
        // A burst, then 5 a step of 100 ms: exactly the refill.
        let mut admitted = vec![at(0, 50)];
        admitted.extend((1..10).map(|i| at(i * 100_000, 5)));
        assert_eq!(excess(bound, &admitted), 0);
        // At 1 s, the step's refill and 35 more (what a promoted replica
        // that missed 700 ms would admit again): 35 beyond.
        admitted.push(at(1_000_000, 40));
        assert_eq!(excess(bound, &admitted), 35);
    }

    #[test]
    fn every_algorithm_has_a_bound_of_its_own() {
        let quota = Quota::per_second(RATE).unwrap();
        for kind in AlgorithmKind::ALL {
            let (text, beyond) = bound(kind, quota);
            assert!(!text.contains("exact log's"), "{kind}: {text}");
            assert_eq!(beyond(&[at(0, u64::from(RATE))]), 0, "{kind}");
        }
    }
}
