//! The reference's counters on a real Redis, on a clock the test sets: its
//! keys and expiries, one pipeline per request, the local cache of keys
//! over their limit, `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, and two
//! services sharing counts through the same keys (as replicas of the
//! reference and of ratelab-server would, during a migration).

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use ratelab::ManualClock;
use ratelab::redis::{Connection, FailurePolicy};
use ratelab_server::{Backend, Service, config};
use ratelab_testkit::redis::RedisServer;

// Leasing hot descriptors needs a Redis too: built in this binary, not
// one of its own.
mod leases;

/// 2026-01-01T00:00:00Z.
const T0: u64 = 1_767_225_600;

const CONFIG: &str = "\
domain: another
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
";

fn request(descriptors: &[(&str, &str)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "another".into(),
        descriptors: descriptors
            .iter()
            .map(|&(key, value)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: key.into(),
                    value: value.into(),
                }],
                ..Default::default()
            })
            .collect(),
        hits_addend: 1,
    }
}

async fn service(
    redis: &RedisServer,
    clock: &Arc<ManualClock>,
    prefix: &str,
    stop: bool,
    cache: usize,
) -> Service {
    let (name, domain) = config::parse("another.yaml".as_ref(), CONFIG).unwrap();
    let connection = Connection::single(&redis.url()).await.unwrap();
    Service::builder(ratelab_server::shared(config::Config::from_domains([(
        name, domain,
    )])))
    .backend(Backend::Redis {
        connection,
        on_failure: FailurePolicy::Error,
        timeout: Duration::from_secs(5),
        prefix: "unused".into(),
    })
    .clock(clock.clone())
    .cache_key_prefix(prefix)
    .stop_increment_when_over_limit(stop)
    .local_cache_bytes(cache)
    .build()
}

fn calls(redis: &RedisServer, command: &str) -> u64 {
    let stats = redis.command(&["INFO", "commandstats"]).unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_references_keys_expiries_and_local_cache() {
    let redis = RedisServer::start();
    let clock = Arc::new(ManualClock::new());
    clock.set((T0 + 10) * 1_000_000);
    let service = service(&redis, &clock, "p_", false, 1_000_000).await;
    let mut remaining = Vec::new();
    for _ in 0..25 {
        let answer = service.decide(&request(&[("key2", "r1")])).await.unwrap();
        remaining.push((answer.overall_code, answer.statuses[0].limit_remaining));
    }
    let expected: Vec<(i32, u32)> = (1..=25)
        .map(|i| {
            if i <= 20 {
                (Code::Ok as i32, 20 - i)
            } else {
                (Code::OverLimit as i32, 0)
            }
        })
        .collect();
    assert_eq!(remaining, expected);
    // The reference's key: prefix, domain, key, value, the minute's start.
    let key = format!("p_another_key2_r1_{}", T0);
    assert_eq!(redis.command(&["GET", &key]).unwrap(), "21");
    let ttl: u64 = redis.command(&["TTL", &key]).unwrap().parse().unwrap();
    assert!(
        (1..=360).contains(&ttl),
        "a minute plus at most 300 s of jitter: {ttl}"
    );
    // Once over, the local cache answered without Redis: 21 INCRBY, not 25.
    assert_eq!(calls(&redis, "incrby"), 21);
    assert_eq!(
        service
            .stats()
            .value("ratelimit.service.rate_limit.another.key2.over_limit_with_local_cache"),
        4
    );
    // The next minute is a new key.
    clock.set((T0 + 60) * 1_000_000);
    let answer = service.decide(&request(&[("key2", "r1")])).await.unwrap();
    assert_eq!(answer.statuses[0].limit_remaining, 19);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_round_trip_per_request_and_stopping_at_the_limit() {
    let redis = RedisServer::start();
    let clock = Arc::new(ManualClock::new());
    clock.set((T0 + 10) * 1_000_000);
    let service = service(&redis, &clock, "", true, 0).await;
    for i in 0..15u32 {
        let answer = service
            .decide(&request(&[("key2", "r2"), ("key3", "r2")]))
            .await
            .unwrap();
        let got: Vec<u32> = answer.statuses.iter().map(|s| s.limit_remaining).collect();
        let want = if i >= 10 {
            vec![10, 0]
        } else {
            vec![20 - (i + 1), 10 - (i + 1)]
        };
        assert_eq!(got, want, "request {i}");
    }
    // Stopping reads first: one GET pipeline and one INCRBY pipeline a
    // request, both descriptors in each.
    assert_eq!(calls(&redis, "get"), 30);
    assert_eq!(calls(&redis, "incrby"), 30);
    assert_eq!(
        redis
            .command(&["GET", &format!("another_key2_r2_{T0}")])
            .unwrap(),
        "10"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_services_on_the_same_keys_share_their_counts() {
    let redis = RedisServer::start();
    let clock = Arc::new(ManualClock::new());
    clock.set((T0 + 3600 + 5) * 1_000_000);
    let a = service(&redis, &clock, "shared_", false, 0).await;
    let b = service(&redis, &clock, "shared_", false, 0).await;
    let mut codes = Vec::new();
    for i in 0..12 {
        let service = if i % 2 == 0 { &a } else { &b };
        codes.push(
            service
                .decide(&request(&[("key3", "m")]))
                .await
                .unwrap()
                .overall_code,
        );
    }
    assert_eq!(codes.iter().filter(|&&c| c == Code::Ok as i32).count(), 10);
    // What the reference would find there: its own key, counted by both.
    let key = format!("shared_another_key3_m_{}", T0 + 3600);
    assert_eq!(redis.command(&["GET", &key]).unwrap(), "12");
}
