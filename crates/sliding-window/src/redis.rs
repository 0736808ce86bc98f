//! The sliding windows on Redis: `lua/sliding_log.lua` (a sorted set, one
//! member per admitted unit) and `lua/sliding_counter.lua` (the two counters
//! packed as doubles).

use std::sync::LazyLock;

use ratelab_core::Algorithm;
use ratelab_redis::{RedisAlgorithm, RedisLimiter, Script};

use crate::{SlidingCounter, SlidingLog};

static LOG: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/sliding_log.lua")));
static COUNTER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/sliding_counter.lua")));

/// A sliding log with its state on Redis.
///
/// ```
/// use ratelab_core::Quota;
/// use ratelab_sliding_window::{SlidingLog, RedisSlidingLog};
/// use ratelab_redis::{Connection, RedisLimiter};
/// # let server = ratelab_testkit::redis::RedisServer::start();
/// # let url = server.url();
/// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # runtime.block_on(async {
///
/// // Every instance that connects to this Redis shares the limit.
/// let connection = Connection::single(&url).await?;
/// let limiter: RedisSlidingLog = RedisLimiter::new(connection, SlidingLog::new(Quota::per_minute(10)?));
/// let mut admitted = 0;
/// for _ in 0..20 {
///     admitted += limiter.check(b"client-42", 1).await?.allowed as u32;
/// }
/// assert_eq!(admitted, 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type RedisSlidingLog = RedisLimiter<SlidingLog>;

/// A sliding counter with its state on Redis.
///
/// ```
/// use ratelab_core::Quota;
/// use ratelab_sliding_window::{SlidingCounter, RedisSlidingCounter};
/// use ratelab_redis::{Connection, RedisLimiter};
/// # let server = ratelab_testkit::redis::RedisServer::start();
/// # let url = server.url();
/// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # runtime.block_on(async {
///
/// // Every instance that connects to this Redis shares the limit.
/// let connection = Connection::single(&url).await?;
/// let limiter: RedisSlidingCounter = RedisLimiter::new(connection, SlidingCounter::new(Quota::per_minute(10)?));
/// let mut admitted = 0;
/// for _ in 0..20 {
///     admitted += limiter.check(b"client-42", 1).await?.allowed as u32;
/// }
/// assert_eq!(admitted, 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type RedisSlidingCounter = RedisLimiter<SlidingCounter>;

impl RedisAlgorithm for SlidingLog {
    fn key_suffix(&self) -> &'static str {
        "sl"
    }

    fn script(&self) -> &'static Script {
        &LOG
    }

    fn script_params(&self) -> Vec<u64> {
        vec![self.window_micros(), self.capacity()]
    }
}

impl RedisAlgorithm for SlidingCounter {
    fn key_suffix(&self) -> &'static str {
        "sc"
    }

    fn script(&self) -> &'static Script {
        &COUNTER
    }

    fn script_params(&self) -> Vec<u64> {
        vec![
            self.window_micros(),
            self.capacity(),
            self.step_micros(),
            self.steps(),
        ]
    }
}
