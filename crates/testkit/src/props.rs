//! Property runners written once, applied to every algorithm by its crate's
//! `tests/properties.rs`.
//!
//! They drive the pure decision logic ([`Algorithm::decide`]) directly, one
//! state per key, so that every step's state before and after can be probed
//! on copies ("would one more pass now?", "would a retry at exactly
//! `retry_after` pass?") without disturbing the run. [`keyed_agrees`] then
//! checks that the real in-memory limiter decides exactly as the pure logic.

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::test_runner::{
    FailurePersistence, FileFailurePersistence, PersistedSeed, TestCaseError,
};
use ratelab_core::toolkit::clamp_instant;
use ratelab_core::{Algorithm, Decision, Error, Keyed, ManualClock};

use crate::oracle::{Admitted, Bound, Oracle};
use crate::strategies::{Arrival, unwrapped};

/// One decided request, with the key's state before and after.
#[derive(Debug, Clone)]
pub struct Step<S> {
    /// The request.
    pub arrival: Arrival,
    /// The clock reading the algorithm saw (clamped to
    /// [`MAX_INSTANT_MICROS`](ratelab_core::toolkit::MAX_INSTANT_MICROS)).
    pub now: u64,
    /// The key's state before.
    pub before: S,
    /// The key's state after.
    pub after: S,
    /// The answer.
    pub result: Result<Decision, String>,
}

/// Runs `arrivals` through `algorithm`'s pure logic, one state per key.
pub fn simulate<A: Algorithm>(algorithm: &A, arrivals: &[Arrival]) -> Vec<Step<A::State>> {
    let mut states: HashMap<u8, A::State> = HashMap::new();
    arrivals
        .iter()
        .map(|&arrival| {
            let now = clamp_instant(arrival.at);
            let state = states
                .entry(arrival.key)
                .or_insert_with(|| algorithm.initial_state());
            let before = state.clone();
            let result = algorithm
                .decide(state, now, arrival.cost)
                .map_err(|e| e.to_string());
            Step {
                arrival,
                now,
                before,
                after: state.clone(),
                result,
            }
        })
        .collect()
}

fn probe<A: Algorithm>(algorithm: &A, state: &A::State, now: u64, cost: u32) -> Decision {
    let mut copy = state.clone();
    algorithm
        .decide(&mut copy, clamp_instant(now), cost)
        .expect("a cost within the capacity is always decided")
}

/// The admitted units of `key`, on the given timeline (one time per step).
fn admitted_of<S>(steps: &[Step<S>], times: &[u64], key: u8) -> Vec<Admitted> {
    steps
        .iter()
        .zip(times)
        .filter(|(s, _)| s.arrival.key == key)
        .filter_map(|(s, &at)| match &s.result {
            Ok(d) if d.allowed && s.arrival.cost > 0 => Some(Admitted {
                at,
                units: u64::from(s.arrival.cost),
            }),
            _ => None,
        })
        .collect()
}

/// For every key and every interval, the admitted units stay within `bound`.
/// Clock readings that go backwards are taken as time standing still
/// ([`unwrapped`]), so this holds for wild clocks too.
pub fn bound_holds<S>(steps: &[Step<S>], bound: Bound) -> Result<(), TestCaseError> {
    let times = unwrapped(steps.iter().map(|s| s.arrival.at));
    for key in 0..=u8::MAX {
        let admitted = admitted_of(steps, &times, key);
        if let Some(violation) = bound.violation(&admitted) {
            return Err(TestCaseError::fail(format!(
                "key {key}: {violation} ({bound:?})"
            )));
        }
    }
    Ok(())
}

/// Every field of every decision tells the truth, probed on copies of the
/// state after it:
///
/// - `limit` is the capacity; a cost above it is [`Error::CostTooHigh`] and
///   changes nothing; cost 0 is allowed and changes nothing;
/// - exactly `remaining` more unit requests pass at that instant;
/// - a refusal's `retry_after` is positive, a retry of the same cost at
///   exactly `retry_after` passes and one a microsecond earlier does not;
///   an admission's `retry_after` is zero;
/// - at exactly `reset_after` the key is back to full capacity, and a
///   microsecond earlier it is not.
///
/// Needs readings that never go backwards.
pub fn fields_tell_the_truth<A: Algorithm>(
    algorithm: &A,
    steps: &[Step<A::State>],
) -> Result<(), TestCaseError>
where
    A::State: PartialEq + std::fmt::Debug,
{
    let capacity = algorithm.capacity();
    for step in steps {
        let (now, cost) = (step.now, step.arrival.cost);
        let decision = match &step.result {
            Err(message) => {
                prop_assert!(
                    u64::from(cost) > capacity,
                    "cost {cost} within capacity {capacity} failed: {message}"
                );
                prop_assert_eq!(&step.before, &step.after, "an error changed the state");
                prop_assert_eq!(message, &Error::CostTooHigh { cost, capacity }.to_string());
                continue;
            }
            Ok(decision) => *decision,
        };
        prop_assert!(
            u64::from(cost) <= capacity,
            "cost {cost} > capacity {capacity} decided"
        );
        prop_assert_eq!(decision.limit, capacity);
        if cost == 0 {
            prop_assert!(decision.allowed, "a peek was refused");
            prop_assert_eq!(
                probe(algorithm, &step.before, now, 1),
                probe(algorithm, &step.after, now, 1),
                "a peek consumed"
            );
        }

        // Exactly `remaining` unit requests pass now, and not one more.
        let mut state = step.after.clone();
        for i in 0..decision.remaining {
            let d = algorithm.decide(&mut state, now, 1).expect("cost 1 fits");
            prop_assert!(
                d.allowed,
                "remaining said {} but unit {} was refused: {:?}",
                decision.remaining,
                i + 1,
                decision
            );
        }
        let extra = algorithm.decide(&mut state, now, 1).expect("cost 1 fits");
        prop_assert!(
            !extra.allowed,
            "remaining said {} but one more passed: {:?}",
            decision.remaining,
            decision
        );

        if decision.allowed {
            prop_assert!(
                decision.retry_after().is_zero(),
                "allowed with a retry_after"
            );
        } else {
            let retry = decision.retry_after_micros;
            prop_assert!(retry > 0, "refused with retry_after 0: {:?}", decision);
            prop_assert!(
                probe(algorithm, &step.after, now + retry, cost).allowed,
                "a retry at exactly retry_after ({retry} µs) was refused: {decision:?}"
            );
            prop_assert!(
                !probe(algorithm, &step.after, now + retry - 1, cost).allowed,
                "a retry 1 µs before retry_after ({retry} µs) passed: {decision:?}"
            );
        }

        let reset = decision.reset_after_micros;
        let at_reset = probe(algorithm, &step.after, now + reset, 0);
        prop_assert_eq!(
            at_reset.remaining,
            capacity,
            "not full at reset_after ({} µs): {:?}",
            reset,
            decision
        );
        if reset > 0 {
            let before_reset = probe(algorithm, &step.after, now + reset - 1, 0);
            prop_assert!(
                before_reset.remaining < capacity,
                "already full 1 µs before reset_after ({reset} µs): {decision:?}"
            );
        }
        let full_at = algorithm.full_at(&step.after);
        if reset == 0 {
            prop_assert!(full_at <= now, "full now, yet full_at is {full_at} > {now}");
        } else {
            prop_assert_eq!(full_at, now + reset, "full_at disagrees with reset_after");
        }
    }
    Ok(())
}

/// A refused request consumes nothing: from then on, the state before and the
/// state after it decide alike (probed at the refusal, at its retry time, and
/// at its reset time, for unit requests and for the refused cost).
pub fn refusals_consume_nothing<A: Algorithm>(
    algorithm: &A,
    steps: &[Step<A::State>],
) -> Result<(), TestCaseError> {
    for step in steps {
        let Ok(decision) = step.result else { continue };
        if decision.allowed {
            continue;
        }
        let now = step.now;
        for at in [
            now,
            now + decision.retry_after_micros,
            now + decision.reset_after_micros,
        ] {
            for cost in [1, step.arrival.cost] {
                prop_assert_eq!(
                    probe(algorithm, &step.before, at, cost),
                    probe(algorithm, &step.after, at, cost),
                    "the refusal at {} changed what a request of {} at {} gets",
                    now,
                    cost,
                    at
                );
            }
        }
    }
    Ok(())
}

/// After each key's last request, an idle time of its `reset_after` brings
/// back the full burst: a request of the whole capacity passes at once.
pub fn idle_restores_the_burst<A: Algorithm>(
    algorithm: &A,
    steps: &[Step<A::State>],
) -> Result<(), TestCaseError> {
    let mut last: HashMap<u8, &Step<A::State>> = HashMap::new();
    for step in steps {
        if step.result.is_ok() {
            last.insert(step.arrival.key, step);
        }
    }
    let capacity = u32::try_from(algorithm.capacity()).expect("capacity is a burst");
    for (key, step) in last {
        let decision = step.result.as_ref().expect("kept only decided steps");
        let at = step.now + decision.reset_after_micros;
        let full = probe(algorithm, &step.after, at, capacity);
        prop_assert!(
            full.allowed,
            "key {key}: a full burst of {capacity} was refused after reset_after: {full:?}"
        );
    }
    Ok(())
}

/// The in-memory keyed limiter, on a [`ManualClock`] set to each arrival's
/// time, decides exactly as the pure logic (readings that never go back).
pub fn keyed_agrees<A: Algorithm + Clone>(
    algorithm: &A,
    steps: &[Step<A::State>],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let keyed = Keyed::with_clock(algorithm.clone(), clock.clone());
    for step in steps {
        clock.set(step.arrival.at);
        let got = keyed
            .check(&[step.arrival.key], step.arrival.cost)
            .map_err(|e| e.to_string());
        prop_assert_eq!(&got, &step.result, "at {}", step.arrival.at);
    }
    Ok(())
}

/// A proptest config for property files: `cases` cases (or
/// `$PROPTEST_CASES`, for a longer hunt), failures saved next to the test
/// source in `<file>.proptest-regressions` (committed).
pub fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        failure_persistence: Some(regressions()),
        ..ProptestConfig::default()
    }
}

/// Where a property test's regressions live: the committed
/// `*.proptest-regressions` beside its source, read on every run (each seed
/// in it replayed first). A failure found now is written there only when
/// `PROPTEST_SAVE_REGRESSIONS=1` asks, as a deliberate addition; otherwise
/// its seed is printed, with the line to keep it, and the tree is left as
/// it was (a failing run on a branch leaves nothing to commit by mistake).
pub fn regressions() -> Box<dyn FailurePersistence> {
    Box::new(Regressions(FileFailurePersistence::WithSource(
        "proptest-regressions",
    )))
}

/// [`regressions`]: the committed seeds read, new ones written on request.
#[derive(Debug, Clone, PartialEq)]
struct Regressions(FileFailurePersistence);

impl FailurePersistence for Regressions {
    fn load_persisted_failures2(&self, source_file: Option<&'static str>) -> Vec<PersistedSeed> {
        self.0.load_persisted_failures2(source_file)
    }

    fn save_persisted_failure2(
        &mut self,
        source_file: Option<&'static str>,
        seed: PersistedSeed,
        shrunken_value: &dyn std::fmt::Debug,
    ) {
        if std::env::var_os("PROPTEST_SAVE_REGRESSIONS").is_some_and(|v| v == "1") {
            self.0
                .save_persisted_failure2(source_file, seed, shrunken_value);
        } else {
            eprintln!(
                "proptest: a failure of {} (run again with PROPTEST_SAVE_REGRESSIONS=1 to keep its \
                 seed in the regressions file beside it):\ncc {seed} # shrinks to {shrunken_value:?}",
                source_file.unwrap_or("this test"),
            );
        }
    }

    fn box_clone(&self) -> Box<dyn FailurePersistence> {
        Box::new(self.clone())
    }

    fn eq(&self, other: &dyn FailurePersistence) -> bool {
        other
            .as_any()
            .downcast_ref::<Self>()
            .is_some_and(|other| other == self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Runs `arrivals` through a [`Keyed`] limiter on a [`ManualClock`] set to
/// each reading in turn (states are not observable: `()`).
pub fn run_keyed<A: Algorithm + Clone>(algorithm: &A, arrivals: &[Arrival]) -> Vec<Step<()>> {
    let clock = ManualClock::new();
    let keyed = Keyed::with_clock(algorithm.clone(), clock.clone());
    arrivals
        .iter()
        .map(|&arrival| {
            clock.set(arrival.at);
            Step {
                arrival,
                now: clamp_instant(arrival.at),
                before: (),
                after: (),
                result: keyed
                    .check(&[arrival.key], arrival.cost)
                    .map_err(|e| e.to_string()),
            }
        })
        .collect()
}

/// Every property for readings that never go back: the bound, truthful
/// fields, refusals that consume nothing, the burst restored after
/// `reset_after`, and the keyed limiter agreeing with the pure logic.
pub fn all_properties<A: Algorithm + Clone>(
    algorithm: &A,
    arrivals: &[Arrival],
    bound: Bound,
) -> Result<(), TestCaseError>
where
    A::State: PartialEq + std::fmt::Debug,
{
    prop_assert_eq!(algorithm.bound(), bound, "the bound the algorithm declares");
    let steps = simulate(algorithm, arrivals);
    bound_holds(&steps, bound)?;
    fields_tell_the_truth(algorithm, &steps)?;
    refusals_consume_nothing(algorithm, &steps)?;
    idle_restores_the_burst(algorithm, &steps)?;
    keyed_agrees(algorithm, &steps)
}

/// With a clock that jumps backwards and far forwards: nothing panics, and
/// neither the pure logic nor the keyed limiter admits beyond the bound on
/// the timeline where a clock that went back stood still.
pub fn wild_clock_properties<A: Algorithm + Clone>(
    algorithm: &A,
    arrivals: &[Arrival],
    bound: Bound,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(algorithm.bound(), bound, "the bound the algorithm declares");
    bound_holds(&simulate(algorithm, arrivals), bound)?;
    bound_holds(&run_keyed(algorithm, arrivals), bound)
}
