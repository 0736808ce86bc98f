//! What a [`RedisStore`](crate::RedisStore) is configured with: where time
//! comes from, and the defaults.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ratelab_core::Clock;
use ratelab_resilience::LATE_REPLY_WAIT;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "ratelab";

/// The default TTL slack for a [`TimeSource::Client`]: one minute.
pub const DEFAULT_CLIENT_TTL_SLACK: Duration = Duration::from_secs(60);

/// How long the connection itself awaits a reply: as long as a limiter
/// awaits a late one ([`LATE_REPLY_WAIT`]). Each call is bounded by its
/// limiter's own timeout; a shorter bound here (redis-rs's default is
/// 500 ms) would fail every call at it whatever the limiter's timeout says,
/// and drop the late replies whose admissions are given back.
pub(crate) const RESPONSE_TIMEOUT: Duration = LATE_REPLY_WAIT;

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
    /// [`RedisStoreBuilder::ttl_slack`](crate::RedisStoreBuilder::ttl_slack)).
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
