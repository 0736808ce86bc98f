//! The token bucket on Redis (`lua/token_bucket.lua`): the bucket packed as
//! two doubles, exact for integers below 2^53.

use std::sync::LazyLock;

use ratelab_redis::{RedisAlgorithm, RedisLimiter, Script};

use crate::TokenBucket;

static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/token_bucket.lua")));

/// A token bucket with its state on Redis:
/// `RedisLimiter::builder(connection, TokenBucket::new(quota)).build()`.
///
/// ```
/// use ratelab_core::Quota;
/// use ratelab_token_bucket::{TokenBucket, RedisTokenBucket};
/// use ratelab_redis::{Connection, RedisLimiter};
/// # let server = ratelab_testkit::redis::RedisServer::start();
/// # let url = server.url();
/// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # runtime.block_on(async {
///
/// // Every instance that connects to this Redis shares the limit.
/// let connection = Connection::single(&url).await?;
/// let limiter: RedisTokenBucket = RedisLimiter::new(connection, TokenBucket::new(Quota::per_second(5)?.with_burst(10)?));
/// let mut admitted = 0;
/// for _ in 0..20 {
///     admitted += limiter.check(b"client-42", 1).await?.allowed as u32;
/// }
/// assert_eq!(admitted, 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type RedisTokenBucket = RedisLimiter<TokenBucket>;

impl RedisAlgorithm for TokenBucket {
    fn key_suffix(&self) -> &'static str {
        "tb"
    }

    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn script_params(&self) -> Vec<u64> {
        vec![self.interval, self.capacity]
    }
}
