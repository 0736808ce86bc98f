//! [`Limits`] and their builder: the configuration, checked once, that
//! every request is decided by. (One request's steps, from
//! [`Limits::start`] on, are the `request` module's.)

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use http::request::Parts;

use crate::config::{self, ConfigError};
use crate::failure::{Alerts, LimiterFailure};
use crate::headers::{FieldSettings, HeaderStyle, LegacyReset};
use crate::identity::Identify;
use crate::login::{GuardCore, LoginGuard};
use crate::matching::Compiled;
use crate::policy::Policy;
use crate::stats::Stats;

pub(crate) type SkipFn = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

/// The rate limits of an HTTP API, whatever serves it: how clients are
/// identified, the [`Policy`]s and [login guards](LoginGuard), and what
/// responses say. Build them with [`Limits::builder`]; then drive each
/// request through [`Limits::start`], [`Pending::decide`](crate::Pending::decide),
/// [`Limits::conclude`] and, for a request that passes,
/// [`Admitted::settle`](crate::Admitted::settle) (see [the crate
/// docs](crate)). Share them between tasks behind an `Arc`: every method
/// takes `&self`.
pub struct Limits {
    pub(crate) identify: Identify,
    pub(crate) policies: Vec<Compiled>,
    /// The login guards, whose attempts the policies read.
    pub(crate) guards: Vec<Arc<GuardCore>>,
    pub(crate) fields: FieldSettings,
    /// Passed requests carry the [`Client`](crate::Client) and its
    /// [`RateLimitInfo`](crate::RateLimitInfo) in their extensions.
    pub(crate) request_extensions: bool,
    pub(crate) alerts: Alerts,
    pub(crate) skip: Option<SkipFn>,
    /// Every request is started from its headers and extensions alone (see
    /// [`Limits::start_in_place`]).
    pub(crate) in_place: bool,
    /// Started in place, under one policy that decides nothing after the
    /// response: a request its limiter admits at once passes without a
    /// [`Pending`](crate::Pending) ([`Limits::decide_in_place`]).
    pub(crate) one_policy: bool,
}

/// Builds [`Limits`].
#[must_use]
pub struct LimitsBuilder {
    identify: Identify,
    policies: Vec<Policy>,
    guards: Vec<Arc<GuardCore>>,
    fields: FieldSettings,
    request_extensions: bool,
    alerts: Alerts,
    skip: Option<SkipFn>,
}

impl Default for LimitsBuilder {
    fn default() -> Self {
        LimitsBuilder {
            identify: Identify::default(),
            policies: Vec::new(),
            guards: Vec::new(),
            fields: FieldSettings {
                style: HeaderStyle::default(),
                legacy_reset: LegacyReset::default(),
                wall_clock: Arc::new(SystemTime::now),
            },
            request_extensions: true,
            alerts: Alerts {
                stats: Arc::default(),
                on_failure: None,
            },
            skip: None,
        }
    }
}

impl Limits {
    /// A builder: identify by IP, no policy, the draft's fields only.
    pub fn builder() -> LimitsBuilder {
        LimitsBuilder::default()
    }

    /// The counters of what these limits decided.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.alerts.stats
    }

    /// How clients are identified.
    pub fn identify(&self) -> &Identify {
        &self.identify
    }

    /// Whether [`Limits::start_in_place`] starts requests: the limits read
    /// no more of a request than its headers and extensions.
    pub fn starts_in_place(&self) -> bool {
        self.in_place
    }

    /// The policies, in the order they were added (a login guard's three
    /// where it was added).
    pub fn policies(&self) -> impl ExactSizeIterator<Item = &Policy> {
        self.policies.iter().map(|c| &*c.policy)
    }
}

impl LimitsBuilder {
    /// How to identify the client (by default: by peer IP, no trusted proxy).
    pub fn identify(mut self, identify: Identify) -> Self {
        self.identify = identify;
        self
    }

    /// Adds a policy. Policies are reported in the fields in the order they
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

    /// Which rate limit fields responses carry: the draft's
    /// ([`HeaderStyle::Draft`], the default), the legacy `X-RateLimit-*` for
    /// the policy closest to refusing (on a refusal, the violated policy
    /// with the longest wait, otherwise the policy with the least remaining:
    /// [`HeaderStyle::Legacy`]), both ([`HeaderStyle::DraftAndLegacy`]), or
    /// none ([`HeaderStyle::None`]). One setting: a later call replaces an
    /// earlier one.
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.fields.style = style;
        self
    }

    /// Whether a request that passes carries the [`Client`](crate::Client)
    /// and its [`RateLimitInfo`](crate::RateLimitInfo) in its extensions,
    /// for handlers (on by default). Off, a request passes with its
    /// extensions as they came, and their construction is saved: two boxes,
    /// the policies' statuses, and the extension map's growth (a sixth of
    /// the tower layer's cost per admitted request in the `http` bench).
    /// Refusals get their [`RateLimitInfo`](crate::RateLimitInfo) either
    /// way, and requests on a [login guard](LimitsBuilder::login_guard)'s
    /// routes carry its [`LoginAttempt`](crate::LoginAttempt) either way
    /// (its policies read it there).
    pub fn request_extensions(mut self, on: bool) -> Self {
        self.request_extensions = on;
        self
    }

    /// What `X-RateLimit-Reset` holds: seconds from now (the default) or a
    /// Unix time.
    pub fn legacy_reset(mut self, reset: LegacyReset) -> Self {
        self.fields.legacy_reset = reset;
        self
    }

    /// The wall clock `X-RateLimit-Reset` Unix times are computed from
    /// ([`SystemTime::now`] by default): a test's clock, or one shared with
    /// the limiters' time source.
    pub fn wall_clock<F>(mut self, now: F) -> Self
    where
        F: Fn() -> SystemTime + Send + Sync + 'static,
    {
        self.fields.wall_clock = Arc::new(now);
        self
    }

    /// Requests for which `skip` is true are not limited: no policy, no
    /// limiter call, no field ([`Limits::start`] answers `None`): health
    /// checks, `OPTIONS` preflights, the metrics endpoint. It sees the
    /// request head only.
    pub fn skip<F>(mut self, skip: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.skip = Some(Arc::new(skip));
        self
    }

    /// Calls `callback` whenever a limiter fails (in addition to the
    /// `tracing` event and the [`Stats`] counters): page someone, flip a
    /// health check. It runs on the request's task: keep it quick.
    pub fn on_limiter_failure<F>(mut self, callback: F) -> Self
    where
        F: Fn(&LimiterFailure<'_>) + Send + Sync + 'static,
    {
        self.alerts.on_failure = Some(Arc::new(callback));
        self
    }

    /// The limits, or what is wrong with the configuration.
    pub fn build(self) -> Result<Limits, ConfigError> {
        let mut policies: Vec<Compiled> = Vec::with_capacity(self.policies.len());
        for policy in self.policies {
            let name = config::policy_name(&policy.name)?;
            if policies.iter().any(|c| c.policy.name == policy.name) {
                return Err(ConfigError::DuplicateName(policy.name));
            }
            policies.push(Compiled::new(policy, name)?);
        }
        let in_place = self.skip.is_none()
            && self.guards.is_empty()
            && self.identify.reads_in_place()
            && policies.iter().all(Compiled::reads_client_only);
        let one_policy = in_place && matches!(&*policies, [one] if !one.policy.after_response());
        Ok(Limits {
            in_place,
            one_policy,
            identify: self.identify,
            policies,
            guards: self.guards,
            fields: self.fields,
            request_extensions: self.request_extensions,
            alerts: self.alerts,
            skip: self.skip,
        })
    }
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("identify", &self.identify)
            .field("policies", &self.policies().collect::<Vec<_>>())
            .field("headers", &self.fields.style)
            .field("legacy_reset", &self.fields.legacy_reset)
            .field("request_extensions", &self.request_extensions)
            .field("skip", &self.skip.is_some())
            .field("in_place", &self.in_place)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for LimitsBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitsBuilder")
            .field("identify", &self.identify)
            .field("policies", &self.policies)
            .field("headers", &self.fields.style)
            .field("legacy_reset", &self.fields.legacy_reset)
            .field("request_extensions", &self.request_extensions)
            .field("skip", &self.skip.is_some())
            .finish_non_exhaustive()
    }
}
