//! Leasing hot descriptors: several replicas (services, each with its own
//! connection, as processes would be) on one real Redis, on one manual
//! clock that the scripts read from the client. What they admit together
//! stays within `Bound::leased`, replayed by the oracle; far fewer Redis
//! commands run than checks; and leases keep every feature's meaning:
//! all or nothing, reloads, a replica dropped with leases out, stopping.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::google::protobuf::UInt64Value;
use ratelab::lease::LeaseConfig;
use ratelab::redis::{Connection, FailurePolicy};
use ratelab::{AlgorithmKind, Bound, Clock, ManualClock};
use ratelab_server::config::{self, Unit};
use ratelab_server::{Backend, Service, SharedConfig};
use ratelab_testkit::oracle::{Admitted, Oracle};
use ratelab_testkit::redis::RedisServer;

/// 2026-01-01T00:00:00Z.
const T0: u64 = 1_767_225_600_000_000;
const LIFETIME: Duration = Duration::from_millis(100);

fn parse(yaml: &str) -> config::Config {
    let (name, domain) = config::parse("hot.yaml".as_ref(), yaml).unwrap();
    config::Config::from_domains([(name, domain)])
}

/// A replica on `redis`, leasing when `lease` says so.
async fn replica(
    redis: &RedisServer,
    config: SharedConfig,
    clock: &Arc<ManualClock>,
    prefix: &str,
    lease: bool,
) -> Service {
    let connection = Connection::single(&redis.url()).await.unwrap();
    let builder = Service::builder(config)
        .backend(Backend::Redis {
            connection,
            on_failure: FailurePolicy::Error,
            timeout: Duration::from_secs(10),
            prefix: prefix.to_owned(),
        })
        .clock(clock.clone() as Arc<dyn Clock>);
    if lease {
        let leases = LeaseConfig::default().max_units(100).max_lifetime(LIFETIME);
        builder.leases(leases).unwrap().build()
    } else {
        builder.build()
    }
}

/// A request for one `k: value` descriptor per entry of `descriptors`,
/// each of its cost.
fn request(descriptors: &[(&str, u64)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "hot".into(),
        descriptors: descriptors
            .iter()
            .map(|&(value, cost)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: "k".into(),
                    value: value.into(),
                }],
                hits_addend: Some(UInt64Value { value: cost }),
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// The commands clients sent Redis to decide: scripts (`EVALSHA`) and the
/// native module's (`RATELAB.*`); not the commands a script runs inside.
fn commands(redis: &RedisServer) -> u64 {
    let info = redis.command(&["INFO", "commandstats"]).unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_ratelab."))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
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

/// The bound a leased limit of `requests` per `unit` of `kind` keeps.
fn leased_bound(kind: AlgorithmKind, requests: u32, unit: Unit) -> Bound {
    let lifetime = u64::try_from(LIFETIME.as_micros()).unwrap();
    kind.bound(config::quota(requests, unit).unwrap())
        .leased(lifetime)
}

/// Rounds of concurrent requests from every replica, each round 8 per
/// replica on `value` (costs 1 to 3), the clock moving `gap` µs at most
/// between rounds; replica 0 dropped with its leases out halfway
/// (`drop_one`). Answers what was admitted, the checks and the commands
/// Redis ran.
async fn rounds(
    redis: &RedisServer,
    replicas: &mut [Service],
    make: impl AsyncFn() -> Service,
    clock: &ManualClock,
    value: &str,
    (count, gap): (u32, u64),
    drop_one: bool,
) -> (Vec<Admitted>, u64, u64) {
    let mut steps = Steps(11);
    let mut admitted = Vec::new();
    let before = commands(redis);
    let mut checks = 0;
    for round in 0..count {
        if drop_one && round == count / 2 {
            // Stops without releasing: its leases are never settled.
            replicas[0] = make().await;
        }
        let costs: Vec<u64> = (0..replicas.len() * 8).map(|_| 1 + steps.next(3)).collect();
        let answers = futures::future::join_all(
            replicas
                .iter()
                .flat_map(|r| std::iter::repeat_n(r, 8))
                .zip(&costs)
                .map(|(replica, &cost)| async move {
                    let answer = replica.decide(&request(&[(value, cost)])).await.unwrap();
                    (answer.overall_code == Code::Ok as i32).then_some(cost)
                }),
        )
        .await;
        checks += answers.len() as u64;
        let at = clock.now_micros();
        admitted.extend(
            answers
                .into_iter()
                .flatten()
                .map(|units| Admitted { at, units }),
        );
        clock.advance(Duration::from_micros(steps.next(gap + 1)));
    }
    (admitted, checks, commands(redis) - before)
}

const YAML: &str = "domain: hot
descriptors:
  - key: k
    value: wide
    rate_limit: {unit: second, requests_per_unit: 20000, algorithm: gcra}
  - key: k
    value: narrow
    rate_limit: {unit: second, requests_per_unit: 50, algorithm: gcra}
  - key: k
    value: window
    rate_limit: {unit: second, requests_per_unit: 200, algorithm: fixed-window}
";

/// Four replicas on one Redis: below the quota, leases save nearly every
/// command; above it, with a replica dropped with its leases out, what
/// they admit stays within the leased bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_one_redis_keep_the_leased_bound_with_few_commands() {
    let redis = RedisServer::start();
    let clock = Arc::new(ManualClock::new());
    clock.set(T0);
    let config = ratelab_server::shared(parse(YAML));
    let make = async |prefix: &str, lease: bool| {
        replica(&redis, config.clone(), &clock, prefix, lease).await
    };

    // Below the quota: 32 checks (64 units) every 5 ms at most on 20,000/s.
    let mut plain = Vec::new();
    let mut leased = Vec::new();
    for _ in 0..4 {
        plain.push(make("plain", false).await);
        leased.push(make("leased", true).await);
    }
    let (_, plain_checks, plain_commands) = rounds(
        &redis,
        &mut plain,
        async || make("plain", false).await,
        &clock,
        "wide",
        (60, 5_000),
        false,
    )
    .await;
    let (kept, checks, leased_commands) = rounds(
        &redis,
        &mut leased,
        async || make("leased", true).await,
        &clock,
        "wide",
        (60, 5_000),
        false,
    )
    .await;
    let per_check = |commands: u64, checks: u64| commands as f64 / checks as f64;
    eprintln!(
        "below the quota: {plain_commands} commands for {plain_checks} checks without leases ({:.3} a check), {leased_commands} for {checks} with ({:.3})",
        per_check(plain_commands, plain_checks),
        per_check(leased_commands, checks),
    );
    assert_eq!(kept.len() as u64, checks, "below the quota, all admitted");
    assert!(
        plain_commands >= plain_checks,
        "one script a check without leases"
    );
    assert!(
        leased_commands * 10 < plain_commands,
        "{leased_commands} commands with leases against {plain_commands} without"
    );
    // Every hit counted, locally, in the reference's statistics.
    let within: u64 = leased
        .iter()
        .map(|r| r.stats().limit("hot.k_wide").within_limit.value())
        .sum();
    assert_eq!(within, kept.iter().map(|a| a.units).sum::<u64>());

    // Above the quota, a replica dropped halfway: the narrow limit (50/s,
    // a unit every 20 ms) and a fixed window of 200/s.
    for (value, kind, requests) in [
        ("narrow", AlgorithmKind::Gcra, 50),
        ("window", AlgorithmKind::FixedWindow, 200),
    ] {
        let (kept, checks, commands) = rounds(
            &redis,
            &mut leased,
            async || make("leased", true).await,
            &clock,
            value,
            (150, 15_000),
            true,
        )
        .await;
        let units: u64 = kept.iter().map(|a| a.units).sum();
        eprintln!("{value}: {checks} checks, {units} units admitted, {commands} commands");
        let bound = leased_bound(kind, requests, Unit::Second);
        if let Some(v) = bound.violation(&kept) {
            panic!("{value}: {v}");
        }
        // Nothing withheld for good: more than one full quota passed.
        assert!(units > u64::from(requests), "{value}: {units} admitted");
        let stats = |r: &Service| {
            let s = r.stats().limit(&format!("hot.k_{value}"));
            (
                s.total_hits.value(),
                s.within_limit.value(),
                s.over_limit.value(),
            )
        };
        // The replicas that lived through it count every hit, admitted or
        // over the limit.
        for replica in &leased[1..] {
            let (total, within, over) = stats(replica);
            assert_eq!(total, within + over, "{value}");
        }
    }
    for replica in &leased {
        replica.release_leases().await;
    }
}

/// All or nothing, leased: requests of a pool descriptor alone and with a
/// descriptor over its limit, from three replicas at once on a frozen
/// clock. A request answered `OVER_LIMIT` gives its pool units back to
/// the lease they came from, and stopping gives back what the leases held:
/// what was kept plus what Redis has left is the pool's quota, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_gives_its_leased_units_back() {
    const POOL: &str = "domain: hot
descriptors:
  - key: k
    value: pool
    rate_limit: {unit: hour, requests_per_unit: 20, algorithm: gcra}
  - key: k
    value: tight
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: gcra}
";
    let redis = RedisServer::start();
    let clock = Arc::new(ManualClock::new());
    clock.set(T0);
    let config = ratelab_server::shared(parse(POOL));
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(replica(&redis, config.clone(), &clock, "aon", true).await);
    }
    let mut kept = 0;
    let (mut refused_together, mut tight_admitted) = (0, 0);
    for batch in 0..30 {
        let answers = futures::future::join_all(replicas.iter().enumerate().map(|(i, r)| {
            let together = (batch + i) % 2 == 0;
            async move {
                let descriptors: &[(&str, u64)] = if together {
                    &[("pool", 1), ("tight", 1)]
                } else {
                    &[("pool", 1)]
                };
                let answer = r.decide(&request(descriptors)).await.unwrap();
                (together, answer.overall_code == Code::Ok as i32)
            }
        }))
        .await;
        for (together, ok) in answers {
            kept += u64::from(ok);
            tight_admitted += u64::from(ok && together);
            refused_together += u64::from(!ok && together);
        }
    }
    assert_eq!(tight_admitted, 1, "the tight limit admits one");
    assert!(refused_together > 10, "{refused_together} refused");
    for r in &replicas {
        r.release_leases().await;
    }
    // What Redis has left, counted by a replica that does not lease.
    let plain = replica(&redis, config.clone(), &clock, "aon", false).await;
    let mut left = 0;
    while plain
        .decide(&request(&[("pool", 1)]))
        .await
        .unwrap()
        .overall_code
        == Code::Ok as i32
    {
        left += 1;
        assert!(left <= 20, "more than the quota");
    }
    eprintln!("kept {kept}, {refused_together} refused with the tight limit, {left} left on Redis");
    assert_eq!(kept + left, 20, "kept {kept}, left {left}");
}

/// A reload that lowers a leased limit: the leases of the old quota admit
/// nothing more, and what the replicas admit after it stays within the
/// new quota's leased bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_limit_does_not_admit_from_leases_of_the_old_one() {
    let yaml = |requests: u32| {
        format!(
            "domain: hot\ndescriptors:\n  - key: k\n    value: hot\n    rate_limit: {{unit: second, requests_per_unit: {requests}, algorithm: gcra}}\n"
        )
    };
    let redis = RedisServer::start();
    let clock = Arc::new(ManualClock::new());
    clock.set(T0);
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let config = ratelab_server::shared(parse(&yaml(1000)));
        let replica = replica(&redis, config.clone(), &clock, "reload", true).await;
        replicas.push((config, replica));
    }
    let hot = || request(&[("hot", 1)]);
    // Leases grow to their largest, each with units to spare.
    for _ in 0..20 {
        for (_, r) in &replicas {
            assert_eq!(
                r.decide(&hot()).await.unwrap().overall_code,
                Code::Ok as i32
            );
        }
        clock.advance(Duration::from_millis(2));
    }
    for (config, _) in &replicas {
        *config.write() = Arc::new(parse(&yaml(10)));
    }
    let mut admitted = Vec::new();
    for _ in 0..100 {
        for (_, r) in &replicas {
            let answer = r.decide(&hot()).await.unwrap();
            assert_eq!(
                answer.statuses[0]
                    .current_limit
                    .as_ref()
                    .unwrap()
                    .requests_per_unit,
                10
            );
            if answer.overall_code == Code::Ok as i32 {
                admitted.push(Admitted {
                    at: clock.now_micros(),
                    units: 1,
                });
            }
        }
        clock.advance(Duration::from_millis(1));
    }
    let bound = leased_bound(AlgorithmKind::Gcra, 10, Unit::Second);
    eprintln!("after the reload: {} admitted in 100 ms", admitted.len());
    if let Some(v) = bound.violation(&admitted) {
        panic!("after the reload: {v}");
    }
    // 10 a second, a burst of 10, leases of 100 ms: at most 12 in 100 ms.
    assert!(admitted.len() <= 12, "{} admitted", admitted.len());
    for (_, r) in &replicas {
        r.settle_leases().await;
        r.release_leases().await;
    }
}

/// Shadow mode and the statistics, leased: a shadow limit over its quota
/// answers `OK`, and every hit is counted once, admitted or over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_shadow_limit_counts_every_hit_and_refuses_none() {
    const SHADOW: &str = "domain: hot
descriptors:
  - key: k
    value: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 4, algorithm: gcra}
";
    let redis = RedisServer::start();
    let clock = Arc::new(ManualClock::new());
    clock.set(T0);
    let config = ratelab_server::shared(parse(SHADOW));
    let service = replica(&redis, config, &clock, "shadow", true).await;
    for _ in 0..10 {
        let answer = service.decide(&request(&[("shadow", 1)])).await.unwrap();
        assert_eq!(answer.overall_code, Code::Ok as i32);
    }
    let stats = service.stats().limit("hot.k_shadow");
    let counts = [
        stats.total_hits.value(),
        stats.within_limit.value(),
        stats.over_limit.value(),
        stats.shadow_mode.value(),
    ];
    assert_eq!(counts, [10, 4, 6, 6]);
    service.release_leases().await;
}

/// Redis gone with a lease out: the lease still answers what it holds,
/// without Redis; past its lifetime, the failure policy answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_a_live_lease_answers_then_the_failure_policy() {
    const POOL: &str = "domain: hot
descriptors:
  - key: k
    value: pool
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: gcra}
";
    let mut redis = RedisServer::start();
    let clock = Arc::new(ManualClock::new());
    clock.set(T0);
    let config = ratelab_server::shared(parse(POOL));
    let service = replica(&redis, config, &clock, "down", true).await;
    let pool = || request(&[("pool", 1)]);
    // A lease of one, then one of four (one used).
    for _ in 0..2 {
        assert_eq!(
            service.decide(&pool()).await.unwrap().overall_code,
            Code::Ok as i32
        );
    }
    redis.kill();
    for _ in 0..3 {
        let answer = service.decide(&pool()).await.unwrap();
        assert_eq!(answer.overall_code, Code::Ok as i32, "from the lease");
    }
    clock.advance(LIFETIME);
    let failed = service.decide(&pool()).await.unwrap_err();
    assert_eq!(failed.code(), tonic::Code::Unavailable, "{failed:?}");
}
