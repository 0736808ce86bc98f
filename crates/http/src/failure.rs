//! What the layer does when a limiter cannot decide: count it, log it (at
//! most a line a second per policy), and tell the failure callback.

use std::sync::Arc;

use ratelab_core::Error;

use crate::engine::Verdict;
use crate::identity::Client;
use crate::layer::Shared;
use crate::policy::FailureMode;

pub(crate) type FailureCallback = Arc<dyn Fn(&LimiterFailure<'_>) + Send + Sync>;

/// What the layer tells the failure callback when a limiter could not decide.
#[derive(Debug)]
#[non_exhaustive]
pub struct LimiterFailure<'a> {
    /// The policy whose limiter failed.
    pub policy: &'a str,
    /// The client of the request.
    pub client: &'a Client,
    /// What went wrong.
    pub error: &'a Error,
    /// What the layer did about it.
    pub mode: FailureMode,
}

/// Raises the alerts for every limiter failure of `verdict`, in the order
/// they happened.
pub(crate) fn alert(shared: &Shared, verdict: &Verdict, client: &Client) {
    for failure in &verdict.failures {
        let index = verdict.reports[failure.report].check.index;
        let compiled = &shared.policies[index];
        let policy = &compiled.policy;
        let (error, mode) = (&failure.error, failure.mode);
        shared.stats.count_failure(mode);
        // An outage at thousands of requests a second logs a line a second
        // (with the count of the others), not thousands; the counters and
        // the callback still see every failure.
        if let Some(suppressed) = compiled.log_gate.admit() {
            match mode {
                FailureMode::Open => tracing::warn!(
                    policy = %policy.name,
                    client = %client,
                    error = %error,
                    suppressed,
                    "rate limiter failed; policy fails open: the request passes unchecked by it"
                ),
                FailureMode::Closed => tracing::error!(
                    policy = %policy.name,
                    client = %client,
                    error = %error,
                    suppressed,
                    "rate limiter failed; policy fails closed: the request is refused with 503"
                ),
            }
        }
        if let Some(callback) = &shared.on_failure {
            callback(&LimiterFailure {
                policy: &policy.name,
                client,
                error,
                mode,
            });
        }
    }
}
