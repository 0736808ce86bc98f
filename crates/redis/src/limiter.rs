//! [`RedisLimiter`]: any [`RedisAlgorithm`] on Redis: one script call per
//! check, within a timeout, with a failure policy and an optional local
//! cache of refusals.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelab_core::remote::Params;
use ratelab_core::{
    AsyncRateLimiter, CheckFuture, Clock, Decision, Error, Issuer, Keyed, Limiter, Quota, Receipt,
    ReceiptFuture, ResetFuture, Stamp, SystemClock, clamp_instant, ensure_fits,
};
use redis::Value;

use crate::alert::Alerts;
use crate::backend::{
    Detection, Route, ScriptBackend, is_other_version, is_unknown_command, probe,
};
use crate::breaker::{Breaker, Permit};
use crate::builder::RedisLimiterBuilder;
use crate::connection::Connection;
use crate::failure::classify;
use crate::key::redis_key;
use crate::redis_clock::RedisClock;
use crate::refusal_cache::RefusalCache;
use crate::reply::{Asked, Bounds, decision_from_reply};
use crate::script::{MAX_TTL_SLACK_MS, Op, RedisAlgorithm, Script, ScriptArgs};
use crate::settings::{FailurePolicy, TimeSource};
use crate::stats::{Counters, Stats};

/// A rate limiter whose state lives in Redis: one algorithm, one quota, any
/// number of keys, shared by every application instance that uses the same
/// Redis and prefix.
///
/// Each check is one round trip: the native ratelab module's command where
/// the server has it ([`ScriptBackend`]: detected, or forced by the builder),
/// else `EVALSHA` (the script mirrors the in-memory decision exactly); after `NOSCRIPT` (`SCRIPT FLUSH`, a restart, a failover,
/// a cluster node that never saw the script) it is retried once as `EVAL`,
/// which also caches the script there; the caller never notices. Each check
/// waits at most the timeout, then the [`FailurePolicy`] applies. Cloning
/// shares the limiter.
pub struct RedisLimiter<A: RedisAlgorithm> {
    pub(crate) inner: Arc<Inner<A>>,
}

pub(crate) struct Inner<A: RedisAlgorithm> {
    pub(crate) connection: Connection,
    pub(crate) algorithm: A,
    pub(crate) capacity: u64,
    pub(crate) params: Params,
    /// The algorithm's script, its SHA1 computed once.
    pub(crate) script: Script,
    /// The native module's command for the algorithm.
    pub(crate) module_command: String,
    pub(crate) prefix: String,
    pub(crate) timeout: Duration,
    pub(crate) time: TimeSource,
    pub(crate) key_suffix: String,
    pub(crate) ttl_slack_ms: u64,
    pub(crate) bounds: Bounds,
    /// Where Redis's clock stands against ours: each call's deadline.
    pub(crate) redis_clock: RedisClock,
    pub(crate) failure: FailurePolicy,
    pub(crate) policy_on_data_errors: bool,
    pub(crate) breaker: Breaker,
    pub(crate) alerts: Alerts,
    pub(crate) fallback: Option<Keyed<A, Arc<dyn Clock>>>,
    pub(crate) refusals: Option<RefusalCache>,
    pub(crate) counters: Counters,
    pub(crate) backend: ScriptBackend,
    pub(crate) detection: Detection,
    /// Issues this limiter's receipts, and takes them back.
    pub(crate) issuer: Issuer,
}

impl<A: RedisAlgorithm> Clone for RedisLimiter<A> {
    fn clone(&self) -> Self {
        RedisLimiter {
            inner: self.inner.clone(),
        }
    }
}

impl<A: RedisAlgorithm> RedisLimiter<A> {
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
    /// one round trip (none for a cost that can never fit, a cached refusal,
    /// or while the circuit breaker is open).
    ///
    /// Errors: [`Error::CostTooHigh`]; [`Error::Data`] when Redis holds or
    /// sends something no script could have written (whatever the failure
    /// policy, unless it is applied to data errors too); under
    /// [`FailurePolicy::Error`], [`Error::Timeout`], [`Error::Backend`] or
    /// [`Error::CircuitOpen`] when Redis is unavailable.
    pub async fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.decide(key, cost, false)
            .await
            .map(|(decision, _)| decision)
    }

    /// Decides as [`RedisLimiter::check`] does, and hands back, for an
    /// admission of a positive cost, a [`Receipt`] for it: give it to
    /// [`settle`](RedisLimiter::settle) or [`refund`](RedisLimiter::refund)
    /// of this limiter when what the request really counts for is known, or
    /// drop it to keep the charge. The receipt holds the stamp the script
    /// answered (what the key held right after the admission): a settlement
    /// gives back only what the key provably still holds of it (the rule:
    /// [`Receipt`]).
    ///
    /// A decision the failure policy made has no receipt under
    /// [`FailurePolicy::Allow`] and [`FailurePolicy::Deny`] (nothing was
    /// charged anywhere); under [`FailurePolicy::Fallback`] the in-memory
    /// fallback issues it, and [`RedisLimiter::settle`] takes it there.
    /// A cached refusal has none either. Errors as for
    /// [`RedisLimiter::check`].
    pub async fn check_with_receipt(
        &self,
        key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        self.decide(key, cost, true).await
    }

    /// A check, with a receipt for an admission when `receipt`.
    async fn decide(
        &self,
        key: &[u8],
        cost: u32,
        receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        let inner = &*self.inner;
        ensure_fits(cost, inner.capacity)?;
        inner.ensure_supported()?;
        let now = inner.now();
        // The refusal cache's clock: read only when there is a cache.
        let local_now = inner
            .refusals
            .as_ref()
            .map(|_| now.unwrap_or_else(|| SystemClock.now_micros()));
        if let (Some(cache), Some(local_now)) = (&inner.refusals, local_now)
            && let Some(refusal) = cache.refusal(key, cost, local_now)
        {
            Counters::count(&inner.counters.cached_refusals);
            return Ok((refusal, None));
        }
        let redis_key = self.redis_key(key);
        match inner
            .guarded(|give_up| inner.run(&redis_key, now, cost, Op::Check, give_up))
            .await
        {
            Ok((decision, stamp)) => {
                if let (Some(cache), Some(local_now)) = (&inner.refusals, local_now)
                    && !decision.allowed
                {
                    cache.remember(key, cost, local_now, &decision);
                }
                let receipt = (receipt && decision.allowed && cost > 0)
                    .then(|| inner.issuer.issue(key, cost, stamp));
                Ok((decision, receipt))
            }
            Err(error) => inner.on_failure(key, cost, error, receipt),
        }
    }

    /// The decision a request of weight `cost` for `key` would get now,
    /// writing nothing (the sliding log does not even forget expired units):
    /// a check at the same instant, with nothing else consumed in between,
    /// decides the same. One round trip; the refusal cache is neither read
    /// nor filled.
    ///
    /// When Redis is unavailable the failure policy answers as for a check,
    /// except that the in-memory fallback is peeked, not charged. Errors as
    /// for [`RedisLimiter::check`].
    pub async fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        let inner = &*self.inner;
        ensure_fits(cost, inner.capacity)?;
        inner.ensure_supported()?;
        let redis_key = self.redis_key(key);
        match inner
            .guarded(|give_up| inner.run(&redis_key, inner.now(), cost, Op::Peek, give_up))
            .await
        {
            Ok((decision, _)) => Ok(decision),
            Err(error) => inner.peek_on_failure(key, cost, error),
        }
    }

    /// Settles the admission `receipt` stands for: it finally counts for
    /// `actual` units instead of the cost it was charged. Less gives the
    /// difference back, only what the key provably still holds of it (units
    /// whose debt was repaid, or counted in a window that has ended, belong
    /// to other requests by then; a reset since gives nothing back); more
    /// charges the difference as debt that later requests wait out,
    /// whatever the room. Never takes the key above its capacity. The rule,
    /// and why it never lets more than the quota count: [`Receipt`].
    /// Answers what a peek of cost 0 would after it. One round trip; this
    /// instance's cached refusal for the key is forgotten.
    ///
    /// The script decides from the stamp the receipt holds and the key's own
    /// state, at the instant it runs (never before the latest instant the
    /// key was written at, when a client clock went back). A receipt the
    /// in-memory fallback issued (during an outage, under
    /// [`FailurePolicy::Fallback`]) is settled there, in memory.
    ///
    /// Errors: [`Error::ForeignReceipt`] for a receipt neither this limiter
    /// nor its fallback issued (nothing changes); [`Error::CostTooHigh`] for
    /// an `actual` above the capacity (the receipt is spent, the admission
    /// counts as charged). No failure policy applies: when Redis is
    /// unavailable the error is returned, and the admission counts as
    /// charged.
    pub async fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        let inner = &*self.inner;
        let redeemed = match inner.issuer.redeem(receipt) {
            Ok(redeemed) => redeemed,
            // The fallback's own, or another limiter's (the fallback says
            // so).
            Err(receipt) => {
                return match &inner.fallback {
                    Some(fallback) => fallback.settle(receipt, actual).map(Decision::degraded),
                    None => Err(Error::ForeignReceipt),
                };
            }
        };
        ensure_fits(actual, inner.capacity)?;
        inner.ensure_supported()?;
        if let Some(cache) = &inner.refusals {
            cache.forget(&redeemed.key);
        }
        let settlement = redeemed.settlement(actual);
        let op = Op::Settle {
            actual: settlement.actual,
            stamp: settlement.stamp,
        };
        let redis_key = self.redis_key(&redeemed.key);
        inner
            .guarded(|give_up| inner.run(&redis_key, inner.now(), settlement.charged, op, give_up))
            .await
            .map(|(decision, _)| decision)
    }

    /// Gives back what the admission `receipt` stands for still holds: a
    /// request admitted that should not count (only failures count, the
    /// work was cancelled). [`RedisLimiter::settle`] to 0.
    pub async fn refund(&self, receipt: Receipt) -> Result<Decision, Error> {
        self.settle(receipt, 0).await
    }

    /// Puts `key` back to full capacity, as if it had never been seen, and
    /// no receipt issued for it before gives anything back afterwards (the
    /// script's reset: [`Algorithm::reset`](ratelab_core::Algorithm::reset)).
    /// One round trip; this instance's cached refusal for `key` is
    /// forgotten.
    ///
    /// Cost: a key that holds something a receipt could still claim keeps a
    /// tombstone (the state of a key never seen, with its ledger or fence)
    /// until none could: at most the burst's time for the debts, until the
    /// window (the sliding counter: the window after it) ends for the
    /// windows, a window for the sliding log, plus the TTL slack; and in a
    /// window algorithm, admissions later in the same window cannot be
    /// given back. Redis cannot know whether receipts are outstanding, so a
    /// reset pays this even when none is. A key that holds nothing is left
    /// alone. As for [`RedisLimiter::settle`], no failure policy applies.
    pub async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        let inner = &*self.inner;
        inner.ensure_supported()?;
        if let Some(cache) = &inner.refusals {
            cache.forget(key);
        }
        let redis_key = self.redis_key(key);
        inner
            .guarded(|give_up| inner.run(&redis_key, inner.now(), 0, Op::Reset, give_up))
            .await
            .map(drop)
    }

    /// What this limiter has done so far.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The algorithm and its parameters.
    pub fn algorithm(&self) -> &A {
        &self.inner.algorithm
    }

    /// The connection.
    pub fn connection(&self) -> &Connection {
        &self.inner.connection
    }

    /// The Redis key holding `key`'s state.
    pub fn redis_key(&self, key: &[u8]) -> Vec<u8> {
        redis_key(&self.inner.prefix, key, &self.inner.key_suffix)
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    pub(crate) fn stats(&self) -> Stats {
        self.counters.snapshot(self.breaker.snapshot())
    }

    /// [`Error::Unsupported`] for parameters Redis cannot hold
    /// ([`RemoteForm::unsupported`](ratelab_core::RemoteForm::unsupported)) or a TTL slack the scripts refuse:
    /// refused here, before the script would answer `invalid arguments`.
    fn ensure_supported(&self) -> Result<(), Error> {
        if self.ttl_slack_ms > MAX_TTL_SLACK_MS {
            return Err(Error::Unsupported(
                "a TTL slack above 2^52 µs (MAX_TTL_SLACK_MS), which the scripts refuse",
            ));
        }
        match self.algorithm.unsupported() {
            Some(why) => Err(Error::Unsupported(why)),
            None => Ok(()),
        }
    }

    /// `now` from the client's clock, or `None` for Redis `TIME`.
    fn now(&self) -> Option<u64> {
        match &self.time {
            TimeSource::Redis => None,
            TimeSource::Client(clock) => Some(clamp_instant(clock.now_micros())),
        }
    }

    /// Runs one call to Redis within the timeout and under the circuit
    /// breaker, and counts it: the path every operation takes. The failure
    /// policy is the caller's to apply.
    ///
    /// `call` is given the instant the caller gives up (`None` for a timeout
    /// too long to represent): the deadline its script gets.
    async fn guarded<T, F>(&self, call: impl FnOnce(Option<Instant>) -> F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        let probe = match self.breaker.permit() {
            Permit::Call => false,
            Permit::Probe => true,
            Permit::Refused(wait) => return Err(Error::CircuitOpen(wait)),
        };
        let give_up = Instant::now().checked_add(self.timeout);
        let result = match tokio::time::timeout(self.timeout, call(give_up)).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout(self.timeout)),
        };
        match &result {
            Ok(_) => {
                self.breaker.success();
                Counters::count(&self.counters.answered);
            }
            Err(error) => {
                match error {
                    Error::Timeout(_) => Counters::count(&self.counters.timeouts),
                    Error::Data(_) => Counters::count(&self.counters.data_errors),
                    _ => Counters::count(&self.counters.errors),
                }
                if error.is_unavailable() {
                    // A reconnection may reach another server: measure its
                    // clock again.
                    self.redis_clock.forget();
                    self.breaker.failure(probe);
                } else {
                    // Redis answered: it is up, whatever it said.
                    self.breaker.success();
                }
            }
        }
        result
    }

    /// The failure policy's answer to a peek: a check's answer, but the
    /// in-memory fallback is peeked, not charged.
    fn peek_on_failure(&self, key: &[u8], cost: u32, error: Error) -> Result<Decision, Error> {
        // Cost 0 charges no fallback; this raises the alert and applies the
        // policy (or returns the error) exactly as for a check.
        let (answer, _) = self.on_failure(key, 0, error, false)?;
        Ok(match (self.failure, &self.fallback) {
            (FailurePolicy::Fallback, Some(fallback)) => fallback.peek(key, cost)?.degraded(),
            (FailurePolicy::Allow, _) if cost > 0 => Decision::admitted(self.capacity)
                .with_remaining(self.capacity - u64::from(cost))
                .with_reset_after_micros(self.algorithm.max_wait_micros().max(1))
                .degraded(),
            _ => answer,
        })
    }

    /// One call (the module's command or `EVALSHA`, as the backend says;
    /// after `NOSCRIPT`, the script is loaded and the same call sent again),
    /// its reply validated: the decision, and the stamp of an admission.
    async fn run(
        &self,
        key: &[u8],
        now: Option<u64>,
        cost: u32,
        op: Op,
        give_up: Option<Instant>,
    ) -> Result<(Decision, Stamp), Error> {
        // Past this instant on Redis's clock the caller has given up: the
        // script must not charge it. Measured, not guessed (`RedisClock`).
        let deadline = match give_up {
            Some(give_up) => Some(self.redis_clock.deadline(&self.connection, give_up).await?),
            None => None,
        };
        let args = ScriptArgs::call(now, cost, self.ttl_slack_ms, deadline, op, &self.params);
        let reply = self.call(key, &args).await?;
        let asked = Asked {
            stamps: op == Op::Check && cost > 0,
            now,
        };
        decision_from_reply(self.algorithm.name(), &reply, self.bounds, asked).map_err(Error::data)
    }

    /// Sends `args` for `key` to the module's command when the backend says
    /// so (under [`ScriptBackend::Auto`], when this server has it), else, or
    /// when the module turns out to be missing, to the script.
    async fn call(&self, key: &[u8], args: &ScriptArgs) -> Result<Value, Error> {
        let command = self.module_command.as_str();
        if self.module_first().await? {
            let mut cmd = redis::cmd(command);
            cmd.arg(key).arg(args.as_slice());
            Counters::count(&self.counters.module_calls);
            match self.connection.query::<Value>(&cmd).await {
                Err(e) if is_unknown_command(&e) || is_other_version(&e) => {
                    if self.backend != ScriptBackend::Auto {
                        let what = if is_other_version(&e) {
                            "speaks another protocol version"
                        } else {
                            "is not loaded"
                        };
                        return Err(Error::data(format!(
                            "the ratelab module {what} on this Redis ({command} answered \
                             \"{} {}\"): load this version's \
                             (redis-server --loadmodule libratelab_redis_module.so) or use \
                             ScriptBackend::Auto or ScriptBackend::Lua",
                            e.code().unwrap_or_default(),
                            e.detail().unwrap_or_default()
                        )));
                    }
                    // Gone (a restart or failover onto a node without it),
                    // never there on this cluster node, or of another
                    // version (a cluster's nodes are probed by the command
                    // itself): the script, which this client ships.
                    self.detection.missing();
                }
                Ok(reply) => {
                    if self.backend == ScriptBackend::Auto
                        && self.detection.route() != Route::Module
                    {
                        self.detection.found();
                    }
                    return Ok(reply);
                }
                Err(e) => return Err(classify(e)),
            }
        }
        Counters::count(&self.counters.script_calls);
        self.script
            .invoke(&self.connection, key, args, || {
                Counters::count(&self.counters.reloads);
            })
            .await
            .map_err(classify)
    }

    /// Whether the next call goes to the module first. Under
    /// [`ScriptBackend::Auto`], a single node is asked `RATELAB.PROTOCOL`
    /// once (again after [`MODULE_RECHECK`](crate::MODULE_RECHECK) when it
    /// lacked the module); a cluster, whose keyless probe would reach one
    /// random node, tries the module's command itself, routed by its key.
    async fn module_first(&self) -> Result<bool, Error> {
        match self.backend {
            ScriptBackend::Lua => Ok(false),
            ScriptBackend::Module => Ok(true),
            ScriptBackend::Auto => match self.detection.route() {
                Route::Module => Ok(true),
                Route::Lua => Ok(false),
                Route::Unknown => match &self.connection {
                    Connection::Single(_) => {
                        let found = probe(&self.connection).await.map_err(classify)?;
                        if found {
                            self.detection.found();
                        } else {
                            self.detection.missing();
                        }
                        Ok(found)
                    }
                    Connection::Cluster(_) => Ok(true),
                },
            },
        }
    }
}

impl<A: RedisAlgorithm> Limiter for RedisLimiter<A> {
    fn quota(&self) -> Quota {
        *self.inner.algorithm.quota()
    }

    fn algorithm_name(&self) -> &'static str {
        self.inner.algorithm.name()
    }

    fn backend(&self) -> &'static str {
        "redis"
    }

    fn refunds(&self) -> bool {
        A::REFUNDS
    }
}

impl<A: RedisAlgorithm> AsyncRateLimiter for RedisLimiter<A> {
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

impl<A: RedisAlgorithm + fmt::Debug> fmt::Debug for RedisLimiter<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("RedisLimiter")
            .field("algorithm", &inner.algorithm)
            .field("connection", &inner.connection)
            .field("prefix", &inner.prefix)
            .field("timeout", &inner.timeout)
            .field("time", &inner.time)
            .field("failure", &inner.failure)
            .field("backend", &inner.backend)
            .finish_non_exhaustive()
    }
}
