//! Faults: the server killed mid-run, `SCRIPT FLUSH` mid-run, the server
//! paused, a cluster master killed. Each failure policy does what it says,
//! no call waits longer than its timeout, alerts are raised where a program
//! can see them, and checks succeed again once a server is back.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ratelab::Gcra;
use ratelab::redis::{Connection, FailurePolicy, RedisLimiter, RedisStore, Stats};
use ratelab::{Error, Quota};
use ratelab_testkit::redis::{RedisCluster, RedisServer};

const TIMEOUT: Duration = Duration::from_millis(200);
/// What "never longer than the timeout" tolerates for scheduling noise.
const NOISE: Duration = Duration::from_millis(800);

fn quota() -> Quota {
    Quota::per_minute(3).unwrap()
}

/// A limiter with `policy`, counting the alerts its callback receives.
fn limiter(connection: &Connection, policy: FailurePolicy) -> (RedisLimiter<Gcra>, Arc<AtomicU64>) {
    let alerts = Arc::new(AtomicU64::new(0));
    let seen = alerts.clone();
    let limiter = RedisStore::builder(connection.clone(), Gcra::new(quota()))
        .prefix(common::unique_prefix())
        .timeout(TIMEOUT)
        .on_failure(policy)
        .on_alert(move |alert| {
            assert_eq!(alert.algorithm, "gcra");
            seen.fetch_add(1, Ordering::Relaxed);
        })
        .build();
    (limiter, alerts)
}

/// What each policy answers while Redis is away: `(allowed, error)`, timed.
async fn while_away(limiter: &RedisLimiter<Gcra>) -> Vec<Result<bool, String>> {
    let mut answers = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let answer = limiter.check(b"k", 1).await;
        assert!(
            started.elapsed() < TIMEOUT + NOISE,
            "a check took {:?}",
            started.elapsed()
        );
        answers.push(answer.map(|d| d.allowed).map_err(|e| e.to_string()));
    }
    answers
}

/// Checks until one is answered by Redis again (the connection reconnects).
async fn until_answered(limiter: &RedisLimiter<Gcra>) -> Stats {
    let deadline = Instant::now() + Duration::from_secs(15);
    let before = limiter.stats().answered;
    while limiter.stats().answered == before {
        assert!(Instant::now() < deadline, "Redis never answered again");
        let _ = limiter.check(b"again", 1).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    limiter.stats()
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

/// One limiter per policy on `connection`, each answered by Redis once.
async fn warmed_up(
    connection: &Connection,
) -> Vec<(FailurePolicy, (RedisLimiter<Gcra>, Arc<AtomicU64>))> {
    let limiters: Vec<_> = POLICIES
        .iter()
        .map(|&p| (p, limiter(connection, p)))
        .collect();
    for (_, (limiter, _)) in &limiters {
        assert!(limiter.check(b"warm", 1).await.unwrap().allowed);
    }
    limiters
}

#[test]
fn a_killed_server_gets_each_policy_then_recovers_on_restart() {
    let (_, runtime, _) = common::shared();
    let mut server = RedisServer::start();
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        let limiters = warmed_up(&connection).await;
        server.kill();
        for (policy, (limiter, alerts)) in &limiters {
            let answers = while_away(limiter).await;
            expect_policy(*policy, &answers);
            assert_eq!(
                alerts.load(Ordering::Relaxed),
                5,
                "{policy:?}: one alert per failure"
            );
            assert_eq!(limiter.stats().errors + limiter.stats().timeouts, 5);
        }
        server.restart();
        for (policy, (limiter, _)) in &limiters {
            let stats = until_answered(limiter).await;
            assert!(stats.answered >= 2, "{policy:?}: {stats:?}");
            // The restarted server is empty: the quota starts afresh there.
            assert!(limiter.check(b"k", 1).await.unwrap().allowed, "{policy:?}");
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
        for (policy, (limiter, alerts)) in &limiters {
            let answers = while_away(limiter).await;
            expect_policy(*policy, &answers);
            if *policy == FailurePolicy::Error {
                let timeout = Error::Timeout(TIMEOUT).to_string();
                assert!(
                    answers.iter().all(|a| a == &Err(timeout.clone())),
                    "{answers:?}"
                );
            }
            assert_eq!(limiter.stats().timeouts, 5, "{policy:?}");
            assert_eq!(alerts.load(Ordering::Relaxed), 5);
        }
        server.resume();
        for (_, (limiter, _)) in &limiters {
            until_answered(limiter).await;
        }
    });
}

#[test]
fn a_script_flush_mid_run_is_invisible_to_callers() {
    let (server, runtime, connection) = common::shared();
    runtime.block_on(async {
        let (limiter, alerts) = limiter(connection, FailurePolicy::Error);
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
        for (_, (limiter, _)) in &limiters {
            for key in &keys {
                assert!(limiter.check(key.as_bytes(), 1).await.unwrap().allowed);
            }
        }
        cluster.nodes_mut()[1].kill();
        for (policy, (limiter, alerts)) in &limiters {
            let mut failed = 0;
            for key in &keys {
                let started = Instant::now();
                let answer = limiter.check(key.as_bytes(), 1).await;
                assert!(
                    started.elapsed() < TIMEOUT + NOISE,
                    "{policy:?}: {:?}",
                    started.elapsed()
                );
                // A check the open breaker answered without calling Redis
                // is a failure too.
                let stats = limiter.stats();
                let was_failure = stats.errors + stats.timeouts + stats.short_circuited > failed;
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
            assert_eq!(alerts.load(Ordering::Relaxed), failed);
        }
    });
}
