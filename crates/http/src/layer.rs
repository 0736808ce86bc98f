//! [`RateLimitLayer`] and its builder: the configuration, checked once and
//! shared by every clone of the layer and every service it wraps.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::Response;
use http::request::Parts;
use http_body_util::Full;
use tower::Layer;

use crate::config::{self, ConfigError};
use crate::failure::{FailureCallback, LimiterFailure};
use crate::headers::{HeaderStyle, LegacyReset};
use crate::identity::Identify;
use crate::info::RateLimitInfo;
use crate::login::{GuardCore, LoginGuard};
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

pub(crate) type Responder = Arc<dyn Fn(&RateLimitInfo) -> Response<Full<Bytes>> + Send + Sync>;
pub(crate) type SkipFn = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;
pub(crate) type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Builds a [`RateLimitLayer`].
#[must_use]
pub struct RateLimitLayerBuilder {
    identify: Identify,
    policies: Vec<Policy>,
    guards: Vec<Arc<GuardCore>>,
    header_style: HeaderStyle,
    legacy_reset: LegacyReset,
    wall_clock: WallClock,
    request_extensions: bool,
    on_failure: Option<FailureCallback>,
    on_refusal: Option<Responder>,
    on_unavailable: Option<Responder>,
    skip: Option<SkipFn>,
}

impl Default for RateLimitLayerBuilder {
    fn default() -> Self {
        RateLimitLayerBuilder {
            identify: Identify::default(),
            policies: Vec::new(),
            guards: Vec::new(),
            header_style: HeaderStyle::default(),
            legacy_reset: LegacyReset::default(),
            wall_clock: Arc::new(SystemTime::now),
            request_extensions: true,
            on_failure: None,
            on_refusal: None,
            on_unavailable: None,
            skip: None,
        }
    }
}

/// What the layer and its services share.
pub(crate) struct Shared {
    pub(crate) identify: Identify,
    pub(crate) policies: Vec<Compiled>,
    /// The login guards, whose attempts the policies read.
    pub(crate) guards: Vec<Arc<GuardCore>>,
    pub(crate) header_style: HeaderStyle,
    pub(crate) legacy_reset: LegacyReset,
    pub(crate) wall_clock: WallClock,
    /// Passed requests carry the [`Client`](crate::Client) and its
    /// [`RateLimitInfo`] in their extensions.
    pub(crate) request_extensions: bool,
    pub(crate) stats: Arc<Stats>,
    pub(crate) on_failure: Option<FailureCallback>,
    pub(crate) on_refusal: Option<Responder>,
    pub(crate) on_unavailable: Option<Responder>,
    pub(crate) skip: Option<SkipFn>,
}

impl RateLimitLayer {
    /// A builder: identify by IP, no policy, the draft's headers only.
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

    /// Guards a login route with `guard` (see [`LoginGuard`]): its three
    /// policies are added after the ones added so far, and its successful
    /// logins get a device cookie.
    pub fn login_guard(mut self, guard: LoginGuard) -> Self {
        self.policies.extend(guard.policies);
        self.guards.push(guard.core);
        self
    }

    /// Also send `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
    /// `X-RateLimit-Reset` for the policy closest to refusing (see
    /// [the guide](crate::guide#legacy-headers)): `true` adds them to the
    /// draft's fields ([`HeaderStyle::DraftAndLegacy`]), `false` sends the
    /// draft's only. Off by default.
    pub fn legacy_headers(self, on: bool) -> Self {
        self.headers(if on {
            HeaderStyle::DraftAndLegacy
        } else {
            HeaderStyle::Draft
        })
    }

    /// Which rate limit fields responses carry ([`HeaderStyle::Draft`] by
    /// default; [`HeaderStyle::None`] for none).
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.header_style = style;
        self
    }

    /// Whether a request passed on carries the [`Client`](crate::Client)
    /// and its [`RateLimitInfo`] in its extensions, for handlers (on by
    /// default). Off, a request passes with its extensions as they came,
    /// and the layer saves their construction: two boxes, the policies'
    /// statuses, and the extension map's growth (a sixth of its cost per
    /// admitted request in the `http` bench). Custom refusal and
    /// unavailability responses get their [`RateLimitInfo`] either way, and
    /// requests on a [login guard](RateLimitLayerBuilder::login_guard)'s
    /// routes carry its [`LoginAttempt`](crate::LoginAttempt) either way
    /// (its policies read it there).
    pub fn request_extensions(mut self, on: bool) -> Self {
        self.request_extensions = on;
        self
    }

    /// What `X-RateLimit-Reset` holds: seconds from now (the default) or a
    /// Unix time.
    pub fn legacy_reset(mut self, reset: LegacyReset) -> Self {
        self.legacy_reset = reset;
        self
    }

    /// The wall clock `X-RateLimit-Reset` Unix times are computed from
    /// ([`SystemTime::now`] by default): a test's clock, or one shared with
    /// the limiters' time source.
    pub fn wall_clock<F>(mut self, now: F) -> Self
    where
        F: Fn() -> SystemTime + Send + Sync + 'static,
    {
        self.wall_clock = Arc::new(now);
        self
    }

    /// Answer refused requests with `respond(info)` instead of the default
    /// `429` problem ([`RateLimitInfo::problem_response`]): another status,
    /// body or headers. The layer adds `Retry-After` if the response has
    /// none and a wait helps, and its rate limit fields.
    pub fn refusal_response<F>(mut self, respond: F) -> Self
    where
        F: Fn(&RateLimitInfo) -> Response<Full<Bytes>> + Send + Sync + 'static,
    {
        self.on_refusal = Some(Arc::new(respond));
        self
    }

    /// Answer requests a fail-closed policy could not decide with
    /// `respond(info)` instead of the default `503` problem. The layer adds
    /// `Retry-After` (at least 1 s) if the response has none, and its rate
    /// limit fields.
    pub fn unavailable_response<F>(mut self, respond: F) -> Self
    where
        F: Fn(&RateLimitInfo) -> Response<Full<Bytes>> + Send + Sync + 'static,
    {
        self.on_unavailable = Some(Arc::new(respond));
        self
    }

    /// Requests for which `skip` is true pass straight to the service: no
    /// policy, no limiter call, no header (health checks, `OPTIONS`
    /// preflights, the metrics endpoint). It sees the request head only.
    pub fn skip<F>(mut self, skip: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.skip = Some(Arc::new(skip));
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
                guards: self.guards,
                header_style: self.header_style,
                legacy_reset: self.legacy_reset,
                wall_clock: self.wall_clock,
                request_extensions: self.request_extensions,
                stats: Arc::default(),
                on_failure: self.on_failure,
                on_refusal: self.on_refusal,
                on_unavailable: self.on_unavailable,
                skip: self.skip,
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
            .field("headers", &self.shared.header_style)
            .field("legacy_reset", &self.shared.legacy_reset)
            .field("request_extensions", &self.shared.request_extensions)
            .field("skip", &self.shared.skip.is_some())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("identify", &self.identify)
            .field("policies", &self.policies)
            .field("headers", &self.header_style)
            .field("legacy_reset", &self.legacy_reset)
            .field("request_extensions", &self.request_extensions)
            .field("skip", &self.skip.is_some())
            .finish_non_exhaustive()
    }
}
