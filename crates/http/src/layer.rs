//! [`RateLimitLayer`] and its builder: the core's [`Limits`], and the
//! responses the application chooses, checked once and shared by every
//! clone of the layer and every service it wraps.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use http::Response;
use http::request::Parts;
use http_body_util::Full;
use ratelab_http_core::{
    ConfigError, HeaderStyle, Identify, LegacyReset, LimiterFailure, Limits, LimitsBuilder,
    LoginGuard, Policy, RateLimitInfo, Stats,
};
use tower::Layer;

use crate::body::{ServiceBody, WrapBody};
use crate::service::RateLimit;
use crate::shared::Shared;

/// A tower [`Layer`] that rate-limits requests by [`Policy`], for axum and
/// plain hyper alike. Build one with [`RateLimitLayer::builder`]; cloning is
/// cheap (the configuration and the limiters are shared).
///
/// See [the crate docs](crate) for an example and [the guide](crate::guide)
/// for exactly what it does.
///
/// `M` is how responses carry their body: by default a [`LimitedBody`]
/// (the inner service's body or the layer's own, for any service); with
/// [`with_service_body`](RateLimitLayer::with_service_body), the inner
/// service's own body type, which axum takes without boxing it again.
///
/// [`LimitedBody`]: crate::LimitedBody
pub struct RateLimitLayer<M = WrapBody> {
    shared: Arc<Shared>,
    body: PhantomData<fn() -> M>,
}

impl<M> Clone for RateLimitLayer<M> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: self.shared.clone(),
            body: PhantomData,
        }
    }
}

/// Builds a [`RateLimitLayer`]: the [`Limits`]' settings (each method is
/// [`LimitsBuilder`]'s of the same name), and the layer's own responses.
#[must_use]
#[derive(Default)]
pub struct RateLimitLayerBuilder {
    limits: LimitsBuilder,
    on_refusal: Option<crate::shared::Responder>,
    on_unavailable: Option<crate::shared::Responder>,
}

impl RateLimitLayer {
    /// A builder: identify by IP, no policy, the draft's headers only.
    pub fn builder() -> RateLimitLayerBuilder {
        RateLimitLayerBuilder::default()
    }

    /// The same layer, its responses carrying the inner service's own body
    /// type (a `B: From<Bytes>`, such as axum's `Body`), refusals included
    /// ([`ServiceBody`]). With axum, this saves boxing every response's
    /// body a second time (the default [`LimitedBody`](crate::LimitedBody)
    /// is not axum's `Body`). A refusal's body is the same bytes either way.
    ///
    /// ```
    /// use axum::{Router, routing::get};
    /// use ratelab_core::{Keyed, Quota};
    /// use ratelab_gcra::Gcra;
    /// use ratelab_http::{Policy, RateLimitLayer};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::builder()
    ///     .policy(Policy::new("per-ip", Keyed::new(Gcra::new(Quota::per_second(10)?))))
    ///     .build()?
    ///     .with_service_body();
    /// let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(layer);
    /// # let _ = app;
    /// # Ok(()) }
    /// ```
    pub fn with_service_body(self) -> RateLimitLayer<ServiceBody> {
        RateLimitLayer {
            shared: self.shared,
            body: PhantomData,
        }
    }
}

impl<M> RateLimitLayer<M> {
    /// The counters of what this layer (and its clones) decided.
    pub fn stats(&self) -> &Arc<Stats> {
        self.shared.limits.stats()
    }

    /// How the layer identifies clients.
    pub fn identify(&self) -> &Identify {
        self.shared.limits.identify()
    }

    /// The limits the layer enforces.
    pub fn limits(&self) -> &Limits {
        &self.shared.limits
    }
}

impl RateLimitLayerBuilder {
    /// How to identify the client (by default: by peer IP, no trusted
    /// proxy); see [`LimitsBuilder::identify`].
    pub fn identify(self, identify: Identify) -> Self {
        self.with(|limits| limits.identify(identify))
    }

    /// Adds a policy. Policies are reported in the headers in the order they
    /// were added.
    pub fn policy(self, policy: Policy) -> Self {
        self.with(|limits| limits.policy(policy))
    }

    /// Guards a login route with `guard` (see [`LoginGuard`]): its three
    /// policies are added after the ones added so far, and its successful
    /// logins get a device cookie.
    pub fn login_guard(self, guard: LoginGuard) -> Self {
        self.with(|limits| limits.login_guard(guard))
    }

    /// Which rate limit fields responses carry: the draft's
    /// ([`HeaderStyle::Draft`], the default), the legacy `X-RateLimit-*`
    /// for the policy closest to refusing ([`HeaderStyle::Legacy`], see
    /// [the guide](crate::guide#legacy-headers)), both
    /// ([`HeaderStyle::DraftAndLegacy`]), or none ([`HeaderStyle::None`]).
    pub fn headers(self, style: HeaderStyle) -> Self {
        self.with(|limits| limits.headers(style))
    }

    /// Whether a request passed on carries the [`Client`](crate::Client)
    /// and its [`RateLimitInfo`] in its extensions, for handlers (on by
    /// default); see [`LimitsBuilder::request_extensions`] for what leaving
    /// them out saves.
    pub fn request_extensions(self, on: bool) -> Self {
        self.with(|limits| limits.request_extensions(on))
    }

    /// What `X-RateLimit-Reset` holds: seconds from now (the default) or a
    /// Unix time.
    pub fn legacy_reset(self, reset: LegacyReset) -> Self {
        self.with(|limits| limits.legacy_reset(reset))
    }

    /// The wall clock `X-RateLimit-Reset` Unix times are computed from
    /// ([`SystemTime::now`] by default).
    pub fn wall_clock<F>(self, now: F) -> Self
    where
        F: Fn() -> SystemTime + Send + Sync + 'static,
    {
        self.with(|limits| limits.wall_clock(now))
    }

    /// Requests for which `skip` is true pass straight to the service: no
    /// policy, no limiter call, no header (health checks, `OPTIONS`
    /// preflights, the metrics endpoint). It sees the request head only.
    pub fn skip<F>(self, skip: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.with(|limits| limits.skip(skip))
    }

    /// Calls `callback` whenever a limiter fails (in addition to the `tracing`
    /// event and the [`Stats`] counters): page someone, flip a health check.
    /// It runs on the request's task: keep it quick.
    pub fn on_limiter_failure<F>(self, callback: F) -> Self
    where
        F: Fn(&LimiterFailure<'_>) + Send + Sync + 'static,
    {
        self.with(|limits| limits.on_limiter_failure(callback))
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

    /// The layer, or what is wrong with the configuration.
    pub fn build(self) -> Result<RateLimitLayer, ConfigError> {
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                limits: self.limits.build()?,
                on_refusal: self.on_refusal,
                on_unavailable: self.on_unavailable,
            }),
            body: PhantomData,
        })
    }

    /// The same builder, its limits' settings changed by `change`.
    fn with(mut self, change: impl FnOnce(LimitsBuilder) -> LimitsBuilder) -> Self {
        self.limits = change(self.limits);
        self
    }
}

impl<S, M> Layer<S> for RateLimitLayer<M> {
    type Service = RateLimit<S, M>;

    fn layer(&self, inner: S) -> RateLimit<S, M> {
        RateLimit::new(inner, self.shared.clone())
    }
}

impl<M> fmt::Debug for RateLimitLayer<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limits", &self.shared.limits)
            .field("refusal_response", &self.shared.on_refusal.is_some())
            .field(
                "unavailable_response",
                &self.shared.on_unavailable.is_some(),
            )
            .finish()
    }
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("limits", &self.limits)
            .field("refusal_response", &self.on_refusal.is_some())
            .field("unavailable_response", &self.on_unavailable.is_some())
            .finish()
    }
}
