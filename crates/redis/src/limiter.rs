//! [`RedisLimiter`]: any [`RedisAlgorithm`] on Redis: one script call per
//! check, within a timeout, with a failure policy and an optional local
//! cache of refusals.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratelab_core::{
    AsyncRateLimiter, CheckFuture, Clock, Decision, Error, Keyed, Limiter, MAX_INSTANT_MICROS,
    Quota, ResetFuture, SystemClock, clamp_instant, duration_to_micros, ensure_fits, owed_micros,
};
use redis::Value;

use crate::alert::Alerts;
use crate::backend::{Detection, Route, ScriptBackend, is_unknown_command, probe};
use crate::breaker::{Breaker, Permit};
use crate::builder::RedisLimiterBuilder;
use crate::connection::Connection;
use crate::failure::classify;
use crate::key::redis_key;
use crate::refusal_cache::RefusalCache;
use crate::reply::{Bounds, decision_from_reply};
use crate::script::{Op, RedisAlgorithm, ScriptArgs};
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
    pub(crate) params: Vec<u64>,
    pub(crate) prefix: String,
    pub(crate) timeout: Duration,
    pub(crate) time: TimeSource,
    pub(crate) key_suffix: String,
    pub(crate) ttl_slack_ms: u64,
    pub(crate) bounds: Bounds,
    pub(crate) clock_skew: Duration,
    pub(crate) failure: FailurePolicy,
    pub(crate) policy_on_data_errors: bool,
    pub(crate) breaker: Breaker,
    pub(crate) alerts: Alerts,
    pub(crate) fallback: Option<Keyed<A, Arc<dyn Clock>>>,
    pub(crate) refusals: Option<RefusalCache>,
    pub(crate) counters: Counters,
    pub(crate) backend: ScriptBackend,
    pub(crate) detection: Detection,
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
            return Ok(refusal);
        }
        let redis_key = self.redis_key(key);
        match inner
            .guarded(inner.run(&redis_key, now, cost, Op::Check))
            .await
        {
            Ok(decision) => {
                if let (Some(cache), Some(local_now)) = (&inner.refusals, local_now)
                    && !decision.allowed
                {
                    cache.remember(key, cost, local_now, &decision);
                }
                Ok(decision)
            }
            Err(error) => inner.on_failure(key, cost, error),
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
            .guarded(inner.run(&redis_key, inner.now(), cost, Op::Peek))
            .await
        {
            Ok(decision) => Ok(decision),
            Err(error) => inner.peek_on_failure(key, cost, error),
        }
    }

    /// Gives back up to `cost` units `key` consumed, for an admission that
    /// still weighs on it for `owed` ([`RateLimiter::refund`]: only what it
    /// still holds comes back), never taking it above its capacity (what
    /// each algorithm gives back:
    /// [`Algorithm::refund`](ratelab_core::Algorithm::refund)); answers what
    /// a peek of cost 0 would after it. One round trip; this instance's
    /// cached refusal for `key` is forgotten.
    ///
    /// On Redis `TIME` the refund is decided when the script runs, which may
    /// be as late as the call's deadline allows: `owed` is taken down by the
    /// timeout and twice the clock skew first. On the client's clock it is
    /// decided at the instant sent with it.
    ///
    /// No failure policy applies: when Redis is unavailable the error is
    /// returned (there is nothing to give back on a store that is not there,
    /// and a fallback never saw the units).
    ///
    /// [`RateLimiter::refund`]: ratelab_core::RateLimiter::refund
    pub async fn refund(&self, key: &[u8], cost: u32, owed: Duration) -> Result<Decision, Error> {
        let inner = &*self.inner;
        ensure_fits(cost, inner.capacity)?;
        inner.ensure_supported()?;
        let in_flight = match inner.time {
            TimeSource::Redis => inner
                .timeout
                .saturating_add(inner.clock_skew.saturating_mul(2)),
            TimeSource::Client(_) => Duration::ZERO,
        };
        // Sent as an integer the scripts read exactly: any more is as good
        // as all of it (2^52 µs is over a century).
        let owed = owed_micros(owed.saturating_sub(in_flight)).min(MAX_INSTANT_MICROS);
        if let Some(cache) = &inner.refusals {
            cache.forget(key);
        }
        let redis_key = self.redis_key(key);
        inner
            .guarded(inner.run(&redis_key, inner.now(), cost, Op::Refund { owed }))
            .await
    }

    /// Puts `key` back to full capacity: `DEL` of its Redis key (the key of
    /// this quota: state kept under other parameters is another key, and
    /// expires by itself). One round trip; this instance's cached refusal for
    /// `key` is forgotten. As for [`RedisLimiter::refund`], no failure policy
    /// applies.
    pub async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        let inner = &*self.inner;
        if let Some(cache) = &inner.refusals {
            cache.forget(key);
        }
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.redis_key(key));
        inner
            .guarded(async {
                inner
                    .connection
                    .query::<Value>(&cmd)
                    .await
                    .map(drop)
                    .map_err(classify)
            })
            .await
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
    /// ([`RedisAlgorithm::unsupported`]): refused here, before the script
    /// would answer `invalid arguments`.
    fn ensure_supported(&self) -> Result<(), Error> {
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
    async fn guarded<T>(&self, call: impl Future<Output = Result<T, Error>>) -> Result<T, Error> {
        let probe = match self.breaker.permit() {
            Permit::Call => false,
            Permit::Probe => true,
            Permit::Refused(wait) => return Err(Error::CircuitOpen(wait)),
        };
        let result = match tokio::time::timeout(self.timeout, call).await {
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
        let answer = self.on_failure(key, 0, error)?;
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
    /// its reply validated.
    async fn run(
        &self,
        key: &[u8],
        now: Option<u64>,
        cost: u32,
        op: Op,
    ) -> Result<Decision, Error> {
        // Past this instant on Redis's clock the caller has given up: the
        // script must not charge it.
        let deadline = unix_micros()
            .saturating_add(duration_to_micros(self.timeout))
            .saturating_add(duration_to_micros(self.clock_skew));
        let args = ScriptArgs::call(
            now,
            cost,
            self.ttl_slack_ms,
            Some(deadline),
            op,
            &self.params,
        );
        let reply = self.call(key, &args).await?;
        decision_from_reply(self.algorithm.name(), &reply, self.bounds).map_err(Error::data)
    }

    /// Sends `args` for `key` to the module's command when the backend says
    /// so (under [`ScriptBackend::Auto`], when this server has it), else, or
    /// when the module turns out to be missing, to the script.
    async fn call(&self, key: &[u8], args: &ScriptArgs) -> Result<Value, Error> {
        let command = self.algorithm.module_command();
        if let Some(command) = command
            && self.module_first().await?
        {
            let mut cmd = redis::cmd(command);
            cmd.arg(key).arg(args.as_slice());
            Counters::count(&self.counters.module_calls);
            match self.connection.query::<Value>(&cmd).await {
                Err(e) if is_unknown_command(&e) => {
                    if self.backend != ScriptBackend::Auto {
                        return Err(Error::data(format!(
                            "the ratelab module is not loaded on this Redis ({command} answered \
                             \"{} {}\"): load it (redis-server --loadmodule \
                             libratelab_redis_module.so) or use ScriptBackend::Auto or \
                             ScriptBackend::Lua",
                            e.code().unwrap_or_default(),
                            e.detail().unwrap_or_default()
                        )));
                    }
                    // Gone (a restart or failover onto a node without it),
                    // or never there on this cluster node: the script.
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
        } else if command.is_none() && self.backend == ScriptBackend::Module {
            return Err(Error::Unsupported(
                "the native module (this algorithm has no module command)",
            ));
        }
        Counters::count(&self.counters.script_calls);
        self.algorithm
            .script()
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

/// The wall clock, in µs since the Unix epoch (0 before it).
fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, duration_to_micros)
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

    fn refund_async<'a>(&'a self, key: &'a [u8], cost: u32, owed: Duration) -> CheckFuture<'a> {
        Box::pin(self.refund(key, cost, owed))
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
