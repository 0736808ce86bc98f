//! What a [`Resilient`](crate::Resilient) limiter is configured with: what
//! a failure answers, and the defaults.

use std::time::Duration;

#[cfg(doc)]
use ratelab_core::Error;

/// The default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// The default number of consecutive outage failures that open the circuit
/// breaker.
pub const DEFAULT_BREAKER_THRESHOLD: u32 = 5;

/// The default time an open circuit breaker keeps the store uncalled before
/// it lets one probe through.
pub const DEFAULT_BREAKER_COOL_DOWN: Duration = Duration::from_millis(500);

/// How long past its caller's timeout a check's answer is still awaited, so
/// that an admission the store made but answered late is given back
/// ([`Resilient`](crate::Resilient)'s docs).
pub const LATE_REPLY_WAIT: Duration = Duration::from_secs(30);

/// What a check answers when the store is unavailable: it does not answer
/// within the timeout, the connection fails, a cluster slot is moving or
/// down, or the circuit breaker is open after such failures.
///
/// Data errors are not outages and get [`FailurePolicy::Error`] whatever the
/// policy (unless
/// [`policy_on_data_errors`](crate::Resilience::policy_on_data_errors) says
/// otherwise): a key of the wrong type, state no store could have written, a
/// reply out of bounds, a store out of memory. Failing open on those would
/// admit everything for as long as nobody repairs them; failing closed would
/// lock clients out. They are [`Error::Data`], with an alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Return the error ([`Error::Timeout`], [`Error::Backend`] or
    /// [`Error::CircuitOpen`]) and let the caller decide (the HTTP layer has
    /// its own per-policy choice). The default.
    #[default]
    Error,
    /// Fail open: admit, as a fresh key would be (`remaining` = capacity −
    /// cost, `reset_after` the longest this algorithm takes to be full again
    /// when cost > 0), and raise an alert.
    Allow,
    /// Fail closed: refuse, with `retry_after` the breaker's remaining
    /// cool-down when it is open, else the timeout, and raise an alert.
    Deny,
    /// Decide with an in-memory limiter of the same algorithm and quota,
    /// local to this process, and raise an alert. Behind N instances this
    /// admits up to N times the quota while the store is away.
    Fallback,
}
