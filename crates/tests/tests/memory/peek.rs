//! A peek of cost `n` tells the decision a check of cost `n` would get at
//! that instant, and changes nothing: for random arrivals, every algorithm,
//! keyed (with a table small enough that floods reach the shared cells) and
//! single-bucket.

use crate::common;

use std::time::Duration;

use proptest::prelude::*;
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, BlockingThrottle, Decision, Direct, Error, FloodPolicy, Keyed,
    KnownAlgorithm, ManualClock, Quota, RateLimiter, wait_and_consume,
};
use ratelab_testkit::props::{Step, config, simulate};
use ratelab_testkit::strategies::{Arrival, quota_and_arrivals};

/// Limiters of one algorithm on one clock: keyed with room for every key,
/// keyed with room for one key (the rest go through the flood policy), and
/// one bucket.
fn limiters(kind: AlgorithmKind, quota: Quota, clock: &ManualClock) -> Vec<Box<dyn RateLimiter>> {
    struct Build<'a>(&'a ManualClock);
    impl AlgorithmVisitor for Build<'_> {
        type Output = Vec<Box<dyn RateLimiter>>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            let tight = |flood| {
                Keyed::builder(algorithm.clone())
                    .clock(self.0.clone())
                    .shards(1)
                    .max_keys(1)
                    .flood_policy(flood)
                    .build()
            };
            vec![
                Box::new(Keyed::with_clock(algorithm.clone(), self.0.clone())),
                Box::new(tight(FloodPolicy::Refuse)),
                Box::new(tight(FloodPolicy::Sketch { cells: 2, depth: 2 })),
                Box::new(Direct::with_clock(algorithm, self.0.clone())),
            ]
        }
    }
    kind.visit(quota, Build(clock))
}

/// The pure logic's answers, to prove the peeks consumed nothing.
fn expected(
    kind: AlgorithmKind,
    quota: Quota,
    arrivals: &[Arrival],
) -> Vec<Result<Decision, String>> {
    struct Run<'a>(&'a [Arrival]);
    impl AlgorithmVisitor for Run<'_> {
        type Output = Vec<Result<Decision, String>>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            simulate(&algorithm, self.0)
                .into_iter()
                .map(|s: Step<A::State>| s.result)
                .collect()
        }
    }
    kind.visit(quota, Run(arrivals))
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn a_peek_tells_what_a_check_then_does((quota, arrivals) in quota_and_arrivals(60)) {
        for kind in AlgorithmKind::ALL {
            let clock = ManualClock::new();
            let want = expected(kind, quota, &arrivals);
            for (index, limiter) in limiters(kind, quota, &clock).iter().enumerate() {
                clock.set(0);
                for (arrival, want) in arrivals.iter().zip(&want) {
                    clock.set(arrival.at);
                    let key = [arrival.key];
                    // Twice: a peek changes nothing, not even for the next peek.
                    let peeked = limiter.peek(&key, arrival.cost).map_err(|e| e.to_string());
                    let again = limiter.peek(&key, arrival.cost).map_err(|e| e.to_string());
                    let checked = limiter.check(&key, arrival.cost).map_err(|e| e.to_string());
                    prop_assert_eq!(&peeked, &again, "{} #{} at {}", kind, index, arrival.at);
                    prop_assert_eq!(&peeked, &checked, "{} #{} at {}", kind, index, arrival.at);
                    // The roomy keyed limiter decides as the pure logic:
                    // nothing the peeks did changed a decision.
                    if index == 0 {
                        prop_assert_eq!(&checked, want, "{} at {}", kind, arrival.at);
                    }
                }
            }
        }
    }
}

#[test]
fn a_peek_for_a_cost_tells_when_it_would_pass() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(2).unwrap().with_burst(5).unwrap();
    for kind in [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::Gcra,
        AlgorithmKind::LeakyMeter,
    ] {
        let limiter = common::keyed(kind, quota, clock.clone());
        for _ in 0..4 {
            assert!(limiter.check(b"k", 1).unwrap().allowed);
        }
        // One unit left: a peek of 3 is refused and says when 3 would pass
        // (two more units, one per 500 ms); a peek of 0 would just say yes.
        let peek = limiter.peek(b"k", 3).unwrap();
        assert!(!peek.allowed, "{kind}");
        assert_eq!(peek.remaining, 1, "{kind}");
        assert_eq!(peek.retry_after(), Duration::from_secs(1), "{kind}");
        assert!(limiter.peek(b"k", 0).unwrap().allowed);
        clock.advance(peek.retry_after());
        assert!(
            limiter.check(b"k", 3).unwrap().allowed,
            "{kind}: passes when the peek said"
        );
        clock.set(0);
        clock.advance(Duration::from_secs(100));
    }
}

#[test]
fn a_direct_bucket_works_wherever_a_limiter_is_taken() {
    let clock = ManualClock::new();
    let quota = Quota::per_second(2).unwrap().with_burst(2).unwrap();
    let bucket = Direct::with_clock(ratelab::TokenBucket::new(quota), clock.clone());
    // As a trait object, any key is the one bucket.
    let shared: &dyn RateLimiter = &bucket;
    assert!(shared.check(b"a", 1).unwrap().allowed);
    assert!(shared.check(b"b", 1).unwrap().allowed);
    assert!(!shared.check(b"c", 1).unwrap().allowed);
    assert_eq!(shared.algorithm_name(), "token-bucket");
    // The wait helper on it (timeout shorter than the 500 ms wait: gives up).
    assert!(matches!(
        wait_and_consume(&bucket, b"", 1, Duration::from_millis(100)),
        Err(ratelab::WaitError::TimedOut { .. })
    ));
    // A blocking throttle on the manual clock: the waits move the clock.
    let throttle =
        BlockingThrottle::with_clock(&bucket, clock.clone()).timeout(Duration::from_secs(1));
    let before = ratelab::Clock::now_micros(&clock);
    assert_eq!(throttle.call(|| 7).unwrap(), 7);
    assert_eq!(ratelab::Clock::now_micros(&clock) - before, 500_000);
    // A cost that can never fit is an error at once, not a wait.
    let heavy = BlockingThrottle::with_clock(&bucket, clock.clone()).cost(3);
    assert!(matches!(
        heavy.wait(),
        Err(ratelab::WaitError::Limiter(Error::CostTooHigh { .. }))
    ));
}
