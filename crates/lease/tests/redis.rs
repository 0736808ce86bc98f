//! Several instances leasing one key of a real Redis (the scripts and the
//! native module, on one node and on a cluster), on one manual clock that
//! Redis reads from the client: what they admit together stays within the
//! leased bound, most checks never reach Redis, and every unit comes back.

use ratelab_core::toolkit::RemoteForm;
use ratelab_core::{Algorithm, Bound, Clock, Limiter, ManualClock, Quota};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_lease::{LeaseConfig, Leased};
use ratelab_redis::{Connection, RedisLimiter, RedisStore, ScriptBackend, TimeSource};
use ratelab_testkit::oracle::{Admitted, Oracle};
use ratelab_testkit::redis::{RedisCluster, RedisServer, module_path};
use std::sync::Arc;
use std::time::Duration;

const KEY: &[u8] = b"tenant";
const INSTANCES: usize = 4;

/// Where the shared limit lives: one node or a cluster, running the
/// scripts or the native module.
enum Shared {
    Node(RedisServer, ScriptBackend),
    Cluster(RedisCluster),
}

impl Shared {
    fn nodes(&self) -> Vec<&RedisServer> {
        match self {
            Shared::Node(server, _) => vec![server],
            Shared::Cluster(cluster) => cluster.nodes().iter().collect(),
        }
    }

    fn backend(&self) -> ScriptBackend {
        match self {
            Shared::Node(_, backend) => *backend,
            Shared::Cluster(_) => ScriptBackend::Module,
        }
    }

    /// The limiter calls run so far on every node (`EVALSHA` and the
    /// module's commands): one per check, lease or settlement that reached
    /// Redis.
    fn calls_run(&self) -> u64 {
        self.nodes()
            .iter()
            .map(|node| {
                let info = node.command(&["INFO", "commandstats"]).expect("INFO");
                info.lines()
                    .filter(|l| {
                        l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_ratelab.")
                    })
                    .filter_map(|l| l.split_once(":calls="))
                    .map(|(_, rest)| {
                        let calls = rest.split(',').next().expect("calls=N,");
                        calls.parse::<u64>().expect("a count")
                    })
                    .sum::<u64>()
            })
            .sum()
    }

    async fn connect(&self) -> Connection {
        match self {
            Shared::Node(server, _) => Connection::single(&server.url()).await,
            Shared::Cluster(cluster) => Connection::cluster(&cluster.urls()).await,
        }
        .expect("connect")
    }
}

async fn limiter<A>(
    shared: &Shared,
    algorithm: A,
    clock: &ManualClock,
    prefix: &str,
) -> RedisLimiter<A>
where
    A: RemoteForm + Algorithm + Clone,
{
    RedisStore::builder(shared.connect().await, algorithm)
        .backend(shared.backend())
        .prefix(prefix)
        .time_source(TimeSource::Client(Arc::new(clock.clone()) as Arc<dyn Clock>))
        .timeout(Duration::from_secs(10))
        .build()
}

/// A pseudo-random sequence, the same on every run.
struct Steps(u64);

impl Steps {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

/// Four instances, each with its own connection and limiter (as four
/// processes would be), check one key in turn while the clock moves by up
/// to `gap` µs between checks; one dies with its lease out halfway; the
/// others release at the end. Answers the limiter calls Redis ran per
/// check.
async fn share_one_key<A>(shared: &Shared, algorithm: A, prefix: &str, gap: u64) -> f64
where
    A: RemoteForm + Algorithm + Clone,
{
    let clock = ManualClock::starting_at(1_700_000_000_000_000);
    let config = LeaseConfig::default()
        .max_units(50)
        .max_lifetime(Duration::from_millis(200));
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        let inner = limiter(shared, algorithm.clone(), &clock, prefix).await;
        instances.push(Leased::with_clock(inner, config, clock.clone()).expect("valid"));
    }
    let own: Bound = instances[0].inner().bound();
    let lifetime = 200_000;
    let commands_before = shared.calls_run();
    let mut steps = Steps(7);
    let mut admitted = Vec::new();
    let checks: u32 = 4_000;
    for i in 0..checks {
        if i == checks / 2 {
            // Dies: its leases are never settled.
            instances[0] = Leased::with_clock(
                limiter(shared, algorithm.clone(), &clock, prefix).await,
                config,
                clock.clone(),
            )
            .expect("valid");
        }
        let instance = &instances[usize::try_from(steps.next(INSTANCES as u64)).unwrap()];
        let decision = instance.check(KEY, 1).await.expect("Redis answers");
        if decision.allowed {
            admitted.push(Admitted {
                at: clock.now_micros(),
                units: 1,
            });
        }
        clock.advance(Duration::from_micros(steps.next(gap)));
    }
    let commands = shared.calls_run() - commands_before;
    eprintln!(
        "{} (gap {gap} µs): {checks} checks, {} admitted, {commands} calls to Redis",
        algorithm.name(),
        admitted.len()
    );
    if let Some(v) = own.leased(lifetime).violation(&admitted) {
        panic!("{}: {v}", algorithm.name());
    }
    if let Bound::AlignedWindow { limit, window } = own {
        let mut per_window = std::collections::BTreeMap::new();
        for a in &admitted {
            *per_window.entry(a.at / window).or_insert(0) += a.units;
        }
        assert!(per_window.values().all(|&n| n <= limit), "{per_window:?}");
    }
    assert!(
        admitted.len() > checks as usize / 10,
        "{} admitted",
        admitted.len()
    );

    for instance in &instances {
        instance.release_all().await.expect("settled");
    }
    clock.advance(Duration::from_secs(10));
    let full = instances[1].inner().peek(KEY, 0).await.expect("peek");
    assert_eq!(full.remaining, own.capacity());
    commands as f64 / f64::from(checks)
}

/// Twice the quota offered, then half of it, for GCRA and the fixed
/// window: near exhaustion a lease is a unit or two; below the quota,
/// tens of units, so few checks reach Redis.
async fn keep_the_leased_bound(shared: &Shared) {
    let quota = Quota::per_second(500)
        .and_then(|q| q.with_burst(100))
        .unwrap();
    let window = FixedWindow::new(Quota::per_second(500).unwrap());
    share_one_key(shared, Gcra::new(quota), "lease-gcra-over", 2_000).await;
    share_one_key(shared, window, "lease-fixed-over", 2_000).await;
    let per_check = share_one_key(shared, Gcra::new(quota), "lease-gcra", 8_000).await;
    assert!(per_check < 0.2, "{per_check} calls to Redis per check");
    let per_check = share_one_key(shared, window, "lease-fixed", 8_000).await;
    assert!(per_check < 0.2, "{per_check} calls to Redis per check");
}

fn module_flags() -> [String; 2] {
    let path = module_path().to_str().expect("a UTF-8 path").to_owned();
    ["--loadmodule".to_owned(), path]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_sharing_one_redis_key_keep_the_leased_bound() {
    keep_the_leased_bound(&Shared::Node(RedisServer::start(), ScriptBackend::Lua)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_sharing_one_key_through_the_module_keep_the_leased_bound() {
    let [flag, path] = module_flags();
    let server = RedisServer::start_with(&[&flag, &path]);
    keep_the_leased_bound(&Shared::Node(server, ScriptBackend::Module)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_sharing_one_key_of_a_cluster_keep_the_leased_bound() {
    let [flag, path] = module_flags();
    keep_the_leased_bound(&Shared::Cluster(RedisCluster::start_with(&[&flag, &path]))).await;
}
