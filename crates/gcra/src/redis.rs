//! GCRA on Redis (`lua/gcra.lua`): the TAT as an integer string.

use std::sync::LazyLock;

use ratelab_redis::{RedisAlgorithm, RedisLimiter, Script};

use crate::Gcra;

static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/gcra.lua")));

/// GCRA with its state on Redis:
/// `RedisLimiter::builder(connection, Gcra::new(quota)).build()`.
///
/// ```
/// use ratelab_core::Quota;
/// use ratelab_gcra::{Gcra, RedisGcra};
/// use ratelab_redis::{Connection, RedisLimiter};
/// # let server = ratelab_testkit::redis::RedisServer::start();
/// # let url = server.url();
/// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # runtime.block_on(async {
///
/// // Every instance that connects to this Redis shares the limit.
/// let connection = Connection::single(&url).await?;
/// let limiter: RedisGcra = RedisLimiter::new(connection, Gcra::new(Quota::per_second(5)?.with_burst(10)?));
/// let mut admitted = 0;
/// for _ in 0..20 {
///     admitted += limiter.check(b"client-42", 1).await?.allowed as u32;
/// }
/// assert_eq!(admitted, 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type RedisGcra = RedisLimiter<Gcra>;

impl RedisAlgorithm for Gcra {
    fn key_suffix(&self) -> &'static str {
        "gcra"
    }

    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn script_params(&self) -> Vec<u64> {
        vec![self.interval, self.tolerance, u64::from(self.quota.burst())]
    }
}
