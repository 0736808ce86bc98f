//! A client that comes back after its bucket refilled finds its key in
//! place: a key back to full capacity stays tracked for the idle grace
//! (the quota's period by default), costs a check no upkeep, and decides
//! exactly as a key never seen. Past the grace, new keys' checks forget it.

use crate::common;

use std::time::Duration;

use common::Toy;
use ratelab_core::{Keyed, ManualClock, Quota};

const KEYS: u64 = 4_000;
/// [`KEYS`], as a count.
const TRACKED: usize = 4_000;

/// Ten per second, burst ten: one unit is back 100 ms after it was taken.
fn limiter(clock: &ManualClock, grace: Option<Duration>) -> Keyed<Toy, ManualClock, u64> {
    let toy = Toy::new(Quota::per_second(10).unwrap());
    let builder = Keyed::builder(toy).clock(clock.clone()).keys::<u64>();
    match grace {
        Some(grace) => builder.idle_grace(grace),
        None => builder,
    }
    .build()
}

#[test]
fn a_returning_client_finds_its_key_and_pays_no_upkeep() {
    let clock = ManualClock::starting_at(1_000_000);
    let limiter = limiter(&clock, None);
    for key in 0..KEYS {
        assert!(limiter.check_key(&key, 1).unwrap().allowed);
    }
    // Every key full again, well within the grace (the period, 1 s).
    clock.advance(Duration::from_millis(500));
    let calls = limiter.algorithm().calls();
    for key in 0..KEYS {
        let decision = limiter.check_key(&key, 1).unwrap();
        // As a key never seen: nine of ten left.
        assert!(decision.allowed);
        assert_eq!(decision.remaining, 9, "key {key}");
    }
    assert_eq!(limiter.len(), TRACKED);
    assert_eq!(
        limiter.algorithm().calls(),
        calls,
        "no key was forgotten, inserted or looked at by an upkeep"
    );
}

#[test]
fn keys_idle_past_the_grace_are_forgotten_by_new_keys_checks() {
    let clock = ManualClock::starting_at(1_000_000);
    let limiter = limiter(&clock, None);
    for key in 0..KEYS {
        assert!(limiter.check_key(&key, 1).unwrap().allowed);
    }
    // Full, within the grace: checks of cost 0 (peeks that move the
    // shards' time) at new keys forget nothing.
    clock.advance(Duration::from_millis(100));
    for key in KEYS..2 * KEYS {
        limiter.check_key(&key, 0).unwrap();
    }
    assert_eq!(limiter.len(), TRACKED);
    // Past the grace: the same traffic forgets every one.
    clock.advance(Duration::from_secs(1));
    for key in 2 * KEYS..5 * KEYS {
        limiter.check_key(&key, 0).unwrap();
    }
    assert_eq!(limiter.len(), 0);
}

#[test]
fn no_grace_forgets_keys_as_soon_as_they_are_full() {
    let clock = ManualClock::starting_at(1_000_000);
    let limiter = limiter(&clock, Some(Duration::ZERO));
    for key in 0..KEYS {
        assert!(limiter.check_key(&key, 1).unwrap().allowed);
    }
    clock.advance(Duration::from_millis(100));
    for key in KEYS..4 * KEYS {
        limiter.check_key(&key, 0).unwrap();
    }
    assert_eq!(limiter.len(), 0);
}

#[test]
fn a_table_forgets_idle_keys_before_it_grows() {
    // One shard: its table's growth is this test's to see.
    let clock = ManualClock::starting_at(1_000_000);
    let toy = Toy::new(Quota::per_second(10).unwrap());
    let limiter = Keyed::builder(toy)
        .clock(clock.clone())
        .keys::<u64>()
        .shards(1)
        .build();
    for key in 0..KEYS {
        assert!(limiter.check_key(&key, 1).unwrap().allowed);
    }
    let bytes = limiter.allocated_bytes();
    // Idle past the grace; then as many new keys, each seen once: the table
    // makes room from the idle keys rather than grow.
    clock.advance(Duration::from_secs(2));
    for key in KEYS..2 * KEYS {
        assert!(limiter.check_key(&key, 1).unwrap().allowed);
    }
    assert!(limiter.len() <= TRACKED, "{}", limiter.len());
    assert_eq!(limiter.allocated_bytes(), bytes, "the table did not grow");
}
