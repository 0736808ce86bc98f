//! GCRA on Redis (`lua/gcra.lua`): the TAT as an integer string.

use std::sync::LazyLock;

use ratelab_redis::{RedisAlgorithm, RedisLimiter, Script};

use crate::Gcra;

static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/gcra.lua")));

/// GCRA with its state on Redis:
/// `RedisLimiter::builder(connection, Gcra::new(quota)).build()`.
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
