//! The conformance suite: one table of scenarios (instants, keys, costs and
//! the exact decision expected), run against every limiter, in memory and on
//! Redis alike.
//!
//! The expected decisions were worked out by hand from each algorithm's
//! definition (the comments show the arithmetic), not recorded from a run.
//! Adding a limiter means adding one line to the list of backends a test
//! passes to [`run`]; adding a scenario means adding one entry to
//! [`SCENARIOS`].

use std::time::Duration;

use ratelab_core::{AsyncRateLimiter, Decision, Error, ManualClock, Quota};

/// What one step expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Admitted, with `remaining`, `reset_after` (µs) and `delay` (µs).
    Allow {
        /// Unit requests still admissible.
        remaining: u64,
        /// µs until full capacity.
        reset: u64,
        /// µs to wait for the slot (the leaky queue).
        delay: u64,
    },
    /// Refused, with `remaining`, `retry_after` (µs) and `reset_after` (µs).
    Deny {
        /// Unit requests still admissible.
        remaining: u64,
        /// µs until a retry passes.
        retry: u64,
        /// µs until full capacity.
        reset: u64,
    },
    /// [`Error::CostTooHigh`].
    TooHigh,
}

const fn allow(remaining: u64, reset: u64) -> Expect {
    Expect::Allow {
        remaining,
        reset,
        delay: 0,
    }
}

const fn allow_after(remaining: u64, reset: u64, delay: u64) -> Expect {
    Expect::Allow {
        remaining,
        reset,
        delay,
    }
}

const fn deny(remaining: u64, retry: u64, reset: u64) -> Expect {
    Expect::Deny {
        remaining,
        retry,
        reset,
    }
}

/// One request of a scenario: at `at` µs, for `key`, of `cost`.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// The clock reading, µs.
    pub at: u64,
    /// The key.
    pub key: &'static str,
    /// The cost.
    pub cost: u32,
    /// What must come back.
    pub expect: Expect,
}

const fn step(at: u64, key: &'static str, cost: u32, expect: Expect) -> Step {
    Step {
        at,
        key,
        cost,
        expect,
    }
}

/// A sequence of requests to one fresh limiter.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    /// What it shows.
    pub name: &'static str,
    /// The algorithm it applies to.
    pub algorithm: &'static str,
    /// `(limit, period in µs, burst)`.
    pub quota: (u32, u64, u32),
    /// The requests, in order.
    pub steps: &'static [Step],
}

impl Scenario {
    /// The scenario's quota.
    pub fn quota(&self) -> Quota {
        let (limit, period, burst) = self.quota;
        Quota::new(limit, Duration::from_micros(period))
            .and_then(|q| q.with_burst(burst))
            .expect("the table's quotas are valid")
    }
}

/// 5 per second, bursts of 10: one unit per 200 ms (T = 200 000 µs), a
/// tolerance of 2 s; the windows hold 10 per 2 s.
const REFERENCE: (u32, u64, u32) = (5, 1_000_000, 10);

/// GCRA and the leaky meter (the same arithmetic, TAT = level time + water).
const GCRA_STEPS: &[Step] = &[
    // TAT 0 -> 200 000 <= 0 + 2 000 000; room (2 000 000 - 200 000) / T = 9.
    step(0, "a", 1, allow(9, 200_000)),
    // TAT -> 2 000 000: exactly the tolerance.
    step(0, "a", 9, allow(0, 2_000_000)),
    // 2 200 000 > 2 000 000: passes at 2 200 000 - 2 000 000.
    step(0, "a", 1, deny(0, 200_000, 2_000_000)),
    step(200_000, "a", 1, allow(0, 2_000_000)),
    // TAT 2 200 000 + 400 000 = 2 600 000 > 500 000 + 2 000 000 by 100 000;
    // room floor(300 000 / T) = 1.
    step(500_000, "a", 2, deny(1, 100_000, 1_700_000)),
    step(600_000, "a", 2, allow(0, 2_000_000)),
    step(600_000, "b", 11, Expect::TooHigh),
    step(600_000, "b", 0, allow(10, 0)),
    step(10_000_000, "a", 0, allow(10, 0)),
];

/// The token bucket: whole tokens, the fraction kept as time since `last`.
const TOKEN_BUCKET_STEPS: &[Step] = &[
    step(0, "a", 1, allow(9, 200_000)),
    step(0, "a", 9, allow(0, 2_000_000)),
    // Next token at last (0) + T.
    step(0, "a", 1, deny(0, 200_000, 2_000_000)),
    // One token arrived (last = 200 000), spent.
    step(200_000, "a", 1, allow(0, 2_000_000)),
    // floor(300 000 / T) = 1 token, last = 400 000: the second at 600 000.
    step(500_000, "a", 2, deny(1, 100_000, 1_700_000)),
    step(600_000, "a", 2, allow(0, 2_000_000)),
    // 100 000 µs is half a token: none yet.
    step(700_000, "a", 1, deny(0, 100_000, 1_900_000)),
    step(700_000, "b", 11, Expect::TooHigh),
    step(700_000, "b", 0, allow(10, 0)),
];

/// The leaky queue: admitted requests get slots T apart.
const LEAKY_QUEUE_STEPS: &[Step] = &[
    step(0, "a", 1, allow_after(9, 200_000, 0)),
    // Slot at 200 000; the queue then holds 2 000 000 µs of work: full.
    step(0, "a", 9, allow_after(0, 2_000_000, 200_000)),
    step(0, "a", 1, deny(0, 200_000, 2_000_000)),
    // Slot 2 000 000, 1 800 000 µs away.
    step(200_000, "a", 1, allow_after(0, 2_000_000, 1_800_000)),
    // Slot 2 200 000 + 400 000 - 500 000 = 2 100 000 > 2 000 000.
    step(500_000, "a", 2, deny(1, 100_000, 1_700_000)),
    step(600_000, "a", 2, allow_after(0, 2_000_000, 1_600_000)),
    step(600_000, "b", 0, allow_after(10, 0, 0)),
];

/// The fixed window: 10 per aligned 2 s window.
const FIXED_WINDOW_STEPS: &[Step] = &[
    step(0, "a", 1, allow(9, 2_000_000)),
    step(0, "a", 9, allow(0, 2_000_000)),
    step(0, "a", 1, deny(0, 2_000_000, 2_000_000)),
    step(1_999_999, "a", 1, deny(0, 1, 1)),
    // A new window: the whole limit at once, right at the edge.
    step(2_000_000, "a", 10, allow(0, 2_000_000)),
    step(2_500_000, "a", 0, allow(0, 1_500_000)),
    step(4_000_000, "a", 0, allow(10, 0)),
    step(4_000_000, "b", 11, Expect::TooHigh),
];

/// The sliding log: 10 in any trailing 2 s.
const SLIDING_LOG_STEPS: &[Step] = &[
    step(0, "a", 3, allow(7, 2_000_000)),
    step(500_000, "a", 7, allow(0, 2_000_000)),
    // The 3 units of 0 leave at 2 000 000.
    step(1_000_000, "a", 1, deny(0, 1_000_000, 1_500_000)),
    // They left; 7 remain until 2 500 000: 4 do not fit, 3 do.
    step(2_000_000, "a", 4, deny(3, 500_000, 500_000)),
    step(2_000_000, "a", 3, allow(0, 2_000_000)),
    step(2_499_999, "a", 1, deny(0, 1, 1_500_001)),
    step(2_500_000, "a", 7, allow(0, 2_000_000)),
];

/// The sliding counter: 10 per 2 s, position in steps of 31 µs (2 000 000 /
/// 65 536, rounded up), 64 517 steps per window.
const SLIDING_COUNTER_STEPS: &[Step] = &[
    // Full until both windows have passed: 4 000 000.
    step(0, "a", 10, allow(0, 4_000_000)),
    // Window 1: the previous 10 weigh 10 × (64 517 − k) / 64 517. One unit
    // fits once 10 × (64 517 − k) <= 9 × 64 517, i.e. k >= 6 452:
    // 6 452 × 31 = 200 012 µs in.
    step(2_000_000, "a", 1, deny(0, 200_012, 2_000_000)),
    step(2_200_011, "a", 1, deny(0, 1, 1_799_989)),
    step(2_200_012, "a", 1, allow(0, 3_799_988)),
    // k = 32 258: room floor((645 170 − 322 590) / 64 517) = 4, 1 spent.
    step(3_000_000, "a", 0, allow(3, 3_000_000)),
    // Window 2: the previous 1 weighs 1 at its start; 10 never fit in
    // window 2, they do at the start of window 3.
    step(4_000_000, "a", 10, deny(9, 2_000_000, 2_000_000)),
    step(4_000_000, "b", 11, Expect::TooHigh),
];

/// Every scenario.
pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "gcra: burst, refill, weighted refusal, peeks",
        algorithm: "gcra",
        quota: REFERENCE,
        steps: GCRA_STEPS,
    },
    Scenario {
        name: "leaky meter: the same arithmetic as GCRA",
        algorithm: "leaky-meter",
        quota: REFERENCE,
        steps: GCRA_STEPS,
    },
    Scenario {
        name: "token bucket: whole tokens, the fraction kept",
        algorithm: "token-bucket",
        quota: REFERENCE,
        steps: TOKEN_BUCKET_STEPS,
    },
    Scenario {
        name: "leaky queue: slots T apart, refused only when full",
        algorithm: "leaky-queue",
        quota: REFERENCE,
        steps: LEAKY_QUEUE_STEPS,
    },
    Scenario {
        name: "fixed window: the whole limit again at the edge",
        algorithm: "fixed-window",
        quota: REFERENCE,
        steps: FIXED_WINDOW_STEPS,
    },
    Scenario {
        name: "sliding log: units leave one window after they came",
        algorithm: "sliding-log",
        quota: REFERENCE,
        steps: SLIDING_LOG_STEPS,
    },
    Scenario {
        name: "sliding counter: the previous window's weight decays step by step",
        algorithm: "sliding-counter",
        quota: REFERENCE,
        steps: SLIDING_COUNTER_STEPS,
    },
];

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
pub async fn run(backends: &[(&str, Factory<'_>)]) -> (Vec<String>, usize) {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (backend, factory) in backends {
        for scenario in SCENARIOS {
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
