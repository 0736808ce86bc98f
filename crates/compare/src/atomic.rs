//! The seam to `ratelab-redis`: the atomic Redis variant of each algorithm
//! (its Lua script, run with EVALSHA), built the same way for every scenario.

use std::sync::Arc;
use std::time::Duration;

use ratelab_core::{AsyncRateLimiter, Quota};
use ratelab_redis::{Connection, RedisAlgorithm, RedisLimiter, TimeSource};

use crate::CompareError;
use crate::algorithms::with_algorithm;
use crate::backend::{RedisEnv, Time};

/// Generous: the comparison measures decisions, not the failure policy, and
/// a loaded two-core machine can be slow to answer 32 tasks at once.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The atomic Redis variant of the named algorithm, on a connection of its
/// own.
pub(crate) async fn atomic(
    env: &RedisEnv,
    name: &str,
    quota: Quota,
    time: &Time,
) -> Result<Box<dyn AsyncRateLimiter>, CompareError> {
    fn build<A: RedisAlgorithm>(
        connection: Connection,
        algorithm: A,
        time: TimeSource,
        prefix: &str,
    ) -> Box<dyn AsyncRateLimiter> {
        Box::new(
            RedisLimiter::builder(connection, algorithm)
                .prefix(prefix)
                .time_source(time)
                .timeout(TIMEOUT)
                .build(),
        )
    }
    let connection = Connection::single(env.url()).await?;
    let time = match time {
        Time::Redis => TimeSource::Redis,
        Time::Manual(clock) => TimeSource::Client(Arc::new(clock.clone())),
    };
    with_algorithm!(name, quota, |a| build(connection, a, time, env.prefix()))
        .ok_or_else(|| CompareError::Unavailable(format!("no algorithm named {name}")))
}
