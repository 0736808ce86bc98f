//! The token bucket's conformance scenario: whole tokens, the fraction
//! kept as time since `last`.

use ratelab_core::toolkit::conformance::{Expect, REFERENCE, Scenario, Step, allow, deny, step};
use ratelab_core::toolkit::{Conformance, RemoteForm};

use crate::TokenBucket;

const STEPS: &[Step] = &[
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

impl Conformance for TokenBucket {
    const CONFORMANCE: Scenario = Scenario {
        name: "token bucket: whole tokens, the fraction kept",
        algorithm: <Self as RemoteForm>::NAME,
        quota: REFERENCE,
        steps: STEPS,
    };
}
