//! The metrics the [`Limits`](crate::Limits) report through the [`metrics`]
//! facade, by name: nothing is recorded until the application installs a
//! recorder (for Prometheus, `metrics-exporter-prometheus`), and then every
//! [`Limits`](crate::Limits) (every clone of every tower layer) reports into
//! it. The names keep the `ratelab_http_` prefix whatever drives the core.

use std::sync::OnceLock;
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata};
use ratelab_core::Error;

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

/// A limiter call's start, for [`CallTimer::elapsed`]: one read of the
/// time-stamp counter ([`quanta`]'s clock, calibrated once per process,
/// read raw rather than through `quanta::Instant::now`, whose scaling and
/// per-thread override check cost as much again).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallTimer(u64);

impl CallTimer {
    fn clock() -> &'static quanta::Clock {
        static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
        CLOCK.get_or_init(quanta::Clock::new)
    }

    /// Starts timing a call.
    #[inline]
    pub(crate) fn start() -> Self {
        CallTimer(Self::clock().raw())
    }

    /// The time since [`CallTimer::start`].
    #[inline]
    pub(crate) fn elapsed(self) -> Duration {
        let clock = Self::clock();
        clock.delta(self.0, clock.raw())
    }
}

fn counter(key: &Key) -> metrics::Counter {
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA))
}

/// One policy's keys, built with the policy.
pub(crate) struct PolicyMetrics {
    limiter_seconds: Key,
    /// By the decision's outcome, in the order of [`Decided`].
    decisions: [Key; 7],
    keys_tracked: Key,
    breaker_open: Key,
}

/// What one policy decided for a request: a label of [`DECISIONS`], in the
/// order of [`PolicyMetrics::decisions`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decided {
    Allowed,
    Refused,
    Never,
    /// Only peeked, or never asked: another policy refused first.
    Peeked,
    FailedOpen,
    FailedClosed,
    GivenBack,
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

    /// One limiter call took `elapsed`.
    pub(crate) fn limiter_call(&self, elapsed: Duration) {
        let key = &self.limiter_seconds;
        metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA))
            .record(elapsed);
    }

    /// A request this policy alone decided, admitting it, after a limiter
    /// call of `elapsed`: [`PolicyMetrics::limiter_call`], [`request`]
    /// and [`PolicyMetrics::decision`] in one look-up of the recorder.
    pub(crate) fn admitted_alone(&self, elapsed: Duration) {
        let allowed = &self.decisions[Decided::Allowed as usize];
        metrics::with_recorder(|recorder| {
            recorder
                .register_histogram(&self.limiter_seconds, &METADATA)
                .record(elapsed);
            recorder
                .register_counter(&REQUESTS_ALLOWED, &METADATA)
                .increment(1);
            recorder.register_counter(allowed, &METADATA).increment(1);
        });
    }

    /// The policy decided `decided` for a request.
    pub(crate) fn decision(&self, decided: Decided) {
        counter(&self.decisions[decided as usize]).increment(1);
    }

    /// The policy's limiter tracks `keys` keys.
    pub(crate) fn keys_tracked(&self, keys: usize) {
        #[allow(clippy::cast_precision_loss)] // a gauge: exact enough
        let tracked = keys as f64;
        let key = &self.keys_tracked;
        metrics::with_recorder(|r| r.register_gauge(key, &METADATA)).set(tracked);
    }

    /// The policy's limiter has its breaker open (or closed).
    pub(crate) fn breaker_open(&self, open: bool) {
        let key = &self.breaker_open;
        let open = if open { 1.0 } else { 0.0 };
        metrics::with_recorder(|r| r.register_gauge(key, &METADATA)).set(open);
    }
}

impl std::fmt::Debug for PolicyMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicyMetrics")
    }
}

/// What happened to a request: a label of [`REQUESTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestOutcome {
    Allowed,
    Refused,
    Unavailable,
    Skipped,
}

/// One request, by what happened to it.
pub(crate) fn request(outcome: RequestOutcome) {
    counter(match outcome {
        RequestOutcome::Allowed => &REQUESTS_ALLOWED,
        RequestOutcome::Refused => &REQUESTS_REFUSED,
        RequestOutcome::Unavailable => &REQUESTS_UNAVAILABLE,
        RequestOutcome::Skipped => &REQUESTS_SKIPPED,
    })
    .increment(1);
}

/// A call made after the decision (`give-back`, `count`, `refund`,
/// `settle`), and whether it succeeded.
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

/// A limiter failure of `policy`, which failed `mode` (`open`, `closed`).
pub(crate) fn failure(policy: &str, mode: &'static str, error: &Error) {
    metrics::counter!(
        FAILURES,
        "policy" => policy.to_owned(),
        "mode" => mode,
        "kind" => kind(error)
    )
    .increment(1);
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
