//! Outages on a real server: a check that timed out is never charged when
//! Redis comes back, the circuit breaker answers at once while Redis is away
//! and lets Redis decide again once it is back, and decisions made by a
//! failure policy keep `Decision`'s contract.
//!
//! Nothing here depends on how fast the machine is: the limiters under test
//! first wait until Redis has answered them once, what a key holds is read
//! by a twin with a timeout no loaded machine reaches, "at once" means a
//! check done on its first poll (no I/O), and what must happen after Redis
//! is back is waited for, never timed.

use crate::common;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use ratelab::redis::{Connection, FailurePolicy, RedisStore, ScriptBackend};
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, Decision, ErrorKind, Gcra, KnownAlgorithm,
    Quota,
};
use ratelab_testkit::redis::{RedisCluster, RedisServer, module_path};
use ratelab_testkit::replication::Relay;

const TIMEOUT: Duration = Duration::from_millis(200);
/// The timeout of a limiter that must not time out, and how long an event
/// (Redis answering again, a refund) is waited for.
const PATIENT: Duration = Duration::from_secs(30);

/// Every algorithm with `policy` and `timeout` under `prefix`, and the
/// breaker off so that every check goes to Redis.
struct Build<'a> {
    connection: &'a Connection,
    policy: FailurePolicy,
    prefix: &'a str,
    timeout: Duration,
}

impl AlgorithmVisitor for Build<'_> {
    type Output = Arc<dyn AsyncRateLimiter>;
    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
        Arc::new(
            RedisStore::builder(self.connection.clone(), algorithm)
                .prefix(self.prefix)
                .timeout(self.timeout)
                .breaker(0, Duration::ZERO)
                .on_failure(self.policy)
                .build(),
        )
    }
}

/// A limiter of `kind` with [`TIMEOUT`] and `policy`, and its patient twin
/// on the same keys (errors returned, [`PATIENT`]), which reads what a key
/// holds whatever the load.
fn with_twin(
    kind: AlgorithmKind,
    quota: Quota,
    connection: &Connection,
    policy: FailurePolicy,
) -> (Arc<dyn AsyncRateLimiter>, Arc<dyn AsyncRateLimiter>) {
    let prefix = common::unique_prefix();
    let build = |policy, timeout| {
        kind.visit(
            quota,
            Build {
                connection,
                policy,
                prefix: &prefix,
                timeout,
            },
        )
    };
    (build(policy, TIMEOUT), build(FailurePolicy::Error, PATIENT))
}

/// Waits until `done` answers true, for at most [`PATIENT`] (an event the
/// test waits for, not a speed it requires).
async fn wait_until<F: Future<Output = bool>>(mut done: impl FnMut() -> F, what: &str) {
    let deadline = Instant::now() + PATIENT;
    while !done().await {
        assert!(Instant::now() < deadline, "{PATIENT:?} and still no {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A peek of `key` answered by Redis, not by the failure policy: asked
/// again until one is (a limiter with a short timeout on a loaded machine,
/// or Redis not yet back). Peeks charge nothing, so asking again is free;
/// the limiter has then measured Redis's clock and loaded its script.
async fn redis_peek(limiter: &dyn AsyncRateLimiter, key: &[u8]) -> Decision {
    let deadline = Instant::now() + PATIENT;
    loop {
        if let Ok(decision) = limiter.check_async(key, 0).await
            && !decision.degraded
        {
            return decision;
        }
        assert!(Instant::now() < deadline, "Redis never answered a peek");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The timeout of the limiters whose replies a relay holds: longer than
/// the connection's own reply timeout used to be (redis-rs's default of
/// 500 ms, which dropped a reply held longer and with it the late refund),
/// and long enough that a loaded machine's check reaches Redis before its
/// deadline.
const HELD_TIMEOUT: Duration = Duration::from_secs(2);

/// A stall after the script ran and before its reply came back (the reply
/// held in a relay past the caller's timeout, [`HELD_TIMEOUT`]): the check
/// times out, the admission is on Redis while the reply waits, and once the
/// reply comes the limiter gives it back by its stamp; every algorithm, on
/// the scripts and the module, side by side. Without the late refund the
/// admission stayed charged.
#[test]
fn a_check_answered_after_its_timeout_is_given_back() {
    let (_, runtime, _) = common::shared();
    let module = module_path().to_str().expect("a UTF-8 path").to_owned();
    let server = RedisServer::start_with(&["--loadmodule", &module]);
    runtime.block_on(async {
        let mut cases = tokio::task::JoinSet::new();
        for backend in [ScriptBackend::Lua, ScriptBackend::Module] {
            for kind in AlgorithmKind::ALL {
                cases.spawn(late_reply_given_back(server.port(), backend, kind));
            }
        }
        while let Some(case) = cases.join_next().await {
            case.unwrap();
        }
    });
}

/// One algorithm on one backend: see
/// [`a_check_answered_after_its_timeout_is_given_back`].
async fn late_reply_given_back(port: u16, backend: ScriptBackend, kind: AlgorithmKind) {
    let quota = Quota::per_hour(10).unwrap();
    let relay = Relay::start(port);
    let relayed = Connection::single(&format!("redis://127.0.0.1:{}/", relay.port()))
        .await
        .unwrap();
    let direct = Connection::single(&format!("redis://127.0.0.1:{port}/"))
        .await
        .unwrap();
    let prefix = common::unique_prefix();
    struct On(Connection, ScriptBackend, String, Duration);
    impl AlgorithmVisitor for On {
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
    let limiter = kind.visit(quota, On(relayed, backend, prefix.clone(), HELD_TIMEOUT));
    let peeker = kind.visit(quota, On(direct, backend, prefix, PATIENT));
    // A first call measures Redis's clock.
    redis_peek(&*limiter, b"warm").await;
    relay.hold();
    let answer = limiter.check_async(b"k", 3).await;
    assert_eq!(
        answer.map_err(|e| e.kind()).err(),
        Some(ErrorKind::Timeout),
        "{kind:?} {backend:?}"
    );
    // The script ran: the key holds the admission while its reply waits in
    // the relay, longer than the timeout.
    let remaining = || async { peeker.check_async(b"k", 0).await.unwrap().remaining };
    wait_until(|| async { remaining().await == 7 }, "admission").await;
    relay.release();
    // The reply comes in, and the admission goes back.
    wait_until(|| async { remaining().await == 10 }, "refund").await;
    assert_eq!(remaining().await, 10, "{kind:?} {backend:?}");
}

/// A limiter waits for Redis as long as its own timeout says, on a node, a
/// cluster and through Sentinel: a stall of a second (longer than
/// redis-rs's default reply timeout of 500 ms, which used to fail such a
/// call with `timed out` whatever the limiter's timeout, and dropped the
/// late replies a limiter gives back) still ends in Redis's decision.
#[test]
fn a_check_waits_as_long_as_its_timeout_says() {
    let (_, runtime, _) = common::shared();
    let server = RedisServer::start();
    // Watching the server, never failing it over during the stall.
    let sentinel = RedisServer::start_sentinel(server.port(), "stalled", 1, 60_000);
    let cluster = RedisCluster::start();
    runtime.block_on(async {
        let single = Connection::single(&server.url()).await.unwrap();
        let sentinel = Connection::sentinel(&[sentinel.url()], "stalled")
            .await
            .unwrap();
        let clustered = Connection::cluster(&cluster.urls()).await.unwrap();
        for (connection, on_cluster) in [(single, false), (sentinel, false), (clustered, true)] {
            let limiter =
                RedisStore::builder(connection.clone(), Gcra::new(Quota::per_hour(10).unwrap()))
                    .prefix(common::unique_prefix())
                    .timeout(PATIENT)
                    .breaker(0, Duration::ZERO)
                    .build();
            redis_peek(&limiter, b"k").await;
            let nodes: Vec<&RedisServer> = if on_cluster {
                cluster.nodes().iter().collect()
            } else {
                vec![&server]
            };
            let pause = |paused: bool| {
                for node in &nodes {
                    if paused {
                        node.pause();
                    } else {
                        node.resume();
                    }
                }
            };
            pause(true);
            let pending = tokio::spawn({
                let limiter = limiter.clone();
                async move { limiter.check(b"k", 1).await }
            });
            tokio::time::sleep(Duration::from_secs(1)).await;
            pause(false);
            let decision = pending
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{}: {e}", connection.kind()));
            assert!(decision.allowed, "{}: {decision:?}", connection.kind());
            assert_eq!(decision.remaining, 9, "{}", connection.kind());
        }
    });
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
            let limiters: Vec<_> = AlgorithmKind::ALL
                .iter()
                .map(|&kind| (kind, with_twin(kind, quota, &connection, policy)))
                .collect();
            for (_, (limiter, patient)) in &limiters {
                for _ in 0..3 {
                    assert!(patient.check_async(b"k", 1).await.unwrap().allowed);
                }
                redis_peek(&**limiter, b"k").await;
            }
            server.pause();
            // The algorithms side by side, each waiting out its own timeouts.
            let mut paused = tokio::task::JoinSet::new();
            for (kind, (limiter, _)) in &limiters {
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
            for (kind, (_, patient)) in &limiters {
                // A peek: what the key holds is what the answered checks took.
                let peek = patient.check_async(b"k", 0).await.unwrap();
                assert_eq!(peek.remaining, 7, "{kind:?} {policy:?}: {peek:?}");
            }
        }
    });
}

/// Stalls longer than the timeout charge none of the checks that timed
/// out: each script's deadline is its caller's own give-up instant on
/// Redis's clock, from a measured offset, with no fixed allowance (with the
/// old allowance of 500 ms, a stall under about 600 ms charged them). The
/// stall ends once every check has timed out and `stall` ms have passed,
/// whichever is later: on an idle machine 150, 300 and 450 ms.
#[test]
fn stalls_of_150_300_and_450_ms_charge_no_check_that_timed_out() {
    let (_, runtime, _) = common::shared();
    let server = RedisServer::start();
    let quota = Quota::per_hour(10).unwrap();
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        let prefix = common::unique_prefix();
        let build = |timeout| {
            RedisStore::builder(connection.clone(), Gcra::new(quota))
                .prefix(prefix.clone())
                .timeout(timeout)
                .breaker(0, Duration::ZERO)
                .build()
        };
        let limiter = Arc::new(build(Duration::from_millis(100)));
        let patient = build(PATIENT);
        // A first call measures Redis's clock.
        redis_peek(&*limiter, b"warm").await;
        for (round, stall) in [150u64, 300, 450].into_iter().enumerate() {
            let keys: Vec<String> = (0..10).map(|i| format!("stall-{round}-{i}")).collect();
            // The checks reach a Redis that stalls, spread over its first
            // 50 ms.
            server.pause();
            let paused = Instant::now();
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
            let mut answers = Vec::new();
            for task in tasks {
                answers.push(task.await.unwrap());
            }
            tokio::time::sleep(Duration::from_millis(stall).saturating_sub(paused.elapsed())).await;
            server.resume();
            for (key, answer) in keys.iter().zip(answers) {
                // Nothing answers a paused server: each check timed out.
                let error = answer.expect_err("answered by a paused server");
                assert_eq!(error.kind(), ErrorKind::Timeout, "{key}: {error}");
                let peek = patient.peek(key.as_bytes(), 0).await.unwrap();
                assert_eq!(
                    peek.remaining, 10,
                    "{key}: timed out in a {stall} ms stall, yet charged"
                );
            }
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
            .map(|&kind| {
                let twins = with_twin(kind, quota, &connection, FailurePolicy::Deny);
                (kind, twins)
            })
            .collect();
        // Keys on every master.
        let keys: Vec<String> = (0..6).map(|i| format!("user-{i}")).collect();
        for (_, (limiter, patient)) in &limiters {
            for key in &keys {
                assert!(
                    patient
                        .check_async(key.as_bytes(), 3)
                        .await
                        .unwrap()
                        .allowed
                );
            }
            redis_peek(&**limiter, keys[0].as_bytes()).await;
        }
        for node in cluster.nodes() {
            node.pause();
        }
        // All at once, so that the pause stays short of the cluster's node
        // timeout (a longer one only delays the peeks below).
        let mut tasks = Vec::new();
        for (_, (limiter, _)) in &limiters {
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
        for (kind, (_, patient)) in &limiters {
            for key in &keys {
                // Asked again while the cluster settles after the pause.
                let deadline = Instant::now() + PATIENT;
                let peek = loop {
                    match patient.check_async(key.as_bytes(), 0).await {
                        Ok(decision) => break decision,
                        Err(error) => {
                            assert!(Instant::now() < deadline, "{kind:?} {key}: {error}");
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                };
                assert_eq!(peek.remaining, 7, "{kind:?} {key}: {peek:?}");
            }
        }
    });
}

/// `check`, polled once: `Ok` if it was done then (no I/O, no timer: an
/// answer given at once, whatever the machine's speed), else what it
/// answers once awaited.
async fn at_once<T>(check: impl Future<Output = T>) -> Result<T, T> {
    let mut check = pin!(check);
    match check.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(answer) => Ok(answer),
        Poll::Pending => Err(check.await),
    }
}

#[test]
fn an_open_breaker_answers_at_once_then_closes_once_redis_is_back() {
    let (_, runtime, _) = common::shared();
    let server = RedisServer::start();
    let quota = Quota::per_second(100).unwrap();
    let cool_down = Duration::from_millis(500);
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
                .breaker(3, cool_down)
                .on_failure(policy)
                .build();
            let deadline = Instant::now() + PATIENT;
            while limiter.stats().answered == 0 {
                assert!(Instant::now() < deadline, "Redis never answered");
                let _ = limiter.check(b"k", 1).await;
            }
            server.pause();
            let mut failures = 0;
            while !limiter.stats().breaker_open {
                let _ = limiter.check(b"k", 1).await;
                failures += 1;
                assert!(failures <= 3, "{policy:?}: {:?}", limiter.stats());
            }
            let before = limiter.stats();
            let (mut short_circuited, mut probes) = (0u64, 0u64);
            let open = Instant::now();
            for _ in 0..300 {
                let answer = match at_once(limiter.check(b"k", 1)).await {
                    Ok(answer) => {
                        short_circuited += 1;
                        answer
                    }
                    Err(answer) => {
                        probes += 1;
                        answer
                    }
                };
                match policy {
                    FailurePolicy::Deny => {
                        let decision = answer.unwrap();
                        assert!(!decision.allowed);
                        // The wait is the breaker's cool-down (or the probe's
                        // timeout): when Redis is tried again.
                        assert!(decision.retry_after() <= cool_down);
                        assert!(decision.retry_after() > Duration::ZERO);
                    }
                    FailurePolicy::Error => {
                        let error = answer.unwrap_err();
                        if error.kind() == ErrorKind::CircuitOpen {
                            assert!(error.retry_after().unwrap() <= cool_down);
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
            // At most one probe per cool-down that could have passed (the
            // loop's length measured: a bound on a count, not a speed); the
            // others were answered without a call, on their first poll.
            let cool_downs = open.elapsed().as_micros() / cool_down.as_micros();
            let stats = limiter.stats();
            println!("{policy:?}: breaker open, {probes} probes of 300 checks");
            assert!(
                u128::from(probes) <= cool_downs + 1,
                "{probes} probes, {stats:?}"
            );
            assert_eq!(
                stats.short_circuited - before.short_circuited,
                short_circuited,
                "{stats:?}"
            );
            assert_eq!(stats.timeouts - before.timeouts, probes, "{stats:?}");
            server.resume();
            // Redis decides again at the next probe it answers in time.
            let resumed = Instant::now();
            let answered = limiter.stats().answered;
            while limiter.stats().answered == answered {
                assert!(resumed.elapsed() < PATIENT, "{:?}", limiter.stats());
                let _ = limiter.check(b"k", 1).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            println!(
                "{policy:?}: Redis decides again {:?} after SIGCONT",
                resumed.elapsed()
            );
            let stats = limiter.stats();
            assert!(!stats.breaker_open);
            assert_eq!(stats.cool_down_left, Duration::ZERO);
        }
    });
}

#[test]
fn a_killed_server_opens_the_breaker_and_a_restart_closes_it() {
    let (_, runtime, _) = common::shared();
    let mut server = RedisServer::start();
    // Longer than any pause between two checks on a loaded machine: the
    // check after the threshold finds the breaker still open.
    let cool_down = Duration::from_secs(3);
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        let limiter = RedisStore::builder(connection, Gcra::new(Quota::per_second(10).unwrap()))
            .prefix(common::unique_prefix())
            .timeout(TIMEOUT)
            .breaker(2, cool_down)
            .build();
        let deadline = Instant::now() + PATIENT;
        while limiter.stats().answered == 0 {
            assert!(Instant::now() < deadline, "Redis never answered");
            let _ = limiter.check(b"k", 1).await;
        }
        server.kill();
        for _ in 0..2 {
            assert!(limiter.check(b"k", 1).await.unwrap_err().is_unavailable());
        }
        let error = limiter.check(b"k", 1).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::CircuitOpen, "{error}");
        assert!(limiter.stats().breaker_open);
        assert!(limiter.stats().cool_down_left <= cool_down);
        server.restart();
        let deadline = Instant::now() + PATIENT;
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
            .map(|&kind| with_twin(kind, quota, &connection, FailurePolicy::Allow).0)
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
            let deadline = Instant::now() + PATIENT;
            while Instant::now() < deadline {
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
                        .timeout(PATIENT)
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
