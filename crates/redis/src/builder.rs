//! [`RedisLimiterBuilder`]: how a [`RedisLimiter`] is configured: the Redis
//! backend's options and the resilience wrapper's, in one builder.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ratelab_core::{Clock, RemoteForm, SystemClock};
use ratelab_resilience::{Alert, FailurePolicy, Resilience};

use crate::backend::ScriptBackend;
use crate::connection::Connection;
use crate::limiter::RedisLimiter;
use crate::settings::TimeSource;
use crate::store::{RedisStore, RedisStoreBuilder};

#[cfg(doc)]
use crate::settings::{DEFAULT_CLIENT_TTL_SLACK, DEFAULT_PREFIX};
#[cfg(doc)]
use ratelab_resilience::{DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_THRESHOLD, DEFAULT_TIMEOUT};

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
