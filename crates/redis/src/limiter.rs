//! [`RedisLimiter`]: a [`RedisStore`] behind the resilience wrapper, the one
//! type a program using Redis needs, built by the store's builder
//! ([`RedisStore::builder`]), which configures both.

use ratelab_resilience::Resilient;

use crate::store::{RedisStore, RedisStoreBuilder};

/// A rate limiter whose state lives in Redis: one algorithm, one quota, any
/// number of keys, shared by every application instance that uses the same
/// Redis and prefix.
///
/// It is a [`RedisStore`] (keys, the script or the native module, replies
/// checked, Redis's measured clock) behind `ratelab-resilience`'s
/// [`Resilient`] wrapper, which is all of its API: each call waits at most
/// the timeout, and the script gets the caller's give-up instant as its
/// deadline, so that a call a stall held past it is never charged; a
/// circuit breaker stops paying the timeout during an outage; the
/// [`FailurePolicy`](crate::FailurePolicy) answers when Redis is
/// unavailable; refusals may be cached; every failure raises an alert.
/// Cloning shares the limiter. What is Redis's (its connection, its keys,
/// how calls went): [`Resilient::store`].
///
/// ```no_run
/// use ratelab_core::Quota;
/// use ratelab_gcra::Gcra;
/// use ratelab_redis::{Connection, RedisLimiter, RedisStore};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let connection = Connection::single("redis://127.0.0.1:6379/").await?;
/// let limiter: RedisLimiter<Gcra> =
///     RedisStore::builder(connection, Gcra::new(Quota::per_second(5)?)).build();
/// let decision = limiter.check(b"client-42", 1).await?;
/// println!("{}", limiter.store().redis_key(b"client-42").len());
/// # let _ = decision;
/// # Ok(())
/// # }
/// ```
pub type RedisLimiter<A> = Resilient<RedisStore<A>>;

/// Builds a [`RedisLimiter`]: the store's builder, which holds the
/// wrapper's options too.
pub type RedisLimiterBuilder<A> = RedisStoreBuilder<A>;
