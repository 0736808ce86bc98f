//! The metrics the layer reports through the [`metrics`] facade, by name: nothing is
//! recorded until the application installs a recorder (for Prometheus,
//! `metrics-exporter-prometheus`), and then every clone of every layer
//! reports into it. The names and labels are listed in
//! [the guide](crate::guide#metrics).

use std::time::Duration;

use metrics::{Key, Label, Level, Metadata};
use ratelab_core::Error;

use crate::engine::{Outcome, State, Verdict};
use crate::policy::{FailureMode, Policy};

/// Requests by outcome: `allowed`, `refused`, `unavailable`, `skipped`.
pub const REQUESTS: &str = "ratelab_http_requests_total";
/// Policy decisions by `policy` and `outcome`: `allowed`, `refused`,
/// `never` (a cost above the burst), `peeked` (only peeked: another policy
/// refused first), `given_back` (admitted, and given back since: another
/// policy refused the request), `failed_open`, `failed_closed`.
pub const DECISIONS: &str = "ratelab_http_decisions_total";
/// Seconds per limiter call, by `policy` (a histogram).
pub const LIMITER_SECONDS: &str = "ratelab_http_limiter_call_seconds";
/// Limiter failures by `policy`, `mode` (`open`, `closed`) and `kind`
/// (`timeout`, `backend`, `data`, `circuit_open`, `too_many_keys`, `other`).
pub const FAILURES: &str = "ratelab_http_limiter_failures_total";
/// Calls made after the decision by `policy`, `call` and `result` (`ok`,
/// `error`): `give-back` (the units of a request another policy refused or
/// failed closed on), and after the response `count` (a deferred
/// [`Count`](crate::Count)), `refund` (a response that does not count) and
/// `settle` ([`Policy::settle_with`](crate::Policy::settle_with)).
pub const AFTER_RESPONSE: &str = "ratelab_http_after_response_total";
/// Keys a policy's limiter tracks, by `policy`, where the policy says
/// ([`Policy::keys_tracked`](crate::Policy::keys_tracked)).
pub const KEYS_TRACKED: &str = "ratelab_http_keys_tracked";
/// 1 while a policy's limiter has its circuit breaker open (its backend is
/// failing and not being called), else 0, by `policy`, where the policy says
/// ([`Policy::breaker_open`](crate::Policy::breaker_open)).
pub const BREAKER_OPEN: &str = "ratelab_http_breaker_open";

// What the macros would build on every call, built once: the keys (with
// their labels) and the metadata. A request then records without allocating,
// whether or not a recorder is installed.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

static ALLOWED: [Label; 1] = [Label::from_static_parts("outcome", "allowed")];
static REFUSED: [Label; 1] = [Label::from_static_parts("outcome", "refused")];
static UNAVAILABLE: [Label; 1] = [Label::from_static_parts("outcome", "unavailable")];
static SKIPPED: [Label; 1] = [Label::from_static_parts("outcome", "skipped")];
static REQUESTS_ALLOWED: Key = Key::from_static_parts(REQUESTS, &ALLOWED);
static REQUESTS_REFUSED: Key = Key::from_static_parts(REQUESTS, &REFUSED);
static REQUESTS_UNAVAILABLE: Key = Key::from_static_parts(REQUESTS, &UNAVAILABLE);
static REQUESTS_SKIPPED: Key = Key::from_static_parts(REQUESTS, &SKIPPED);

fn counter(key: &Key) -> metrics::Counter {
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA))
}

/// One policy's keys, built with the policy.
pub(crate) struct PolicyMetrics {
    limiter_seconds: Key,
    /// By the decision's outcome, in the order of [`decision_outcome`].
    decisions: [Key; 7],
    keys_tracked: Key,
    breaker_open: Key,
}

const DECISION_OUTCOMES: [&str; 7] = [
    "allowed",
    "refused",
    "never",
    "peeked",
    "failed_open",
    "failed_closed",
    "given_back",
];

impl PolicyMetrics {
    pub(crate) fn new(policy: &str) -> Self {
        let by_policy = |name: &'static str| {
            Key::from_parts(name, vec![Label::new("policy", policy.to_owned())])
        };
        PolicyMetrics {
            limiter_seconds: by_policy(LIMITER_SECONDS),
            decisions: DECISION_OUTCOMES.map(|outcome| {
                Key::from_parts(
                    DECISIONS,
                    vec![
                        Label::new("policy", policy.to_owned()),
                        Label::from_static_parts("outcome", outcome),
                    ],
                )
            }),
            keys_tracked: by_policy(KEYS_TRACKED),
            breaker_open: by_policy(BREAKER_OPEN),
        }
    }
}

impl std::fmt::Debug for PolicyMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicyMetrics")
    }
}

pub(crate) fn skipped() {
    counter(&REQUESTS_SKIPPED).increment(1);
}

pub(crate) fn limiter_call(policy: &Policy, elapsed: Duration) {
    let key = &policy.metrics.limiter_seconds;
    metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA)).record(elapsed);
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

/// The position of a policy's state in [`DECISION_OUTCOMES`].
fn decision_outcome(state: &State) -> usize {
    match state {
        State::Decided(d) if d.allowed => 0,
        State::Decided(_) => 1,
        State::Never { .. } => 2,
        State::Peeked(_) | State::Pending => 3,
        State::FailedOpen => 4,
        State::FailedClosed(_) => 5,
        State::GivenBack(_) => 6,
    }
}

/// Everything one verdict has to report.
pub(crate) fn verdict(verdict: &Verdict) {
    let requests = match verdict.outcome {
        Outcome::Pass { .. } => &REQUESTS_ALLOWED,
        Outcome::Refuse => &REQUESTS_REFUSED,
        Outcome::Unavailable => &REQUESTS_UNAVAILABLE,
    };
    counter(requests).increment(1);
    for report in verdict.reports.iter() {
        let policy = &report.check.policy;
        let keys = &policy.metrics;
        counter(&keys.decisions[decision_outcome(&report.state())]).increment(1);
        if let Some(count) = &policy.keys_tracked {
            #[allow(clippy::cast_precision_loss)] // a gauge: exact enough
            let tracked = count() as f64;
            metrics::with_recorder(|r| r.register_gauge(&keys.keys_tracked, &METADATA))
                .set(tracked);
        }
        if let Some(open) = &policy.breaker_open {
            let open = if open() { 1.0 } else { 0.0 };
            metrics::with_recorder(|r| r.register_gauge(&keys.breaker_open, &METADATA)).set(open);
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
