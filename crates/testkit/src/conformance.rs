//! Runs conformance scenarios (each algorithm's own,
//! [`Conformance`](ratelab_core::toolkit::Conformance): instants, keys,
//! costs and the exact decisions expected, worked out by hand) against
//! every limiter, in memory and on Redis alike.
//!
//! Adding a limiter means adding one line to the list of backends a test
//! passes to [`run`]; an algorithm brings its scenario with it.

use std::time::Duration;

use ratelab_core::toolkit::conformance::{Expect, Scenario};
use ratelab_core::{AsyncRateLimiter, Decision, Error, ManualClock, Quota};

/// Builds a limiter of the named algorithm, for the quota, on the clock.
pub type Factory<'a> = &'a dyn Fn(&'static str, Quota, ManualClock) -> Box<dyn AsyncRateLimiter>;

fn matches(expect: Expect, got: &Result<Decision, Error>) -> bool {
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    match (expect, got) {
        (Expect::TooHigh, Err(Error::CostTooHigh { .. })) => true,
        (
            Expect::Allow {
                remaining,
                reset,
                delay,
            },
            Ok(d),
        ) => {
            d.allowed
                && d.remaining == remaining
                && d.retry_after().is_zero()
                && micros(d.reset_after()) == reset
                && micros(d.delay()) == delay
        }
        (
            Expect::Deny {
                remaining,
                retry,
                reset,
            },
            Ok(d),
        ) => {
            !d.allowed
                && d.remaining == remaining
                && micros(d.retry_after()) == retry
                && micros(d.reset_after()) == reset
                && d.delay().is_zero()
        }
        _ => false,
    }
}

/// Runs every scenario against every backend (`(name, factory)`), each on a
/// fresh limiter and a [`ManualClock`]; returns one line per mismatch (empty
/// when everything conforms) and the number of steps checked.
pub async fn run(scenarios: &[Scenario], backends: &[(&str, Factory<'_>)]) -> (Vec<String>, usize) {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (backend, factory) in backends {
        for scenario in scenarios {
            let clock = ManualClock::new();
            let limiter = factory(scenario.algorithm, scenario.quota(), clock.clone());
            assert_eq!(
                limiter.algorithm_name(),
                scenario.algorithm,
                "{backend} built the wrong limiter"
            );
            for (i, step) in scenario.steps.iter().enumerate() {
                clock.set(step.at);
                let got = limiter.check_async(step.key.as_bytes(), step.cost).await;
                checked += 1;
                if !matches(step.expect, &got) {
                    failures.push(format!(
                        "{backend} / {}: step {i} ({} µs, key {}, cost {}): expected {:?}, got {got:?}",
                        scenario.name, step.at, step.key, step.cost, step.expect
                    ));
                }
            }
        }
    }
    (failures, checked)
}
