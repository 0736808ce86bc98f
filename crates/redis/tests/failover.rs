//! What a failover costs, measured on real servers: a master with a replica
//! (which has a replica of its own), clients hammering one key past its
//! limit, the master killed in the middle of it, the replica promoted
//! (`REPLICAOF NO ONE`) and the clients going on against it.
//!
//! The replica is fed through a [`Relay`]: cutting it makes the replica lag
//! by exactly what the master admitted after the cut. The clients decide
//! on a [`ManualClock`] that moves in steps, so the lag, in the limiter's
//! time, is a number of steps, and every assertion is on counts: units
//! admitted beyond the algorithm's bound over the whole run, against the
//! bound the crate docs state ("Replicas and failover"):
//!
//! - a healthy replica loses at most what was in flight at the kill;
//! - a lagging one: GCRA (a debt) re-admits at most `rate × lag` (never
//!   more than its burst), the fixed window at most what the master
//!   admitted during the lag, a window's limit when the lag holds the
//!   start of a window (nothing when the window was already spent);
//! - strict mode (`.replicas(1, ..)`) admits nothing beyond the bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ratelab_core::toolkit::RemoteForm;
use ratelab_core::{Algorithm, Clock, ManualClock, Quota};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
use ratelab_redis::{Connection, FailurePolicy, RedisLimiter, RedisStore, TimeSource};
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_testkit::oracle::{Admitted, Bound, Oracle};
use ratelab_testkit::redis::RedisServer;
use ratelab_testkit::replication::Relay;
use ratelab_token_bucket::TokenBucket;

/// Concurrent clients, each with at most one check in flight: the most a
/// kill can catch in flight.
const CLIENTS: u64 = 6;
/// One step of the clients' clock.
const STEP: Duration = Duration::from_millis(100);
/// The clock's start: a whole second, so that windows start on steps.
const START: u64 = 1_000_000_000_000;
/// How long strict mode waits for the replica.
const WAIT: Duration = Duration::from_millis(250);
const KEY: &[u8] = b"hammered";

/// What one run counted.
#[derive(Debug, Default)]
struct Outcome {
    /// Units the clients were told were admitted, by instant.
    admitted: Vec<Admitted>,
    /// Of those, admitted by the master after the cut.
    after_cut: u64,
    /// Checks that failed (the kill, or strict mode's unconfirmed ones).
    errors: u64,
    /// Unconfirmed admissions counted by the master's store.
    unconfirmed: u64,
}

impl Outcome {
    fn total(&self) -> u64 {
        self.admitted.iter().map(|a| a.units).sum()
    }
}

/// Every client checks `KEY` until it is refused or fails (or has been
/// admitted `cap` times); the count of admissions, and of errors.
async fn hammer<A: RemoteForm>(limiter: &RedisLimiter<A>, results: &Arc<AtomicU64>) -> (u64, u64) {
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let limiter = limiter.clone();
        let results = results.clone();
        tasks.push(tokio::spawn(async move {
            let (mut admitted, mut errors) = (0u64, 0u64);
            for _ in 0..1000 {
                let result = limiter.check(KEY, 1).await;
                results.fetch_add(1, Ordering::SeqCst);
                match result {
                    Ok(decision) if decision.allowed => admitted += 1,
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
        let (admitted, errors) = task.await.expect("a client task");
        totals.0 += admitted;
        totals.1 += errors;
    }
    totals
}

fn limiter<A: RemoteForm>(
    connection: Connection,
    algorithm: A,
    clock: &Arc<ManualClock>,
    strict: bool,
) -> RedisLimiter<A> {
    let mut builder = RedisStore::builder(connection, algorithm)
        .time_source(TimeSource::Client(clock.clone()))
        // A loaded machine must not turn a slow answer into a failure; no
        // breaker, so that every check reaches Redis.
        .timeout(Duration::from_secs(5))
        .breaker(0, Duration::ZERO)
        .on_failure(FailurePolicy::Error);
    if strict {
        builder = builder.replicas(1, WAIT);
    }
    builder.build()
}

/// A master, a replica fed through a relay, and that replica's own replica.
/// Five healthy steps; then, with `lag_steps > 0`, the relay is cut and
/// the clients go on for `lag_steps` more, the master killed in the middle
/// of the last (without a lag: in the middle of one more step); the
/// replica is promoted and the clients go on against it for five steps.
async fn failover<A: RemoteForm + Clone>(algorithm: A, strict: bool, lag_steps: u32) -> Outcome {
    let mut master = RedisServer::start();
    let relay = Relay::start(master.port());
    let replica = RedisServer::start_replica_of(relay.port(), &[]);
    let second = RedisServer::start_replica_of(replica.port(), &[]);
    let clock = Arc::new(ManualClock::starting_at(START));
    let connection = Connection::single(&master.url()).await.expect("the master");
    let on_master = limiter(connection, algorithm.clone(), &clock, strict);
    let results = Arc::new(AtomicU64::new(0));
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
        let counts = hammer(&on_master, &results).await;
        record(&mut outcome, counts);
    }
    replica.wait_caught_up(master.port());
    if lag_steps > 0 {
        relay.cut();
        for _ in 1..lag_steps {
            clock.advance(STEP);
            let counts = hammer(&on_master, &results).await;
            outcome.after_cut += record(&mut outcome, counts);
        }
    }
    // The last step on the master: killed once a check has been answered.
    clock.advance(STEP);
    let before = results.load(Ordering::SeqCst);
    let clients = {
        let on_master = on_master.clone();
        let results = results.clone();
        tokio::spawn(async move { hammer(&on_master, &results).await })
    };
    while results.load(Ordering::SeqCst) == before {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    master.kill();
    let counts = clients.await.expect("the clients");
    let admitted = record(&mut outcome, counts);
    if lag_steps > 0 {
        outcome.after_cut += admitted;
    }
    outcome.unconfirmed = on_master.store().stats().unconfirmed;

    replica.promote();
    second.wait_caught_up(replica.port());
    let connection = Connection::single(&replica.url())
        .await
        .expect("the promoted replica");
    let on_replica = limiter(connection, algorithm, &clock, strict);
    for _ in 0..5 {
        clock.advance(STEP);
        let counts = hammer(&on_replica, &results).await;
        record(&mut outcome, counts);
    }
    eprintln!(
        "{} strict={strict} lag={} ms: {} admitted, {} of them after the cut, {} errors, \
         {} unconfirmed, {} bytes of replication dropped",
        A::NAME,
        u64::from(lag_steps) * 100,
        outcome.total(),
        outcome.after_cut,
        outcome.errors,
        outcome.unconfirmed,
        relay.dropped(),
    );
    outcome
}

/// GCRA: units admitted beyond `burst + elapsed / interval` in the worst
/// interval of the run.
fn bucket_excess(quota: Quota, admitted: &[Admitted]) -> u64 {
    excess(Bound::rate(&quota), admitted)
}

/// Units admitted beyond `bound` in the worst interval of the run it
/// speaks of.
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

/// The fixed window: units admitted beyond the limit, summed over the
/// windows.
fn window_excess(quota: Quota, admitted: &[Admitted]) -> u64 {
    let window = quota.window_micros();
    let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
    for a in admitted {
        *per_window.entry(a.at / window).or_default() += a.units;
    }
    per_window
        .values()
        .map(|&n| n.saturating_sub(u64::from(quota.limit())))
        .sum()
}

/// 100 units a second, a burst of 50: 10 units a step.
fn gcra_quota() -> Quota {
    Quota::per_second(100)
        .and_then(|q| q.with_burst(50))
        .expect("a quota")
}

/// 50 units a one-second window.
fn window_quota() -> Quota {
    Quota::per_second(50).expect("a quota")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_with_a_healthy_replica_loses_at_most_what_was_in_flight() {
    let quota = gcra_quota();
    let outcome = failover(Gcra::new(quota), false, 0).await;
    let excess = bucket_excess(quota, &outcome.admitted);
    eprintln!("gcra, healthy replica: {excess} beyond the bound");
    assert!(excess <= CLIENTS, "{excess} beyond the bound: {outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_with_a_lagging_replica_loses_at_most_rate_times_lag() {
    let quota = gcra_quota();
    // Lagging 300 ms of the clients' clock behind, at 100 a second.
    let outcome = failover(Gcra::new(quota), false, 3).await;
    let excess = bucket_excess(quota, &outcome.admitted);
    eprintln!("gcra, replica 300 ms behind: {excess} beyond the bound");
    let rate_times_lag = 30;
    assert!(
        excess <= rate_times_lag + CLIENTS,
        "{excess} beyond the bound: {outcome:?}"
    );
    assert!(excess <= outcome.after_cut + CLIENTS, "{outcome:?}");
    // The loss is real: what strict mode closes.
    assert!(excess > 0, "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_in_strict_mode_admits_nothing_beyond_the_bound() {
    let quota = gcra_quota();
    for lag_steps in [0, 3] {
        let outcome = failover(Gcra::new(quota), true, lag_steps).await;
        let excess = bucket_excess(quota, &outcome.admitted);
        eprintln!("gcra, strict, lag {lag_steps} steps: {excess} beyond the bound");
        assert_eq!(excess, 0, "{outcome:?}");
        assert!(outcome.total() > 0, "{outcome:?}");
        if lag_steps > 0 {
            // Every admission the master made after the cut went
            // unconfirmed, and none was counted.
            assert_eq!(outcome.after_cut, 0, "{outcome:?}");
            assert!(outcome.unconfirmed > 0, "{outcome:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_window_loses_a_window_when_the_lag_holds_its_start() {
    let quota = window_quota();
    // The lag within the first window, which was spent: nothing lost.
    let outcome = failover(FixedWindow::new(quota), false, 3).await;
    let within = window_excess(quota, &outcome.admitted);
    eprintln!("fixed window, lag within a spent window: {within} beyond the bound");
    assert_eq!(outcome.after_cut, 0, "{outcome:?}");
    assert!(within <= CLIENTS, "{outcome:?}");
    // The lag holds the start of the next window: the master admits its
    // limit, the promoted replica admits it again.
    let outcome = failover(FixedWindow::new(quota), false, 7).await;
    let across = window_excess(quota, &outcome.admitted);
    eprintln!("fixed window, lag across a window's start: {across} beyond the bound");
    assert!(across <= outcome.after_cut + CLIENTS, "{outcome:?}");
    assert!(across <= u64::from(quota.limit()) + CLIENTS, "{outcome:?}");
    assert!(across > 0, "{outcome:?}");
    // Strict mode, the same lag: nothing beyond.
    let outcome = failover(FixedWindow::new(quota), true, 7).await;
    let strict = window_excess(quota, &outcome.admitted);
    eprintln!("fixed window, strict, lag across a window's start: {strict} beyond the bound");
    assert_eq!(strict, 0, "{outcome:?}");
}

/// The other algorithms, a replica lagging: what the promoted replica
/// admits beyond each one's own bound is at most what the master admitted
/// after the cut, plus what was in flight (the bound every algorithm
/// shares); the debts' at most `rate × lag` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_algorithm_loses_at_most_what_the_master_admitted_in_the_lag() {
    let debt = gcra_quota();
    let bucket = Bound::rate(&debt);
    let window = window_quota();
    let log = SlidingLog::new(window).bound();
    let counter = SlidingCounter::new(window).bound();
    // The debts lag 300 ms; the windows 700 ms, over the second at which
    // the first second's units leave them.
    let outcomes = [
        (
            "token bucket",
            bucket,
            failover(TokenBucket::new(debt), false, 3).await,
        ),
        (
            "leaky meter",
            bucket,
            failover(LeakyMeter::new(debt), false, 3).await,
        ),
        (
            "leaky queue",
            bucket,
            failover(LeakyQueue::new(debt), false, 3).await,
        ),
        (
            "sliding log",
            log,
            failover(SlidingLog::new(window), false, 7).await,
        ),
        (
            "sliding counter",
            counter,
            failover(SlidingCounter::new(window), false, 7).await,
        ),
    ];
    for (name, bound, outcome) in outcomes {
        let beyond = excess(bound, &outcome.admitted);
        eprintln!("{name}, lagging replica: {beyond} beyond the bound");
        assert!(beyond <= outcome.after_cut + CLIENTS, "{name}: {outcome:?}");
        if bound.is_debt() {
            assert!(beyond <= 30 + CLIENTS, "{name}: {outcome:?}");
        }
    }
}
