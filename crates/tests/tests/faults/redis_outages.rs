//! Outages on a real server: a check that timed out is never charged when
//! Redis comes back, the circuit breaker answers at once while Redis is away
//! and lets Redis decide again soon after it is back, and decisions made by
//! a failure policy keep `Decision`'s contract.

use crate::common;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelab::redis::{Connection, FailurePolicy, RedisStore, ScriptBackend};
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, ErrorKind, Gcra, KnownAlgorithm, Quota,
};
use ratelab_testkit::redis::{RedisCluster, RedisServer, module_path};
use ratelab_testkit::replication::Relay;

const TIMEOUT: Duration = Duration::from_millis(200);

/// Every algorithm with `policy`, and the breaker off so that every check
/// goes to Redis.
struct Build<'a>(&'a Connection, FailurePolicy);

impl AlgorithmVisitor for Build<'_> {
    type Output = Box<dyn AsyncRateLimiter>;
    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
        Box::new(
            RedisStore::builder(self.0.clone(), algorithm)
                .prefix(common::unique_prefix())
                .timeout(TIMEOUT)
                .breaker(0, Duration::ZERO)
                .on_failure(self.1)
                .build(),
        )
    }
}

/// A stall after the script ran and before its reply came back (the reply
/// held in a relay past the caller's timeout): the check times out, the
/// admission is on Redis while the reply waits, and once the reply comes
/// the limiter gives it back by its stamp; every algorithm, on the scripts
/// and the module. Without the late refund the admission stayed charged.
#[test]
fn a_check_answered_after_its_timeout_is_given_back() {
    let (_, runtime, _) = common::shared();
    let module = module_path().to_str().expect("a UTF-8 path").to_owned();
    let server = RedisServer::start_with(&["--loadmodule", &module]);
    let quota = Quota::per_hour(10).unwrap();
    runtime.block_on(async {
        let direct = Connection::single(&server.url()).await.unwrap();
        for backend in [ScriptBackend::Lua, ScriptBackend::Module] {
            for kind in AlgorithmKind::ALL {
                let relay = Relay::start(server.port());
                let relayed = Connection::single(&format!("redis://127.0.0.1:{}/", relay.port()))
                    .await
                    .unwrap();
                let prefix = common::unique_prefix();
                struct Build(Connection, ScriptBackend, String, Duration);
                impl AlgorithmVisitor for Build {
                    type Output = Arc<dyn AsyncRateLimiter>;
                    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
                        Arc::new(
                            RedisStore::builder(self.0, algorithm)
                                .backend(self.1)
                                .prefix(self.2)
                                .timeout(self.3)
                                .breaker(0, Duration::ZERO)
                                .build(),
                        )
                    }
                }
                let limiter = kind.visit(
                    quota,
                    Build(relayed, backend, prefix.clone(), Duration::from_millis(200)),
                );
                let peeker = kind.visit(
                    quota,
                    Build(direct.clone(), backend, prefix, Duration::from_secs(5)),
                );
                // A first call measures Redis's clock.
                assert!(limiter.check_async(b"warm", 1).await.unwrap().allowed);
                relay.hold();
                let answer = limiter.check_async(b"k", 3).await;
                assert_eq!(
                    answer.map_err(|e| e.kind()).err(),
                    Some(ErrorKind::Timeout),
                    "{kind:?} {backend:?}"
                );
                // The script ran: the key holds the admission while its
                // reply waits in the relay.
                let remaining = || async { peeker.check_async(b"k", 0).await.unwrap().remaining };
                wait_until(|| async { remaining().await == 7 }, "the admission").await;
                relay.release();
                // The reply comes in, and the admission goes back.
                wait_until(|| async { remaining().await == 10 }, "the refund").await;
                assert_eq!(remaining().await, 10, "{kind:?} {backend:?}");
            }
        }
    });
}

/// Waits until `done` answers true, for at most 30 s (an event the test
/// waits for, not a speed it requires).
async fn wait_until<F: Future<Output = bool>>(mut done: impl FnMut() -> F, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(Instant::now() < deadline, "30 s and still no {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn checks_that_timed_out_during_a_pause_are_never_charged() {
    let (_, runtime, _) = common::shared();
    let server = RedisServer::start();
    // Nothing comes back during the test: 10 an hour.
    let quota = Quota::per_hour(10).unwrap();
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        for policy in [
            FailurePolicy::Deny,
            FailurePolicy::Allow,
            FailurePolicy::Error,
        ] {
            let limiters: Vec<(AlgorithmKind, Arc<dyn AsyncRateLimiter>)> = AlgorithmKind::ALL
                .iter()
                .map(|kind| (*kind, kind.visit(quota, Build(&connection, policy)).into()))
                .collect();
            for (_, limiter) in &limiters {
                for _ in 0..3 {
                    assert!(limiter.check_async(b"k", 1).await.unwrap().allowed);
                }
            }
            server.pause();
            // The algorithms side by side, each waiting out its own timeouts.
            let mut paused = tokio::task::JoinSet::new();
            for (kind, limiter) in &limiters {
                let (kind, limiter) = (*kind, Arc::clone(limiter));
                paused.spawn(async move {
                    let mut answers = Vec::new();
                    for _ in 0..4 {
                        answers.push(limiter.check_async(b"k", 1).await);
                    }
                    (kind, answers)
                });
            }
            while let Some(joined) = paused.join_next().await {
                let (kind, answers) = joined.unwrap();
                for answer in answers {
                    match policy {
                        FailurePolicy::Error => {
                            assert_eq!(answer.unwrap_err().kind(), ErrorKind::Timeout, "{kind:?}");
                        }
                        FailurePolicy::Allow => assert!(answer.unwrap().allowed),
                        _ => assert!(!answer.unwrap().allowed),
                    }
                }
            }
            // Every deadline (the timeout, on Redis's clock) is long past.
            std::thread::sleep(Duration::from_millis(500));
            server.resume();
            for (kind, limiter) in &limiters {
                // A peek: what the key holds is what the answered checks took.
                let peek = loop {
                    match limiter.check_async(b"k", 0).await {
                        Ok(decision) => break decision,
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                };
                assert_eq!(peek.remaining, 7, "{kind:?} {policy:?}: {peek:?}");
            }
        }
    });
}

/// Stalls just longer than the timeout charge none of the checks that timed
/// out: each script's deadline is its caller's own give-up instant on
/// Redis's clock, from a measured offset, with no fixed allowance (with the
/// old allowance of 500 ms, a stall under about 600 ms charged them).
#[test]
fn stalls_of_150_300_and_450_ms_charge_no_check_that_timed_out() {
    let (_, runtime, _) = common::shared();
    let server = RedisServer::start();
    let quota = Quota::per_hour(10).unwrap();
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        let limiter = Arc::new(
            RedisStore::builder(connection, Gcra::new(quota))
                .prefix(common::unique_prefix())
                .timeout(Duration::from_millis(100))
                .breaker(0, Duration::ZERO)
                .build(),
        );
        // A first call measures Redis's clock.
        assert!(limiter.check(b"warm", 1).await.unwrap().allowed);
        for (round, stall) in [150u64, 300, 450].into_iter().enumerate() {
            let keys: Vec<String> = (0..10).map(|i| format!("stall-{round}-{i}")).collect();
            // The checks reach a Redis that stalls for `stall` ms, spread
            // over its first 50 ms.
            server.pause();
            let tasks: Vec<_> = keys
                .iter()
                .enumerate()
                .map(|(i, key)| {
                    let (limiter, key) = (limiter.clone(), key.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(5 * i as u64)).await;
                        limiter.check(key.as_bytes(), 1).await
                    })
                })
                .collect();
            tokio::time::sleep(Duration::from_millis(stall)).await;
            server.resume();
            let mut timed_out = 0;
            for (key, task) in keys.iter().zip(tasks) {
                let answer = task.await.unwrap();
                let peek = limiter.peek(key.as_bytes(), 0).await.unwrap();
                match answer {
                    Ok(decision) => {
                        assert!(decision.allowed, "{key}");
                        assert_eq!(peek.remaining, 9, "{key}: answered, so charged");
                    }
                    Err(error) => {
                        assert_eq!(error.kind(), ErrorKind::Timeout, "{key}: {error}");
                        timed_out += 1;
                        assert_eq!(
                            peek.remaining, 10,
                            "{key}: timed out after a {stall} ms stall, yet charged"
                        );
                    }
                }
            }
            // The stall outlasted every check's timeout.
            assert_eq!(timed_out, keys.len(), "{stall} ms");
        }
    });
}

#[test]
fn checks_that_timed_out_on_a_paused_cluster_are_never_charged() {
    let (_, runtime, _) = common::shared();
    let cluster = RedisCluster::start();
    let quota = Quota::per_hour(10).unwrap();
    runtime.block_on(async {
        let connection = Connection::cluster(&cluster.urls()).await.unwrap();
        let limiters: Vec<_> = AlgorithmKind::ALL
            .iter()
            .map(|kind| {
                let limiter: Arc<dyn AsyncRateLimiter> =
                    Arc::from(kind.visit(quota, Build(&connection, FailurePolicy::Deny)));
                (*kind, limiter)
            })
            .collect();
        // Keys on every master.
        let keys: Vec<String> = (0..6).map(|i| format!("user-{i}")).collect();
        for (_, limiter) in &limiters {
            for key in &keys {
                assert!(
                    limiter
                        .check_async(key.as_bytes(), 3)
                        .await
                        .unwrap()
                        .allowed
                );
            }
        }
        // Shorter than the cluster's node timeout: no node is failed over.
        for node in cluster.nodes() {
            node.pause();
        }
        // All at once, so that the pause stays well under the node timeout.
        let mut tasks = Vec::new();
        for (_, limiter) in &limiters {
            for key in &keys {
                let (limiter, key) = (limiter.clone(), key.clone());
                tasks.push(tokio::spawn(async move {
                    limiter
                        .check_async(key.as_bytes(), 1)
                        .await
                        .unwrap()
                        .allowed
                }));
            }
        }
        for task in tasks {
            assert!(!task.await.unwrap());
        }
        std::thread::sleep(Duration::from_millis(300));
        for node in cluster.nodes() {
            node.resume();
        }
        for (kind, limiter) in &limiters {
            for key in &keys {
                let peek = loop {
                    match limiter.check_async(key.as_bytes(), 0).await {
                        Ok(decision) => break decision,
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                };
                assert_eq!(peek.remaining, 7, "{kind:?} {key}: {peek:?}");
            }
        }
    });
}

#[test]
fn an_open_breaker_answers_at_once_then_closes_soon_after_redis_is_back() {
    let (_, runtime, _) = common::shared();
    let server = RedisServer::start();
    let quota = Quota::per_second(100).unwrap();
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        for policy in [
            FailurePolicy::Deny,
            FailurePolicy::Error,
            FailurePolicy::Allow,
        ] {
            let limiter = RedisStore::builder(connection.clone(), Gcra::new(quota))
                .prefix(common::unique_prefix())
                .timeout(TIMEOUT)
                .breaker(3, Duration::from_millis(500))
                .on_failure(policy)
                .build();
            assert!(limiter.check(b"k", 1).await.unwrap().allowed);
            server.pause();
            let mut failures = 0;
            while !limiter.stats().breaker_open {
                let _ = limiter.check(b"k", 1).await;
                failures += 1;
                assert!(failures <= 3, "{policy:?}: {:?}", limiter.stats());
            }
            let mut latencies = Vec::new();
            for _ in 0..300 {
                let started = Instant::now();
                let answer = limiter.check(b"k", 1).await;
                latencies.push(started.elapsed());
                match policy {
                    FailurePolicy::Deny => {
                        let decision = answer.unwrap();
                        assert!(!decision.allowed);
                        // The wait is the breaker's cool-down (or the probe's
                        // timeout): when Redis is tried again.
                        assert!(decision.retry_after() <= Duration::from_millis(500));
                        assert!(decision.retry_after() > Duration::ZERO);
                    }
                    FailurePolicy::Error => {
                        let error = answer.unwrap_err();
                        if error.kind() == ErrorKind::CircuitOpen {
                            assert!(error.retry_after().unwrap() <= Duration::from_millis(500));
                        } else {
                            // The one probe after a cool-down.
                            assert_eq!(error.kind(), ErrorKind::Timeout);
                        }
                    }
                    _ => {
                        let decision = answer.unwrap();
                        assert!(decision.allowed);
                        assert!(decision.reset_after() > Duration::ZERO, "{decision:?}");
                        assert!(decision.remaining < decision.limit);
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let stats = limiter.stats();
            assert!(stats.short_circuited > 250, "{stats:?}");
            // Probes (one per cool-down) pay the timeout; the rest do not.
            latencies.sort();
            let p99 = latencies[latencies.len() * 99 / 100];
            let p50 = latencies[latencies.len() / 2];
            println!("{policy:?}: breaker open, p50 {p50:?}, p99 {p99:?}");
            assert!(p99 < Duration::from_millis(20), "p99 {p99:?}");
            server.resume();
            let resumed = Instant::now();
            let answered = limiter.stats().answered;
            while limiter.stats().answered == answered {
                assert!(
                    resumed.elapsed() < Duration::from_secs(3),
                    "{:?}",
                    limiter.stats()
                );
                let _ = limiter.check(b"k", 1).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let recovery = resumed.elapsed();
            println!("{policy:?}: Redis decides again {recovery:?} after SIGCONT");
            assert!(recovery < Duration::from_millis(1500), "{recovery:?}");
            assert!(!limiter.stats().breaker_open);
            assert_eq!(limiter.stats().cool_down_left, Duration::ZERO);
        }
    });
}

#[test]
fn a_killed_server_opens_the_breaker_and_a_restart_closes_it() {
    let (_, runtime, _) = common::shared();
    let mut server = RedisServer::start();
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        let limiter = RedisStore::builder(connection, Gcra::new(Quota::per_second(10).unwrap()))
            .prefix(common::unique_prefix())
            .timeout(TIMEOUT)
            .breaker(2, Duration::from_millis(300))
            .build();
        assert!(limiter.check(b"k", 1).await.unwrap().allowed);
        server.kill();
        for _ in 0..2 {
            assert!(limiter.check(b"k", 1).await.unwrap_err().is_unavailable());
        }
        let error = limiter.check(b"k", 1).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::CircuitOpen, "{error}");
        assert!(limiter.stats().breaker_open);
        assert!(limiter.stats().cool_down_left <= Duration::from_millis(300));
        server.restart();
        let deadline = Instant::now() + Duration::from_secs(10);
        while limiter.check(b"k", 1).await.is_err() {
            assert!(Instant::now() < deadline, "{:?}", limiter.stats());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!limiter.stats().breaker_open);
        assert!(limiter.stats().breaker_opened >= 1);
    });
}

#[test]
fn fail_open_decisions_keep_the_decision_contract() {
    let (_, runtime, _) = common::shared();
    let mut server = RedisServer::start();
    let quota = Quota::per_second(10).unwrap();
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        let limiters: Vec<_> = AlgorithmKind::ALL
            .iter()
            .map(|kind| kind.visit(quota, Build(&connection, FailurePolicy::Allow)))
            .collect();
        server.kill();
        for limiter in &limiters {
            for cost in [0, 1, 10] {
                let decision = limiter.check_async(b"k", cost).await.unwrap();
                assert!(decision.allowed);
                assert_eq!(decision.remaining, 10 - u64::from(cost));
                // Full (reset zero) exactly when nothing is missing.
                assert_eq!(decision.reset_after().is_zero(), cost == 0, "{decision:?}");
                assert_eq!(decision.retry_after(), Duration::ZERO);
            }
        }
    });
}

/// A limiter pointed at a read-only replica: a check that must write (every
/// admission, and the sliding log's pruning on every check) is refused
/// there with `READONLY`, an outage like any other (the failure policy
/// answers, with an alert), never corrupt state; a peek writes nothing, so
/// the replica answers it, as the master would. (The sliding log's script
/// used to report `READONLY` as "a zset, not a zset": a data error that
/// bypassed the failure policy.)
#[test]
fn on_a_replica_a_check_is_an_outage_and_a_peek_answers() {
    use ratelab::redis::{ScriptBackend, TimeSource};
    use ratelab::{Clock, ManualClock};
    use std::sync::atomic::{AtomicU64, Ordering};

    let (_, runtime, _) = common::shared();
    let master = RedisServer::start();
    // Caught up, and its master streaming to it: `WAIT` below counts it.
    let replica = RedisServer::start_replica_of(master.port(), &[]);
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    runtime.block_on(async {
        let primary = Connection::single(&master.url()).await.unwrap();
        let copy = Connection::single(&replica.url()).await.unwrap();
        let linked = async {
            for _ in 0..200 {
                let info: String = copy
                    .query(redis::cmd("INFO").arg("replication"))
                    .await
                    .unwrap();
                if info.contains("master_link_status:up") {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            false
        };
        assert!(linked.await, "the replica never linked to its master");
        let clock = ManualClock::new();
        clock.set(1_700_000_000_000_000);
        struct On<'a>(
            &'a Connection,
            &'a str,
            &'a ManualClock,
            FailurePolicy,
            Arc<AtomicU64>,
        );
        impl AlgorithmVisitor for On<'_> {
            type Output = Box<dyn AsyncRateLimiter>;
            fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
                let alerts = self.4;
                Box::new(
                    RedisStore::builder(self.0.clone(), algorithm)
                        .prefix(self.1)
                        .backend(ScriptBackend::Lua)
                        .time_source(TimeSource::Client(
                            Arc::new(self.2.clone()) as Arc<dyn Clock>
                        ))
                        .timeout(Duration::from_secs(2))
                        .breaker(0, Duration::ZERO)
                        .on_failure(self.3)
                        .on_alert(move |_| {
                            alerts.fetch_add(1, Ordering::Relaxed);
                        })
                        .build(),
                )
            }
        }
        for kind in AlgorithmKind::ALL {
            let prefix = common::unique_prefix();
            let alerts = Arc::new(AtomicU64::new(0));
            let on = |connection, policy| {
                kind.visit(
                    quota,
                    On(connection, &prefix, &clock, policy, alerts.clone()),
                )
            };
            let writer = on(&primary, FailurePolicy::Error);
            for _ in 0..3 {
                assert!(writer.check_async(b"k", 1).await.unwrap().allowed, "{kind}");
            }
            let acknowledged: i64 = primary
                .query(redis::cmd("WAIT").arg(1).arg(5_000))
                .await
                .unwrap();
            assert_eq!(acknowledged, 1, "{kind}");
            let on_master = writer.peek_async(b"k", 1).await.unwrap();

            let reader = on(&copy, FailurePolicy::Error);
            let peeked = reader.peek_async(b"k", 1).await.unwrap();
            assert_eq!(peeked, on_master, "{kind}: a peek on the replica");
            let error = reader.check_async(b"k", 1).await.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Backend, "{kind}: {error}");
            assert!(
                error.to_string().contains("read only replica"),
                "{kind}: {error}"
            );

            let open = on(&copy, FailurePolicy::Allow);
            let before = alerts.load(Ordering::Relaxed);
            let answered = open.check_async(b"k", 1).await.unwrap();
            assert!(
                answered.allowed && answered.degraded,
                "{kind}: {answered:?}"
            );
            assert_eq!(alerts.load(Ordering::Relaxed), before + 1, "{kind}");
        }
    });
}
