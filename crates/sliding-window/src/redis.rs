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
pub type RedisSlidingLog = RedisLimiter<SlidingLog>;

/// A sliding counter with its state on Redis.
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
