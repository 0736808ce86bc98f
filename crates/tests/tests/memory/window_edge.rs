//! The fixed window's flaw, proved: at 10 per second, 10 requests at 0.95 s
//! and 10 at 1.05 s all pass, 20 within 0.11 s. Every other algorithm keeps
//! its own bound on the same traffic. And the exact worst case each window
//! algorithm admits within one window's length, found by search.

use crate::common;

use ratelab::FixedWindow;
use ratelab::SlidingCounter;
use ratelab::{Algorithm, AlgorithmKind, ManualClock, Quota};
use ratelab_testkit::oracle::{Admitted, max_within};

/// (algorithm, admitted of the 20, the most its bound allows within 0.1 s)
const EDGE: [(AlgorithmKind, u64, u64); 7] = [
    (AlgorithmKind::FixedWindow, 20, 20),
    // Exact: at most 10 in any trailing second.
    (AlgorithmKind::SlidingLog, 10, 10),
    // 0.95 s of the first window's 10 still weigh at 1.05 s: 9.5 of them.
    (AlgorithmKind::SlidingCounter, 10, 20),
    // Buckets: burst 10 + floor(0.1 s / 0.1 s) = 11.
    (AlgorithmKind::LeakyMeter, 11, 11),
    (AlgorithmKind::LeakyQueue, 11, 11),
    (AlgorithmKind::TokenBucket, 11, 11),
    (AlgorithmKind::Gcra, 11, 11),
];

#[test]
fn twenty_pass_the_fixed_window_within_a_tenth_of_a_second() {
    for kind in AlgorithmKind::ALL {
        assert!(
            EDGE.iter().any(|(k, _, _)| *k == kind),
            "{kind}: what it admits at the window edge is not in EDGE (crates/tests/tests/memory/window_edge.rs)"
        );
    }
    let quota = Quota::per_second(10).unwrap();
    for (name, expected, bound) in EDGE {
        let clock = ManualClock::new();
        let limiter = common::keyed(name, quota, clock.clone());
        let mut admitted = 0;
        for at in [950_000, 1_050_000] {
            clock.set(at);
            admitted += (0..10)
                .filter(|_| limiter.check(b"edge", 1).unwrap().allowed)
                .count() as u64;
        }
        assert_eq!(admitted, expected, "{name} on the window edge");
        assert!(admitted <= bound, "{name} beyond its bound");
    }
}

/// The adversary: `limit` units at one instant of the first window, then as
/// many as pass at every `step` of the next; the most admitted within any
/// interval shorter than the window, over the choices of the first instant
/// (every twentieth of the window, plus its last microsecond).
fn worst_case<A: Algorithm>(algorithm: &A, limit: u32, window: u64, step: u64) -> u64 {
    let mut firsts: Vec<u64> = (0..window).step_by((window / 20) as usize).collect();
    firsts.push(window - 1);
    firsts
        .into_iter()
        .map(|first| {
            let mut state = algorithm.initial_state();
            let mut admitted = Vec::new();
            let mut take = |at: u64, admitted: &mut Vec<Admitted>| {
                while algorithm.decide(&mut state, at, 1).unwrap().allowed {
                    admitted.push(Admitted { at, units: 1 });
                }
            };
            take(first, &mut admitted);
            assert!(admitted.len() <= limit as usize);
            let mut at = window;
            while at < 2 * window + first {
                take(at, &mut admitted);
                at += step;
            }
            max_within(&admitted, window)
        })
        .max()
        .unwrap()
}

#[test]
fn the_exact_worst_case_of_each_window_algorithm() {
    // 10 per second; probing every 16 µs, the sliding counter's step.
    let quota = Quota::per_second(10).unwrap();
    let counter = SlidingCounter::new(quota);
    assert_eq!(counter.step_micros(), 16);
    assert_eq!(worst_case(&FixedWindow::new(quota), 10, 1_000_000, 16), 20);
    // The first window's 10 at its last microsecond weigh 10 × (1 − k/S) for
    // the whole next window; by its last step they weigh 10/62500, so 9 more
    // fit: 19 within one second, never 20.
    assert_eq!(worst_case(&counter, 10, 1_000_000, 16), 19);
}
