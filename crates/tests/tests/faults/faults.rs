//! Faults: the server killed mid-run, `SCRIPT FLUSH` mid-run, the server
//! paused, a cluster master killed. Each failure policy does what it says,
//! every call returns (its timeout ends it: a paused server's checks fail
//! with the timeout's error), alerts are raised where a program can see
//! them, and checks succeed again once a server is back.
//!
//! Nothing here depends on how fast the machine is: a limiter first waits
//! until Redis has answered it once (a loaded machine may time out a first
//! call), counts are taken from there, and a call is only required to
//! return within [`HANG`], far past any timeout.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ratelab::Gcra;
use ratelab::redis::{Connection, FailurePolicy, RedisLimiter, RedisStore, Stats};
use ratelab::{Error, Quota};
use ratelab_testkit::redis::{RedisCluster, RedisServer};

const TIMEOUT: Duration = Duration::from_millis(200);
/// How long a call may take before the test calls it hung, and how long a
/// server may take to answer again: events waited for, not speeds.
const HANG: Duration = Duration::from_secs(30);

fn quota() -> Quota {
    Quota::per_minute(3).unwrap()
}

/// A limiter with `policy` and [`TIMEOUT`], counting the alerts its
/// callback receives.
fn limiter(connection: &Connection, policy: FailurePolicy) -> (RedisLimiter<Gcra>, Arc<AtomicU64>) {
    limiter_with(connection, policy, TIMEOUT)
}

fn limiter_with(
    connection: &Connection,
    policy: FailurePolicy,
    timeout: Duration,
) -> (RedisLimiter<Gcra>, Arc<AtomicU64>) {
    let alerts = Arc::new(AtomicU64::new(0));
    let seen = alerts.clone();
    let limiter = RedisStore::builder(connection.clone(), Gcra::new(quota()))
        .prefix(common::unique_prefix())
        .timeout(timeout)
        .on_failure(policy)
        .on_alert(move |alert| {
            assert_eq!(alert.algorithm, "gcra");
            seen.fetch_add(1, Ordering::Relaxed);
        })
        .build();
    (limiter, alerts)
}

/// `check`, which must return: a call the limiter's timeout did not end
/// would hang here, and fails after [`HANG`].
async fn returns<T>(check: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG, check)
        .await
        .unwrap_or_else(|_| panic!("a check did not return within {HANG:?}"))
}

/// What each policy answers while Redis is away: `(allowed, error)`.
async fn while_away(limiter: &RedisLimiter<Gcra>) -> Vec<Result<bool, String>> {
    let mut answers = Vec::new();
    for _ in 0..5 {
        let answer = returns(limiter.check(b"k", 1)).await;
        answers.push(answer.map(|d| d.allowed).map_err(|e| e.to_string()));
    }
    answers
}

/// Checks `key` until Redis answers one (the connection reconnects, or a
/// loaded machine timed out the calls before).
async fn until_answered(limiter: &RedisLimiter<Gcra>, key: &[u8]) -> Stats {
    let deadline = Instant::now() + HANG;
    let before = limiter.stats().answered;
    while limiter.stats().answered == before {
        assert!(Instant::now() < deadline, "Redis never answered");
        let _ = limiter.check(key, 1).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    limiter.stats()
}

/// A check of `key` decided by Redis, not by the failure policy: checked
/// again until Redis answers one in time.
async fn decided_by_redis(limiter: &RedisLimiter<Gcra>, key: &[u8]) -> ratelab::Decision {
    let deadline = Instant::now() + HANG;
    loop {
        if let Ok(decision) = limiter.check(key, 1).await
            && !decision.degraded
        {
            return decision;
        }
        assert!(Instant::now() < deadline, "Redis never decided {key:?}");
    }
}

/// Failures a limiter counted: errors and timeouts.
fn failures(stats: &Stats) -> u64 {
    stats.errors + stats.timeouts
}

fn expect_policy(policy: FailurePolicy, answers: &[Result<bool, String>]) {
    match policy {
        FailurePolicy::Error => assert!(
            answers
                .iter()
                .all(|a| matches!(a, Err(e) if e.contains("backend"))),
            "{answers:?}"
        ),
        FailurePolicy::Allow => assert!(answers.iter().all(|a| a == &Ok(true)), "{answers:?}"),
        FailurePolicy::Deny => assert!(answers.iter().all(|a| a == &Ok(false)), "{answers:?}"),
        // The in-memory fallback enforces the quota itself: 3 of 5 pass.
        FailurePolicy::Fallback => {
            assert_eq!(
                answers.iter().filter(|a| **a == Ok(true)).count(),
                3,
                "{answers:?}"
            );
            assert_eq!(
                answers.iter().filter(|a| **a == Ok(false)).count(),
                2,
                "{answers:?}"
            );
        }
    }
}

const POLICIES: [FailurePolicy; 4] = [
    FailurePolicy::Error,
    FailurePolicy::Allow,
    FailurePolicy::Deny,
    FailurePolicy::Fallback,
];

/// One limiter per policy on `connection`, each answered by Redis once,
/// with the alerts and failures counted until then (a loaded machine may
/// have timed out a first call).
struct Warm {
    policy: FailurePolicy,
    limiter: RedisLimiter<Gcra>,
    alerts: Arc<AtomicU64>,
    alerts_before: u64,
    failures_before: u64,
}

impl Warm {
    fn alerts(&self) -> u64 {
        self.alerts.load(Ordering::Relaxed) - self.alerts_before
    }

    fn failures(&self) -> u64 {
        failures(&self.limiter.stats()) - self.failures_before
    }
}

async fn warmed_up(connection: &Connection) -> Vec<Warm> {
    let mut warm = Vec::new();
    for &policy in &POLICIES {
        let (limiter, alerts) = limiter(connection, policy);
        until_answered(&limiter, b"warm").await;
        warm.push(Warm {
            policy,
            alerts_before: alerts.load(Ordering::Relaxed),
            failures_before: failures(&limiter.stats()),
            limiter,
            alerts,
        });
    }
    warm
}

#[test]
fn a_killed_server_gets_each_policy_then_recovers_on_restart() {
    let (_, runtime, _) = common::shared();
    let mut server = RedisServer::start();
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        let limiters = warmed_up(&connection).await;
        server.kill();
        for warm in &limiters {
            let policy = warm.policy;
            let answers = while_away(&warm.limiter).await;
            expect_policy(policy, &answers);
            assert_eq!(warm.alerts(), 5, "{policy:?}: one alert per failure");
            assert_eq!(warm.failures(), 5, "{policy:?}");
        }
        server.restart();
        for warm in &limiters {
            let stats = until_answered(&warm.limiter, b"again").await;
            assert!(stats.answered >= 2, "{:?}: {stats:?}", warm.policy);
            // The restarted server is empty: the quota starts afresh there.
            let fresh = decided_by_redis(&warm.limiter, b"k").await;
            assert!(fresh.allowed, "{:?}", warm.policy);
        }
    });
}

#[test]
fn a_paused_server_times_out_then_gets_each_policy() {
    let (_, runtime, _) = common::shared();
    let server = RedisServer::start();
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        let limiters = warmed_up(&connection).await;
        server.pause();
        for warm in &limiters {
            let policy = warm.policy;
            let timeouts = warm.limiter.stats().timeouts;
            let answers = while_away(&warm.limiter).await;
            expect_policy(policy, &answers);
            // Each ended by its timeout: nothing else answers while Redis
            // is paused.
            if policy == FailurePolicy::Error {
                let timeout = Error::Timeout(TIMEOUT).to_string();
                assert!(
                    answers.iter().all(|a| a == &Err(timeout.clone())),
                    "{answers:?}"
                );
            }
            assert_eq!(warm.limiter.stats().timeouts - timeouts, 5, "{policy:?}");
            assert_eq!(warm.alerts(), 5, "{policy:?}");
        }
        server.resume();
        for warm in &limiters {
            until_answered(&warm.limiter, b"again").await;
        }
    });
}

#[test]
fn a_script_flush_mid_run_is_invisible_to_callers() {
    let (server, runtime, connection) = common::shared();
    runtime.block_on(async {
        // No outage here: a timeout no loaded machine reaches.
        let (limiter, alerts) = limiter_with(connection, FailurePolicy::Error, HANG);
        // The script may or may not be on the server yet: count from here.
        assert!(limiter.check(b"warm", 1).await.unwrap().allowed);
        let reloads = limiter.store().stats().reloads;
        let mut admitted = 0;
        for i in 0..6 {
            if i == 2 || i == 4 {
                assert_eq!(server.command(&["SCRIPT", "FLUSH"]).unwrap(), "OK");
            }
            admitted += u32::from(limiter.check(b"k", 1).await.unwrap().allowed);
        }
        assert_eq!(admitted, 3, "the quota held across the flushes");
        assert_eq!(limiter.store().stats().reloads - reloads, 2);
        assert_eq!(alerts.load(Ordering::Relaxed), 0);
    });
}

#[test]
fn a_killed_cluster_master_gets_the_policy_without_a_hang() {
    let (_, runtime, _) = common::shared();
    let mut cluster = RedisCluster::start();
    runtime.block_on(async {
        let connection = Connection::cluster(&cluster.urls()).await.unwrap();
        // Keys on every master, so that one of them lives on the killed node.
        let keys: Vec<String> = (0..30).map(|i| format!("user-{i}")).collect();
        let limiters: Vec<_> = POLICIES
            .iter()
            .map(|&p| (p, limiter(&connection, p)))
            .collect();
        let mut before = Vec::new();
        for (_, (limiter, alerts)) in &limiters {
            for key in &keys {
                assert!(decided_by_redis(limiter, key.as_bytes()).await.allowed);
            }
            let stats = limiter.stats();
            let failed = failures(&stats) + stats.short_circuited;
            before.push((alerts.load(Ordering::Relaxed), failed));
        }
        cluster.nodes_mut()[1].kill();
        for ((policy, (limiter, alerts)), (alerts_before, failed_before)) in
            limiters.iter().zip(before)
        {
            let mut failed = 0;
            for key in &keys {
                let answer = returns(limiter.check(key.as_bytes(), 1)).await;
                // A check the open breaker answered without calling Redis
                // is a failure too.
                let stats = limiter.stats();
                let was_failure = failures(&stats) + stats.short_circuited - failed_before > failed;
                if was_failure {
                    failed += 1;
                    match policy {
                        FailurePolicy::Error => assert!(answer.is_err()),
                        FailurePolicy::Allow => assert!(answer.unwrap().allowed),
                        FailurePolicy::Deny => assert!(!answer.unwrap().allowed),
                        FailurePolicy::Fallback => {
                            assert!(answer.unwrap().allowed, "first use in memory");
                        }
                    }
                } else {
                    // Keys on the surviving masters are still decided by Redis.
                    assert!(answer.unwrap().allowed, "{policy:?} {key}");
                }
            }
            // Some keys lived on the killed master. Once the other masters
            // see it fail (node timeout: 2 s), a cluster without replicas
            // refuses every slot (CLUSTERDOWN): every key fails, and gets the
            // policy all the same.
            assert!(failed > 0, "{policy:?}: no key lived on the killed master");
            assert_eq!(alerts.load(Ordering::Relaxed) - alerts_before, failed);
        }
    });
}
