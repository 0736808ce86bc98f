//! What happens when a limiter cannot decide, besides the answer: count it,
//! log it (at most a line a second per policy), and tell the failure
//! callback.

use std::sync::Arc;

use ratelab_core::Error;

use crate::client::Client;
use crate::engine::Tally;
use crate::matching::Compiled;
use crate::policy::FailureMode;
use crate::stats::Stats;

pub(crate) type FailureCallback = Arc<dyn Fn(&LimiterFailure<'_>) + Send + Sync>;

/// What the failure callback
/// ([`LimitsBuilder::on_limiter_failure`](crate::LimitsBuilder::on_limiter_failure))
/// is told when a limiter could not decide.
#[derive(Debug)]
#[non_exhaustive]
pub struct LimiterFailure<'a> {
    /// The policy whose limiter failed.
    pub policy: &'a str,
    /// The client of the request.
    pub client: &'a Client,
    /// What went wrong.
    pub error: &'a Error,
    /// What was done about it.
    pub mode: FailureMode,
}

/// Where the alerts go: the counters, and the callback if there is one.
pub(crate) struct Alerts {
    pub(crate) stats: Arc<Stats>,
    pub(crate) on_failure: Option<FailureCallback>,
}

impl Alerts {
    /// Raises the alerts for every limiter failure of `tally` (whose checks
    /// index `policies`), in the order they happened.
    pub(crate) fn raise(&self, policies: &[Compiled], tally: &Tally, client: &Client) {
        for failure in &tally.failures {
            let compiled = &policies[tally.reports[failure.report].check.index];
            let policy = &compiled.policy;
            let (error, mode) = (&failure.error, failure.mode);
            self.stats.count_failure(mode);
            // An outage at thousands of requests a second logs a line a
            // second (with the count of the others), not thousands; the
            // counters and the callback still see every failure.
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
            if let Some(callback) = &self.on_failure {
                callback(&LimiterFailure {
                    policy: &policy.name,
                    client,
                    error,
                    mode,
                });
            }
        }
    }
}
