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
pub type RedisLeakyMeter = RedisLimiter<LeakyMeter>;

/// A leaky bucket queue with its state on Redis: every instance hands out
/// slots from the same queue.
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
