//! `RedisLimiter` on servers that load the native ratelab module: the
//! default backend finds it (and finds it missing elsewhere), a forced
//! module on a server without it is a clear error, and memory == Lua ==
//! module, decision for decision, on a node and on a cluster whose nodes
//! load the module; the module and the scripts take turns on the same keys.

use crate::common;

use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use ratelab::redis::{Connection, RedisLimiter, RedisStore, ScriptBackend};
use ratelab::toolkit::MAX_INSTANT_MICROS;
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, ErrorKind, Gcra, KnownAlgorithm,
    ManualClock, Quota,
};
use ratelab_testkit::conformance::{Factory, SCENARIOS, run};
use ratelab_testkit::props::{Step, config, simulate};
use ratelab_testkit::redis::{RedisCluster, RedisServer, module_path};
use ratelab_testkit::strategies::{Arrival, quota_and_arrivals, quota_and_wild_arrivals};

/// `--loadmodule <the module>`.
fn load_module() -> [String; 2] {
    [
        "--loadmodule".to_owned(),
        module_path().to_str().expect("a UTF-8 path").to_owned(),
    ]
}

/// A `redis-server` that loads the module.
fn module_server() -> RedisServer {
    let [flag, path] = load_module();
    RedisServer::start_with(&[&flag, &path])
}

/// One module-loaded server for the tests of this file, and a runtime.
fn shared() -> &'static (RedisServer, tokio::runtime::Runtime, Connection) {
    static SHARED: OnceLock<(RedisServer, tokio::runtime::Runtime, Connection)> = OnceLock::new();
    SHARED.get_or_init(|| {
        let server = module_server();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let connection = runtime
            .block_on(Connection::single(&server.url()))
            .expect("connect to the test server");
        (server, runtime, connection)
    })
}

/// Three cluster nodes that load the module.
fn module_cluster() -> RedisCluster {
    let [flag, path] = load_module();
    RedisCluster::start_with(&[&flag, &path])
}

/// The calls of `command` (lowercase, as `INFO commandstats` names it) the
/// server has run.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server
        .command(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .map_or(0, |rest| {
            rest.split(',')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("a call count")
        })
}

/// How each limiter of a test is built.
#[derive(Clone)]
struct Build {
    backend: ScriptBackend,
    prefix: String,
    /// Stored instants may be any distance ahead of now (a clock that steps
    /// back anywhere).
    any_clock: bool,
}

impl Build {
    fn new(backend: ScriptBackend) -> Self {
        Build {
            backend,
            prefix: common::unique_prefix(),
            any_clock: false,
        }
    }

    fn limiter(
        &self,
        kind: AlgorithmKind,
        quota: Quota,
        connection: &Connection,
        clock: &ManualClock,
    ) -> Box<dyn AsyncRateLimiter> {
        struct Visit<'a>(&'a Build, &'a Connection, &'a ManualClock);
        impl AlgorithmVisitor for Visit<'_> {
            type Output = Box<dyn AsyncRateLimiter>;
            fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
                let mut builder = RedisStore::builder(self.1.clone(), algorithm)
                    .backend(self.0.backend)
                    .prefix(self.0.prefix.clone())
                    .time_source(common::client_time(self.2))
                    .timeout(common::PATIENT);
                if self.0.any_clock {
                    builder = builder.ttl_slack(Duration::from_micros(MAX_INSTANT_MICROS));
                }
                Box::new(builder.build())
            }
        }
        kind.visit(quota, Visit(self, connection, clock))
    }
}

/// GCRA at 5 a second, a burst of 3, on a clock that stands still: no unit
/// comes back between checks, however long they take.
fn gcra(connection: &Connection, backend: ScriptBackend) -> RedisLimiter<Gcra> {
    let quota = Quota::per_second(5).unwrap().with_burst(3).unwrap();
    let clock = ManualClock::starting_at(1_700_000_000_000_000);
    RedisStore::builder(connection.clone(), Gcra::new(quota))
        .backend(backend)
        .prefix(common::unique_prefix())
        .time_source(common::client_time(&clock))
        .timeout(common::PATIENT)
        .build()
}

/// The default backend runs the module where the server has it (one
/// `RATELAB.PROTOCOL`, then no `EVALSHA`), the scripts where it has not; a
/// forced module on a server without it is a data error that says so; forced
/// scripts run on a module server.
#[test]
fn auto_finds_the_module_and_its_absence() {
    let (_, runtime, _) = shared();
    let with = module_server();
    let without = RedisServer::start();
    runtime.block_on(async {
        let on_with = Connection::single(&with.url()).await.unwrap();
        let on_without = Connection::single(&without.url()).await.unwrap();

        let limiter = gcra(&on_with, ScriptBackend::Auto);
        let admitted = futures_count(&limiter, 5).await;
        assert_eq!(admitted, 3, "a burst of 3");
        let stats = limiter.store().stats();
        assert_eq!((stats.module_calls, stats.script_calls), (5, 0));
        assert_eq!(calls(&with, "ratelab.gcra"), 5);
        assert_eq!(calls(&with, "ratelab.protocol"), 1, "asked once");
        assert_eq!(calls(&with, "evalsha"), 0);
        assert_eq!(calls(&with, "eval"), 0);

        let limiter = gcra(&on_without, ScriptBackend::Auto);
        assert_eq!(futures_count(&limiter, 5).await, 3);
        let stats = limiter.store().stats();
        assert_eq!((stats.module_calls, stats.script_calls), (0, 5));
        // Five, and the first one's NOSCRIPT before the script was loaded.
        assert!(calls(&without, "evalsha") >= 5);

        let forced = gcra(&on_without, ScriptBackend::Module);
        let error = forced.check(b"k", 1).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Data, "{error}");
        let text = error.to_string();
        assert!(
            text.contains("the ratelab module is not loaded")
                && text.contains("unknown command")
                && text.contains("--loadmodule"),
            "{text}"
        );
        assert!(!forced.stats().breaker_open);

        let scripts = gcra(&on_with, ScriptBackend::Lua);
        assert_eq!(futures_count(&scripts, 5).await, 3);
        let stats = scripts.store().stats();
        assert_eq!((stats.module_calls, stats.script_calls), (0, 5));
        assert!(calls(&with, "evalsha") >= 5);
        assert_eq!(calls(&with, "ratelab.gcra"), 5, "no more module calls");
    });
}

/// Checks of cost 1 on one key: how many were admitted.
async fn futures_count(limiter: &RedisLimiter<Gcra>, checks: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..checks {
        admitted += usize::from(limiter.check(b"client", 1).await.unwrap().allowed);
    }
    admitted
}

/// A module that goes away under a limiter that found it (`MODULE UNLOAD`,
/// as a restart or failover onto a node without it would) costs nothing to
/// the caller: the call is sent again as a script, and the scripts carry on
/// from the state the module wrote.
#[test]
fn a_module_that_goes_away_hands_over_to_the_scripts() {
    let (_, runtime, _) = shared();
    let [flag, path] = load_module();
    let server = RedisServer::start_with(&[&flag, &path, "--enable-module-command", "yes"]);
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        let limiter = gcra(&connection, ScriptBackend::Auto);
        assert!(limiter.check(b"client", 1).await.unwrap().allowed);
        assert!(limiter.check(b"client", 1).await.unwrap().allowed);
        server
            .command(&["MODULE", "UNLOAD", "ratelab"])
            .expect("the module unloads");
        let third = limiter.check(b"client", 1).await.unwrap();
        assert!(third.allowed);
        assert_eq!(third.remaining, 0, "the script read the module's state");
        assert!(!limiter.check(b"client", 1).await.unwrap().allowed);
        let calls = limiter.store().stats();
        assert_eq!((calls.module_calls, calls.script_calls), (3, 2));
        assert_eq!(limiter.stats().answered, 4);
    });
}

/// The conformance table on a module-loaded node (the default backend, and
/// the module forced) and on a cluster whose nodes load the module: every
/// decision as worked out by hand, run by the module, no script.
#[test]
fn the_module_conforms_on_a_node_and_a_cluster() {
    let (_, runtime, _) = shared();
    let server = module_server();
    let cluster = module_cluster();
    let nodes = cluster.nodes();
    runtime.block_on(async {
        let single = Connection::single(&server.url()).await.unwrap();
        let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
        let cluster = Connection::cluster(&urls).await.unwrap();
        let on = |connection: Connection, backend: ScriptBackend| {
            move |name: &'static str, quota: Quota, clock: ManualClock| {
                let kind: AlgorithmKind = name.parse().unwrap();
                Build::new(backend).limiter(kind, quota, &connection, &clock)
            }
        };
        let auto = on(single.clone(), ScriptBackend::Auto);
        let module = on(single, ScriptBackend::Module);
        let cluster_auto = on(cluster, ScriptBackend::Auto);
        let backends: [(&str, Factory<'_>); 3] = [
            ("module", &auto),
            ("module-forced", &module),
            ("module-cluster", &cluster_auto),
        ];
        let (failures, checked) = run(&backends).await;
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert_eq!(
            checked,
            3 * SCENARIOS.iter().map(|s| s.steps.len()).sum::<usize>()
        );
    });
    for node in std::iter::once(&server).chain(nodes) {
        assert_eq!(calls(node, "evalsha"), 0, "no script ran");
        assert_eq!(calls(node, "eval"), 0, "no script ran");
    }
    for kind in AlgorithmKind::ALL {
        let command = module_command(kind).to_lowercase();
        if SCENARIOS.iter().any(|s| s.algorithm == kind.name()) {
            assert!(calls(&server, &command) > 0, "{command} ran");
            let on_cluster: u64 = nodes.iter().map(|n| calls(n, &command)).sum();
            assert!(on_cluster > 0, "{command} ran on the cluster");
        }
    }
    let served: usize = nodes
        .iter()
        .filter(|n| calls(n, "ratelab.gcra") > 0)
        .count();
    assert!(served >= 2, "the cluster's keys spread over its nodes");
}

/// The module's command for `kind`.
fn module_command(kind: AlgorithmKind) -> String {
    struct Command;
    impl AlgorithmVisitor for Command {
        type Output = String;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> String {
            algorithm.module_command()
        }
    }
    kind.visit(Quota::per_second(1).unwrap(), Command)
}

/// The module runs every algorithm: its commands are built from the rows of
/// `AlgorithmKind` (an algorithm without one does not compile), and the
/// library loaded registers each of them.
#[test]
fn the_module_has_a_command_for_every_algorithm() {
    let server = RedisServer::start_with(&["--loadmodule", module_path().to_str().unwrap()]);
    let client = redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_connection().unwrap();
    for kind in AlgorithmKind::ALL {
        let command = module_command(kind);
        let info: redis::Value = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(&command)
            .query(&mut connection)
            .unwrap();
        let known = matches!(&info, redis::Value::Array(items) if items.iter().any(|i| *i != redis::Value::Nil));
        assert!(
            known,
            "the module has no {command}, though it registers every row of \
             ratelab::each_algorithm! (crates/redis-module/src/registry.rs): is {} \
             built from this tree?",
            module_path().display()
        );
    }
}

/// The pure logic's answers for `arrivals`.
fn expected(
    kind: AlgorithmKind,
    quota: Quota,
    arrivals: &[Arrival],
) -> Vec<Result<ratelab::Decision, String>> {
    struct Run<'a>(&'a [Arrival]);
    impl AlgorithmVisitor for Run<'_> {
        type Output = Vec<Result<ratelab::Decision, String>>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            simulate(&algorithm, self.0)
                .into_iter()
                .map(|s: Step<A::State>| s.result)
                .collect()
        }
    }
    kind.visit(quota, Run(arrivals))
}

/// Runs `arrivals` for every algorithm through limiters built by each of
/// `builds` on the same keys, in turn (arrival `i` through `builds[i %
/// builds.len()]`), and compares each answer with memory's.
fn agree(
    connection: &Connection,
    builds: &[ScriptBackend],
    quota: Quota,
    arrivals: &[Arrival],
    any_clock: bool,
) -> Result<(), TestCaseError> {
    let (_, runtime, _) = shared();
    for kind in AlgorithmKind::ALL {
        let clock = ManualClock::new();
        let prefix = common::unique_prefix();
        let limiters: Vec<_> = builds
            .iter()
            .map(|&backend| {
                let build = Build {
                    backend,
                    prefix: prefix.clone(),
                    any_clock,
                };
                (backend, build.limiter(kind, quota, connection, &clock))
            })
            .collect();
        let want = expected(kind, quota, arrivals);
        for (i, (arrival, want)) in arrivals.iter().zip(want).enumerate() {
            let (backend, limiter) = &limiters[i % limiters.len()];
            clock.set(arrival.at);
            let got = runtime
                .block_on(limiter.check_async(&[arrival.key], arrival.cost))
                .map_err(|e| e.to_string());
            prop_assert_eq!(
                got,
                want,
                "{} on {:?} at {} (key {}, cost {})",
                kind,
                backend,
                arrival.at,
                arrival.key,
                arrival.cost
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn the_module_decides_as_memory((quota, arrivals) in quota_and_arrivals(40)) {
        let (_, _, connection) = shared();
        agree(connection, &[ScriptBackend::Auto], quota, &arrivals, false)?;
    }

    #[test]
    fn the_module_decides_as_memory_when_the_clock_goes_wild(
        (quota, arrivals) in quota_and_wild_arrivals(30)
    ) {
        let (_, _, connection) = shared();
        agree(connection, &[ScriptBackend::Module], quota, &arrivals, true)?;
    }

    /// The module and the scripts take turns on the same keys, and still
    /// decide as memory: they read and write the same state.
    #[test]
    fn the_module_and_the_scripts_take_turns_on_the_same_keys(
        (quota, arrivals) in quota_and_arrivals(40)
    ) {
        let (_, _, connection) = shared();
        agree(
            connection,
            &[ScriptBackend::Module, ScriptBackend::Lua, ScriptBackend::Lua, ScriptBackend::Module],
            quota,
            &arrivals,
            false,
        )?;
    }
}

/// Memory == module on a cluster whose nodes load it, the default backend
/// finding the module through the keyed commands themselves.
#[test]
fn a_module_cluster_decides_as_memory() {
    let (_, runtime, _) = shared();
    let cluster = module_cluster();
    let nodes = cluster.nodes();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let connection = runtime.block_on(Connection::cluster(&urls)).unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(config(12));
    runner
        .run(&quota_and_arrivals(30), |(quota, arrivals)| {
            agree(&connection, &[ScriptBackend::Auto], quota, &arrivals, false)
        })
        .unwrap();
    for node in nodes {
        assert_eq!(calls(node, "evalsha"), 0, "no script ran");
    }
}
