//! The leaky buckets on Redis: `lua/leaky_meter.lua` (the level packed as two
//! doubles) and `lua/leaky_queue.lua` (the next free slot, an integer).

use std::sync::LazyLock;

use ratelab_core::Algorithm;
use ratelab_redis::{RedisAlgorithm, RedisLimiter, Script};

use crate::{LeakyMeter, LeakyQueue};

static METER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/leaky_meter.lua")));
static QUEUE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/leaky_queue.lua")));

/// A leaky bucket meter with its state on Redis.
///
/// ```
/// use ratelab_core::Quota;
/// use ratelab_leaky_bucket::{LeakyMeter, RedisLeakyMeter};
/// use ratelab_redis::{Connection, RedisLimiter};
/// # let server = ratelab_testkit::redis::RedisServer::start();
/// # let url = server.url();
/// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # runtime.block_on(async {
///
/// // Every instance that connects to this Redis shares the limit.
/// let connection = Connection::single(&url).await?;
/// let limiter: RedisLeakyMeter = RedisLimiter::new(connection, LeakyMeter::new(Quota::per_second(5)?.with_burst(10)?));
/// let mut admitted = 0;
/// for _ in 0..20 {
///     admitted += limiter.check(b"client-42", 1).await?.allowed as u32;
/// }
/// assert_eq!(admitted, 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type RedisLeakyMeter = RedisLimiter<LeakyMeter>;

/// A leaky bucket queue with its state on Redis: every instance hands out
/// slots from the same queue.
///
/// ```
/// use ratelab_core::Quota;
/// use ratelab_leaky_bucket::{LeakyQueue, RedisLeakyQueue};
/// use ratelab_redis::{Connection, RedisLimiter};
/// # let server = ratelab_testkit::redis::RedisServer::start();
/// # let url = server.url();
/// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # runtime.block_on(async {
///
/// // Every instance that connects to this Redis shares the limit.
/// let connection = Connection::single(&url).await?;
/// let limiter: RedisLeakyQueue = RedisLimiter::new(connection, LeakyQueue::new(Quota::per_second(5)?.with_burst(10)?));
/// let mut admitted = 0;
/// for _ in 0..20 {
///     admitted += limiter.check(b"client-42", 1).await?.allowed as u32;
/// }
/// assert_eq!(admitted, 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type RedisLeakyQueue = RedisLimiter<LeakyQueue>;

impl RedisAlgorithm for LeakyMeter {
    fn key_suffix(&self) -> &'static str {
        "lm"
    }

    fn script(&self) -> &'static Script {
        &METER
    }

    fn script_params(&self) -> Vec<u64> {
        let quota = self.quota();
        vec![
            quota.emission_interval_micros(),
            quota.burst_tolerance_micros(),
            self.capacity(),
        ]
    }
}

impl RedisAlgorithm for LeakyQueue {
    fn key_suffix(&self) -> &'static str {
        "lq"
    }

    fn script(&self) -> &'static Script {
        &QUEUE
    }

    fn script_params(&self) -> Vec<u64> {
        let quota = self.quota();
        vec![
            quota.emission_interval_micros(),
            quota.burst_tolerance_micros(),
            self.capacity(),
        ]
    }
}
