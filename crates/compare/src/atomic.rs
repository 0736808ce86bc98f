//! The atomic Redis variant of each algorithm (its Lua script, run with
//! EVALSHA through `ratelab::redis`), built the same way for every scenario
//! on the server [`crate::backend`] found.

use std::sync::Arc;
use std::time::Duration;

use ratelab::redis::{Connection, RedisStore, TimeSource};
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, KnownAlgorithm, ManualClock, Quota,
};

use crate::CompareError;
use crate::backend::RedisEnv;

/// Generous: the comparison measures decisions, not the failure policy, and
/// a loaded two-core machine can be slow to answer 32 tasks at once.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Which clock a Redis limiter decides on.
#[derive(Debug, Clone)]
pub enum Time {
    /// Redis `TIME`: the same clock for every app instance (production).
    Redis,
    /// `now` passed by the client from a clock moved by hand: deterministic
    /// runs, and the same instants as the in-memory limiters.
    Manual(ManualClock),
}

/// The atomic Redis variant of `kind` on `env`, on a connection of its own,
/// deciding on `time`, its keys under the run's prefix.
pub async fn limiter(
    env: &RedisEnv,
    kind: AlgorithmKind,
    quota: Quota,
    time: &Time,
) -> Result<Box<dyn AsyncRateLimiter>, CompareError> {
    struct Build<'a> {
        connection: Connection,
        time: TimeSource,
        prefix: &'a str,
    }
    impl AlgorithmVisitor for Build<'_> {
        type Output = Box<dyn AsyncRateLimiter>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            Box::new(
                RedisStore::builder(self.connection, algorithm)
                    .prefix(self.prefix)
                    .time_source(self.time)
                    .timeout(TIMEOUT)
                    .build(),
            )
        }
    }
    let connection = Connection::single(env.url()).await?;
    let time = match time {
        Time::Redis => TimeSource::Redis,
        Time::Manual(clock) => TimeSource::Client(Arc::new(clock.clone())),
    };
    Ok(kind.visit(
        quota,
        Build {
            connection,
            time,
            prefix: env.prefix(),
        },
    ))
}

/// Whether the atomic variants can be built on `env`, and if not, why.
pub async fn status(env: &RedisEnv) -> Result<(), String> {
    let quota = Quota::per_second(1).map_err(|e| e.to_string())?;
    limiter(
        env,
        AlgorithmKind::Gcra,
        quota,
        &Time::Manual(ManualClock::new()),
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}
