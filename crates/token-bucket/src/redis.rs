//! The token bucket on Redis (`lua/token_bucket.lua`): the bucket packed as
//! two doubles, exact for integers below 2^53.

use std::sync::LazyLock;

use ratelab_redis::{RedisAlgorithm, RedisLimiter, Script};

use crate::TokenBucket;

static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/token_bucket.lua")));

/// A token bucket with its state on Redis:
/// `RedisLimiter::builder(connection, TokenBucket::new(quota)).build()`.
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
