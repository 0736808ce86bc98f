//! 20 threads released together against capacity 10 admit exactly 10, for
//! every algorithm, single-bucket and keyed, many times over: the
//! compare-and-swap loops and the locks leave no room for a race.

use crate::common;

use ratelab::AlgorithmKind;

use ratelab::{ManualClock, Quota};
use ratelab_testkit::concurrency::release_together;

const ROUNDS: usize = 200;

#[test]
fn twenty_threads_capacity_ten_admit_exactly_ten() {
    let quota = Quota::per_second(10).unwrap();
    for name in AlgorithmKind::ALL {
        for round in 0..ROUNDS {
            // Frozen time: nothing refills while the threads race.
            let clock = ManualClock::starting_at(5_000_000);
            let keyed = common::keyed(name, quota, clock.clone());
            let direct = common::direct(name, quota, clock);
            let results = release_together(20, |i| {
                // Every thread also spends on a key of its own, interleaved,
                // so that the shared key's shard sees other traffic too.
                let own = keyed
                    .check(&[b'o', u8::try_from(i).unwrap()], 1)
                    .unwrap()
                    .allowed;
                let shared = keyed.check(b"shared", 1).unwrap().allowed;
                (shared, direct(1).unwrap().allowed, own)
            });
            let count =
                |f: fn(&(bool, bool, bool)) -> bool| results.iter().filter(|r| f(r)).count();
            assert_eq!(count(|r| r.0), 10, "{name} keyed, round {round}");
            assert_eq!(count(|r| r.1), 10, "{name} direct, round {round}");
            assert_eq!(
                count(|r| r.2),
                20,
                "{name}: each own key admits its first request"
            );
        }
    }
}

/// The algorithms whose `Direct` check keeps its latest instant with a plain
/// store (`Algorithm::ORDER_FREE`): two threads may decide at instants out of
/// order. Threads racing on one bucket, on a clock that moves forward and
/// jumps back under them, never admit more than `burst + span / T` over the
/// span of instants the clock showed (lowest to highest): the in-order
/// bound.
#[test]
fn order_free_buckets_keep_their_bound_through_races_and_rewinds() {
    use ratelab::Clock as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    let quota = Quota::per_second(2_000).unwrap().with_burst(5).unwrap();
    for kind in [AlgorithmKind::Gcra, AlgorithmKind::LeakyQueue] {
        for round in 0..20u64 {
            let start = 1u64 << 40;
            let clock = ManualClock::starting_at(start);
            let direct = Arc::new(common::direct(kind, quota, clock.clone()));
            let stop = Arc::new(AtomicBool::new(false));
            let mover = {
                let (clock, stop) = (clock.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut state = round.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    let (mut lowest, mut highest) = (clock.now_micros(), clock.now_micros());
                    while !stop.load(Ordering::Relaxed) {
                        // xorshift: steps of up to 300 µs, a rewind one time in four.
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        if state % 4 == 0 {
                            clock.rewind(Duration::from_micros(state % 20_000));
                        } else {
                            clock.advance(Duration::from_micros(state % 300));
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
                    let direct = direct.clone();
                    std::thread::spawn(move || {
                        (0..20_000).filter(|_| direct(1).unwrap().allowed).count() as u64
                    })
                })
                .collect();
            let admitted: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
            stop.store(true, Ordering::Relaxed);
            // Every instant decided at is a reading, or the latest one:
            // within what the clock showed, which a rewind before the first
            // check may take below the start.
            let (lowest, highest) = mover.join().unwrap();
            let span = highest - lowest;
            let allowed = u64::from(quota.burst()) + span / quota.emission_interval_micros();
            assert!(
                admitted <= allowed,
                "{kind} round {round}: {admitted} admitted, at most {allowed} over {span} µs"
            );
            assert!(admitted > 0, "{kind} round {round}: nothing admitted");
        }
    }
}

/// The same on the real clock: two threads hammering one bucket admit no
/// more than the burst plus what refilled over the wall time they ran.
#[test]
fn order_free_buckets_keep_their_bound_on_the_system_clock() {
    use std::sync::Arc;
    use std::time::Instant;

    let quota = Quota::per_second(10_000).unwrap().with_burst(20).unwrap();
    for kind in [AlgorithmKind::Gcra, AlgorithmKind::LeakyQueue] {
        let direct = Arc::new(common::direct(kind, quota, ratelab::SystemClock));
        let started = Instant::now();
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let direct = direct.clone();
                std::thread::spawn(move || {
                    (0..2_000_000)
                        .filter(|_| direct(1).unwrap().allowed)
                        .count() as u64
                })
            })
            .collect();
        let admitted: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        let elapsed = u64::try_from(started.elapsed().as_micros()).unwrap();
        // One unit more: elapsed µs are rounded down.
        let allowed = u64::from(quota.burst()) + elapsed / quota.emission_interval_micros() + 1;
        assert!(
            admitted <= allowed,
            "{kind}: {admitted} admitted in {elapsed} µs, at most {allowed}"
        );
    }
}
