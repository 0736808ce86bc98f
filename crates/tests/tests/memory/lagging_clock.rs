//! A lagging clock (the opt-in [`CoarseClock`](ratelab::CoarseClock), which
//! reads the instant of its last tick) against real time, for every
//! algorithm, on random request sequences.
//!
//! A limiter on a lagging clock decides as a precise one would at the
//! readings, so the quota's bound holds on the readings' timeline. Real
//! time differs from it by less than a tick, and not by the same amount at
//! both ends of an interval: what real time sees is the quota over intervals
//! one tick longer, and no more. Proved here; and that the tick is needed in
//! that bound (a lagging clock can admit one unit a precise clock refuses)
//! is proved too, not just said.
//!
//! This is why the default clock is the precise `SystemClock`.

use proptest::prelude::*;
use ratelab::{AlgorithmKind, AlgorithmVisitor, Direct, Gcra, KnownAlgorithm, ManualClock, Quota};
use ratelab_testkit::oracle::{Bound, Oracle};
use ratelab_testkit::props::{config, simulate};
use ratelab_testkit::strategies::{Arrival, quota_and_arrivals};

/// The first interval of real time `[a, b]` in which a key was admitted more
/// than the bound allows over `b - a + stretch`.
fn stretched_violation(bound: Bound, admitted: &[(u8, u64, u64)], stretch: u64) -> Option<String> {
    for key in 0..3u8 {
        let mine: Vec<(u64, u64)> = admitted
            .iter()
            .filter(|a| a.0 == key)
            .map(|a| (a.1, a.2))
            .collect();
        for (i, &(from, _)) in mine.iter().enumerate() {
            let mut total = 0;
            for &(to, units) in &mine[i..] {
                total += units;
                let Some(allowed) = bound.allowed_within(to - from + stretch) else {
                    break;
                };
                if total > allowed {
                    return Some(format!(
                        "key {key}: {total} units in [{from}, {to}] µs of real time, at most {allowed} over {} µs",
                        to - from + stretch
                    ));
                }
            }
        }
    }
    None
}

/// Decides `arrivals` on the readings of a clock refreshed every `tick` µs
/// (the instant of its last refresh: never ahead, never going back, less
/// than a tick behind), and checks the admissions against real time.
fn on_a_lagging_clock(
    kind: AlgorithmKind,
    quota: Quota,
    arrivals: &[Arrival],
    tick: u64,
) -> Option<String> {
    struct Run<'a>(&'a [Arrival], u64);
    impl AlgorithmVisitor for Run<'_> {
        type Output = Option<String>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            let Run(arrivals, tick) = self;
            let readings: Vec<Arrival> = arrivals
                .iter()
                .map(|a| Arrival {
                    at: a.at / tick * tick,
                    ..*a
                })
                .collect();
            let admitted: Vec<(u8, u64, u64)> = simulate(&algorithm, &readings)
                .iter()
                .zip(arrivals)
                .filter(|(step, _)| step.result.as_ref().is_ok_and(|d| d.allowed))
                .map(|(step, real)| (real.key, real.at, u64::from(step.arrival.cost)))
                .filter(|a| a.2 > 0)
                .collect();
            // Readings lag by 0 to tick - 1 µs: an interval of real time
            // maps onto one of readings at most tick - 1 µs longer.
            stretched_violation(algorithm.bound(), &admitted, tick - 1)
        }
    }
    kind.visit(quota, Run(arrivals, tick))
}

proptest! {
    #![proptest_config(config(256))]

    /// Every algorithm: on a clock lagging by less than a tick, the
    /// admissions in any interval of real time stay within the bound over
    /// that interval lengthened by the tick.
    #[test]
    fn a_lagging_clock_admits_at_most_the_quota_over_one_tick_more(
        (quota, arrivals) in quota_and_arrivals(60),
        tick in prop_oneof![Just(1u64), 2u64..=50, 50u64..=5_000, 5_000u64..=2_000_000],
    ) {
        for kind in AlgorithmKind::ALL {
            if let Some(violation) = on_a_lagging_clock(kind, quota, &arrivals, tick) {
                prop_assert!(false, "{}, tick {tick} µs: {violation}", kind.name());
            }
        }
    }
}

#[test]
fn with_a_tick_of_one_microsecond_the_bound_is_exact() {
    // A tick of 1 µs is no lag: the stretch is zero, the check above is the
    // algorithms' own bound.
    let quota = Quota::per_second(10).unwrap();
    let arrivals: Vec<Arrival> = (0..50)
        .map(|i| Arrival {
            at: i * 37_000,
            key: 0,
            cost: 1,
        })
        .collect();
    for kind in AlgorithmKind::ALL {
        assert_eq!(
            on_a_lagging_clock(kind, quota, &arrivals, 1),
            None,
            "{}",
            kind.name()
        );
    }
}

#[test]
fn a_lagging_clock_can_admit_one_unit_a_precise_clock_refuses() {
    // One per 10 ms, no burst beyond one; a clock ticking every millisecond.
    // Real time: checks at 9.9 ms and 19.8 ms, 9.9 ms apart, under the
    // 10 ms interval. The lagging clock reads 9 ms and 19 ms: 10 ms apart.
    let quota = Quota::per_second(100).unwrap().with_burst(1).unwrap();
    let precise = ManualClock::starting_at(9_900);
    let lagging = ManualClock::starting_at(9_000);
    let (on_precise, on_lagging) = (
        Direct::with_clock(Gcra::new(quota), precise.clone()),
        Direct::with_clock(Gcra::new(quota), lagging.clone()),
    );
    assert!(on_precise.check(1).unwrap().allowed);
    assert!(on_lagging.check(1).unwrap().allowed);
    precise.set(19_800);
    lagging.set(19_000);
    assert!(!on_precise.check(1).unwrap().allowed);
    assert!(
        on_lagging.check(1).unwrap().allowed,
        "the second unit passes 9.9 ms after the first: the bound over 10.9 ms, not 9.9"
    );
}
