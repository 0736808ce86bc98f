//! [`RedisLimiter`]: any [`RedisAlgorithm`] on Redis, with a timeout, a
//! failure policy, alerts and an optional local cache of refusals.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use ratelab_core::{
    AsyncRateLimiter, CheckFuture, Clock, Decision, Error, Keyed, Limiter, MAX_INSTANT_MICROS,
    Quota, SystemClock, duration_to_micros, ensure_fits,
};
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::connection::Connection;
use crate::key::redis_key;
use crate::script::RedisAlgorithm;

/// The default per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "ratelab";

/// The default TTL slack for a [`TimeSource::Client`]: one minute.
pub const DEFAULT_CLIENT_TTL_SLACK: Duration = Duration::from_secs(60);

/// Where "now" comes from.
#[derive(Clone, Default)]
pub enum TimeSource {
    /// Redis `TIME`, read inside the script: one clock for every application
    /// instance. The default.
    #[default]
    Redis,
    /// The caller's clock, passed to the script as an argument: for
    /// deterministic tests and simulations (a [`ManualClock`]), or to share a
    /// clock with in-memory limiters.
    ///
    /// Redis still expires keys on its own clock, so keys are kept a slack
    /// longer than the client's clock says they need (see
    /// [`RedisLimiterBuilder::ttl_slack`]).
    ///
    /// [`ManualClock`]: ratelab_core::ManualClock
    Client(Arc<dyn Clock>),
}

impl fmt::Debug for TimeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeSource::Redis => f.write_str("Redis"),
            TimeSource::Client(_) => f.write_str("Client"),
        }
    }
}

/// What a check answers when Redis fails or does not answer within the
/// timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Return the error ([`Error::Timeout`] or [`Error::Backend`]) and let the
    /// caller decide (the HTTP layer has its own per-policy choice). The
    /// default.
    #[default]
    Error,
    /// Fail open: admit, as a fresh key would be (`remaining` = capacity −
    /// cost), and raise an alert.
    Allow,
    /// Fail closed: refuse, with `retry_after` = the timeout, and raise an
    /// alert.
    Deny,
    /// Decide with an in-memory limiter of the same algorithm and quota,
    /// local to this process, and raise an alert. Behind N instances this
    /// admits up to N times the quota while Redis is away.
    Fallback,
}

/// One failure, as the alert callback sees it.
#[derive(Debug)]
#[non_exhaustive]
pub struct Alert<'a> {
    /// The algorithm of the limiter that failed.
    pub algorithm: &'static str,
    /// What went wrong.
    pub error: &'a Error,
    /// What the limiter did about it.
    pub policy: FailurePolicy,
}

/// Counts of what a limiter did, for a program to observe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Checks answered by Redis.
    pub answered: u64,
    /// Checks that failed because Redis did not answer within the timeout.
    pub timeouts: u64,
    /// Checks that failed because Redis returned an error or the connection
    /// failed.
    pub errors: u64,
    /// Scripts reloaded after `NOSCRIPT` (a flush, a restart, a failover).
    pub reloads: u64,
    /// Refusals answered from the local cache, without a round trip.
    pub cached_refusals: u64,
}

#[derive(Default)]
struct Counters {
    answered: AtomicU64,
    timeouts: AtomicU64,
    errors: AtomicU64,
    reloads: AtomicU64,
    cached_refusals: AtomicU64,
    /// The second (on the process clock) of the last warning logged.
    last_logged_second: AtomicU64,
}

type AlertCallback = Arc<dyn Fn(&Alert<'_>) + Send + Sync>;

/// Builds a [`RedisLimiter`].
pub struct RedisLimiterBuilder<A: RedisAlgorithm> {
    connection: Connection,
    algorithm: A,
    prefix: String,
    timeout: Duration,
    time: TimeSource,
    ttl_slack: Option<Duration>,
    failure: FailurePolicy,
    on_alert: Option<AlertCallback>,
    refusal_cache: Option<usize>,
}

impl<A: RedisAlgorithm + fmt::Debug> fmt::Debug for RedisLimiterBuilder<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiterBuilder")
            .field("algorithm", &self.algorithm)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("time", &self.time)
            .field("failure", &self.failure)
            .finish_non_exhaustive()
    }
}

impl<A: RedisAlgorithm> RedisLimiterBuilder<A> {
    /// The prefix of every key (default [`DEFAULT_PREFIX`]).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The most a check waits for Redis, reconnecting included (default
    /// [`DEFAULT_TIMEOUT`]); then the failure policy applies.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Where "now" comes from (default [`TimeSource::Redis`]).
    pub fn time_source(mut self, time: TimeSource) -> Self {
        self.time = time;
        self
    }

    /// Extra time every written key is kept beyond the time its state needs
    /// (default: none with Redis time, [`DEFAULT_CLIENT_TTL_SLACK`] with a
    /// client clock, which Redis's own clock may not follow).
    pub fn ttl_slack(mut self, slack: Duration) -> Self {
        self.ttl_slack = Some(slack);
        self
    }

    /// What a check answers when Redis fails (default
    /// [`FailurePolicy::Error`]).
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.failure = policy;
        self
    }

    /// Called on every failure, whatever the policy (besides a `tracing`
    /// warning, logged at most once a second).
    pub fn on_alert(mut self, callback: impl Fn(&Alert<'_>) + Send + Sync + 'static) -> Self {
        self.on_alert = Some(Arc::new(callback));
        self
    }

    /// Remembers refusals locally: a key refused with `retry_after = d` is
    /// refused again without a round trip until `d` has passed, for requests
    /// of the same cost or more. At most `max_keys` keys are remembered. Off
    /// by default.
    ///
    /// It only ever refuses, and only what Redis would refuse: nothing can
    /// make a refused request pass before its `retry_after` (other callers can
    /// only consume more). It sheds the load of a client hammering past its
    /// limit. The cached answer's `remaining` is the one Redis gave.
    pub fn cache_refusals(mut self, max_keys: usize) -> Self {
        self.refusal_cache = Some(max_keys);
        self
    }

    /// The limiter.
    pub fn build(self) -> RedisLimiter<A> {
        let slack = self.ttl_slack.unwrap_or(match self.time {
            TimeSource::Redis => Duration::ZERO,
            TimeSource::Client(_) => DEFAULT_CLIENT_TTL_SLACK,
        });
        let fallback_clock: Arc<dyn Clock> = match &self.time {
            TimeSource::Redis => Arc::new(SystemClock),
            TimeSource::Client(clock) => clock.clone(),
        };
        let fallback = (self.failure == FailurePolicy::Fallback)
            .then(|| Keyed::with_clock(self.algorithm.clone(), fallback_clock));
        let params = self.algorithm.script_params();
        RedisLimiter {
            inner: Arc::new(Inner {
                connection: self.connection,
                capacity: self.algorithm.capacity(),
                algorithm: self.algorithm,
                params,
                prefix: self.prefix,
                timeout: self.timeout,
                time: self.time,
                ttl_slack_ms: duration_to_micros(slack).div_ceil(1000),
                failure: self.failure,
                on_alert: self.on_alert,
                fallback,
                refusals: self.refusal_cache.map(RefusalCache::new),
                counters: Counters::default(),
            }),
        }
    }
}

/// A rate limiter whose state lives in Redis: one algorithm, one quota, any
/// number of keys, shared by every application instance that uses the same
/// Redis and prefix.
///
/// Each check is one `EVALSHA` round trip (the script mirrors the in-memory
/// decision exactly); after `NOSCRIPT` (`SCRIPT FLUSH`, a restart, a failover,
/// a cluster node that never saw the script) it is retried once as `EVAL`,
/// which also caches the script there; the caller never notices. Each check
/// waits at most the timeout, then the [`FailurePolicy`] applies. Cloning
/// shares the limiter.
pub struct RedisLimiter<A: RedisAlgorithm> {
    inner: Arc<Inner<A>>,
}

struct Inner<A: RedisAlgorithm> {
    connection: Connection,
    algorithm: A,
    capacity: u64,
    params: Vec<u64>,
    prefix: String,
    timeout: Duration,
    time: TimeSource,
    ttl_slack_ms: u64,
    failure: FailurePolicy,
    on_alert: Option<AlertCallback>,
    fallback: Option<Keyed<A, Arc<dyn Clock>>>,
    refusals: Option<RefusalCache>,
    counters: Counters,
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
        RedisLimiterBuilder {
            connection,
            algorithm,
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            time: TimeSource::Redis,
            ttl_slack: None,
            failure: FailurePolicy::Error,
            on_alert: None,
            refusal_cache: None,
        }
    }

    /// A limiter with every default: Redis time, 100 ms timeout, errors
    /// returned.
    pub fn new(connection: Connection, algorithm: A) -> Self {
        Self::builder(connection, algorithm).build()
    }

    /// Decides a request of weight `cost` for `key`: all or nothing, at most
    /// one round trip (none for a cost that can never fit, or a cached
    /// refusal).
    pub async fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        let inner = &*self.inner;
        ensure_fits(cost, inner.capacity)?;
        let now = match &inner.time {
            TimeSource::Redis => None,
            TimeSource::Client(clock) => Some(clock.now_micros().min(MAX_INSTANT_MICROS)),
        };
        // The refusal cache's clock: read only when there is a cache.
        let local_now = inner
            .refusals
            .as_ref()
            .map(|_| now.unwrap_or_else(|| SystemClock.now_micros()));
        if let (Some(cache), Some(local_now)) = (&inner.refusals, local_now)
            && let Some(refusal) = cache.refusal(key, cost, local_now)
        {
            inner
                .counters
                .cached_refusals
                .fetch_add(1, Ordering::Relaxed);
            return Ok(refusal);
        }
        let redis_key = redis_key(&inner.prefix, key, inner.algorithm.key_suffix());
        let result =
            match tokio::time::timeout(inner.timeout, inner.run(&redis_key, now, cost)).await {
                Ok(Ok(decision)) => Ok(decision),
                Ok(Err(error)) => {
                    inner.counters.errors.fetch_add(1, Ordering::Relaxed);
                    Err(Error::backend(error))
                }
                Err(_) => {
                    inner.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                    Err(Error::Timeout(inner.timeout))
                }
            };
        match result {
            Ok(decision) => {
                inner.counters.answered.fetch_add(1, Ordering::Relaxed);
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

    /// What this limiter has done so far.
    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        Stats {
            answered: c.answered.load(Ordering::Relaxed),
            timeouts: c.timeouts.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            reloads: c.reloads.load(Ordering::Relaxed),
            cached_refusals: c.cached_refusals.load(Ordering::Relaxed),
        }
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
        redis_key(&self.inner.prefix, key, self.inner.algorithm.key_suffix())
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// One `EVALSHA`; after `NOSCRIPT`, one `EVAL` of the source.
    async fn run(&self, key: &[u8], now: Option<u64>, cost: u32) -> Result<Decision, RedisError> {
        let script = self.algorithm.script();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.sha()).arg(1).arg(key);
        match now {
            Some(now) => cmd.arg(now),
            None => cmd.arg(""),
        };
        cmd.arg(cost).arg(self.ttl_slack_ms).arg(&self.params[..]);
        let reply: Vec<u64> = match self.connection.query(&cmd).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.counters.reloads.fetch_add(1, Ordering::Relaxed);
                // Same arguments, with the source in place of the SHA1.
                let mut eval = redis::cmd("EVAL");
                eval.arg(script.source());
                for arg in cmd.args_iter().skip(2) {
                    if let redis::Arg::Simple(bytes) = arg {
                        eval.arg(bytes);
                    }
                }
                self.connection.query(&eval).await?
            }
            other => other?,
        };
        decision_from_reply(&reply).ok_or_else(|| {
            RedisError::from((
                ErrorKind::Parse,
                "the script's reply is not six non-negative integers",
                format!("{reply:?}"),
            ))
        })
    }

    fn on_failure(&self, key: &[u8], cost: u32, error: Error) -> Result<Decision, Error> {
        self.alert(&error);
        match self.failure {
            FailurePolicy::Error => Err(error),
            FailurePolicy::Allow => Ok(Decision::allow(
                self.capacity,
                self.capacity - u64::from(cost),
                0,
            )),
            FailurePolicy::Deny => {
                let retry = duration_to_micros(self.timeout).max(1);
                Ok(Decision::deny(self.capacity, 0, retry, retry))
            }
            FailurePolicy::Fallback => match &self.fallback {
                Some(fallback) => fallback.check(key, cost),
                None => Err(error),
            },
        }
    }

    fn alert(&self, error: &Error) {
        if let Some(callback) = &self.on_alert {
            callback(&Alert {
                algorithm: self.algorithm.name(),
                error,
                policy: self.failure,
            });
        }
        // One warning a second at most: an outage must not flood the logs.
        let second = SystemClock.now_micros() / 1_000_000 + 1;
        let last = self.counters.last_logged_second.load(Ordering::Relaxed);
        if last != second
            && self
                .counters
                .last_logged_second
                .compare_exchange(last, second, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                algorithm = self.algorithm.name(),
                policy = ?self.failure,
                timeouts = self.counters.timeouts.load(Ordering::Relaxed),
                errors = self.counters.errors.load(Ordering::Relaxed),
                "{error}"
            );
        }
    }
}

/// `{allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}`.
fn decision_from_reply(reply: &[u64]) -> Option<Decision> {
    let &[allowed, limit, remaining, retry, reset, delay] = reply else {
        return None;
    };
    match allowed {
        1 => Some(Decision::allow(limit, remaining, reset).with_delay(delay)),
        0 => Some(Decision::deny(limit, remaining, retry, reset)),
        _ => None,
    }
}

impl<A: RedisAlgorithm> Limiter for RedisLimiter<A> {
    fn quota(&self) -> Quota {
        *self.inner.algorithm.quota()
    }

    fn algorithm(&self) -> &'static str {
        self.inner.algorithm.name()
    }

    fn backend(&self) -> &'static str {
        "redis"
    }
}

impl<A: RedisAlgorithm> AsyncRateLimiter for RedisLimiter<A> {
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(self.check(key, cost))
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
            .finish_non_exhaustive()
    }
}

/// Refusals remembered locally, per key.
struct RefusalCache {
    entries: Mutex<HashMap<Vec<u8>, Refusal>>,
    max_keys: usize,
}

#[derive(Clone, Copy)]
struct Refusal {
    /// The cost refused: requests of this cost or more are refused again.
    cost: u32,
    /// Until when, on the limiter's time source (µs).
    until: u64,
    /// When the key is full again, same clock.
    full_at: u64,
    limit: u64,
    remaining: u64,
}

impl RefusalCache {
    fn new(max_keys: usize) -> Self {
        RefusalCache {
            entries: Mutex::new(HashMap::new()),
            max_keys,
        }
    }

    fn refusal(&self, key: &[u8], cost: u32, now: u64) -> Option<Decision> {
        if cost == 0 {
            return None;
        }
        let mut entries = self.entries.lock();
        let refusal = *entries.get(key)?;
        if now >= refusal.until {
            entries.remove(key);
            return None;
        }
        (cost >= refusal.cost).then(|| {
            Decision::deny(
                refusal.limit,
                refusal.remaining,
                refusal.until - now,
                refusal.full_at.saturating_sub(now),
            )
        })
    }

    /// `now` was read before the request was sent: Redis decided no earlier,
    /// so `now + retry_after` is never later than the instant it named.
    fn remember(&self, key: &[u8], cost: u32, now: u64, decision: &Decision) {
        let mut entries = self.entries.lock();
        if entries.len() >= self.max_keys {
            entries.retain(|_, r| r.until > now);
            if entries.len() >= self.max_keys {
                return;
            }
        }
        entries.insert(
            key.to_vec(),
            Refusal {
                cost,
                until: now + duration_to_micros(decision.retry_after),
                full_at: now + duration_to_micros(decision.reset_after),
                limit: decision.limit,
                remaining: decision.remaining,
            },
        );
    }
}
