//! The fixed window's flaw, proved: at 10 per second, 10 requests at 0.95 s
//! and 10 at 1.05 s all pass, 20 within 0.11 s. Every other algorithm keeps
//! its own bound on the same traffic. And the exact worst case each window
//! algorithm admits within one window's length, found by search.

use crate::common;

use ratelab::FixedWindow;
use ratelab::SlidingCounter;
use ratelab::{Algorithm, AlgorithmKind, ManualClock, Quota};
use ratelab_testkit::kept::History;
use ratelab_testkit::oracle::{Admitted, max_within};

/// The edge's two instants, µs: 10 requests at each.
const INSTANTS: [u64; 2] = [950_000, 1_050_000];

#[test]
fn twenty_pass_the_fixed_window_within_a_tenth_of_a_second() {
    let quota = Quota::per_second(10).unwrap();
    let span = INSTANTS[1] - INSTANTS[0];
    for kind in AlgorithmKind::ALL {
        let clock = ManualClock::new();
        let limiter = common::keyed(kind, quota, clock.clone());
        // The same requests through the model of the algorithm's promise
        // (testkit's replay of a bound, not the algorithm's code).
        let bound = kind.bound(quota);
        let mut model = History::new(bound);
        let (mut admitted, mut expected) = (0, 0);
        for at in INSTANTS {
            clock.set(at);
            for _ in 0..10 {
                admitted += u64::from(limiter.check(b"edge", 1).unwrap().allowed);
                if model.admits(at, 1) {
                    model.admit(at, 1);
                    expected += 1;
                }
            }
        }
        assert_eq!(admitted, expected, "{kind} on the window edge");
        assert!(
            admitted <= bound.most_within(span),
            "{kind} beyond its bound"
        );
        if kind == AlgorithmKind::FixedWindow {
            // The flaw: both windows' limits within 0.1 s.
            assert_eq!(admitted, 20);
        }
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
