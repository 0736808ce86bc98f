//! The Redis backend of ratelab: every algorithm's decision, run atomically
//! by a Lua script on Redis or Redis Cluster (or by ratelab's native module),
//! so that any number of application instances share one limit.
//!
//! A [`RedisStore`] runs any algorithm with a remote form
//! ([`RemoteForm`](ratelab_core::toolkit::RemoteForm): its script, parameters, key
//! code and stored encoding, which each algorithm crate describes itself,
//! so this crate knows no algorithm by name) over a [`Connection`] to one
//! node, a cluster, or the master Redis Sentinel names
//! ([`Connection::sentinel`], found again after a failover): one `EVALSHA`
//! per call, the time from Redis `TIME` (or the caller's clock:
//! [`TimeSource`]), keys named by [`redis_key`] (braces
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
//! let limiter = RedisStore::builder(connection, Gcra::new(quota))
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
//!
//! ## Replicas and failover
//!
//! Redis replicates asynchronously: a replica promoted after its master
//! died (Sentinel, a Cluster's failover, `REPLICAOF NO ONE`) holds the
//! keys as they were some `lag` ago, and the limiter admits again what the
//! master had admitted in that time. What a failover can cost, beyond each
//! algorithm's own bound, for one key:
//!
//! - every algorithm: at most what the master admitted after the last
//!   write the replica received, plus the checks in flight at the kill
//!   (admitted, their replication not yet sent). With a healthy replica
//!   that is the in-flight part alone;
//! - the debts (GCRA, token bucket, leaky meter and queue), whose state is
//!   one instant or level: at most `rate × lag` (the refill of the lag),
//!   never more than the burst (at worst, the promoted replica finds the
//!   bucket full);
//! - the windows (fixed window, sliding counter, sliding log): what the
//!   master admitted during the lag, counted again. Nothing when the
//!   window was spent before the lag began and ends after it; up to a
//!   window's limit for each window that starts within the lag.
//!
//! `tests/failover.rs` measures it on real servers (a master, a replica
//! fed through a relay that can be cut, the master killed while clients
//! hammer one key, the replica promoted): at 100 units a second, GCRA
//! re-admitted 0 with a healthy replica and 30 (`rate × lag`) with a
//! replica 300 ms behind, and so did the token bucket and both leaky
//! buckets; the fixed window (50 a window) 0 when the lag fell inside a
//! spent window and 50 when a window started within it, the sliding log 50
//! when its first units left within the lag (the sliding counter lost 5,
//! within its own bound of twice the limit).
//! `tests/cluster_failover.rs` kills a master of a Cluster with a replica
//! each: the cluster promotes the replica (the key answered again within
//! a few failed checks) and every admission strict mode confirmed is there.
//! With Sentinel, [`Connection::sentinel`] follows the failover
//! (`tests/sentinel.rs`, three real sentinels).
//!
//! **Strict mode** closes it: [`RedisLimiterBuilder::replicas`]`(n,
//! timeout)` counts an admission only once `n` replicas acknowledge it
//! (`WAIT` after the write, on the same connection; on a cluster, on the
//! key's master). When they do not within the timeout, the check fails as
//! an outage and the failure policy answers (with
//! [`FailurePolicy::Error`]: the error), the units staying charged on the
//! master. The same scenarios then admit nothing beyond the bound. A
//! failover must promote a replica that acknowledged: ask for as many
//! replicas as could be promoted, or let Sentinel or the Cluster choose,
//! which prefer the replica with the most data (after `replica-priority`).
//! What it costs: a replica's acknowledgement per admission (on one
//! machine's loopback, sequential checks took about as long as without it
//! at the median, p99 up to 0.8 ms against 0.2 ms), and checks sharing the
//! connection wait behind a `WAIT` that is waiting.

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
mod sentinel;
mod settings;
mod store;

pub use backend::{MODULE_RECHECK, ScriptBackend};
pub use connection::Connection;
pub use key::{MAX_KEY_LEN, hash_tag, redis_key};
pub use limiter::{RedisLimiter, RedisLimiterBuilder};
pub use redis::RedisError;
pub use registry::{DEFAULT_QUOTA_CHECK_EVERY, QuotaMismatch};
pub use reply::InvalidReply;
pub use script::{MAX_TTL_SLACK_MS, Op, PROTOCOL_VERSION, Script, ScriptArgs};
pub use sentinel::SentinelMaster;
pub use settings::{DEFAULT_CLIENT_TTL_SLACK, DEFAULT_PREFIX, TimeSource};
pub use store::{RedisStats, RedisStore, RedisStoreBuilder};
// The resilience wrapper's, as a program using Redis configures and
// observes it.
pub use ratelab_resilience::{
    Alert, DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_THRESHOLD, DEFAULT_TIMEOUT, FailurePolicy,
    Resilience, Resilient, Stats, Store,
};
