//! A clock that goes back is time standing still for every runner: `Direct`
//! decides exactly as `Keyed` does, and neither locks a client out for the
//! length of the rewind.

// Small test figures (random draws below a few thousand, key counts).
#![allow(clippy::cast_possible_truncation)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Rng, Toy};
use ratelab_core::{Clock, Direct, Keyed, ManualClock, Quota};

#[test]
fn a_rewind_of_an_hour_does_not_lock_direct_out() {
    let clock = ManualClock::starting_at(7_200_000_000);
    let limiter = Direct::with_clock(Toy::new(Quota::per_second(1).unwrap()), clock.clone());
    assert!(limiter.check(1).unwrap().allowed);
    clock.rewind(Duration::from_secs(3600));
    let refused = limiter.check(1).unwrap();
    assert!(!refused.allowed);
    // Before: 3,600 s, the rewind itself.
    assert_eq!(refused.retry_after(), Duration::from_secs(1));
}

#[test]
fn direct_and_keyed_decide_alike_through_rewinds() {
    for seed in 0..200 {
        let mut rng = Rng::new(seed);
        let quota = Quota::per_second(1 + rng.below(50) as u32)
            .unwrap()
            .with_burst(1 + rng.below(5) as u32)
            .unwrap();
        let clock = ManualClock::starting_at(rng.below(1 << 45));
        let direct = Direct::with_clock(Toy::new(quota), clock.clone());
        let keyed = Keyed::with_clock(Toy::new(quota), clock.clone());
        for step in 0..300 {
            match rng.below(6) {
                0 => clock.advance(Duration::from_micros(rng.below(300_000))),
                1 => clock.rewind(Duration::from_micros(rng.below(3_000_000))),
                _ => {}
            }
            let cost = rng.below(u64::from(quota.burst()) + 1) as u32;
            assert_eq!(
                direct.check(cost).unwrap(),
                keyed.check(b"k", cost).unwrap(),
                "seed {seed}, step {step}"
            );
        }
    }
}

/// Threads racing on one `Direct` while the clock jumps back and forth
/// never admit more than the bound, measured on time as the limiter saw it.
#[test]
fn concurrent_checks_through_rewinds_stay_within_the_bound() {
    let quota = Quota::per_second(1_000).unwrap().with_burst(5).unwrap();
    let clock = ManualClock::starting_at(1 << 40);
    let limiter = Arc::new(Direct::with_clock(Toy::new(quota), clock.clone()));
    let bound = limiter.algorithm().bound();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mover = {
        let (clock, stop) = (clock.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut rng = Rng::new(7);
            let (mut lowest, mut highest) = (clock.now_micros(), clock.now_micros());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if rng.below(4) == 0 {
                    clock.rewind(Duration::from_micros(rng.below(50_000)));
                } else {
                    clock.advance(Duration::from_micros(rng.below(300)));
                }
                lowest = lowest.min(clock.now_micros());
                highest = highest.max(clock.now_micros());
                std::thread::yield_now();
            }
            (lowest, highest)
        })
    };
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let limiter = limiter.clone();
            std::thread::spawn(move || {
                (0..20_000)
                    .filter(|_| limiter.check(1).unwrap().allowed)
                    .count() as u64
            })
        })
        .collect();
    let admitted: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (lowest, highest) = mover.join().unwrap();
    // Over the whole run, time as the limiter saw it spanned at most
    // [lowest, highest reading]: a rewind before the first check takes it
    // below the start.
    let span = highest - lowest;
    let allowed = bound.burst + span / bound.interval;
    assert!(
        admitted <= allowed,
        "{admitted} admitted, at most {allowed}"
    );
}
