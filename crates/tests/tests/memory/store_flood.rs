//! Under random floods of new keys against a small table, no key, tracked
//! or decided by the shared cells, is admitted past its algorithm's bound,
//! whatever the flood policy, with the clock jumping back and forth.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use ratelab::{
    Algorithm, FloodPolicy, Gcra, Keyed, LeakyMeter, ManualClock, Quota, SlidingLog, TokenBucket,
};
use ratelab_testkit::oracle::{Admitted, Bound, Oracle};

#[derive(Debug, Clone)]
enum Step {
    Advance(u64),
    Rewind(u64),
    Sweep,
    /// A request of `cost` by key `key`.
    Check(u64, u32),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            2 => (0..1_500_000u64).prop_map(Step::Advance),
            1 => (0..300_000u64).prop_map(Step::Rewind),
            1 => Just(Step::Sweep),
            // A few heavy keys and a long tail of new ones.
            6 => (prop_oneof![0..3u64, 0..500u64], 0..4u32).prop_map(|(k, c)| Step::Check(k, c)),
        ],
        1..400,
    )
}

fn policy() -> impl Strategy<Value = FloodPolicy> {
    prop_oneof![
        1 => Just(FloodPolicy::Refuse),
        4 => (1..32usize, 1..4usize).prop_map(|(cells, depth)| FloodPolicy::sketch(cells, depth)),
    ]
}

fn run<A: Algorithm>(
    algorithm: A,
    bound: Bound,
    max_keys: usize,
    policy: FloodPolicy,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(1 << 40);
    // One shard: its time (the latest reading of any check or sweep) is the
    // time this test can follow exactly.
    let limiter = Keyed::builder(algorithm)
        .clock(clock.clone())
        .max_keys(max_keys)
        .shards(1)
        .flood_policy(policy)
        .build();
    let mut latest = 0;
    let mut admitted: HashMap<u64, Vec<Admitted>> = HashMap::new();
    for step in steps {
        match *step {
            Step::Advance(us) => clock.advance(Duration::from_micros(us)),
            Step::Rewind(us) => clock.rewind(Duration::from_micros(us)),
            Step::Sweep => {
                limiter.sweep();
                latest = latest.max(ratelab::Clock::now_micros(&clock));
            }
            Step::Check(key, cost) => {
                let answer = limiter.check(&key.to_le_bytes(), cost);
                latest = latest.max(ratelab::Clock::now_micros(&clock));
                if let Ok(decision) = answer
                    && decision.allowed
                    && cost > 0
                {
                    admitted.entry(key).or_default().push(Admitted {
                        at: latest,
                        units: u64::from(cost),
                    });
                }
            }
        }
    }
    for (key, log) in &admitted {
        if let Some(violation) = bound.violation(log) {
            prop_assert!(false, "key {key}: {violation}");
        }
    }
    Ok(())
}

/// Small quotas, so that keys owe and refill within a few steps (also
/// `store_budget`'s).
pub(super) fn quota() -> impl Strategy<Value = Quota> {
    (1..20u32, 1..5u32)
        .prop_map(|(limit, burst)| Quota::per_second(limit).unwrap().with_burst(burst).unwrap())
}

fn bucket(quota: Quota) -> Bound {
    Bound::rate(&quota)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: Some(ratelab_testkit::props::regressions()),
        ..ProptestConfig::default()
    })]

    #[test]
    fn gcra(quota in quota(), max_keys in 0..20usize, policy in policy(), steps in steps()) {
        run(Gcra::new(quota), bucket(quota), max_keys, policy, &steps)?;
    }

    #[test]
    fn token_bucket(quota in quota(), max_keys in 0..20usize, policy in policy(), steps in steps()) {
        run(TokenBucket::new(quota), bucket(quota), max_keys, policy, &steps)?;
    }

    #[test]
    fn leaky_meter(quota in quota(), max_keys in 0..20usize, policy in policy(), steps in steps()) {
        run(LeakyMeter::new(quota), bucket(quota), max_keys, policy, &steps)?;
    }

    #[test]
    fn sliding_log(quota in quota(), max_keys in 0..20usize, policy in policy(), steps in steps()) {
        let bound = Bound::TrailingWindow {
            limit: u64::from(quota.burst()),
            window: quota.window_micros(),
        };
        run(SlidingLog::new(quota), bound, max_keys, policy, &steps)?;
    }
}
