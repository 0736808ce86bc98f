//! Alerts: every failure reaches the caller's callback, and a `tracing`
//! warning at most once a second (an outage must not flood the logs).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ratelab_core::Error;
use ratelab_core::toolkit::LogGate;

use crate::settings::FailurePolicy;
use crate::stats::Stats;

/// One failure, as the alert callback sees it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Alert<'a> {
    /// The algorithm of the limiter that failed.
    pub algorithm: &'static str,
    /// What went wrong.
    pub error: &'a Error,
    /// What the limiter did about it.
    pub policy: FailurePolicy,
}

/// The callback a program registers with
/// [`Resilience::on_alert`](crate::Resilience::on_alert).
pub(crate) type AlertCallback = Arc<dyn Fn(&Alert<'_>) + Send + Sync>;

/// Where a limiter's alerts go.
pub(crate) struct Alerts {
    callback: Option<AlertCallback>,
    log_gate: LogGate,
}

impl Alerts {
    pub(crate) fn new(callback: Option<AlertCallback>) -> Self {
        Alerts {
            callback,
            log_gate: LogGate::new(Duration::from_secs(1)),
        }
    }

    /// Tells the callback about `alert`, and logs it unless a warning went
    /// out less than a second ago.
    pub(crate) fn raise(&self, alert: &Alert<'_>, stats: Stats) {
        if let Some(callback) = &self.callback {
            callback(alert);
        }
        if let Some(suppressed) = self.log_gate.admit() {
            tracing::warn!(
                algorithm = alert.algorithm,
                policy = ?alert.policy,
                timeouts = stats.timeouts,
                errors = stats.errors,
                suppressed,
                "{}: {}",
                outcome(alert.policy),
                alert.error
            );
        }
    }
}

/// What a limiter did about a failure, as its warning says it: the line an
/// operator greps for when requests pass unchecked.
fn outcome(policy: FailurePolicy) -> &'static str {
    match policy {
        FailurePolicy::Allow => "rate limiter failing open, admitted without a check",
        FailurePolicy::Deny => "rate limiter failing closed, refused without a check",
        FailurePolicy::Fallback => "rate limiter decided in memory by its fallback",
        FailurePolicy::Error => "rate limiter failed, the error returned to the caller",
    }
}

impl fmt::Debug for Alerts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Alerts")
            .field("callback", &self.callback.is_some())
            .finish_non_exhaustive()
    }
}
