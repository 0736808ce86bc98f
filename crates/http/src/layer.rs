//! [`RateLimitLayer`] and its builder: the configuration, checked once and
//! shared by every clone of the layer and every service it wraps.

use std::fmt;
use std::sync::Arc;

use tower::Layer;

use crate::config::{self, ConfigError};
use crate::failure::{FailureCallback, LimiterFailure};
use crate::identity::Identify;
use crate::matching::Compiled;
use crate::policy::Policy;
use crate::service::RateLimit;
use crate::stats::Stats;

/// A tower [`Layer`] that rate-limits requests by [`Policy`], for axum and
/// plain hyper alike. Build one with [`RateLimitLayer::builder`]; cloning is
/// cheap (the configuration and the limiters are shared).
///
/// See [the crate docs](crate) for an example and [the guide](crate::guide)
/// for exactly what it does.
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

/// Builds a [`RateLimitLayer`].
#[derive(Default)]
#[must_use]
pub struct RateLimitLayerBuilder {
    identify: Identify,
    policies: Vec<Policy>,
    legacy_headers: bool,
    on_failure: Option<FailureCallback>,
}

/// What the layer and its services share.
pub(crate) struct Shared {
    pub(crate) identify: Identify,
    pub(crate) policies: Vec<Compiled>,
    pub(crate) legacy_headers: bool,
    pub(crate) stats: Arc<Stats>,
    pub(crate) on_failure: Option<FailureCallback>,
}

impl RateLimitLayer {
    /// A builder: identify by IP, no policy, no legacy headers.
    pub fn builder() -> RateLimitLayerBuilder {
        RateLimitLayerBuilder::default()
    }

    /// The counters of what this layer (and its clones) decided.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.shared.stats
    }

    /// How the layer identifies clients.
    pub fn identify(&self) -> &Identify {
        &self.shared.identify
    }
}

impl RateLimitLayerBuilder {
    /// How to identify the client (by default: by peer IP, no trusted proxy).
    pub fn identify(mut self, identify: Identify) -> Self {
        self.identify = identify;
        self
    }

    /// Adds a policy. Policies are reported in the headers in the order they
    /// were added.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policies.push(policy);
        self
    }

    /// Also send `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` (seconds from now) for the policy closest to
    /// refusing (see [the guide](crate::guide#legacy-headers)). Off by default.
    pub fn legacy_headers(mut self, on: bool) -> Self {
        self.legacy_headers = on;
        self
    }

    /// Calls `callback` whenever a limiter fails (in addition to the `tracing`
    /// event and the [`Stats`] counters): page someone, flip a health check.
    /// It runs on the request's task: keep it quick.
    pub fn on_limiter_failure<F>(mut self, callback: F) -> Self
    where
        F: Fn(&LimiterFailure<'_>) + Send + Sync + 'static,
    {
        self.on_failure = Some(Arc::new(callback));
        self
    }

    /// The layer, or what is wrong with the configuration.
    pub fn build(self) -> Result<RateLimitLayer, ConfigError> {
        let mut policies: Vec<Compiled> = Vec::with_capacity(self.policies.len());
        for policy in self.policies {
            let name = config::policy_name(&policy.name)?;
            if policies.iter().any(|c| c.policy.name == policy.name) {
                return Err(ConfigError::DuplicateName(policy.name));
            }
            policies.push(Compiled::new(policy, name)?);
        }
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                identify: self.identify,
                policies,
                legacy_headers: self.legacy_headers,
                stats: Arc::default(),
                on_failure: self.on_failure,
            }),
        })
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::new(inner, self.shared.clone())
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("identify", &self.shared.identify)
            .field(
                "policies",
                &self
                    .shared
                    .policies
                    .iter()
                    .map(|c| &c.policy)
                    .collect::<Vec<_>>(),
            )
            .field("legacy_headers", &self.shared.legacy_headers)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("identify", &self.identify)
            .field("policies", &self.policies)
            .field("legacy_headers", &self.legacy_headers)
            .finish_non_exhaustive()
    }
}
