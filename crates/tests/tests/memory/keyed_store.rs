//! The keyed in-memory store forgets keys by itself once they are back to
//! full capacity, never holds more than its bound, and under a flood of new
//! keys forgets no key that still owes: a tracked client stays limited.

use std::time::Duration;

use ratelab::Gcra;
use ratelab::SlidingLog;
use ratelab::TokenBucket;
use ratelab::{Error, FloodPolicy, Keyed, ManualClock, Quota};

fn key(i: u64) -> [u8; 8] {
    i.to_le_bytes()
}

#[test]
fn keys_back_to_full_capacity_are_forgotten_without_a_chore() {
    let clock = ManualClock::starting_at(1_000_000);
    let limiter = Keyed::with_clock(Gcra::new(Quota::per_second(10).unwrap()), clock.clone());
    for i in 0..10_000 {
        assert!(limiter.check(&key(i), 1).unwrap().allowed);
    }
    assert_eq!(limiter.len(), 10_000);

    // One unit comes back in 0.1 s: every key is full again, and stays
    // tracked for the idle grace (the quota's period, 1 s), in case its
    // client comes back.
    clock.advance(Duration::from_millis(100));
    for i in 10_000..20_000 {
        limiter.check(&key(i), 0).unwrap();
    }
    assert_eq!(limiter.len(), 10_000);
    // Idle past the grace: ordinary traffic (peeks, which store nothing) on
    // other keys is enough for every shard to sweep itself.
    clock.advance(Duration::from_secs(1));
    for i in 20_000..50_000 {
        limiter.check(&key(i), 0).unwrap();
    }
    assert_eq!(limiter.len(), 0);
}

#[test]
fn a_check_that_leaves_a_new_key_full_stores_nothing() {
    let clock = ManualClock::new();
    let limiter = Keyed::with_clock(TokenBucket::new(Quota::per_second(10).unwrap()), clock);
    assert_eq!(limiter.check(b"peek", 0).unwrap().remaining, 10);
    assert!(limiter.check(b"too much", 11).is_err());
    assert!(limiter.is_empty());
    limiter.check(b"spend", 1).unwrap();
    assert_eq!(limiter.len(), 1);
}

#[test]
fn at_the_bound_the_wait_for_a_slot_is_exact() {
    // One shard, two keys: one unit per 100 ms, burst 1.
    let clock = ManualClock::new();
    let quota = Quota::per_second(10).unwrap().with_burst(1).unwrap();
    let limiter = Keyed::builder(Gcra::new(quota))
        .clock(clock.clone())
        .shards(1)
        .max_keys(2)
        .flood_policy(FloodPolicy::Refuse)
        .build();
    assert_eq!(limiter.max_keys(), 2);
    assert!(limiter.check(b"a", 1).unwrap().allowed); // full again at 100 ms
    clock.set(50_000);
    assert!(limiter.check(b"b", 1).unwrap().allowed); // full again at 150 ms
    clock.set(60_000);
    match limiter.check(b"c", 1) {
        Err(Error::TooManyKeys {
            max_keys,
            retry_after,
        }) => {
            assert_eq!(max_keys, 2);
            assert_eq!(retry_after, Duration::from_millis(40));
        }
        other => panic!("expected TooManyKeys, got {other:?}"),
    }
    // Known keys are still decided while new ones wait.
    assert!(!limiter.check(b"a", 1).unwrap().allowed);
    clock.set(100_000);
    assert!(
        limiter.check(b"c", 1).unwrap().allowed,
        "a is full: its slot is free"
    );
    assert_eq!(limiter.len(), 2);
}

#[test]
fn a_flood_of_new_keys_is_bounded_and_forgets_no_debt() {
    let clock = ManualClock::starting_at(7_000_000);
    // A slow quota: 5 per minute, so nobody refills during the flood.
    let quota = Quota::per_minute(5).unwrap();
    let limiter = Keyed::builder(SlidingLog::new(quota))
        .clock(clock.clone())
        .shards(8)
        .max_keys(1_000)
        .flood_policy(FloodPolicy::Refuse)
        .build();
    let bound = limiter.max_keys();
    assert_eq!(bound, 1_000);

    // The victim spends its whole quota first.
    for _ in 0..5 {
        assert!(limiter.check(b"victim", 1).unwrap().allowed);
    }
    let mut admitted_new = 0;
    let mut refused_for_room = 0;
    for i in 0..100_000u64 {
        clock.advance(Duration::from_micros(3));
        match limiter.check(&key(i), 1) {
            Ok(d) => {
                assert!(d.allowed);
                admitted_new += 1;
            }
            Err(Error::TooManyKeys { retry_after, .. }) => {
                assert!(retry_after > Duration::ZERO);
                refused_for_room += 1;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
        if i % 10_000 == 0 {
            assert!(limiter.len() <= bound);
        }
        // The flood never erases the victim's debt.
        if i % 1_000 == 0 {
            assert!(
                !limiter.check(b"victim", 1).unwrap().allowed,
                "after {i} flood keys"
            );
        }
    }
    assert!(limiter.len() <= bound);
    assert!(
        admitted_new < bound as u64,
        "at most the bound minus the victim: {admitted_new}"
    );
    assert_eq!(admitted_new + refused_for_room, 100_000);

    // Once the flood's keys are back to full, new clients get in again.
    clock.advance(Duration::from_secs(60));
    assert!(limiter.check(b"newcomer", 1).unwrap().allowed);
    assert!(limiter.check(b"victim", 1).unwrap().allowed);
}
