//! Strict mode (`RedisLimiterBuilder::replicas`): an admission counts only
//! once the replicas asked for acknowledge it, through the scripts and
//! through the native module, on one node and on a cluster.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelab_core::{ErrorKind, ManualClock, Quota};
use ratelab_gcra::Gcra;
use ratelab_redis::{Connection, FailurePolicy, RedisLimiter, RedisStore, ScriptBackend, TimeSource};
use ratelab_testkit::redis::{RedisCluster, RedisServer, module_path};

fn quota() -> Quota {
    Quota::per_minute(60)
        .and_then(|q| q.with_burst(5))
        .expect("a quota")
}

/// A clock that stands still at the same instant for every limiter: no
/// unit comes back between two calls, however long they take.
fn frozen() -> TimeSource {
    TimeSource::Client(Arc::new(ManualClock::starting_at(1_700_000_000_000_000)))
}

/// A timeout no healthy call reaches on a loaded machine: strict mode's
/// waits are bounded by their own timeouts here.
const PATIENT: Duration = Duration::from_secs(30);

/// A server, with the module loaded for [`ScriptBackend::Module`].
fn server(backend: ScriptBackend) -> RedisServer {
    match backend {
        ScriptBackend::Module => {
            RedisServer::start_with(&["--loadmodule", module_path().to_str().expect("UTF-8")])
        }
        _ => RedisServer::start(),
    }
}

fn replica_of(master: &RedisServer, backend: ScriptBackend) -> RedisServer {
    match backend {
        ScriptBackend::Module => RedisServer::start_replica_of(
            master.port(),
            &["--loadmodule", module_path().to_str().expect("UTF-8")],
        ),
        _ => RedisServer::start_replica_of(master.port(), &[]),
    }
}

async fn strict(
    url: &str,
    backend: ScriptBackend,
    policy: FailurePolicy,
    wait: Duration,
) -> RedisLimiter<Gcra> {
    let connection = Connection::single(url).await.expect("a connection");
    RedisStore::builder(connection, Gcra::new(quota()))
        .backend(backend)
        .time_source(frozen())
        .timeout(PATIENT)
        .on_failure(policy)
        .replicas(1, wait)
        .build()
}

const BACKENDS: [ScriptBackend; 2] = [ScriptBackend::Lua, ScriptBackend::Module];

#[tokio::test]
async fn without_the_replicas_an_admission_is_an_outage_and_stays_charged() {
    for backend in BACKENDS {
        // No replica at all: WAIT 1 can only time out.
        let master = server(backend);
        let wait = Duration::from_millis(10);
        let limiter = strict(&master.url(), backend, FailurePolicy::Error, wait).await;
        let error = limiter.check(b"k", 2).await.expect_err("unconfirmed");
        assert_eq!(error.kind(), ErrorKind::Backend, "{error}");
        assert!(error.is_unavailable());
        assert!(error.to_string().contains("0 of the 1 replicas"), "{error}");
        assert_eq!(limiter.store().stats().unconfirmed, 1);
        assert_eq!(limiter.stats().errors, 1);
        // The units stay charged on the master.
        assert_eq!(limiter.peek(b"k", 0).await.expect("a peek").remaining, 3);
        // Peeks and resets write no charge: not waited for.
        limiter.reset(b"k").await.expect("a reset");
        assert_eq!(limiter.peek(b"k", 0).await.expect("a peek").remaining, 5);
        assert_eq!(limiter.store().stats().unconfirmed, 1);

        // The failure policy decides what the check answers.
        let deny = strict(&master.url(), backend, FailurePolicy::Deny, wait).await;
        let refused = deny.check(b"d", 1).await.expect("the policy answers");
        assert!(!refused.allowed && refused.degraded);
        let allow = strict(&master.url(), backend, FailurePolicy::Allow, wait).await;
        let admitted = allow.check(b"a", 1).await.expect("the policy answers");
        assert!(admitted.allowed && admitted.degraded);

        // A refusal charged nothing: answered as is, not waited for.
        let plain = RedisStore::builder(
            Connection::single(&master.url())
                .await
                .expect("a connection"),
            Gcra::new(quota()),
        )
        .backend(backend)
        .time_source(frozen())
        .timeout(PATIENT)
        .build();
        for _ in 0..5 {
            assert!(plain.check(b"full", 1).await.expect("a check").allowed);
        }
        let before = limiter.store().stats().unconfirmed;
        let refusal = limiter.check(b"full", 1).await.expect("a refusal");
        assert!(!refusal.allowed && !refusal.degraded);
        assert_eq!(limiter.store().stats().unconfirmed, before);
        // Strict mode off: `0`.
        let off = RedisStore::builder(
            Connection::single(&master.url())
                .await
                .expect("a connection"),
            Gcra::new(quota()),
        )
        .backend(backend)
        .time_source(frozen())
        .timeout(PATIENT)
        .replicas(0, wait)
        .build();
        assert!(off.check(b"off", 1).await.expect("no wait").allowed);
    }
}

#[tokio::test]
async fn a_confirmed_admission_is_on_the_replica_when_the_check_returns() {
    for backend in BACKENDS {
        let master = server(backend);
        let replica = replica_of(&master, backend);
        let limiter = strict(
            &master.url(),
            backend,
            FailurePolicy::Error,
            // Long enough for a loaded machine's replica to acknowledge;
            // the frozen replica below makes the charge wait all of it.
            Duration::from_secs(2),
        )
        .await;
        let key = limiter.store().redis_key(b"k");
        let key = std::str::from_utf8(&key).expect("an ASCII key");
        let (decision, receipt) = limiter
            .check_with_receipt(b"k", 1)
            .await
            .expect("confirmed");
        assert!(decision.allowed);
        // No waiting here: the replica had it before the check returned.
        let on_master = master.command(&["GET", key]).expect("GET");
        assert!(!on_master.is_empty());
        assert_eq!(replica.command(&["GET", key]), Ok(on_master));
        assert_eq!(limiter.store().stats().unconfirmed, 0);

        // The replica frozen: a settlement that charges more is waited for
        // and fails, one that gives back is not waited for.
        let (_, second) = limiter
            .check_with_receipt(b"k", 1)
            .await
            .expect("confirmed");
        replica.pause();
        let started = Instant::now();
        let refund = limiter.refund(receipt.expect("a receipt")).await;
        let refund_took = started.elapsed();
        let more = limiter.settle(second.expect("a receipt"), 3).await;
        replica.resume();
        refund.expect("a refund is not waited for");
        let error = more.expect_err("an unconfirmed charge");
        assert_eq!(error.kind(), ErrorKind::Backend, "{error}");
        assert_eq!(limiter.store().stats().unconfirmed, 1);
        eprintln!("{backend:?}: a refund with the replica frozen took {refund_took:?}");
    }
}

#[tokio::test]
async fn on_a_cluster_wait_goes_to_the_key_s_master() {
    // Three masters, no replicas: WAIT reaches the key's master (which
    // answers 0), never another node or an error about routing.
    let cluster = RedisCluster::start();
    let connection = Connection::cluster(&cluster.urls())
        .await
        .expect("a cluster");
    let limiter = RedisStore::builder(connection, Gcra::new(quota()))
        .backend(ScriptBackend::Lua)
        .time_source(frozen())
        .timeout(PATIENT)
        .replicas(1, Duration::from_millis(10))
        .build();
    for key in [&b"a"[..], b"b", b"c", b"{x}y", b"zz"] {
        let error = limiter.check(key, 1).await.expect_err("no replica");
        assert!(error.to_string().contains("0 of the 1 replicas"), "{error}");
        assert_eq!(limiter.peek(key, 0).await.expect("a peek").remaining, 4);
    }
    assert_eq!(limiter.store().stats().unconfirmed, 5);
}

/// What strict mode costs one sequential client, logged (never asserted):
/// the same checks with and without `WAIT 1`, master and replica on this
/// machine's loopback.
#[tokio::test]
async fn strict_mode_latency_is_logged() {
    const CHECKS: usize = 2000;
    for backend in BACKENDS {
        let master = server(backend);
        let _replica = replica_of(&master, backend);
        let connection = Connection::single(&master.url())
            .await
            .expect("a connection");
        let generous = Quota::per_second(1_000_000).expect("a quota");
        let plain = RedisStore::builder(connection.clone(), Gcra::new(generous))
            .backend(backend)
            .timeout(PATIENT)
            .build();
        // A wait no healthy replica needs, however loaded the machine: the
        // latency is logged, never bounded.
        let strict = RedisStore::builder(connection, Gcra::new(generous))
            .backend(backend)
            .timeout(PATIENT)
            .replicas(1, Duration::from_secs(5))
            .build();
        let mut report = Vec::new();
        for (name, limiter) in [("plain", &plain), ("strict", &strict)] {
            let mut times = Vec::with_capacity(CHECKS);
            for i in 0..CHECKS {
                let key = format!("k{}", i % 100);
                let started = Instant::now();
                let decision = limiter.check(key.as_bytes(), 1).await.expect("a check");
                times.push(started.elapsed());
                assert!(decision.allowed);
            }
            times.sort();
            report.push(format!(
                "{name} p50 {:?} p99 {:?}",
                times[CHECKS / 2],
                times[CHECKS * 99 / 100]
            ));
        }
        assert_eq!(strict.store().stats().unconfirmed, 0);
        eprintln!(
            "{backend:?}, {CHECKS} sequential checks: {}",
            report.join(", ")
        );
    }
}
