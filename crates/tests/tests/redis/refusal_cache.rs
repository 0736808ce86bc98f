//! The local cache of refusals sheds round trips and never admits anything
//! Redis would refuse: on the same sequences, a limiter with the cache and
//! one without admit exactly the same requests.

use crate::common;

use std::time::Duration;

use proptest::prelude::*;
use ratelab::Gcra;
use ratelab::redis::{RedisLimiter, RedisStore};
use ratelab::{ManualClock, Quota};
use ratelab_testkit::props::config;
use ratelab_testkit::strategies::quota_and_arrivals;

fn limiter(quota: Quota, clock: &ManualClock, cache: bool) -> RedisLimiter<Gcra> {
    let (_, _, connection) = common::shared();
    let builder = RedisStore::builder(connection.clone(), Gcra::new(quota))
        .prefix(common::unique_prefix())
        .time_source(common::client_time(clock))
        .timeout(common::PATIENT);
    if cache {
        builder.cache_refusals(1_000).build()
    } else {
        builder.build()
    }
}

#[test]
fn a_hammering_client_is_refused_locally_until_its_retry() {
    let (_, runtime, _) = common::shared();
    let clock = ManualClock::starting_at(5_000_000);
    let quota = Quota::per_second(10).unwrap().with_burst(2).unwrap();
    let limiter = limiter(quota, &clock, true);
    runtime.block_on(async {
        assert!(limiter.check(b"k", 2).await.unwrap().allowed);
        let refused = limiter.check(b"k", 1).await.unwrap();
        assert_eq!(refused.retry_after(), Duration::from_millis(100));
        let answered = limiter.stats().answered;
        clock.advance(Duration::from_millis(40));
        for _ in 0..100 {
            let cached = limiter.check(b"k", 1).await.unwrap();
            assert!(!cached.allowed);
            assert_eq!(cached.retry_after(), Duration::from_millis(60));
        }
        assert_eq!(limiter.stats().answered, answered, "no round trip");
        assert_eq!(limiter.stats().cached_refusals, 100);
        // A peek still goes to Redis; so does anything once the wait is over.
        assert!(limiter.check(b"k", 0).await.unwrap().allowed);
        clock.advance(Duration::from_millis(60));
        assert!(limiter.check(b"k", 1).await.unwrap().allowed);
    });
}

#[test]
fn a_bigger_cost_is_never_answered_with_a_smaller_ones_wait() {
    let (_, runtime, _) = common::shared();
    let clock = ManualClock::starting_at(5_000_000);
    let quota = Quota::per_second(10).unwrap().with_burst(5).unwrap();
    let limiter = limiter(quota, &clock, true);
    runtime.block_on(async {
        assert!(limiter.check(b"k", 5).await.unwrap().allowed);
        let unit = limiter.check(b"k", 1).await.unwrap();
        assert_eq!(unit.retry_after(), Duration::from_millis(100));
        // Cost 3 asks Redis, which knows it needs three units back.
        let answered = limiter.stats().answered;
        let three = limiter.check(b"k", 3).await.unwrap();
        assert!(!three.allowed);
        assert_eq!(three.retry_after(), Duration::from_millis(300));
        assert_eq!(limiter.stats().answered, answered + 1, "not from the cache");
        // A retry at exactly that wait passes.
        clock.advance(three.retry_after());
        assert!(limiter.check(b"k", 3).await.unwrap().allowed);
    });
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn the_cache_admits_exactly_what_redis_admits((quota, arrivals) in quota_and_arrivals(40)) {
        let (_, runtime, _) = common::shared();
        let clock = ManualClock::new();
        let with = limiter(quota, &clock, true);
        let without = limiter(quota, &clock, false);
        runtime.block_on(async {
            for arrival in &arrivals {
                clock.set(arrival.at);
                let a = with.check(&[arrival.key], arrival.cost).await.map(|d| d.allowed).map_err(|e| e.to_string());
                let b = without.check(&[arrival.key], arrival.cost).await.map(|d| d.allowed).map_err(|e| e.to_string());
                prop_assert_eq!(a, b, "at {}", arrival.at);
            }
            Ok(())
        })?;
    }
}
