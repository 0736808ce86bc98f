//! What a [`RedisLimiter`](crate::RedisLimiter) is configured with: where
//! time comes from, what a failure answers, and the defaults.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ratelab_core::Clock;

#[cfg(doc)]
use ratelab_core::Error;

/// The default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "ratelab";

/// The default TTL slack for a [`TimeSource::Client`]: one minute.
pub const DEFAULT_CLIENT_TTL_SLACK: Duration = Duration::from_secs(60);

/// The default number of consecutive outage failures that open the circuit
/// breaker.
pub const DEFAULT_BREAKER_THRESHOLD: u32 = 5;

/// The default time an open circuit breaker keeps Redis uncalled before it
/// lets one probe through.
pub const DEFAULT_BREAKER_COOL_DOWN: Duration = Duration::from_millis(500);

/// Where "now" comes from.
#[derive(Clone, Default)]
pub enum TimeSource {
    /// Redis `TIME`, read inside the script: one clock for every application
    /// instance. The default.
    #[default]
    Redis,
    /// The caller's clock, passed to the script as an argument: for
    /// deterministic tests and simulations (a [`ManualClock`]), or to share a
    /// clock with in-memory limiters.
    ///
    /// Redis still expires keys on its own clock, so keys are kept a slack
    /// longer than the client's clock says they need (see
    /// [`RedisLimiterBuilder::ttl_slack`](crate::RedisLimiterBuilder::ttl_slack)).
    ///
    /// [`ManualClock`]: ratelab_core::ManualClock
    Client(Arc<dyn Clock>),
}

impl fmt::Debug for TimeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeSource::Redis => f.write_str("Redis"),
            TimeSource::Client(_) => f.write_str("Client"),
        }
    }
}

/// What a check answers when Redis is unavailable: it does not answer within
/// the timeout, the connection fails, a cluster slot is moving or down, or
/// the circuit breaker is open after such failures.
///
/// Data errors are not outages and get [`FailurePolicy::Error`] whatever the
/// policy (unless the builder says
/// [`policy_on_data_errors`](crate::RedisLimiterBuilder::policy_on_data_errors)):
/// a key of the wrong type, state no script could have written, a reply out
/// of bounds, Redis out of memory. Failing open on those would admit
/// everything for as long as nobody repairs them; failing closed would lock
/// clients out. They are [`Error::Data`](ratelab_core::Error::Data), with an
/// alert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Return the error ([`Error::Timeout`], [`Error::Backend`] or
    /// [`Error::CircuitOpen`]) and let the caller decide (the HTTP layer has its own per-policy choice). The
    /// default.
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
    /// admits up to N times the quota while Redis is away.
    Fallback,
}
