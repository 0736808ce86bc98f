//! A rewound clock is time standing still for every runner: GCRA, the token
//! bucket and the leaky meter decide identically, and the leaky queue admits
//! identically, through `Direct` and `Keyed`, whatever the clock does.

use std::time::Duration;

use proptest::prelude::*;
use ratelab::{
    Algorithm, Direct, Gcra, Keyed, LeakyMeter, LeakyQueue, ManualClock, Quota, TokenBucket,
};

#[derive(Debug, Clone)]
enum Step {
    Advance(u64),
    Rewind(u64),
    Check(u32),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            2 => (0..2_000_000u64).prop_map(Step::Advance),
            1 => (0..10_000_000u64).prop_map(Step::Rewind),
            5 => (0..4u32).prop_map(Step::Check),
        ],
        1..200,
    )
}

fn quota() -> impl Strategy<Value = Quota> {
    (1..50u32, 1..5u32)
        .prop_map(|(limit, burst)| Quota::per_second(limit).unwrap().with_burst(burst).unwrap())
}

/// Runs `steps` through both runners; `compare` says what must match.
fn run<A: Algorithm>(
    make: impl Fn() -> A,
    start: u64,
    steps: &[Step],
    full: bool,
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(start);
    let direct = Direct::with_clock(make(), clock.clone());
    let keyed = Keyed::with_clock(make(), clock.clone());
    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Advance(us) => clock.advance(Duration::from_micros(us)),
            Step::Rewind(us) => clock.rewind(Duration::from_micros(us)),
            Step::Check(cost) => {
                let (d, k) = (direct.check(cost), keyed.check(b"k", cost));
                match (d, k) {
                    (Ok(d), Ok(k)) if full => prop_assert_eq!(d, k, "step {}", i),
                    (Ok(d), Ok(k)) => {
                        prop_assert_eq!(
                            (d.allowed, d.delay()),
                            (k.allowed, k.delay()),
                            "step {}",
                            i
                        );
                    }
                    (Err(d), Err(k)) => prop_assert_eq!(d.kind(), k.kind()),
                    (d, k) => prop_assert!(false, "step {i}: {d:?} vs {k:?}"),
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(ratelab_testkit::props::regressions()),
        ..ProptestConfig::default()
    })]

    #[test]
    fn gcra_decides_alike(quota in quota(), start in 0..(1u64 << 45), steps in steps()) {
        run(|| Gcra::new(quota), start, &steps, true)?;
    }

    #[test]
    fn token_bucket_decides_alike(quota in quota(), start in 0..(1u64 << 45), steps in steps()) {
        run(|| TokenBucket::new(quota), start, &steps, true)?;
    }

    #[test]
    fn leaky_meter_decides_alike(quota in quota(), start in 0..(1u64 << 45), steps in steps()) {
        run(|| LeakyMeter::new(quota), start, &steps, true)?;
    }

    #[test]
    fn leaky_queue_admits_alike(quota in quota(), start in 0..(1u64 << 45), steps in steps()) {
        run(|| LeakyQueue::new(quota), start, &steps, false)?;
    }
}
