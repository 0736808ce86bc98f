//! The fixed window on Redis (`lua/fixed_window.lua`): the window index and
//! its count packed as two doubles.

use std::sync::LazyLock;

use ratelab_redis::{RedisAlgorithm, RedisLimiter, Script};

use crate::FixedWindow;

static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/fixed_window.lua")));

/// A fixed window with its state on Redis, windows aligned on Redis `TIME`
/// (the Unix epoch).
///
/// ```
/// use ratelab_core::Quota;
/// use ratelab_fixed_window::{FixedWindow, RedisFixedWindow};
/// use ratelab_redis::{Connection, RedisLimiter};
/// # let server = ratelab_testkit::redis::RedisServer::start();
/// # let url = server.url();
/// # let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # runtime.block_on(async {
///
/// // Every instance that connects to this Redis shares the limit.
/// let connection = Connection::single(&url).await?;
/// let limiter: RedisFixedWindow = RedisLimiter::new(connection, FixedWindow::new(Quota::per_hour(10)?));
/// let mut admitted = 0;
/// for _ in 0..20 {
///     admitted += limiter.check(b"client-42", 1).await?.allowed as u32;
/// }
/// assert_eq!(admitted, 10);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type RedisFixedWindow = RedisLimiter<FixedWindow>;

impl RedisAlgorithm for FixedWindow {
    fn key_suffix(&self) -> &'static str {
        "fw"
    }

    fn script(&self) -> &'static Script {
        &SCRIPT
    }

    fn script_params(&self) -> Vec<u64> {
        vec![self.window, self.limit]
    }
}
