//! The leaky bucket's conformance scenarios: the meter's is GCRA's
//! arithmetic ([`TAT_STEPS`]); the queue's slots are T apart.

use ratelab_core::toolkit::conformance::{
    REFERENCE, Scenario, Step, TAT_STEPS, allow_after, deny, step,
};
use ratelab_core::toolkit::{Conformance, RemoteForm};

use crate::{LeakyMeter, LeakyQueue};

impl Conformance for LeakyMeter {
    const CONFORMANCE: Scenario = Scenario {
        name: "leaky meter: the same arithmetic as GCRA",
        algorithm: <Self as RemoteForm>::NAME,
        quota: REFERENCE,
        steps: TAT_STEPS,
    };
}

/// Admitted requests get slots T apart.
const QUEUE_STEPS: &[Step] = &[
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

impl Conformance for LeakyQueue {
    const CONFORMANCE: Scenario = Scenario {
        name: "leaky queue: slots T apart, refused only when full",
        algorithm: <Self as RemoteForm>::NAME,
        quota: REFERENCE,
        steps: QUEUE_STEPS,
    };
}
