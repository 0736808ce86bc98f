//! Conformance: each algorithm's decisions worked out by hand from its
//! definition (the comments show the arithmetic), not recorded from a run,
//! that every store of it (memory, the scripts, the native module, the
//! clients of other languages) must give exactly.
//!
//! An algorithm states its own with [`Conformance`], a trait the registry
//! of algorithms requires: an algorithm without its scenario does not
//! compile into it.
//!
//! ```
//! use ratelab_core::toolkit::conformance::{Expect, REFERENCE, Scenario, allow, deny, step};
//!
//! // Two units of a fresh key: both pass at 0, the third waits 200 ms.
//! const STEPS: &[ratelab_core::toolkit::conformance::Step] = &[
//!     step(0, "a", 10, allow(0, 2_000_000)),
//!     step(0, "a", 1, deny(0, 200_000, 2_000_000)),
//!     step(0, "a", 11, Expect::TooHigh),
//! ];
//! let scenario = Scenario {
//!     name: "a burst, then one unit's wait",
//!     algorithm: "gcra",
//!     quota: REFERENCE,
//!     steps: STEPS,
//! };
//! assert_eq!(scenario.quota().burst(), 10);
//! ```

use std::time::Duration;

use crate::Quota;

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
    /// [`Error::CostTooHigh`](crate::Error::CostTooHigh).
    TooHigh,
}

/// Admitted at once, with `remaining` and `reset` µs until full.
pub const fn allow(remaining: u64, reset: u64) -> Expect {
    allow_after(remaining, reset, 0)
}

/// Admitted to a slot `delay` µs away (the leaky queue).
pub const fn allow_after(remaining: u64, reset: u64, delay: u64) -> Expect {
    Expect::Allow {
        remaining,
        reset,
        delay,
    }
}

/// Refused, passing after `retry` µs.
pub const fn deny(remaining: u64, retry: u64, reset: u64) -> Expect {
    Expect::Deny {
        remaining,
        retry,
        reset,
    }
}

/// One request of a scenario: at `at` µs, for `key`, of `cost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// A [`Step`].
pub const fn step(at: u64, key: &'static str, cost: u32, expect: Expect) -> Step {
    Step {
        at,
        key,
        cost,
        expect,
    }
}

/// A sequence of requests to one fresh limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scenario {
    /// What it shows.
    pub name: &'static str,
    /// The algorithm it applies to (its name).
    pub algorithm: &'static str,
    /// `(limit, period in µs, burst)`.
    pub quota: (u32, u64, u32),
    /// The requests, in order.
    pub steps: &'static [Step],
}

impl Scenario {
    /// The scenario's quota.
    ///
    /// # Panics
    ///
    /// If the scenario's quota is not a valid one: a scenario's table is
    /// written by hand, and one that cannot run is a bug in it.
    pub fn quota(&self) -> Quota {
        let (limit, period, burst) = self.quota;
        Quota::new(limit, Duration::from_micros(period))
            .and_then(|q| q.with_burst(burst))
            .expect("a scenario's quota is valid")
    }
}

/// 5 per second, bursts of 10: one unit per 200 ms (T = 200 000 µs), a
/// tolerance of 2 s; the windows hold 10 per 2 s.
pub const REFERENCE: (u32, u64, u32) = (5, 1_000_000, 10);

/// GCRA's arithmetic on [`REFERENCE`], which the leaky meter shares (TAT =
/// the level's time + the water): a burst, the refill, a weighted refusal
/// and peeks.
pub const TAT_STEPS: &[Step] = &[
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

/// An algorithm's conformance scenario: the decisions every store of it
/// must give, worked out by hand.
pub trait Conformance {
    /// The scenario, on a fresh limiter and a clock at 0.
    const CONFORMANCE: Scenario;
}
