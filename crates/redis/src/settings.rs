//! What a [`RedisLimiter`](crate::RedisLimiter) is configured with: where
//! time comes from, what a failure answers, and the defaults.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ratelab_core::Clock;

/// The default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "ratelab";

/// The default TTL slack for a [`TimeSource::Client`]: one minute.
pub const DEFAULT_CLIENT_TTL_SLACK: Duration = Duration::from_secs(60);

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
    /// [`RedisLimiterBuilder::ttl_slack`]).
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

/// What a check answers when Redis fails or does not answer within the
/// timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Return the error ([`Error::Timeout`] or [`Error::Backend`]) and let the
    /// caller decide (the HTTP layer has its own per-policy choice). The
    /// default.
    #[default]
    Error,
    /// Fail open: admit, as a fresh key would be (`remaining` = capacity −
    /// cost), and raise an alert.
    Allow,
    /// Fail closed: refuse, with `retry_after` = the timeout, and raise an
    /// alert.
    Deny,
    /// Decide with an in-memory limiter of the same algorithm and quota,
    /// local to this process, and raise an alert. Behind N instances this
    /// admits up to N times the quota while Redis is away.
    Fallback,
}
