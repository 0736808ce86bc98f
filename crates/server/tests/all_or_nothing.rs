//! All or nothing: a request answered `OVER_LIMIT`, or failed, costs
//! nothing in any of its descriptors. In memory against an oracle that
//! replays what was kept (a proptest), and on a real Redis whose answer for
//! one descriptor fails while another was admitted.

use std::collections::BTreeMap;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use proptest::prelude::*;
use ratelab_server::{Backend, Service, config};

/// One value of the `k` descriptor per limit: different algorithms, limits
/// and shadow modes, a day each so that nothing comes back during a test.
const KEYS: [(&str, u32, bool, &str); 6] = [
    ("a", 5, false, "gcra"),
    ("b", 3, false, "fixed-window"),
    ("c", 2, true, "sliding-log"),
    ("d", 4, false, "token-bucket"),
    ("e", 3, true, "sliding-counter"),
    ("f", 2, false, "leaky-meter"),
];

fn config() -> String {
    let mut yaml = String::from("domain: p\ndescriptors:\n");
    for (value, limit, shadow, algorithm) in KEYS {
        yaml.push_str(&format!(
            "  - key: k\n    value: {value}\n    shadow_mode: {shadow}\n    rate_limit: {{unit: day, requests_per_unit: {limit}, algorithm: {algorithm}}}\n"
        ));
    }
    yaml
}

fn service(yaml: &str, backend: Backend) -> Service {
    let (name, domain) = config::parse("p.yaml".as_ref(), yaml).unwrap();
    let config = config::Config::from_domains([(name, domain)]);
    Service::new(ratelab_server::shared(config), backend, false)
}

/// A request of `domain` for `k: value` descriptors, each with its own
/// cost (`hits_addend`).
fn request(domain: &str, descriptors: &[(&str, u64)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
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

fn remaining(answer: &RateLimitResponse) -> Vec<u32> {
    answer.statuses.iter().map(|s| s.limit_remaining).collect()
}

#[tokio::test]
async fn a_refused_request_costs_nothing_in_its_other_descriptors() {
    let service = service(&config(), Backend::Memory);
    // `b` (3 a day) has 1 left.
    let first = service.decide(&request("p", &[("b", 2)])).await.unwrap();
    assert_eq!(remaining(&first), [1]);
    // `a` (5 a day) admits 1; `b` cannot take 2: refused.
    let refused = service
        .decide(&request("p", &[("a", 1), ("b", 2)]))
        .await
        .unwrap();
    assert_eq!(refused.overall_code, Code::OverLimit as i32);
    let codes: Vec<i32> = refused.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [Code::Ok as i32, Code::OverLimit as i32]);
    // Each status says what its own check decided: `a` admitted, 4 left.
    assert_eq!(remaining(&refused), [4, 1]);
    // Yet `a` was given back: the next request finds all 5.
    let after = service.decide(&request("p", &[("a", 1)])).await.unwrap();
    assert_eq!(
        (after.overall_code, remaining(&after)),
        (Code::Ok as i32, vec![4])
    );

    // A shadow limit's refusal refuses nothing: `c` (2 a day, shadow) has
    // 1 left and refuses 2, and `a` keeps its unit.
    service.decide(&request("p", &[("c", 1)])).await.unwrap();
    let shadowed = service
        .decide(&request("p", &[("a", 1), ("c", 2)]))
        .await
        .unwrap();
    assert_eq!(shadowed.overall_code, Code::Ok as i32);
    let codes: Vec<i32> = shadowed.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [Code::Ok as i32, Code::Ok as i32]);
    assert_eq!(remaining(&shadowed), [3, 1]);
    assert_eq!(
        remaining(&service.decide(&request("p", &[("a", 0)])).await.unwrap()),
        [3]
    );
}

/// `is_negative_hits` would give units back on the caller's word: as
/// envoyproxy/ratelimit does, the hits are counted like any others, and
/// nothing is given back.
#[tokio::test]
async fn negative_hits_give_nothing_back() {
    let service = service(&config(), Backend::Memory);
    service.decide(&request("p", &[("a", 2)])).await.unwrap();
    let mut give_back = request("p", &[("a", 2)]);
    give_back.descriptors[0].is_negative_hits = true;
    let answer = service.decide(&give_back).await.unwrap();
    assert_eq!(remaining(&answer), [1]);
    let after = service.decide(&request("p", &[("a", 0)])).await.unwrap();
    assert_eq!(remaining(&after), [1]);
}

/// What the oracle expects of one request: the overall code and each
/// descriptor's code and remaining; `used` is updated when it is kept.
fn oracle(
    used: &mut BTreeMap<usize, u64>,
    descriptors: &[(usize, u64)],
) -> (Code, Vec<(Code, u32)>) {
    let mut trial = used.clone();
    let mut refused = false;
    let mut statuses = Vec::new();
    for &(key, cost) in descriptors {
        let (_, limit, shadow, _) = KEYS[key];
        let limit = u64::from(limit);
        let taken = trial.entry(key).or_default();
        let fits = *taken + cost <= limit;
        if fits {
            *taken += cost;
        } else if !shadow {
            refused = true;
        }
        // More than the whole limit can never pass: over the limit, 0 left.
        let left = if cost > limit { 0 } else { limit - *taken };
        let code = if fits || shadow {
            Code::Ok
        } else {
            Code::OverLimit
        };
        statuses.push((code, u32::try_from(left).unwrap()));
    }
    if refused {
        return (Code::OverLimit, statuses);
    }
    *used = trial;
    (Code::Ok, statuses)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random requests of 1 to 3 descriptors over the keys, with costs up
    /// to one more than the largest limit: after each, the answer is `OK`
    /// exactly when every non-shadow descriptor fits, each status is its
    /// own check's, and every key has its limit minus what the kept
    /// requests cost.
    #[test]
    fn refused_requests_cost_nothing(
        requests in prop::collection::vec(
            prop::collection::vec((0..KEYS.len(), 0u64..=6), 1..=3),
            1..24,
        )
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let service = service(&config(), Backend::Memory);
        let mut used = BTreeMap::new();
        for descriptors in &requests {
            let named: Vec<(&str, u64)> =
                descriptors.iter().map(|&(k, cost)| (KEYS[k].0, cost)).collect();
            let answer = rt.block_on(service.decide(&request("p", &named))).unwrap();
            let (overall, statuses) = oracle(&mut used, descriptors);
            prop_assert_eq!(answer.overall_code, overall as i32, "{:?}", named);
            let got: Vec<(i32, u32)> =
                answer.statuses.iter().map(|s| (s.code, s.limit_remaining)).collect();
            let want: Vec<(i32, u32)> =
                statuses.iter().map(|&(code, left)| (code as i32, left)).collect();
            prop_assert_eq!(got, want, "{:?}", named);

            // Every key, looked at without a hit (cost 0).
            let all: Vec<(&str, u64)> = KEYS.iter().map(|k| (k.0, 0)).collect();
            let look = rt.block_on(service.decide(&request("p", &all))).unwrap();
            let want: Vec<u32> = KEYS
                .iter()
                .enumerate()
                .map(|(i, k)| k.1 - u32::try_from(used.get(&i).copied().unwrap_or(0)).unwrap())
                .collect();
            prop_assert_eq!(remaining(&look), want, "after {:?}", named);
        }
    }
}

/// A descriptor whose Redis key holds another type fails the request
/// (`INTERNAL`: a data error, not an outage) after another descriptor was
/// admitted: that admission is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_failing_midway_on_redis_gives_back_what_it_took() {
    let redis = ratelab_testkit::redis::RedisServer::start();
    let connection = ratelab::redis::Connection::single(&redis.url())
        .await
        .unwrap();
    let backend = Backend::Redis {
        connection,
        on_failure: ratelab::redis::FailurePolicy::Error,
        timeout: Duration::from_secs(2),
        prefix: "midway".into(),
    };
    let service = service(&config(), backend);
    // `b`'s state is on the server: replace it (and anything beside it)
    // with a list, which no check can read.
    let broken = service.decide(&request("p", &[("b", 1)])).await.unwrap();
    assert_eq!(broken.overall_code, Code::Ok as i32);
    // (In Lua: the keys hold bytes that a text command would mangle.)
    let replaced = redis
        .command(&[
            "EVAL",
            "local keys = redis.call('KEYS', '*') \
             for _, key in ipairs(keys) do \
                 redis.call('DEL', key) redis.call('RPUSH', key, 'not a rate limit') \
             end \
             return #keys",
            "0",
        ])
        .unwrap();
    assert_ne!(replaced, "0", "nothing on the server");

    // `a` is admitted, `b` fails: the request fails, `a` is given back.
    let failed = service.decide(&request("p", &[("a", 2), ("b", 1)])).await;
    let status = failed.expect_err("b's key holds a list");
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    let after = service.decide(&request("p", &[("a", 1)])).await.unwrap();
    assert_eq!(
        (after.overall_code, remaining(&after)),
        (Code::Ok as i32, vec![4])
    );
    // And refused on Redis as in memory: `d` (4 a day) has 1 left, cannot
    // take 2, and `a` is given back again.
    let first = service.decide(&request("p", &[("d", 3)])).await.unwrap();
    assert_eq!(remaining(&first), [1]);
    let refused = service
        .decide(&request("p", &[("a", 1), ("d", 2)]))
        .await
        .unwrap();
    assert_eq!(refused.overall_code, Code::OverLimit as i32);
    assert_eq!(remaining(&refused), [3, 1]);
    let after = service
        .decide(&request("p", &[("a", 0), ("d", 0)]))
        .await
        .unwrap();
    assert_eq!(remaining(&after), [4, 1]);
}
