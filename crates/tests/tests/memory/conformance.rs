//! The conformance table, in memory: every in-memory limiter gives exactly
//! the decisions worked out by hand.

use crate::common;

use ratelab::{AlgorithmKind, AsyncRateLimiter, ManualClock, Quota};
use ratelab_testkit::conformance::{Factory, run};

#[tokio::test]
async fn every_in_memory_limiter_conforms() {
    let memory = |name: &'static str,
                  quota: Quota,
                  clock: ManualClock|
     -> Box<dyn AsyncRateLimiter> { Box::new(common::keyed(name, quota, clock)) };
    let backends: [(&str, Factory<'_>); 1] = [("memory", &memory)];
    let (failures, checked) = run(&scenarios(), &backends).await;
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        checked,
        scenarios().iter().map(|s| s.steps.len()).sum::<usize>()
    );
}

/// Every algorithm's own scenario.
fn scenarios() -> Vec<ratelab::toolkit::conformance::Scenario> {
    AlgorithmKind::ALL.map(AlgorithmKind::conformance).to_vec()
}
