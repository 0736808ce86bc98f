//! The Redis backend of ratelab: every algorithm's decision, run atomically
//! by a Lua script on Redis or Redis Cluster (or by ratelab's native module),
//! so that any number of application instances share one limit.
//!
//! A [`RedisStore`] runs any algorithm with a remote form
//! ([`RemoteForm`](ratelab_core::RemoteForm): its script, parameters, key
//! code and stored encoding, which each algorithm crate describes itself,
//! so this crate knows no algorithm by name) over a [`Connection`] to one
//! node or a cluster: one `EVALSHA` per call, the time from Redis `TIME` (or
//! the caller's clock: [`TimeSource`]), keys named by [`redis_key`] (braces
//! in a user key never move the cluster hash tag), every key expiring when
//! it may be forgotten, and each call's deadline the caller's give-up
//! instant on Redis's measured clock. A [`RedisLimiter`] is that store
//! behind `ratelab-resilience`'s wrapper ([`Resilient`]): a per-call
//! timeout, a circuit breaker, a [`FailurePolicy`] for when Redis fails
//! (with an in-memory fallback), a cache of refusals, and alerts a program
//! can observe. The wrapper is written once, for any store; this crate is
//! the Redis part only.
//!
//! Nothing read from Redis is trusted. Each script checks the state it reads
//! and answers `ratelab <algorithm>: corrupt state at <key>: <what>` for
//! anything it could not have written; each reply is checked against the
//! limiter's bounds. Such data errors (and `WRONGTYPE`, `OOM`) are
//! [`Error::Data`](ratelab_core::Error::Data), not outages: the failure
//! policy applies to outages only, unless asked otherwise. Every call
//! carries a deadline, so a check its caller gave up on is never charged when
//! a paused Redis comes back; a circuit breaker answers at once while Redis
//! keeps failing. Keys end with a fingerprint of the algorithm's parameters,
//! so a changed quota starts clean.
//!
//! Where a server has loaded the native ratelab module
//! (`crates/redis-module`: `redis-server --loadmodule
//! libratelab_redis_module.so`), the same calls go to its commands
//! (`RATELAB.GCRA`, ...) instead of the scripts, with the same arguments,
//! replies, errors and stored encodings and a fraction of the server time:
//! [`ScriptBackend::Auto`] (the default) finds out by itself, and the
//! builder's [`backend`](RedisLimiterBuilder::backend) forces either.
//!
//! Beside the check, one round trip each: [`RedisLimiter::peek`] (the
//! decision a check would get, nothing written),
//! [`RedisLimiter::check_with_receipt`] and [`RedisLimiter::settle`] (an
//! admission's [`Receipt`](ratelab_core::Receipt) holds the stamp the script
//! answered; its settlement gives back only what the key provably still
//! holds of it, or charges what it used beyond) and [`RedisLimiter::reset`]:
//! the script protocol's operations ([`Op`]), the same arithmetic as in
//! memory.
//!
//! ```
//! use ratelab_core::Quota;
//! use ratelab_gcra::Gcra;
//! use ratelab_redis::{Connection, FailurePolicy, RedisLimiter};
//! # let server = ratelab_testkit::redis::RedisServer::start();
//! # let url = server.url();
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let connection = Connection::single(&url).await?;
//! let quota = Quota::per_second(5)?.with_burst(10)?;
//! let limiter = RedisLimiter::builder(connection, Gcra::new(quota))
//!     .on_failure(FailurePolicy::Deny)
//!     .build();
//!
//! let mut receipts = Vec::new();
//! for _ in 0..20 {
//!     let (decision, receipt) = limiter.check_with_receipt(b"client-42", 1).await?;
//!     assert_eq!(decision.allowed, receipt.is_some());
//!     receipts.extend(receipt);
//! }
//! assert_eq!(receipts.len(), 10);
//!
//! // A login that should not count given back (the limiter decides what
//! // its admission still holds), a successful one forgiving the rest.
//! let last = receipts.pop().expect("ten admissions");
//! assert!(limiter.refund(last).await?.remaining >= 1);
//! assert!(limiter.peek(b"client-42", 1).await?.allowed);
//! limiter.reset(b"client-42").await?;
//! assert_eq!(limiter.peek(b"client-42", 0).await?.remaining, 10);
//! // Receipts from before the reset give nothing back any more.
//! assert!(limiter.check(b"client-42", 1).await?.allowed);
//! let before = receipts.pop().expect("nine left");
//! assert_eq!(limiter.refund(before).await?.remaining, 9);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod backend;
mod classify;
mod connection;
mod key;
mod limiter;
mod redis_clock;
mod registry;
mod reply;
mod script;
mod settings;
mod store;

pub use backend::{MODULE_RECHECK, ScriptBackend};
pub use connection::Connection;
pub use key::{MAX_KEY_LEN, hash_tag, redis_key};
pub use limiter::{RedisLimiter, RedisLimiterBuilder};
pub use redis::RedisError;
pub use registry::{DEFAULT_QUOTA_CHECK_EVERY, QuotaMismatch};
pub use reply::InvalidReply;
pub use script::{MAX_TTL_SLACK_MS, Op, PROTOCOL_VERSION, RedisAlgorithm, Script, ScriptArgs};
pub use settings::{DEFAULT_CLIENT_TTL_SLACK, DEFAULT_PREFIX, TimeSource};
pub use store::{RedisStats, RedisStore, RedisStoreBuilder};
// The resilience wrapper's, as a program using Redis configures and
// observes it.
pub use ratelab_resilience::{
    Alert, DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_THRESHOLD, DEFAULT_TIMEOUT, FailurePolicy,
    Resilience, Resilient, Stats, Store,
};
