//! The fixed window's conformance scenario: 10 per aligned 2 s window.

use ratelab_core::toolkit::conformance::{Expect, REFERENCE, Scenario, Step, allow, deny, step};
use ratelab_core::toolkit::{Conformance, RemoteForm};

use crate::FixedWindow;

const STEPS: &[Step] = &[
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

impl Conformance for FixedWindow {
    const CONFORMANCE: Scenario = Scenario {
        name: "fixed window: the whole limit again at the edge",
        algorithm: <Self as RemoteForm>::NAME,
        quota: REFERENCE,
        steps: STEPS,
    };
}
