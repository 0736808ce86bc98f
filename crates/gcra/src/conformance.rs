//! GCRA's conformance scenario: [`TAT_STEPS`], the arithmetic the leaky
//! meter shares.

use ratelab_core::toolkit::conformance::{REFERENCE, Scenario, TAT_STEPS};
use ratelab_core::toolkit::{Conformance, RemoteForm};

use crate::Gcra;

impl Conformance for Gcra {
    const CONFORMANCE: Scenario = Scenario {
        name: "gcra: burst, refill, weighted refusal, peeks",
        algorithm: <Self as RemoteForm>::NAME,
        quota: REFERENCE,
        steps: TAT_STEPS,
    };
}
