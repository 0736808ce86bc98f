//! [`RedisLimiterBuilder`]: how a [`RedisLimiter`] is configured.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ratelab_core::{Clock, Issuer, Keyed, SystemClock, duration_to_micros};

use crate::alert::{Alert, AlertCallback, Alerts};
use crate::backend::{Detection, ScriptBackend};
use crate::breaker::Breaker;
use crate::connection::Connection;
use crate::limiter::{Inner, RedisLimiter};
use crate::redis_clock::RedisClock;
use crate::refusal_cache::RefusalCache;
use crate::reply::Bounds;
use crate::script::{RedisAlgorithm, Script};
use crate::settings::{
    DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_THRESHOLD, DEFAULT_CLIENT_TTL_SLACK, DEFAULT_PREFIX,
    DEFAULT_TIMEOUT, FailurePolicy, TimeSource,
};
use crate::stats::Counters;

/// Builds a [`RedisLimiter`].
pub struct RedisLimiterBuilder<A: RedisAlgorithm> {
    connection: Connection,
    algorithm: A,
    prefix: String,
    timeout: Duration,
    time: TimeSource,
    ttl_slack: Option<Duration>,
    failure: FailurePolicy,
    policy_on_data_errors: bool,
    breaker_threshold: u32,
    breaker_cool_down: Duration,
    on_alert: Option<AlertCallback>,
    refusal_cache: Option<usize>,
    backend: ScriptBackend,
}

impl<A: RedisAlgorithm + fmt::Debug> fmt::Debug for RedisLimiterBuilder<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiterBuilder")
            .field("algorithm", &self.algorithm)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("time", &self.time)
            .field("failure", &self.failure)
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl<A: RedisAlgorithm> RedisLimiterBuilder<A> {
    pub(crate) fn new(connection: Connection, algorithm: A) -> Self {
        RedisLimiterBuilder {
            connection,
            algorithm,
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            time: TimeSource::Redis,
            ttl_slack: None,
            failure: FailurePolicy::Error,
            policy_on_data_errors: false,
            breaker_threshold: DEFAULT_BREAKER_THRESHOLD,
            breaker_cool_down: DEFAULT_BREAKER_COOL_DOWN,
            on_alert: None,
            refusal_cache: None,
            backend: ScriptBackend::Auto,
        }
    }

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
    ///
    /// It is also how far back a clock may step: the scripts take an instant
    /// the key was written at up to the slack plus one second ahead of now
    /// (Redis clocks differ a little after a failover), and report state
    /// further ahead as corrupt (no clock of this key's could have written
    /// it). A simulation whose client clock steps back anywhere sets it to
    /// [`MAX_INSTANT_MICROS`](ratelab_core::MAX_INSTANT_MICROS), the most the
    /// scripts take ([`MAX_TTL_SLACK_MS`](crate::MAX_TTL_SLACK_MS): no clock
    /// steps back further than its whole range). A larger slack is refused:
    /// every call of the limiter answers [`Error::Unsupported`] at once,
    /// before any round trip.
    ///
    /// [`Error::Unsupported`]: ratelab_core::Error::Unsupported
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

    /// Applies the failure policy to data errors too (a key of the wrong
    /// type, corrupt state, a reply out of bounds, Redis out of memory),
    /// instead of returning [`Error::Data`](ratelab_core::Error::Data). Off
    /// by default: an outage passes, a data error stays until someone repairs
    /// it, and failing open on it admits everything meanwhile.
    pub fn policy_on_data_errors(mut self, apply: bool) -> Self {
        self.policy_on_data_errors = apply;
        self
    }

    /// The circuit breaker: after `threshold` consecutive outage failures
    /// (timeouts, connection or cluster errors), Redis is not called for
    /// `cool_down` and the failure policy answers at once
    /// ([`Error::CircuitOpen`](ratelab_core::Error::CircuitOpen) under
    /// [`FailurePolicy::Error`]); then one check at a time probes Redis, and
    /// the first answer closes it. Default [`DEFAULT_BREAKER_THRESHOLD`] and
    /// [`DEFAULT_BREAKER_COOL_DOWN`]; a threshold of 0 never opens.
    pub fn breaker(mut self, threshold: u32, cool_down: Duration) -> Self {
        self.breaker_threshold = threshold;
        self.breaker_cool_down = cool_down;
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
    /// of the same cost. At most `max_keys` keys are remembered. Off by
    /// default.
    ///
    /// It only ever refuses, and only what Redis would refuse: nothing can
    /// make a refused request pass before its `retry_after` (other callers can
    /// only consume more). It sheds the load of a client hammering past its
    /// limit. The cached answer's `remaining` is the one Redis gave.
    pub fn cache_refusals(mut self, max_keys: usize) -> Self {
        self.refusal_cache = Some(max_keys);
        self
    }

    /// What runs the decisions on Redis: the native ratelab module where the
    /// server has it, else the Lua scripts (default [`ScriptBackend::Auto`]),
    /// or always one of them. Both decide alike on the same keys.
    pub fn backend(mut self, backend: ScriptBackend) -> Self {
        self.backend = backend;
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
        let params = self.algorithm.params();
        let module_command = self.algorithm.module_command();
        let key_suffix = self.algorithm.key_suffix();
        let ttl_slack_ms = duration_to_micros(slack).div_ceil(1000);
        // The scripts accept written instants up to 1 s plus the slack ahead
        // of now: replies may wait that much longer than from a fresh state.
        let bounds = Bounds {
            capacity: self.algorithm.capacity(),
            max_wait: self
                .algorithm
                .max_wait_micros()
                .saturating_add(1_000_000)
                .saturating_add(ttl_slack_ms.saturating_mul(1000)),
            debt: A::DEBT,
        };
        RedisLimiter {
            inner: Arc::new(Inner {
                connection: self.connection,
                capacity: self.algorithm.capacity(),
                algorithm: self.algorithm,
                params,
                script: Script::of::<A>(),
                module_command,
                key_suffix,
                prefix: self.prefix,
                timeout: self.timeout,
                time: self.time,
                ttl_slack_ms,
                bounds,
                redis_clock: RedisClock::default(),
                failure: self.failure,
                policy_on_data_errors: self.policy_on_data_errors,
                breaker: Breaker::new(self.breaker_threshold, self.breaker_cool_down, self.timeout),
                alerts: Alerts::new(self.on_alert),
                fallback,
                refusals: self.refusal_cache.map(RefusalCache::new),
                counters: Counters::default(),
                backend: self.backend,
                detection: Detection::new(),
                issuer: Issuer::new(),
            }),
        }
    }
}
