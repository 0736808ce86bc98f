//! The sliding windows' conformance scenarios: 10 in any trailing 2 s for
//! the log; the counter's previous window weighed step by step.

use ratelab_core::toolkit::conformance::{Expect, REFERENCE, Scenario, Step, allow, deny, step};
use ratelab_core::toolkit::{Conformance, RemoteForm};

use crate::{SlidingCounter, SlidingLog};

const LOG_STEPS: &[Step] = &[
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

impl Conformance for SlidingLog {
    const CONFORMANCE: Scenario = Scenario {
        name: "sliding log: units leave one window after they came",
        algorithm: <Self as RemoteForm>::NAME,
        quota: REFERENCE,
        steps: LOG_STEPS,
    };
}

/// 10 per 2 s, position in steps of 31 µs (2 000 000 / 65 536, rounded up),
/// 64 517 steps per window.
const COUNTER_STEPS: &[Step] = &[
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

impl Conformance for SlidingCounter {
    const CONFORMANCE: Scenario = Scenario {
        name: "sliding counter: the previous window's weight decays step by step",
        algorithm: <Self as RemoteForm>::NAME,
        quota: REFERENCE,
        steps: COUNTER_STEPS,
    };
}
