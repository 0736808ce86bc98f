//! Bad input on every public entry point of every in-memory algorithm: clear
//! errors, never a panic, an overflow or an admission beyond the quota.

use crate::common;

use ratelab::AlgorithmKind;

use std::time::Duration;

use ratelab::{Error, ManualClock, Quota, RateLimiter};

fn quota() -> Quota {
    Quota::per_second(4).unwrap().with_burst(3).unwrap()
}

fn admitted(limiter: &dyn RateLimiter, key: &[u8], tries: usize) -> usize {
    (0..tries)
        .filter(|_| limiter.check(key, 1).unwrap().allowed)
        .count()
}

#[test]
fn costs_that_can_never_fit_are_errors() {
    for name in AlgorithmKind::ALL {
        let clock = ManualClock::new();
        let keyed = common::keyed(name, quota(), clock.clone());
        let direct = common::direct(name, quota(), clock);
        for cost in [4, 1_000, u32::MAX] {
            let error = keyed.check(b"k", cost).unwrap_err();
            assert!(
                matches!(error, Error::CostTooHigh { cost: c, capacity: 3 } if c == cost),
                "{name}: {error}"
            );
            assert_eq!(
                error.to_string(),
                format!("a cost of {cost} can never fit: at most 3 pass at once")
            );
            assert!(matches!(direct(cost), Err(Error::CostTooHigh { .. })));
        }
        // Nothing was consumed by the errors; a peek reports full capacity.
        let peek = keyed.check(b"k", 0).unwrap();
        assert!(peek.allowed && peek.remaining == 3, "{name}: {peek:?}");
        assert_eq!(direct(0).unwrap().remaining, 3, "{name}");
        // The whole burst at once fits.
        assert!(keyed.check(b"k", 3).unwrap().allowed, "{name}");
    }
}

#[test]
fn any_byte_string_is_a_key_of_its_own() {
    let mut huge = vec![b'x'; 1 << 20];
    let mut huge_twin = huge.clone();
    *huge_twin.last_mut().unwrap() = b'y';
    let keys: Vec<&[u8]> = vec![
        b"",
        b"\0",
        &[0xff, 0xfe, 0x00, 0x80],
        b"{user}",
        b"}{",
        &huge,
        &huge_twin,
    ];
    for name in AlgorithmKind::ALL {
        let limiter = common::keyed(name, quota(), ManualClock::new());
        for key in &keys {
            assert_eq!(
                admitted(&*limiter, key, 5),
                3,
                "{name}: key of {} bytes",
                key.len()
            );
        }
    }
    huge.clear();
}

#[test]
fn a_clock_far_forward_then_back_admits_nothing_extra() {
    for name in AlgorithmKind::ALL {
        let clock = ManualClock::starting_at(u64::MAX);
        let keyed = common::keyed(name, quota(), clock.clone());
        let direct = common::direct(name, quota(), clock.clone());
        assert_eq!(admitted(&*keyed, b"k", 5), 3, "{name} at the end of time");
        assert_eq!((0..5).filter(|_| direct(1).unwrap().allowed).count(), 3);
        // Back to the origin, then forward a little: the debt is still owed.
        clock.set(0);
        assert_eq!(admitted(&*keyed, b"k", 5), 0, "{name} after going back");
        assert_eq!((0..5).filter(|_| direct(1).unwrap().allowed).count(), 0);
        clock.advance(Duration::from_secs(1));
        assert_eq!(admitted(&*keyed, b"k", 5), 0, "{name} still owing");
        // The decisions still make sense: a finite wait.
        let refused = keyed.check(b"k", 1).unwrap();
        assert!(!refused.allowed && refused.retry_after() > Duration::ZERO);
    }
}

#[test]
fn a_clock_that_goes_back_a_little_keeps_the_debt() {
    for name in AlgorithmKind::ALL {
        let clock = ManualClock::starting_at(10_000_000);
        let keyed = common::keyed(name, quota(), clock.clone());
        let direct = common::direct(name, quota(), clock.clone());
        assert_eq!(admitted(&*keyed, b"k", 5), 3, "{name}");
        assert_eq!((0..5).filter(|_| direct(1).unwrap().allowed).count(), 3);
        clock.rewind(Duration::from_secs(5));
        assert_eq!(admitted(&*keyed, b"k", 5), 0, "{name} keyed, 5 s back");
        assert_eq!(
            (0..5).filter(|_| direct(1).unwrap().allowed).count(),
            0,
            "{name} direct, 5 s back"
        );
    }
}
