//! The fixed window on Redis (`lua/fixed_window.lua`): the window index and
//! its count packed as two doubles.

use std::sync::LazyLock;

use ratelab_redis::{RedisAlgorithm, RedisLimiter, Script};

use crate::FixedWindow;

static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/fixed_window.lua")));

/// A fixed window with its state on Redis, windows aligned on Redis `TIME`
/// (the Unix epoch).
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
