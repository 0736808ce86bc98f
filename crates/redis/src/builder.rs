//! [`RedisLimiterBuilder`]: how a [`RedisLimiter`] is configured.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ratelab_core::{Clock, Keyed, SystemClock, duration_to_micros};

use crate::alert::{Alert, AlertCallback, Alerts};
use crate::connection::Connection;
use crate::limiter::{Inner, RedisLimiter};
use crate::refusal_cache::RefusalCache;
use crate::script::RedisAlgorithm;
use crate::settings::{
    DEFAULT_CLIENT_TTL_SLACK, DEFAULT_PREFIX, DEFAULT_TIMEOUT, FailurePolicy, TimeSource,
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
    pub(crate) fn new(connection: Connection, algorithm: A) -> Self {
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
                alerts: Alerts::new(self.on_alert),
                fallback,
                refusals: self.refusal_cache.map(RefusalCache::new),
                counters: Counters::default(),
            }),
        }
    }
}
