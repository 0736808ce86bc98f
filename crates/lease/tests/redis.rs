//! Several instances leasing one key of a real Redis server (the
//! scripts), on one manual clock that Redis reads from the client: what
//! they admit together stays within the leased bound, most checks never
//! reach Redis, and every unit comes back.

use ratelab_core::toolkit::RemoteForm;
use ratelab_core::{Algorithm, Bound, Clock, Limiter, ManualClock, Quota};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_lease::{LeaseConfig, Leased};
use ratelab_redis::{Connection, RedisLimiter, RedisStore, ScriptBackend, TimeSource};
use ratelab_testkit::oracle::{Admitted, Oracle};
use ratelab_testkit::redis::RedisServer;
use std::sync::Arc;
use std::time::Duration;

const KEY: &[u8] = b"tenant";
const INSTANCES: usize = 4;

/// The scripts run so far: one per check, lease or settlement that
/// reached Redis.
fn scripts_run(server: &RedisServer) -> u64 {
    let info = server.command(&["INFO", "commandstats"]).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count"))
}

async fn limiter<A>(
    server: &RedisServer,
    algorithm: A,
    clock: &ManualClock,
    prefix: &str,
) -> RedisLimiter<A>
where
    A: RemoteForm + Algorithm + Clone,
{
    let connection = Connection::single(&server.url()).await.expect("connect");
    RedisStore::builder(connection, algorithm)
        .backend(ScriptBackend::Lua)
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
/// others release at the end. Answers the scripts Redis ran per check.
async fn share_one_key<A>(server: &RedisServer, algorithm: A, prefix: &str, gap: u64) -> f64
where
    A: RemoteForm + Algorithm + Clone,
{
    let clock = ManualClock::starting_at(1_700_000_000_000_000);
    let config = LeaseConfig::default()
        .max_units(50)
        .max_lifetime(Duration::from_millis(200));
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        let inner = limiter(server, algorithm.clone(), &clock, prefix).await;
        instances.push(Leased::with_clock(inner, config, clock.clone()).expect("valid"));
    }
    let own: Bound = instances[0].inner().bound();
    let lifetime = 200_000;
    let commands_before = scripts_run(server);
    let mut steps = Steps(7);
    let mut admitted = Vec::new();
    let checks: u32 = 4_000;
    for i in 0..checks {
        if i == checks / 2 {
            // Dies: its leases are never settled.
            instances[0] = Leased::with_clock(
                limiter(server, algorithm.clone(), &clock, prefix).await,
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
    let commands = scripts_run(server) - commands_before;
    eprintln!(
        "{} (gap {gap} µs): {checks} checks, {} admitted, {commands} scripts run",
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_sharing_one_redis_key_keep_the_leased_bound() {
    let server = RedisServer::start();
    let quota = Quota::per_second(500)
        .and_then(|q| q.with_burst(100))
        .unwrap();
    let window = FixedWindow::new(Quota::per_second(500).unwrap());
    // Twice the quota offered: near exhaustion a lease is a unit or two.
    share_one_key(&server, Gcra::new(quota), "lease-gcra-over", 2_000).await;
    share_one_key(&server, window, "lease-fixed-over", 2_000).await;
    // Half the quota offered: leases of tens of units.
    let per_check = share_one_key(&server, Gcra::new(quota), "lease-gcra", 8_000).await;
    assert!(per_check < 0.2, "{per_check} scripts per check");
    let per_check = share_one_key(&server, window, "lease-fixed", 8_000).await;
    assert!(per_check < 0.2, "{per_check} scripts per check");
}
