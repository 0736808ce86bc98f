//! Settlements and resets in the keyed store: a key given everything back is
//! forgotten at once, a settlement that makes a key full sooner makes the
//! wait for a slot shorter (exactly), and settlements and resets without end
//! keep the store within its memory bound.

use std::time::Duration;

use ratelab::gcra::Gcra;
use ratelab::{Error, FloodPolicy, Keyed, ManualClock, Quota};

fn store(max_keys: usize, clock: &ManualClock) -> Keyed<Gcra, ManualClock> {
    // Three per three seconds: one unit back every second.
    let quota = Quota::new(3, Duration::from_secs(3)).unwrap();
    Keyed::builder(Gcra::new(quota))
        .clock(clock.clone())
        .shards(1)
        .max_keys(max_keys)
        .flood_policy(FloodPolicy::Refuse)
        .build()
}

#[test]
fn a_key_given_everything_back_or_reset_is_forgotten() {
    let clock = ManualClock::new();
    let limiter = store(2, &clock);
    let (a, receipt) = limiter.check_with_receipt(b"a", 3).unwrap();
    assert!(a.allowed);
    assert!(limiter.check(b"b", 1).unwrap().allowed);
    assert_eq!(limiter.len(), 2);
    // At the instant of its check: the admission holds its whole debt.
    let after = limiter.refund(receipt.unwrap()).unwrap();
    assert_eq!((after.remaining, after.reset_after()), (3, Duration::ZERO));
    // Full again, but its ledger records the give-back: the key is kept a
    // tolerance (3 s) past its end, until no stamp of it could claim
    // anything, and forgotten then.
    assert_eq!(limiter.len(), 2);
    // No receipt was issued for `b`: a reset forgets it at once.
    limiter.reset(b"b");
    assert_eq!(limiter.len(), 1);
    // A receipt of a key forgotten since (full again): nothing to give
    // back, and it answers as a peek of cost 0.
    let (_, receipt) = limiter.check_with_receipt(b"c", 1).unwrap();
    clock.advance(Duration::from_secs(2));
    limiter.sweep();
    assert_eq!(
        limiter.len(),
        1,
        "`a` is kept until 3 s, `c` was full at 1 s"
    );
    clock.advance(Duration::from_secs(1));
    limiter.sweep();
    assert!(limiter.is_empty());
    assert_eq!(
        limiter.refund(receipt.unwrap()).unwrap(),
        limiter.peek(b"c", 0).unwrap()
    );
    assert!(limiter.is_empty());
    // A settlement above the capacity can never be owed.
    let (_, receipt) = limiter.check_with_receipt(b"c", 1).unwrap();
    assert!(matches!(
        limiter.settle(receipt.unwrap(), 4),
        Err(Error::CostTooHigh { .. })
    ));
}

#[test]
fn a_settled_key_is_kept_a_tolerance_and_the_wait_for_a_slot_says_so() {
    let clock = ManualClock::new();
    let limiter = store(2, &clock);
    let (a, receipt) = limiter.check_with_receipt(b"a", 3).unwrap(); // full again at 3 s
    assert!(a.allowed);
    assert!(limiter.check(b"b", 2).unwrap().allowed); // full again at 2 s
    let wait = |limiter: &Keyed<Gcra, ManualClock>| match limiter.peek(b"other", 1) {
        Err(Error::TooManyKeys { retry_after, .. }) => retry_after,
        other => panic!("expected no room, got {other:?}"),
    };
    assert_eq!(wait(&limiter), Duration::from_secs(2));
    // `a` used 1 of its 3: full again at 1 s now, and kept a tolerance
    // (3 s) past that with its ledger, to 4 s: `b`'s slot frees first.
    let after = limiter.settle(receipt.unwrap(), 1).unwrap();
    assert_eq!(after.reset_after(), Duration::from_secs(1));
    assert_eq!(wait(&limiter), Duration::from_secs(2));
    clock.advance(Duration::from_secs(2));
    assert!(limiter.check(b"new", 1).unwrap().allowed);
    // The table holds `a` (to 4 s) and `new` (full at 3 s): the next slot
    // is `new`'s, 1 s away.
    assert_eq!(wait(&limiter), Duration::from_secs(1));
}

#[test]
fn settlements_without_end_stay_within_the_memory_bound() {
    let clock = ManualClock::new();
    let limiter = store(4, &clock);
    for round in 0..10_000u32 {
        let key = (round % 4).to_le_bytes();
        let (decision, receipt) = limiter.check_with_receipt(&key, 2).unwrap();
        assert!(decision.allowed, "round {round}");
        limiter.settle(receipt.unwrap(), 1).unwrap();
        if round % 7 == 0 {
            limiter.reset(&key);
        }
        assert!(
            limiter.allocated_bytes() <= limiter.memory_bound_bytes(),
            "round {round}: {} bytes, bound {}",
            limiter.allocated_bytes(),
            limiter.memory_bound_bytes()
        );
        // Each key keeps one unit until it drains.
        clock.advance(Duration::from_millis(250));
    }
}
