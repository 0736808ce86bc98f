//! The reference's answers, on a clock the tests set: its README examples
//! and integration sequences, as envoyproxy/ratelimit gives them.

use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::google::protobuf::UInt64Value;
use ratelab::ManualClock;

use super::*;
use crate::config::Config;

/// 2026-01-01T00:00:00Z plus `secs`.
const T0: u64 = 1_767_225_600;

fn clock_at(secs: u64) -> Arc<ManualClock> {
    let clock = ManualClock::new();
    clock.set((T0 + secs) * 1_000_000);
    Arc::new(clock)
}

fn config(yamls: &[&str]) -> SharedConfig {
    let mut config = Config::default();
    for (i, yaml) in yamls.iter().enumerate() {
        config
            .add(std::path::Path::new(&format!("{i}.yaml")), yaml, false)
            .unwrap();
    }
    crate::shared(config)
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|&(key, value)| Entry {
                key: key.into(),
                value: value.into(),
            })
            .collect(),
        ..Default::default()
    }
}

fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
        hits_addend: 0,
    }
}

/// Each status as (code, limit, remaining, seconds to reset).
fn statuses(response: &RateLimitResponse) -> Vec<(i32, Option<u32>, u32, Option<i64>)> {
    response
        .statuses
        .iter()
        .map(|s| {
            (
                s.code,
                s.current_limit.as_ref().map(|l| l.requests_per_unit),
                s.limit_remaining,
                s.duration_until_reset.as_ref().map(|d| d.seconds),
            )
        })
        .collect()
}

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

const ANOTHER: &str = "\
domain: another
descriptors:
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 10
";

#[tokio::test]
async fn the_references_integration_sequence() {
    // 10 s into a minute: every answer falls in one window.
    let clock = clock_at(10);
    let service = Service::builder(config(&[ANOTHER]))
        .clock(clock.clone())
        .build();
    for i in 0..25u32 {
        let answer = service
            .decide(&request("another", &[&[("key2", "r1")]]))
            .await
            .unwrap();
        let (code, remaining) = if i >= 20 {
            (OVER, 0)
        } else {
            (OK, 20 - (i + 1))
        };
        assert_eq!(answer.overall_code, code, "request {i}");
        assert_eq!(statuses(&answer), [(code, Some(20), remaining, Some(50))]);
    }
    let stats = service.stats();
    assert_eq!(
        stats.value("ratelimit.service.rate_limit.another.key2.total_hits"),
        25
    );
    assert_eq!(
        stats.value("ratelimit.service.rate_limit.another.key2.over_limit"),
        5
    );
    assert_eq!(
        stats.value("ratelimit.service.rate_limit.another.key2.within_limit"),
        20
    );
    assert_eq!(
        stats.value("ratelimit.service.rate_limit.another.key2.near_limit"),
        4
    );
    // Two keys: the first keeps counting after the second is over.
    for i in 0..15u32 {
        let answer = service
            .decide(&request("another", &[&[("key2", "r2")], &[("key3", "r2")]]))
            .await
            .unwrap();
        let over = i >= 10;
        assert_eq!(answer.overall_code, if over { OVER } else { OK });
        assert_eq!(
            statuses(&answer),
            [
                (OK, Some(20), 20 - (i + 1), Some(50)),
                (
                    if over { OVER } else { OK },
                    Some(10),
                    if over { 0 } else { 10 - (i + 1) },
                    Some(3590)
                ),
            ],
            "request {i}"
        );
    }
}

#[tokio::test]
async fn stopping_at_the_limit_keeps_the_other_counters() {
    let clock = clock_at(10);
    let service = Service::builder(config(&[ANOTHER]))
        .clock(clock)
        .stop_increment_when_over_limit(true)
        .build();
    for i in 0..15u32 {
        let answer = service
            .decide(&request("another", &[&[("key2", "r")], &[("key3", "r")]]))
            .await
            .unwrap();
        let remaining = if i >= 10 {
            (10, 0)
        } else {
            (20 - (i + 1), 10 - (i + 1))
        };
        let got = statuses(&answer);
        assert_eq!((got[0].2, got[1].2), remaining, "request {i}");
    }
}

#[tokio::test]
async fn windows_are_on_the_clock_and_reset_at_their_end() {
    let clock = clock_at(59);
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: day\n    rate_limit: {unit: DAY, requests_per_unit: 1}\n";
    let service = Service::builder(config(&[yaml]))
        .clock(clock.clone())
        .build();
    let minute = request("d", &[&[("k", "v")]]);
    let ask = || service.decide(&minute);
    assert_eq!(statuses(&ask().await.unwrap()), [(OK, Some(2), 1, Some(1))]);
    assert_eq!(statuses(&ask().await.unwrap()), [(OK, Some(2), 0, Some(1))]);
    assert_eq!(
        statuses(&ask().await.unwrap()),
        [(OVER, Some(2), 0, Some(1))]
    );
    // One second later, a new minute on the clock.
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        statuses(&ask().await.unwrap()),
        [(OK, Some(2), 1, Some(60))]
    );
    // A day resets at 00:00 UTC, whenever the first request came.
    clock.set((T0 + 86_400 - 5) * 1_000_000);
    let daily = request("d", &[&[("day", "x")]]);
    let day = || service.decide(&daily);
    assert_eq!(statuses(&day().await.unwrap()), [(OK, Some(1), 0, Some(5))]);
    assert_eq!(day().await.unwrap().overall_code, OVER);
    clock.set((T0 + 86_400) * 1_000_000);
    assert_eq!(
        statuses(&day().await.unwrap()),
        [(OK, Some(1), 0, Some(86_400))]
    );
}

#[tokio::test]
async fn readme_examples_two_three_and_five() {
    let messaging = "\
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
";
    let edge = "\
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
";
    let internal = "\
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
";
    let service = Service::builder(config(&[messaging, edge, internal]))
        .clock(clock_at(100))
        .build();
    let marketing: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "2061111111")];
    let number: &[(&str, &str)] = &[("to_number", "2061111111")];
    for i in 0..7u32 {
        let answer = service
            .decide(&request("messaging", &[marketing, number]))
            .await
            .unwrap();
        let got = statuses(&answer);
        // Refused hits are counted: the number's own limit keeps counting.
        assert_eq!(got[1].2, 100 - (i + 1), "request {i}");
        assert_eq!(got[0].2, 5u32.saturating_sub(i + 1));
        assert_eq!(answer.overall_code, if i >= 5 { OVER } else { OK });
    }
    // The blocked address: always over, the others 10 a second.
    let blocked = service
        .decide(&request(
            "edge_proxy_per_ip",
            &[&[("remote_address", "50.0.0.5")]],
        ))
        .await
        .unwrap();
    assert_eq!(statuses(&blocked), [(OVER, Some(0), 0, Some(1))]);
    let other = service
        .decide(&request(
            "edge_proxy_per_ip",
            &[&[("remote_address", "50.0.0.1")]],
        ))
        .await
        .unwrap();
    assert_eq!(statuses(&other), [(OK, Some(10), 9, Some(1))]);
    // Unlimited: OK, no limit, the most that can remain.
    let ldap = service
        .decide(&request(
            "internal",
            &[&[("ldap", "x")], &[("azure", "y")], &[("nothing", "z")]],
        ))
        .await
        .unwrap();
    assert_eq!(
        statuses(&ldap),
        [
            (OK, None, u32::MAX, None),
            (OK, Some(100), 99, Some(20)),
            (OK, None, 0, None)
        ]
    );
}

#[tokio::test]
async fn replaces_shadow_mode_and_names() {
    let example6 = "\
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: {requests_per_unit: 1, unit: second}
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: {requests_per_unit: 1, unit: second, name: b}
";
    let example7 = "\
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 1, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 2
          unit: second
";
    let service = Service::builder(config(&[example6, example7]))
        .clock(clock_at(0))
        .build();
    let user_a: &[(&str, &str)] = &[("service", "auth"), ("user", "user-a")];
    for _ in 0..3 {
        let answer = service
            .decide(&request("example6", &[user_a]))
            .await
            .unwrap();
        assert_eq!(answer.overall_code, OK);
    }
    assert_eq!(
        service
            .stats()
            .value("ratelimit.service.rate_limit.example6.service.user_user-a.shadow_mode"),
        2
    );
    let user_b: &[(&str, &str)] = &[("service", "auth"), ("user", "user-b")];
    let first = service
        .decide(&request("example6", &[user_b]))
        .await
        .unwrap();
    assert_eq!(first.statuses[0].current_limit.as_ref().unwrap().name, "b");
    assert_eq!(
        service
            .decide(&request("example6", &[user_b]))
            .await
            .unwrap()
            .overall_code,
        OVER
    );

    // Both apply: only the replacing one counts.
    let one: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let two: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    for remaining in [1, 0] {
        let answer = service
            .decide(&request("example7", &[one, two]))
            .await
            .unwrap();
        assert_eq!(
            statuses(&answer),
            [(OK, None, 0, None), (OK, Some(2), remaining, Some(1))]
        );
    }
    // The replaced limit was not touched: alone, it still has its unit.
    let alone = service.decide(&request("example7", &[one])).await.unwrap();
    assert_eq!(statuses(&alone), [(OK, Some(1), 0, Some(1))]);
}

#[tokio::test]
async fn empty_descriptors_unknown_domains_and_bad_requests() {
    let service = Service::builder(config(&[ANOTHER]))
        .clock(clock_at(0))
        .build();
    // A descriptor with no entries: OK, no limit.
    let answer = service
        .decide(&request("another", &[&[], &[("key2", "x")]]))
        .await
        .unwrap();
    assert_eq!(
        statuses(&answer),
        [(OK, None, 0, None), (OK, Some(20), 19, Some(60))]
    );
    // An unknown domain: no limit, counted as not found; its overrides ignored.
    let mut unknown = request("nowhere", &[&[("key2", "x")]]);
    unknown.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 0,
        unit: 1,
    });
    assert_eq!(
        statuses(&service.decide(&unknown).await.unwrap()),
        [(OK, None, 0, None)]
    );
    assert_eq!(
        service
            .stats()
            .value("ratelimit.service.rate_limit.nowhere.domain_not_found"),
        1
    );
    for bad in [request("", &[&[("k", "v")]]), request("another", &[])] {
        let status = service.decide(&bad).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }
    let mut bad_unit = request("another", &[&[("key2", "x")]]);
    bad_unit.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 0,
    });
    assert_eq!(
        service.decide(&bad_unit).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    // More hits than Redis adds (a signed 64-bit number; the reference's
    // INCRBY of 2^64 - 1 lowers the counter by one): refused, nothing counted.
    for huge in [u64::MAX, 1 << 63] {
        let mut too_many = request("another", &[&[("key2", "x")]]);
        too_many.descriptors[0].hits_addend = Some(UInt64Value { value: huge });
        let status = service.decide(&too_many).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains("hits_addend"), "{status:?}");
    }
    assert_eq!(
        statuses(
            &service
                .decide(&request("another", &[&[("key2", "x")]]))
                .await
                .unwrap()
        ),
        [(OK, Some(20), 18, Some(60))]
    );
    assert_eq!(
        service
            .stats()
            .value("ratelimit.service.call.should_rate_limit.service_error"),
        5
    );
}

#[tokio::test]
async fn a_requests_override_and_hits() {
    let service = Service::builder(config(&[ANOTHER]))
        .clock(clock_at(30))
        .build();
    let mut over = request("another", &[&[("key2", "o"), ("sub", "s")]]);
    over.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 3,
        unit: 2,
    });
    over.descriptors[0].hits_addend = Some(UInt64Value { value: 2 });
    let first = service.decide(&over).await.unwrap();
    assert_eq!(statuses(&first), [(OK, Some(3), 1, Some(30))]);
    assert_eq!(first.statuses[0].current_limit.as_ref().unwrap().name, "");
    // 2 more: over, and counted (4 of 3): one more is over too.
    assert_eq!(service.decide(&over).await.unwrap().overall_code, OVER);
    over.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    assert_eq!(
        statuses(&service.decide(&over).await.unwrap()),
        [(OVER, Some(3), 0, Some(30))]
    );
    assert_eq!(
        service
            .stats()
            .value("ratelimit.service.rate_limit.another.key2_o.sub_s.total_hits"),
        4
    );
    // hits_addend on the request: 0 means 1.
    let mut many = request("another", &[&[("key2", "h")]]);
    many.hits_addend = 5;
    assert_eq!(statuses(&service.decide(&many).await.unwrap())[0].2, 15);
}

#[tokio::test]
async fn global_shadow_and_quota_modes() {
    let yaml = "\
domain: q
descriptors:
  - key: a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
";
    let service = Service::builder(config(&[yaml])).clock(clock_at(0)).build();
    let both: &[&[(&str, &str)]] = &[&[("a", "x")], &[("b", "x")]];
    assert_eq!(
        service
            .decide(&request("q", both))
            .await
            .unwrap()
            .overall_code,
        OK
    );
    // `a` is over, `b` is not: quota mode answers OK.
    let answer = service.decide(&request("q", both)).await.unwrap();
    assert_eq!((answer.overall_code, answer.statuses[0].code), (OK, OVER));
    // Both over: refused.
    assert_eq!(
        service
            .decide(&request("q", both))
            .await
            .unwrap()
            .overall_code,
        OVER
    );

    let shadow = Service::builder(config(&[ANOTHER]))
        .clock(clock_at(0))
        .global_shadow_mode(true)
        .build();
    let mut answers = Vec::new();
    for _ in 0..22 {
        answers.push(
            shadow
                .decide(&request("another", &[&[("key2", "s")]]))
                .await
                .unwrap(),
        );
    }
    let last = answers.last().unwrap();
    assert_eq!((last.overall_code, last.statuses[0].code), (OK, OVER));
    assert_eq!(
        shadow.stats().value("ratelimit.service.global_shadow_mode"),
        2
    );
}

#[tokio::test]
async fn headers_are_off_unless_asked_and_then_the_references() {
    let service = Service::builder(config(&[ANOTHER]))
        .clock(clock_at(15))
        .build();
    let answer = service
        .decide(&request("another", &[&[("key2", "h")], &[("key3", "h")]]))
        .await
        .unwrap();
    assert!(answer.response_headers_to_add.is_empty());

    let named = Service::builder(config(&[ANOTHER]))
        .clock(clock_at(15))
        .headers(ResponseHeaders::Reference {
            limit: "X-Limit".into(),
            remaining: "X-Remaining".into(),
            reset: "X-Reset".into(),
        })
        .build();
    let headers = |r: &RateLimitResponse| -> Vec<(String, String)> {
        r.response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect()
    };
    // The descriptor nearest its limit: key3 (9 of 10 left).
    let answer = named
        .decide(&request("another", &[&[("key2", "h")], &[("key3", "h")]]))
        .await
        .unwrap();
    assert_eq!(
        headers(&answer),
        [
            ("X-Limit".into(), "10".into()),
            ("X-Remaining".into(), "9".into()),
            ("X-Reset".into(), "3585".into())
        ]
    );
    let ietf = Service::builder(config(&[ANOTHER]))
        .clock(clock_at(15))
        .headers(ResponseHeaders::Ietf)
        .build();
    let answer = ietf
        .decide(&request("another", &[&[("key2", "h")]]))
        .await
        .unwrap();
    assert_eq!(
        headers(&answer)[0],
        (
            "RateLimit-Policy".into(),
            "\"another.key2\";q=20;w=60".into()
        )
    );
}

#[tokio::test]
async fn ratelab_algorithms_count_all_or_nothing_beside_the_references() {
    let yaml = "\
domain: mixed
descriptors:
  - key: envoy
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: gcra}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: token-bucket}
";
    let clock = clock_at(0);
    let service = Service::builder(config(&[yaml]))
        .clock(clock.clone())
        .build();
    let all: &[&[(&str, &str)]] = &[&[("envoy", "x")], &[("gcra", "x")], &[("bucket", "x")]];
    for _ in 0..2 {
        assert_eq!(
            service
                .decide(&request("mixed", all))
                .await
                .unwrap()
                .overall_code,
            OK
        );
    }
    // The bucket is empty: refused; the gcra unit it took goes back, the
    // reference's counter keeps it (as the reference would).
    let refused = service.decide(&request("mixed", all)).await.unwrap();
    assert_eq!(refused.overall_code, OVER);
    assert_eq!(statuses(&refused)[0].2, 2);
    let gcra = service
        .decide(&request("mixed", &[&[("gcra", "x")]]))
        .await
        .unwrap();
    assert_eq!(statuses(&gcra)[0].2, 0, "gcra had 3, two kept");
    // The default algorithm can be changed for limits that name none.
    let gcra_default = Service::builder(config(&[ANOTHER]))
        .clock(clock_at(0))
        .default_algorithm(Algorithm::Ratelab(AlgorithmKind::Gcra))
        .build();
    let answer = gcra_default
        .decide(&request("another", &[&[("key2", "g")]]))
        .await
        .unwrap();
    // GCRA: full again 3 s after one of 20 a minute.
    assert_eq!(statuses(&answer), [(OK, Some(20), 19, Some(3))]);
}

#[tokio::test]
async fn too_many_descriptors_are_refused_with_a_clear_error() {
    let service = Service::builder(config(&[ANOTHER]))
        .clock(clock_at(0))
        .max_descriptors(3)
        .build();
    let four: Vec<&[(&str, &str)]> = vec![&[("key2", "a")]; 4];
    let status = service
        .decide(&request("another", &four))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("at most 3"), "{status:?}");
}

#[tokio::test]
async fn overrides_cannot_make_limiters_without_bound() {
    let service = Service::builder(config(&[ANOTHER]))
        .clock(clock_at(0))
        .default_algorithm(Algorithm::Ratelab(AlgorithmKind::Gcra))
        .build();
    let bound = u32::try_from(MAX_LIMITERS).unwrap();
    let mut refused = None;
    for rpu in 1..=bound + 1 {
        let mut over = request("another", &[&[("key2", "x")]]);
        over.descriptors[0].limit = Some(RateLimitOverride {
            requests_per_unit: rpu,
            unit: 3,
        });
        if let Err(status) = service.decide(&over).await {
            refused = Some((rpu, status.code()));
            break;
        }
    }
    // One limiter a quota: the first past the bound is refused.
    assert_eq!(refused, Some((bound + 1, tonic::Code::ResourceExhausted)));
    // Quotas already made keep answering.
    let mut known = request("another", &[&[("key2", "y")]]);
    known.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 7,
        unit: 3,
    });
    assert_eq!(service.decide(&known).await.unwrap().overall_code, OK);
}

#[tokio::test]
async fn without_a_configuration_every_call_is_an_error_naming_why() {
    let shared = crate::shared(Config::refused("d.yaml:3:5: descriptor has empty key"));
    let service = Service::builder(shared.clone()).clock(clock_at(0)).build();
    let status = service
        .decide(&request("another", &[&[("key2", "x")]]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(
        status
            .message()
            .contains("no rate limit configuration loaded: d.yaml:3:5"),
        "{status:?}"
    );
    // A reload that loads ends it.
    let mut fixed = Config::default();
    fixed
        .add(std::path::Path::new("a.yaml"), ANOTHER, false)
        .unwrap();
    *shared.write() = Arc::new(fixed);
    let answer = service
        .decide(&request("another", &[&[("key2", "x")]]))
        .await
        .unwrap();
    assert_eq!(answer.overall_code, OK);
}

#[test]
fn overrides_in_the_metadata_read_as_the_references() {
    let text = |requests_per_unit, unit| {
        override_text(&RateLimitOverride {
            requests_per_unit,
            unit,
        })
    };
    // protobuf's text form: fields at zero left out.
    assert_eq!(text(3, 3), "requests_per_unit:3 unit:HOUR");
    assert_eq!(text(0, 2), "unit:MINUTE");
    assert_eq!(text(5, 0), "requests_per_unit:5");
    assert_eq!(text(5, 9), "requests_per_unit:5 unit:9");
    assert_eq!(text(0, 0), "");
}
