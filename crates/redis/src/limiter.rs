//! [`RedisLimiter`]: a [`RedisStore`] behind the resilience wrapper, the one
//! type a program using Redis needs.

use std::fmt;

use ratelab_core::{
    AsyncRateLimiter, CheckFuture, Decision, Error, Limiter, Quota, Receipt, ReceiptFuture,
    RemoteForm, ResetFuture,
};
use ratelab_resilience::{Resilient, Stats};

use crate::builder::RedisLimiterBuilder;
use crate::connection::Connection;
use crate::store::RedisStore;

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

    fn refunds(&self) -> bool {
        self.resilient.refunds()
    }
}

impl<A: RemoteForm> AsyncRateLimiter for RedisLimiter<A> {
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(self.check(key, cost))
    }

    fn peek_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(self.peek(key, cost))
    }

    fn check_with_receipt_async<'a>(&'a self, key: &'a [u8], cost: u32) -> ReceiptFuture<'a> {
        Box::pin(self.check_with_receipt(key, cost))
    }

    fn settle_async(&self, receipt: Receipt, actual: u32) -> CheckFuture<'_> {
        Box::pin(self.settle(receipt, actual))
    }

    fn reset_async<'a>(&'a self, key: &'a [u8]) -> ResetFuture<'a> {
        Box::pin(self.reset(key))
    }
}

impl<A: RemoteForm + fmt::Debug> fmt::Debug for RedisLimiter<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisLimiter")
            .field(&self.resilient)
            .finish()
    }
}
