//! Peeks on a replica: through the native module's read-only twin
//! (`RATELAB.<ALGORITHM>_RO`) a limiter connected to a replica answers
//! peeks, as the scripts do there, and as its master answers them.

use std::sync::Arc;
use std::time::Duration;

use ratelab_core::{ErrorKind, ManualClock, Quota};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_redis::{Connection, RedisLimiter, RedisStore, ScriptBackend, TimeSource};
use ratelab_testkit::redis::{RedisCluster, RedisServer, module_path};

async fn limiter<A: ratelab_core::toolkit::RemoteForm>(
    url: &str,
    algorithm: A,
    backend: ScriptBackend,
    clock: &Arc<ManualClock>,
) -> RedisLimiter<A> {
    let connection = Connection::single(url).await.expect("a connection");
    RedisStore::builder(connection, algorithm)
        .backend(backend)
        .time_source(TimeSource::Client(clock.clone()))
        .timeout(Duration::from_secs(30))
        .build()
}

#[tokio::test]
async fn a_replica_answers_peeks_through_the_module_as_through_the_scripts() {
    let module = module_path().to_str().expect("a UTF-8 path");
    let master = RedisServer::start_with(&["--loadmodule", module]);
    let replica = RedisServer::start_replica_of(master.port(), &["--loadmodule", module]);
    let clock = Arc::new(ManualClock::starting_at(1_700_000_000_000_000));
    let quota = Quota::per_second(10)
        .and_then(|q| q.with_burst(20))
        .expect("a quota");

    let gcra = limiter(&master.url(), Gcra::new(quota), ScriptBackend::Auto, &clock).await;
    let window = limiter(
        &master.url(),
        FixedWindow::new(quota),
        ScriptBackend::Auto,
        &clock,
    )
    .await;
    for _ in 0..15 {
        assert!(gcra.check(b"k", 1).await.expect("a check").allowed);
        assert!(window.check(b"k", 1).await.expect("a check").allowed);
    }
    replica.wait_caught_up(master.port());

    for backend in [
        ScriptBackend::Auto,
        ScriptBackend::Module,
        ScriptBackend::Lua,
    ] {
        let on_replica = limiter(&replica.url(), Gcra::new(quota), backend, &clock).await;
        let window_on_replica =
            limiter(&replica.url(), FixedWindow::new(quota), backend, &clock).await;
        for cost in [0, 1, 5, 6, 20] {
            assert_eq!(
                on_replica.peek(b"k", cost).await.expect("a peek"),
                gcra.peek(b"k", cost).await.expect("a peek"),
                "{backend:?}, cost {cost}"
            );
            assert_eq!(
                window_on_replica.peek(b"k", cost).await.expect("a peek"),
                window.peek(b"k", cost).await.expect("a peek"),
                "{backend:?}, cost {cost}"
            );
        }
        let stats = on_replica.store().stats();
        if backend == ScriptBackend::Lua {
            assert_eq!(stats.module_calls, 0);
        } else {
            // The module answered, not the scripts behind it.
            assert_eq!(
                (stats.module_calls, stats.script_calls),
                (5, 0),
                "{backend:?}"
            );
        }
        // A check writes: the replica refuses it, an outage.
        let error = on_replica.check(b"k", 1).await.expect_err("READONLY");
        assert_eq!(error.kind(), ErrorKind::Backend, "{error}");
    }
}

/// `INFO commandstats`: the calls of `command` on the server at `port`.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server
        .command(&["INFO", "commandstats"])
        .unwrap_or_default();
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn peeks_go_to_the_replica_when_asked() {
    let module = module_path().to_str().expect("a UTF-8 path");
    for with_module in [true, false] {
        let extra: &[&str] = if with_module {
            &["--loadmodule", module]
        } else {
            &[]
        };
        let master = RedisServer::start_with(extra);
        let replica = RedisServer::start_replica_of(master.port(), extra);
        let clock = Arc::new(ManualClock::starting_at(1_700_000_000_000_000));
        let quota = Quota::per_second(10)
            .and_then(|q| q.with_burst(20))
            .expect("a quota");
        let connection = Connection::single(&master.url()).await.expect("the master");
        let on_replica = Connection::single(&replica.url())
            .await
            .expect("the replica");
        let limiter = RedisStore::builder(connection, Gcra::new(quota))
            .time_source(TimeSource::Client(clock.clone()))
            .timeout(Duration::from_secs(30))
            .peek_from(on_replica)
            .build();
        for _ in 0..7 {
            assert!(limiter.check(b"k", 1).await.expect("a check").allowed);
        }
        replica.wait_caught_up(master.port());
        let peeked = limiter.peek(b"k", 1).await.expect("a peek");
        assert!(peeked.allowed);
        assert_eq!(peeked.remaining, 12);
        let (read_only, script) = ("ratelab.gcra_ro", "evalsha");
        if with_module {
            assert_eq!(calls(&replica, read_only), 1);
            assert_eq!(calls(&master, read_only), 0);
        } else {
            assert!(calls(&replica, script) >= 1);
            // The master ran the seven checks, and no peek.
            assert_eq!(calls(&master, script), 7 + 1, "a NOSCRIPT, then seven");
        }
    }
}

#[tokio::test]
async fn without_the_module_a_peek_finds_the_scripts() {
    // A cluster's nodes without the module: the twin, then the command,
    // are unknown; the peek is answered by the script, and remembered.
    let cluster = RedisCluster::start();
    let connection = Connection::cluster(&cluster.urls())
        .await
        .expect("a cluster");
    let quota = Quota::per_second(10).expect("a quota");
    // A clock that stands still: no unit comes back between the calls.
    let clock = Arc::new(ManualClock::starting_at(1_700_000_000_000_000));
    let limiter = RedisStore::builder(connection, Gcra::new(quota))
        .time_source(TimeSource::Client(clock))
        .timeout(Duration::from_secs(30))
        .build();
    assert_eq!(limiter.peek(b"k", 1).await.expect("a peek").remaining, 9);
    assert!(limiter.check(b"k", 1).await.expect("a check").allowed);
    assert_eq!(limiter.peek(b"k", 1).await.expect("a peek").remaining, 8);
    let stats = limiter.store().stats();
    assert_eq!((stats.module_calls, stats.script_calls), (2, 3));
}
