//! The shards of a keyed store share one bound: whatever the shard count,
//! never more than `max_keys` keys are tracked, and a new key is turned away
//! for room only when the table as a whole is full of keys that still owe.
//! Checked step by step against a count of what the store must hold, with
//! receipts settled and refunded, sweeps and the clock jumping back and
//! forth; and no key is admitted past GCRA's bound on the way (followed
//! while the shards' times are known: with one shard, or until the clock
//! first goes back). A refusal for room says exactly when a slot frees.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use ratelab::{Error, FloodPolicy, Gcra, Keyed, ManualClock, Quota, Receipt};
use ratelab_testkit::oracle::{Admitted, Bound, Oracle};

use super::store_flood::quota;

#[derive(Debug, Clone)]
enum Step {
    Advance(u64),
    Rewind(u64),
    Sweep,
    /// A request of `cost` by key `key`.
    Check(u64, u32),
    /// A request of `cost` by receipt key `key`, its receipt kept.
    Receipt(u64, u32),
    /// Settles the kept receipt `index` (modulo their number) to `actual`.
    Settle(usize, u32),
    /// Refunds the kept receipt `index`.
    Refund(usize),
}

/// Keys checked with receipts: their admissions may be given back, so the
/// bound is checked on the other keys only.
const RECEIPT_KEYS: u64 = 1 << 32;

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            2 => (0..1_500_000u64).prop_map(Step::Advance),
            1 => (0..300_000u64).prop_map(Step::Rewind),
            1 => Just(Step::Sweep),
            8 => (prop_oneof![0..4u64, 0..200u64], 0..4u32).prop_map(|(k, c)| Step::Check(k, c)),
            2 => (0..20u64, 0..4u32).prop_map(|(k, c)| Step::Receipt(RECEIPT_KEYS + k, c)),
            1 => (0..64usize, 0..8u32).prop_map(|(i, a)| Step::Settle(i, a)),
            1 => (0..64usize).prop_map(Step::Refund),
        ],
        1..400,
    )
}

fn run(
    quota: Quota,
    shards: usize,
    max_keys: usize,
    policy: FloodPolicy,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(1 << 40);
    let limiter = Keyed::builder(Gcra::new(quota))
        .clock(clock.clone())
        .max_keys(max_keys)
        .shards(shards)
        .flood_policy(policy)
        .seed(7)
        .build();
    let bound = Bound::rate(&quota);
    let mut latest = 0;
    // Once the clock went back, shards may see different instants: a key
    // full at one shard's time may not be at another's.
    let mut rewound = false;
    let mut receipts: Vec<Receipt> = Vec::new();
    let mut admitted: HashMap<u64, Vec<Admitted>> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        let receipts_before = receipts.len();
        match *step {
            Step::Advance(us) => clock.advance(Duration::from_micros(us)),
            Step::Rewind(us) => {
                clock.rewind(Duration::from_micros(us));
                rewound = true;
            }
            Step::Sweep => limiter.sweep(),
            Step::Check(key, cost) => {
                let tracked_before = limiter.len();
                let answer = limiter.check(&key.to_le_bytes(), cost);
                match answer {
                    // The instant of an admission is known while every
                    // shard's time is the clock's, or with one shard (its
                    // time the latest reading).
                    Ok(decision) if decision.allowed && cost > 0 && (shards == 1 || !rewound) => {
                        admitted.entry(key).or_default().push(Admitted {
                            at: latest.max(ratelab::Clock::now_micros(&clock)),
                            units: u64::from(cost),
                        });
                    }
                    Err(Error::TooManyKeys { retry_after, .. }) => {
                        // Turned away for room: every slot is taken...
                        prop_assert_eq!(
                            limiter.len(),
                            max_keys,
                            "step {}: refused for room with {} keys tracked (before: {})",
                            i,
                            limiter.len(),
                            tracked_before
                        );
                        // ...by keys that all still owe: a sweep at the same
                        // instant forgets none (while every shard's time is
                        // the clock's).
                        if !rewound {
                            limiter.sweep();
                            prop_assert_eq!(
                                limiter.len(),
                                max_keys,
                                "step {}: refused for room, yet a key was back to full capacity",
                                i
                            );
                            // ...and `retry_after` is exact: no slot frees a
                            // microsecond before it, one does at it.
                            if max_keys > 0 {
                                exact_wait(&limiter, &clock, retry_after, max_keys, i)?;
                                latest = latest.max(ratelab::Clock::now_micros(&clock));
                            }
                        }
                    }
                    _ => {}
                }
            }
            Step::Receipt(key, cost) => {
                if let Ok((_, Some(receipt))) = limiter.check_with_receipt(&key.to_le_bytes(), cost)
                {
                    receipts.push(receipt);
                }
            }
            Step::Settle(index, actual) => {
                if !receipts.is_empty() {
                    let receipt = receipts.swap_remove(index % receipts.len());
                    // More than the burst can never be settled (an error).
                    let actual = actual.min(quota.burst());
                    limiter.settle(receipt, actual).map_err(|e| {
                        TestCaseError::fail(format!("step {i}: settle failed: {e}"))
                    })?;
                }
            }
            Step::Refund(index) => {
                if !receipts.is_empty() {
                    let receipt = receipts.swap_remove(index % receipts.len());
                    limiter.refund(receipt).map_err(|e| {
                        TestCaseError::fail(format!("step {i}: refund failed: {e}"))
                    })?;
                }
            }
        }
        // Every step but a move of the clock reads it: time as one shard
        // sees it.
        let touched = match step {
            Step::Advance(_) | Step::Rewind(_) => false,
            // With no receipt kept (the last was just used, or none), the
            // store was not asked.
            Step::Settle(..) | Step::Refund(_) => receipts_before > 0,
            _ => true,
        };
        if touched {
            latest = latest.max(ratelab::Clock::now_micros(&clock));
        }
        // Never more than the bound, in all shards together.
        prop_assert!(
            limiter.len() <= max_keys,
            "step {}: {} keys tracked, bound {}",
            i,
            limiter.len(),
            max_keys
        );
    }
    for (key, log) in &admitted {
        if let Some(violation) = bound.violation(log) {
            prop_assert!(false, "key {key}: {violation}");
        }
    }
    Ok(())
}

/// Checks a refusal's `retry_after` against the table (every shard's time
/// the clock's): sweeps a microsecond before it forget no key, and at it
/// some key. Leaves the clock at the refusal's instant plus the wait.
fn exact_wait(
    limiter: &Keyed<Gcra, ManualClock>,
    clock: &ManualClock,
    retry_after: Duration,
    max_keys: usize,
    step: usize,
) -> Result<(), TestCaseError> {
    prop_assert!(
        retry_after > Duration::ZERO && retry_after < Duration::from_secs(3_600),
        "step {}: a full table of owing keys answered retry_after {:?}",
        step,
        retry_after
    );
    clock.advance(retry_after - Duration::from_micros(1));
    limiter.sweep();
    prop_assert_eq!(
        limiter.len(),
        max_keys,
        "step {}: a slot freed before retry_after {:?}",
        step,
        retry_after
    );
    clock.advance(Duration::from_micros(1));
    limiter.sweep();
    prop_assert!(
        limiter.len() < max_keys,
        "step {}: no slot freed at retry_after {:?}",
        step,
        retry_after
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(ratelab_testkit::props::regressions()),
        ..ProptestConfig::default()
    })]

    /// Refusing new keys makes "no room" visible: a refusal for room must
    /// come with a table full of owing keys.
    #[test]
    fn refusing(quota in quota(), shards in prop_oneof![Just(1usize), Just(2), Just(4), Just(8)],
                max_keys in 0..24usize, steps in steps()) {
        run(quota, shards, max_keys, FloodPolicy::Refuse, &steps)?;
    }

    /// Under the sketch, the count stays bounded and nothing passes its bound.
    #[test]
    fn sketching(quota in quota(), shards in prop_oneof![Just(1usize), Just(2), Just(4), Just(8)],
                 max_keys in 0..24usize, cells in 1..32usize, depth in 1..4usize, steps in steps()) {
        run(quota, shards, max_keys, FloodPolicy::sketch(cells, depth), &steps)?;
    }
}

/// Keys spread over many shards still fill the whole bound: every one of
/// `max_keys` keys is tracked, with 1 to 64 shards (a per-shard split of
/// the bound left 0.1 to 0.4 % of keys untracked).
#[test]
fn every_key_is_tracked_up_to_the_bound_whatever_the_shards() {
    for shards in [1, 2, 8, 64] {
        for max_keys in [1, 7, 100, 5_000] {
            let clock = ManualClock::new();
            let quota = Quota::per_hour(1).unwrap();
            let limiter = Keyed::builder(Gcra::new(quota))
                .clock(clock)
                .keys::<u64>()
                .max_keys(max_keys)
                .shards(shards)
                .flood_policy(FloodPolicy::Refuse)
                .build();
            for key in 0..max_keys as u64 {
                let decision = limiter.check_key(&key, 1);
                assert!(
                    decision.as_ref().is_ok_and(|d| d.allowed),
                    "{shards} shards, bound {max_keys}, key {key}: {decision:?}"
                );
            }
            assert_eq!(limiter.len(), max_keys);
            assert!(matches!(
                limiter.check_key(&u64::MAX, 1),
                Err(Error::TooManyKeys { .. })
            ));
            assert_eq!(limiter.len(), max_keys);
        }
    }
}
