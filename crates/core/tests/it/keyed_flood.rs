//! The keyed store under attack: a sustained flood costs no scan, new
//! clients keep being served and no key is admitted past its bound, the
//! wait for a slot is exact, a sweep is a clock reading like a check, and
//! the builder enforces exactly the bound asked for.

// Small test figures (random draws below a few thousand, key counts).
#![allow(clippy::cast_possible_truncation)]

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Rng, Toy};
use ratelab_core::{Clock, Error, FloodPolicy, Keyed, ManualClock, Quota};

fn key(i: u64) -> [u8; 8] {
    i.to_le_bytes()
}

/// The scenario of the report: a full table under a steady flood, one key
/// coming due between two arrivals, so that each new key needs a slot.
#[test]
fn a_sustained_flood_costs_no_scan() {
    const TRACKED: u64 = 20_000;
    let clock = ManualClock::new();
    // One unit per second, burst 1: a key charged at t is full at t + 1 s.
    let toy = Toy::new(Quota::per_second(1).unwrap().with_burst(1).unwrap());
    let limiter = Keyed::builder(toy)
        .clock(clock.clone())
        .max_keys(TRACKED as usize)
        .shards(1)
        .flood_policy(FloodPolicy::Refuse)
        .build();
    // Arrivals every 1 s / TRACKED: the table is full, and exactly one key
    // comes due between two arrivals.
    let step = 1_000_000 / TRACKED;
    for i in 0..3 * TRACKED {
        clock.advance(Duration::from_micros(step));
        let decision = limiter.check(&key(i), 1);
        if i >= TRACKED {
            assert!(
                decision.as_ref().is_ok_and(|d| d.allowed),
                "key {i}: {decision:?}"
            );
        }
    }
    assert_eq!(limiter.len(), TRACKED as usize);
    // Before: every new key swept the shard, one `full_at` per tracked key.
    let per_check = limiter.algorithm().calls() as f64 / (3 * TRACKED) as f64;
    assert!(per_check < 8.0, "{per_check:.1} full_at calls per check");
}

/// With nothing due, a refused key looks at the index's top only.
#[test]
fn a_refused_key_costs_no_scan() {
    const TRACKED: u64 = 10_000;
    let clock = ManualClock::new();
    let toy = Toy::new(Quota::per_hour(1).unwrap());
    let limiter = Keyed::builder(toy)
        .clock(clock.clone())
        .max_keys(TRACKED as usize)
        .shards(1)
        .flood_policy(FloodPolicy::Refuse)
        .build();
    for i in 0..TRACKED {
        limiter.check(&key(i), 1).unwrap();
    }
    let before = limiter.algorithm().calls();
    for i in TRACKED..2 * TRACKED {
        clock.advance(Duration::from_micros(1));
        let error = limiter.check(&key(i), 1).unwrap_err();
        assert!(matches!(error, Error::TooManyKeys { .. }));
    }
    let per_check = (limiter.algorithm().calls() - before) as f64 / TRACKED as f64;
    assert!(
        per_check < 4.0,
        "{per_check:.1} full_at calls per refused key"
    );
}

/// Told to wait `retry_after`, a new key retried at exactly that instant
/// gets its slot, even when the key that was due first has been charged
/// again meanwhile (the wait is computed from current states, not from a
/// stale note).
#[test]
fn the_wait_for_a_slot_is_exact_and_never_stale() {
    let clock = ManualClock::new();
    // One unit per 100 ms, burst 1.
    let quota = Quota::per_second(10).unwrap().with_burst(1).unwrap();
    let limiter = Keyed::builder(Toy::new(quota))
        .clock(clock.clone())
        .max_keys(2)
        .shards(1)
        .flood_policy(FloodPolicy::Refuse)
        .build();
    assert!(limiter.check(b"a", 1).unwrap().allowed); // full at 100 ms
    clock.set(50_000);
    assert!(limiter.check(b"b", 1).unwrap().allowed); // full at 150 ms
    clock.set(100_000);
    assert!(limiter.check(b"a", 1).unwrap().allowed); // full at 200 ms now
    clock.set(110_000);
    let wait = match limiter.check(b"c", 1) {
        Err(Error::TooManyKeys {
            max_keys,
            retry_after,
        }) => {
            assert_eq!(max_keys, 2);
            retry_after
        }
        other => panic!("expected TooManyKeys, got {other:?}"),
    };
    assert_eq!(wait, Duration::from_millis(40), "b is full at 150 ms");
    clock.advance(wait);
    assert!(limiter.check(b"c", 1).unwrap().allowed);
    // And the next one is told the next exact instant: a at 200 ms.
    match limiter.check(b"d", 1) {
        Err(Error::TooManyKeys { retry_after, .. }) => {
            assert_eq!(retry_after, Duration::from_millis(50));
        }
        other => panic!("expected TooManyKeys, got {other:?}"),
    }
}

/// A sweep reads the clock like a check does: after it, a clock going back
/// decides exactly as after a peek at the sweep's instant.
#[test]
fn a_sweep_after_a_rewind_decides_like_a_check() {
    let quota = Quota::per_second(10).unwrap().with_burst(1).unwrap();
    let run = |sweep: bool| {
        let clock = ManualClock::new();
        let limiter = Keyed::builder(Toy::new(quota))
            .clock(clock.clone())
            .shards(1)
            .build();
        let mut decisions = vec![limiter.check(b"k", 1).unwrap()]; // full at 100 ms
        clock.set(150_000);
        if sweep {
            limiter.sweep();
        } else {
            decisions.push(limiter.check(b"k", 0).unwrap());
        }
        clock.set(50_000);
        decisions.push(limiter.check(b"k", 1).unwrap());
        clock.set(160_000);
        decisions.push(limiter.check(b"k", 1).unwrap());
        clock.set(250_000);
        decisions.push(limiter.check(b"k", 1).unwrap());
        if !sweep {
            decisions.remove(1);
        }
        decisions
    };
    assert_eq!(run(true), run(false));
}

#[test]
fn the_bound_is_exactly_the_number_asked_for() {
    for (shards, max_keys) in [(1, 1), (4, 10), (8, 1_000), (16, 5), (3, 7)] {
        let clock = ManualClock::new();
        let limiter = Keyed::builder(Toy::new(Quota::per_hour(1).unwrap()))
            .clock(clock)
            .max_keys(max_keys)
            .shards(shards)
            .flood_policy(FloodPolicy::Refuse)
            .build();
        assert_eq!(limiter.max_keys(), max_keys);
        let admitted = (0..20 * max_keys as u64 + 200)
            .filter(|&i| limiter.check(&key(i), 1).is_ok())
            .count();
        assert_eq!(admitted, max_keys, "{shards} shards");
        assert_eq!(limiter.len(), max_keys, "{shards} shards");
    }
}

#[test]
fn absurd_settings_are_clamped_not_panics() {
    let limiter = Keyed::builder(Toy::new(Quota::per_second(1).unwrap()))
        .shards(usize::MAX)
        .build();
    assert!(limiter.shards() <= ratelab_core::MAX_SHARDS);
    assert!(limiter.check(b"k", 1).unwrap().allowed);
    let limiter = Keyed::builder(Toy::new(Quota::per_second(1).unwrap()))
        .shards(0)
        .max_keys(0)
        .build();
    assert_eq!(limiter.shards(), 1);
    // No room at all: the sketch decides every key, within its bound.
    assert!(limiter.check(b"k", 1).unwrap().allowed);
    assert!(!limiter.check(b"k", 1).unwrap().allowed);
    // A small bound gets few shards by default, so none is left without room.
    let limiter = Keyed::builder(Toy::new(Quota::per_second(1).unwrap()))
        .max_keys(10)
        .build();
    assert_eq!(limiter.shards(), 1);
}

/// When the table is full, new keys are decided by the shared cells, which
/// can only over-count: under random floods, no key, tracked or not, is
/// admitted past GCRA's bound, and keys move between the table and the
/// cells without losing a debt.
#[test]
fn under_random_floods_no_key_passes_its_bound() {
    for seed in 0..40 {
        let mut rng = Rng::new(seed);
        let burst = 1 + rng.below(4) as u32;
        let per_second = 1 + rng.below(20) as u32;
        let quota = Quota::per_second(per_second)
            .unwrap()
            .with_burst(burst)
            .unwrap();
        let toy = Toy::new(quota);
        let bound = toy.bound();
        let clock = ManualClock::starting_at(rng.below(1 << 40));
        let max_keys = 1 + rng.below(40) as usize;
        let cells = 1 + rng.below(16) as usize;
        let depth = 1 + rng.below(3) as usize;
        let limiter = Keyed::builder(toy)
            .clock(clock.clone())
            .max_keys(max_keys)
            // One shard: its time, the latest reading of any check or sweep,
            // is what this test can follow exactly.
            .shards(1)
            .flood_policy(FloodPolicy::sketch(cells, depth))
            .build();
        let keys = 1 + rng.below(200);
        let mut admitted: HashMap<u64, Vec<u64>> = HashMap::new();
        let mut latest = 0;
        for _ in 0..3_000 {
            match rng.below(10) {
                0 => clock.advance(Duration::from_micros(rng.below(2_000_000))),
                1 => clock.rewind(Duration::from_micros(rng.below(200_000))),
                2 => {
                    limiter.sweep();
                    latest = latest.max(clock.now_micros());
                }
                _ => {}
            }
            // A few heavy keys, many light ones.
            let k = if rng.below(3) == 0 {
                rng.below(3)
            } else {
                rng.below(keys)
            };
            let cost = rng.below(u64::from(burst) + 1) as u32;
            let decision = limiter.check(&key(k), cost).unwrap();
            // Time as the store sees it: a rewind is time standing still.
            latest = latest.max(clock.now_micros());
            if decision.allowed && cost > 0 {
                let log = admitted.entry(k).or_default();
                log.extend(std::iter::repeat_n(latest, cost as usize));
            }
        }
        for (k, log) in &admitted {
            if let Some((from, to, count)) = bound.violation(log) {
                panic!("seed {seed}: key {k} got {count} units in [{from}, {to}]");
            }
        }
    }
}

/// A seeded store decides a flood the same way in every process: the
/// shards, the sketch's cells and long keys' digests all follow the seed.
#[test]
fn the_same_seed_gives_the_same_decisions() {
    let run = |seed: u64| {
        let clock = ManualClock::new();
        let toy = Toy::new(Quota::per_second(1).unwrap().with_burst(2).unwrap());
        let limiter = Keyed::builder(toy)
            .clock(clock.clone())
            .max_keys(64)
            .shards(4)
            .flood_policy(FloodPolicy::sketch(64, 1))
            .seed(seed)
            .build();
        (0..4_000u64)
            .map(|i| {
                clock.advance(Duration::from_micros(250));
                // Every third key is long: kept as a digest.
                let mut bytes = key(i).to_vec();
                if i % 3 == 0 {
                    bytes.resize(100, b'x');
                }
                limiter.check(&bytes, 1).is_ok_and(|d| d.allowed)
            })
            .collect::<Vec<bool>>()
    };
    let first = run(7);
    assert_eq!(first, run(7));
    assert!(first.iter().any(|&a| !a), "the sketch saturated somewhere");
    assert_ne!(first, run(8), "another seed, other cells");
}

/// The sketch grows into its cells while the flood goes on (each new cell
/// a copy of the one it splits from): a key that spent its quota in the
/// cells is still refused after every cell has been split, and no key,
/// heavy or new, passes its bound while the cells grow.
#[test]
fn a_growing_sketch_keeps_every_debt() {
    for depth in [1, 2] {
        let clock = ManualClock::starting_at(1 << 40);
        // Ten a minute, all at once: nobody refills during the flood.
        let toy = Toy::new(Quota::per_minute(10).unwrap());
        let bound = toy.bound();
        let limiter = Keyed::builder(toy)
            .clock(clock.clone())
            .max_keys(1)
            .shards(1)
            // Far more cells than the sketch starts with: it grows through
            // the flood below.
            .flood_policy(FloodPolicy::sketch(depth * 60_000, depth))
            .build();
        assert!(
            limiter.check(b"holder", 1).unwrap().allowed,
            "takes the one slot"
        );
        let mut spent = 0;
        while limiter.check(b"heavy", 1).unwrap().allowed {
            spent += 1;
        }
        assert_eq!(
            spent, 10,
            "depth {depth}: the heavy key's whole quota, in the cells"
        );
        let mut admitted: HashMap<u64, Vec<u64>> = HashMap::new();
        for i in 0..40_000u64 {
            clock.advance(Duration::from_micros(1));
            if limiter.check(&key(i % 20_000), 1).unwrap().allowed {
                admitted
                    .entry(i % 20_000)
                    .or_default()
                    .push(clock.now_micros());
            }
            if i % 1_000 == 0 {
                assert!(
                    !limiter.check(b"heavy", 1).unwrap().allowed,
                    "depth {depth}: the heavy key's debt survives the splits ({i} flood keys)"
                );
            }
        }
        assert!(!limiter.check(b"heavy", 1).unwrap().allowed);
        assert!(
            admitted.len() > 15_000,
            "depth {depth}: the flood's keys are served ({} of 20,000)",
            admitted.len()
        );
        for (k, log) in &admitted {
            if let Some((from, to, count)) = bound.violation(log) {
                panic!("depth {depth}: key {k} got {count} units in [{from}, {to}]");
            }
        }
    }
}
