//! [`RedisLimiter`]: a [`RedisStore`] behind the resilience wrapper, the one
//! type a program using Redis needs, and [`RedisLimiterBuilder`], which
//! configures both.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use ratelab_core::toolkit::RemoteForm;
use ratelab_core::{
    AsyncRateLimiter, Bound, CheckFuture, Clock, Decision, Error, Limiter, Quota, Receipt,
    ReceiptFuture, ResetFuture, SystemClock,
};
use ratelab_resilience::{Alert, FailurePolicy, Resilience, Resilient, Stats};

use crate::backend::ScriptBackend;
use crate::connection::Connection;
use crate::registry::QuotaMismatch;
use crate::settings::TimeSource;
use crate::store::{RedisStore, RedisStoreBuilder};

#[cfg(doc)]
use crate::registry::DEFAULT_QUOTA_CHECK_EVERY;
#[cfg(doc)]
use crate::settings::{DEFAULT_CLIENT_TTL_SLACK, DEFAULT_PREFIX};
#[cfg(doc)]
use crate::store::RedisStats;
#[cfg(doc)]
use ratelab_resilience::{DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_THRESHOLD, DEFAULT_TIMEOUT};

/// A rate limiter whose state lives in Redis: one algorithm, one quota, any
/// number of keys, shared by every application instance that uses the same
/// Redis and prefix.
///
/// It is a [`RedisStore`] (keys, the script or the native module, replies
/// checked, Redis's measured clock) behind `ratelab-resilience`'s
/// [`Resilient`] wrapper: each call waits at most the timeout, and the
/// script gets the caller's give-up instant as its deadline, so that a call
/// a stall held past it is never charged; a circuit breaker stops paying
/// the timeout during an outage; the [`FailurePolicy`](crate::FailurePolicy)
/// answers when Redis is unavailable; refusals may be cached; every failure
/// raises an alert. Cloning shares the limiter.
pub struct RedisLimiter<A: RemoteForm> {
    resilient: Resilient<RedisStore<A>>,
}

impl<A: RemoteForm> Clone for RedisLimiter<A> {
    fn clone(&self) -> Self {
        RedisLimiter {
            resilient: self.resilient.clone(),
        }
    }
}

impl<A: RemoteForm> From<Resilient<RedisStore<A>>> for RedisLimiter<A> {
    fn from(resilient: Resilient<RedisStore<A>>) -> Self {
        RedisLimiter { resilient }
    }
}

impl<A: RemoteForm> RedisLimiter<A> {
    /// A builder for `algorithm` on `connection`.
    pub fn builder(connection: Connection, algorithm: A) -> RedisLimiterBuilder<A> {
        RedisLimiterBuilder::new(connection, algorithm)
    }

    /// A limiter with every default: Redis time, 100 ms timeout, errors
    /// returned.
    pub fn new(connection: Connection, algorithm: A) -> Self {
        Self::builder(connection, algorithm).build()
    }

    /// Decides a request of weight `cost` for `key`: all or nothing, at most
    /// one round trip ([`Resilient::check`]).
    pub async fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.resilient.check(key, cost).await
    }

    /// Decides as [`RedisLimiter::check`] does, with a [`Receipt`] for an
    /// admission of a positive cost: the stamp the script answered
    /// ([`Resilient::check_with_receipt`]).
    pub async fn check_with_receipt(
        &self,
        key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        self.resilient.check_with_receipt(key, cost).await
    }

    /// The decision a request of weight `cost` for `key` would get now,
    /// writing nothing (the sliding log does not even forget expired units):
    /// [`Resilient::peek`].
    pub async fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.resilient.peek(key, cost).await
    }

    /// Settles the admission `receipt` stands for to `actual` units, by its
    /// stamp and the key's own state, at the instant the script runs
    /// ([`Resilient::settle`]).
    pub async fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        self.resilient.settle(receipt, actual).await
    }

    /// Gives back what the admission `receipt` stands for still holds:
    /// [`RedisLimiter::settle`] to 0.
    pub async fn refund(&self, receipt: Receipt) -> Result<Decision, Error> {
        self.resilient.refund(receipt).await
    }

    /// Puts `key` back to full capacity, and no receipt issued for it before
    /// gives anything back afterwards ([`Resilient::reset`]; what the
    /// tombstone costs: [`RedisStore`]'s reset).
    pub async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.resilient.reset(key).await
    }

    /// What the wrapper has done so far: answers, timeouts, errors, the
    /// breaker, cached refusals. How the calls went to Redis (module or
    /// script, reloads): [`RedisStore::stats`] of [`RedisLimiter::store`].
    pub fn stats(&self) -> Stats {
        self.resilient.stats()
    }

    /// The algorithm and its parameters.
    pub fn algorithm(&self) -> &A {
        self.resilient.algorithm()
    }

    /// The connection.
    pub fn connection(&self) -> &Connection {
        self.store().connection()
    }

    /// The Redis key holding `key`'s state.
    pub fn redis_key(&self, key: &[u8]) -> Vec<u8> {
        self.store().redis_key(key)
    }

    /// The Redis backend.
    pub fn store(&self) -> &RedisStore<A> {
        self.resilient.store()
    }

    /// The wrapper around it.
    pub fn resilient(&self) -> &Resilient<RedisStore<A>> {
        &self.resilient
    }
}

impl<A: RemoteForm> Limiter for RedisLimiter<A> {
    fn quota(&self) -> Quota {
        self.resilient.quota()
    }

    fn algorithm_name(&self) -> &'static str {
        self.resilient.algorithm_name()
    }

    fn backend(&self) -> &'static str {
        self.resilient.backend()
    }

    fn bound(&self) -> Bound {
        self.resilient.bound()
    }

    fn refunds(&self) -> bool {
        self.resilient.refunds()
    }
}

/// The wrapper's, as is: one boxed future a call, as before the wrapper.
impl<A: RemoteForm> AsyncRateLimiter for RedisLimiter<A> {
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        self.resilient.check_async(key, cost)
    }

    fn peek_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        self.resilient.peek_async(key, cost)
    }

    fn check_with_receipt_async<'a>(&'a self, key: &'a [u8], cost: u32) -> ReceiptFuture<'a> {
        self.resilient.check_with_receipt_async(key, cost)
    }

    fn settle_async(&self, receipt: Receipt, actual: u32) -> CheckFuture<'_> {
        self.resilient.settle_async(receipt, actual)
    }

    fn reset_async<'a>(&'a self, key: &'a [u8]) -> ResetFuture<'a> {
        self.resilient.reset_async(key)
    }
}

impl<A: RemoteForm + fmt::Debug> fmt::Debug for RedisLimiter<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisLimiter")
            .field(&self.resilient)
            .finish()
    }
}

/// Builds a [`RedisLimiter`]: the [`RedisStore`]'s options (prefix, time
/// source, TTL slack, module or scripts) and the wrapper's ([`Resilience`]:
/// timeout, breaker, failure policy, refusal cache, alerts).
pub struct RedisLimiterBuilder<A: RemoteForm> {
    store: RedisStoreBuilder<A>,
    resilience: Resilience,
}

impl<A: RemoteForm + fmt::Debug> fmt::Debug for RedisLimiterBuilder<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiterBuilder")
            .field("store", &self.store)
            .field("resilience", &self.resilience)
            .finish()
    }
}

impl<A: RemoteForm> RedisLimiterBuilder<A> {
    pub(crate) fn new(connection: Connection, algorithm: A) -> Self {
        RedisLimiterBuilder {
            store: RedisStore::builder(connection, algorithm),
            resilience: Resilience::new(),
        }
    }

    /// The prefix of every key (default [`DEFAULT_PREFIX`]).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.store = self.store.prefix(prefix);
        self
    }

    /// The most a call waits for Redis, reconnecting included (default
    /// [`DEFAULT_TIMEOUT`]); then the failure policy applies. The script
    /// gets the instant the caller gives up as its deadline, on Redis's
    /// measured clock.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.resilience = self.resilience.timeout(timeout);
        self
    }

    /// Where "now" comes from (default [`TimeSource::Redis`]). A client
    /// clock is also the in-memory fallback's and the refusal cache's.
    pub fn time_source(mut self, time: TimeSource) -> Self {
        self.store = self.store.time_source(time);
        self
    }

    /// Extra time every written key is kept beyond the time its state needs
    /// (default: none with Redis time, [`DEFAULT_CLIENT_TTL_SLACK`] with a
    /// client clock); also how far back a clock may step
    /// ([`RedisStoreBuilder::ttl_slack`]).
    pub fn ttl_slack(mut self, slack: Duration) -> Self {
        self.store = self.store.ttl_slack(slack);
        self
    }

    /// What a check answers when Redis fails (default
    /// [`FailurePolicy::Error`]).
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.resilience = self.resilience.on_failure(policy);
        self
    }

    /// Applies the failure policy to data errors too
    /// ([`Resilience::policy_on_data_errors`]). Off by default.
    pub fn policy_on_data_errors(mut self, apply: bool) -> Self {
        self.resilience = self.resilience.policy_on_data_errors(apply);
        self
    }

    /// The circuit breaker ([`Resilience::breaker`]). Default
    /// [`DEFAULT_BREAKER_THRESHOLD`] and [`DEFAULT_BREAKER_COOL_DOWN`]; a
    /// threshold of 0 never opens.
    pub fn breaker(mut self, threshold: u32, cool_down: Duration) -> Self {
        self.resilience = self.resilience.breaker(threshold, cool_down);
        self
    }

    /// Called on every failure, whatever the policy (besides a `tracing`
    /// warning, logged at most once a second).
    pub fn on_alert(mut self, callback: impl Fn(&Alert<'_>) + Send + Sync + 'static) -> Self {
        self.resilience = self.resilience.on_alert(callback);
        self
    }

    /// Remembers refusals locally ([`Resilience::cache_refusals`]). Off by
    /// default.
    pub fn cache_refusals(mut self, max_keys: usize) -> Self {
        self.resilience = self.resilience.cache_refusals(max_keys);
        self
    }

    /// What runs the decisions on Redis: the native ratelab module where the
    /// server has it, else the Lua scripts (default [`ScriptBackend::Auto`]),
    /// or always one of them. Both decide alike on the same keys.
    pub fn backend(mut self, backend: ScriptBackend) -> Self {
        self.store = self.store.backend(backend);
        self
    }

    /// How often a check records this limiter's quota in the key's quota
    /// registry, so that another limiter using the key with another quota
    /// is caught (default [`DEFAULT_QUOTA_CHECK_EVERY`]; `None`: never):
    /// [`RedisStoreBuilder::quota_check_every`].
    pub fn quota_check_every(mut self, every: Option<NonZeroU32>) -> Self {
        self.store = self.store.quota_check_every(every);
        self
    }

    /// Called when a check finds another quota recorded for its key
    /// ([`RedisStats::quota_mismatches`] counts them).
    pub fn on_quota_mismatch(
        mut self,
        callback: impl Fn(&QuotaMismatch) + Send + Sync + 'static,
    ) -> Self {
        self.store = self.store.on_quota_mismatch(callback);
        self
    }

    /// Strict mode: an admission counts only once `replicas` replicas
    /// acknowledge it (`WAIT` after it, on the same connection), within
    /// `timeout` or what is left of the call's own timeout, whichever is
    /// shorter. Off by default; `0` turns it off.
    ///
    /// When fewer replicas acknowledge in time, the check fails as an
    /// outage ([`Error::Backend`]): the failure policy
    /// ([`on_failure`](Self::on_failure)) decides what it answers, an alert
    /// is raised, the wrapper's [`Stats::errors`] and the store's
    /// [`RedisStats::unconfirmed`](crate::RedisStats::unconfirmed) count it,
    /// and its units stay charged on the master (which errs toward
    /// refusing). A refusal is answered as is; settlements that give back,
    /// resets and peeks are not waited for. Details and costs:
    /// [`RedisStoreBuilder::replicas`]; what a failover costs without it:
    /// [Replicas and failover](crate#replicas-and-failover).
    pub fn replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.store = self.store.replicas(replicas, timeout);
        self
    }

    /// Sends peeks to `connection` instead, a replica say
    /// ([`RedisStoreBuilder::peek_from`]): it answers them (through the
    /// module's read-only twins or the scripts) as of its lag, and spares
    /// the master the reads. Everything else goes to the limiter's
    /// connection.
    pub fn peek_from(mut self, connection: Connection) -> Self {
        self.store = self.store.peek_from(connection);
        self
    }

    /// The limiter.
    pub fn build(self) -> RedisLimiter<A> {
        // The fallback and the refusal cache read the clock Redis is told.
        let clock: Arc<dyn Clock> = match self.store.time() {
            TimeSource::Redis => Arc::new(SystemClock),
            TimeSource::Client(clock) => clock.clone(),
        };
        self.resilience.clock(clock).wrap(self.store.build()).into()
    }
}
