//! The metrics the layer reports through the [`metrics`] facade, by name: nothing is
//! recorded until the application installs a recorder (for Prometheus,
//! `metrics-exporter-prometheus`), and then every clone of every layer
//! reports into it. The names and labels are listed in
//! [the guide](crate::guide#metrics).

use std::time::Duration;

use ratelab_core::Error;

use crate::engine::{Outcome, State, Verdict};
use crate::policy::FailureMode;

/// Requests by outcome: `allowed`, `refused`, `unavailable`, `skipped`.
pub const REQUESTS: &str = "ratelab_http_requests_total";
/// Policy decisions by `policy` and `outcome`: `allowed`, `refused`,
/// `never` (a cost above the burst), `peeked` (only peeked: another policy
/// refused first), `failed_open`, `failed_closed`.
pub const DECISIONS: &str = "ratelab_http_decisions_total";
/// Seconds per limiter call, by `policy` (a histogram).
pub const LIMITER_SECONDS: &str = "ratelab_http_limiter_call_seconds";
/// Limiter failures by `policy`, `mode` (`open`, `closed`) and `kind`
/// (`timeout`, `backend`, `data`, `circuit_open`, `too_many_keys`, `other`).
pub const FAILURES: &str = "ratelab_http_limiter_failures_total";
/// Calls made after the response ([`Count`](crate::Count)) by `policy`,
/// `call` (`count`, `refund`) and `result` (`ok`, `error`).
pub const AFTER_RESPONSE: &str = "ratelab_http_after_response_total";
/// Keys a policy's limiter tracks, by `policy`, where the policy says
/// ([`Policy::keys_tracked`](crate::Policy::keys_tracked)).
pub const KEYS_TRACKED: &str = "ratelab_http_keys_tracked";
/// 1 while a policy's limiter has its circuit breaker open (its backend is
/// failing and not being called), else 0, by `policy`, where the policy says
/// ([`Policy::breaker_open`](crate::Policy::breaker_open)).
pub const BREAKER_OPEN: &str = "ratelab_http_breaker_open";

pub(crate) fn skipped() {
    metrics::counter!(REQUESTS, "outcome" => "skipped").increment(1);
}

pub(crate) fn limiter_call(policy: &str, elapsed: Duration) {
    metrics::histogram!(LIMITER_SECONDS, "policy" => policy.to_owned()).record(elapsed);
}

pub(crate) fn after_response(policy: &str, call: &'static str, ok: bool) {
    let result = if ok { "ok" } else { "error" };
    metrics::counter!(
        AFTER_RESPONSE,
        "policy" => policy.to_owned(),
        "call" => call,
        "result" => result
    )
    .increment(1);
}

/// Everything one verdict has to report.
pub(crate) fn verdict(verdict: &Verdict<'_>) {
    let outcome = match verdict.outcome {
        Outcome::Pass { .. } => "allowed",
        Outcome::Refuse => "refused",
        Outcome::Unavailable => "unavailable",
    };
    metrics::counter!(REQUESTS, "outcome" => outcome).increment(1);
    for report in &verdict.reports {
        let policy = report.check.policy;
        let outcome = match report.state {
            State::Decided(d) if d.allowed => "allowed",
            State::Decided(_) => "refused",
            State::Never { .. } => "never",
            State::Peeked(_) | State::Pending => "peeked",
            State::FailedOpen => "failed_open",
            State::FailedClosed(_) => "failed_closed",
        };
        metrics::counter!(DECISIONS, "policy" => policy.name.clone(), "outcome" => outcome)
            .increment(1);
        if let Some(count) = &policy.keys_tracked {
            #[allow(clippy::cast_precision_loss)] // a gauge: exact enough
            let keys = count() as f64;
            metrics::gauge!(KEYS_TRACKED, "policy" => policy.name.clone()).set(keys);
        }
        if let Some(open) = &policy.breaker_open {
            let open = if open() { 1.0 } else { 0.0 };
            metrics::gauge!(BREAKER_OPEN, "policy" => policy.name.clone()).set(open);
        }
    }
    for failure in &verdict.failures {
        let policy = &verdict.reports[failure.report].check.policy.name;
        let mode = match failure.mode {
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
        };
        metrics::counter!(
            FAILURES,
            "policy" => policy.clone(),
            "mode" => mode,
            "kind" => kind(&failure.error)
        )
        .increment(1);
    }
}

fn kind(error: &Error) -> &'static str {
    match error {
        Error::Timeout(_) => "timeout",
        Error::Backend(_) => "backend",
        Error::Data(_) => "data",
        Error::CircuitOpen(_) => "circuit_open",
        Error::TooManyKeys { .. } => "too_many_keys",
        _ => "other",
    }
}
