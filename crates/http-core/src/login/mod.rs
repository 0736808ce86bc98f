//! [`LoginGuard`]: login protection a stranger cannot turn against the
//! owner, on the device-cookie scheme OWASP recommends ("Slow Down Online
//! Guessing Attacks with Device Cookies").
//!
//! A successful login hands the browser a signed **device token** in a
//! cookie. An attempt that carries a valid token for the account it is for
//! comes from a **known device**: it is limited per account and device only,
//! so failures from anywhere else never refuse it. Any other attempt is
//! **untrusted**: it is limited per account and client network (a stranger's
//! failures use up the stranger's allowance), and per account across all
//! untrusted clients (guessing spread over many networks). Only failures
//! count, by receipt; an attempt refused by one of its policies gives back
//! what the others took.

mod attempt;
mod cookie;
mod token;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::request::Parts;
use http::{Method, StatusCode};

pub(crate) use attempt::GuardCore;
pub use attempt::LoginAttempt;
pub use cookie::SameSite;

use crate::policy::{Count, FailureMode, Policy};
use crate::route::{Route, RouteError};
use attempt::{AccountFn, StatusFn, WallClock};
use cookie::CookieSettings;
use token::Signer;

/// The shortest secret the guard accepts: 256 bits, HMAC-SHA256's own
/// strength.
pub const MIN_SECRET_LEN: usize = 32;

/// Login protection for one login route, added to the limits with
/// [`LimitsBuilder::login_guard`](crate::LimitsBuilder::login_guard) (or
/// ratelab-http's `RateLimitLayerBuilder::login_guard`).
///
/// # What it does
///
/// On the guard's routes, each request is a login attempt for the account
/// [`account`](LoginGuardBuilder::account) reads from it. The attempt is
/// from a **known device** when it carries a device cookie whose token the
/// guard issued for that very account and that has not expired; otherwise
/// it is **untrusted**. Then:
///
/// - a known device's attempts are limited by the
///   [`per_device`](LoginGuardBuilder::per_device) policy, keyed by account
///   and device, and by nothing else of the guard's: failures from other
///   devices and networks never refuse it;
/// - an untrusted attempt is limited by both
///   [`per_network`](LoginGuardBuilder::per_network), keyed by account and
///   the client's network ([`Client::network`](crate::Client::network): its
///   IPv4 address or IPv6 /64), and
///   [`per_account`](LoginGuardBuilder::per_account), keyed by the account
///   alone, shared by every untrusted client.
///
/// Every one of these policies counts failures only
/// ([`Count::Failures`]): a response that is not a
/// [success](LoginGuardBuilder::succeeded_when) counts, a success is given
/// back. They take the attempt's cost with a receipt before the handler
/// runs, so attempts in flight together never pass beyond the quotas, and an
/// attempt one of them refuses leaves the other untouched (what it took is
/// given back). They fail closed: a limiter that cannot decide
/// refuses the attempt (`503`) rather than let guesses through unchecked.
///
/// A successful response sets the cookie: a new device id, or the same one
/// with a fresh expiry for a known device. The token is
/// `v1.<device id>.<expiry>.<HMAC-SHA256>`, the MAC over the account, the
/// device id and the expiry with the server's secret: a token for another
/// account, expired, altered or forged is simply not a known device, never
/// an error. The cookie is `HttpOnly` (no script reads it), `Secure`
/// ([configurable](LoginGuardBuilder::secure_cookie), for plain-HTTP
/// development), `SameSite=Strict` by default
/// ([configurable](LoginGuardBuilder::same_site)), `Path=/` by default,
/// and lives as long as the token ([`token_lifetime`](LoginGuardBuilder::token_lifetime),
/// 30 days by default). The request's [`LoginAttempt`] is in its
/// extensions, for the handler.
///
/// # What the owner's new device gets during an attack
///
/// A device that never logged in (a new phone, a cleared browser) is
/// untrusted, like the attackers' clients: if they used up the account's
/// untrusted quota, its attempts are refused too, with a `Retry-After`, until
/// that quota comes back. That is the trade-off of the scheme, and it is
/// deliberate: a new device of the owner cannot be told from an attacker's
/// (both know the account, neither has a token), so letting it through would
/// let the attackers through. The owner keeps logging in from every device
/// that has logged in before; the attackers get at most `per_account`
/// evaluated guesses, however many networks they have. Recovery for the new
/// device is to wait, or to log in from a known one.
///
/// # Reading the account
///
/// [`account`](LoginGuardBuilder::account) sees the request head (the limits
/// are decided before the body is read): read the account from HTTP Basic
/// credentials, a header, or an extension that an earlier layer filled from
/// the form. It must read the account exactly as the handler will, or an
/// attacker's guesses could be counted against another account than the
/// one they try. An attempt whose account it cannot read (`None`) is
/// limited as untrusted attempts for the empty account: per network, and
/// all together. Accounts longer than 64 bytes are keyed by their SHA-256
/// digest.
///
/// # What it does not cover
///
/// A stolen device cookie is a known device for as long as it lives: the
/// thief's failures count against that device only (and lock it, not the
/// account). The other policies (a per-client limit on every route)
/// still apply to login attempts. A browser holds one device cookie (one
/// name): the token of the last account that logged in from it. A keyed
/// in-memory limiter full of keys decides new keys by shared cells that can
/// only over-count (see `ratelab_core::Keyed`): size the per-device
/// limiter's table for your users' devices, or keep it on Redis, so that a
/// flood of keys (which needs accounts of the attacker's own that log in)
/// cannot push a known device into a shared cell.
///
/// ```
/// use http::Method;
/// use ratelab_core::{Keyed, Quota};
/// use ratelab_gcra::Gcra;
/// use ratelab_http_core::{Limits, LoginGuard, Policy};
/// use std::time::Duration;
///
/// let per = |n: u32, minutes: u64| Quota::new(n, Duration::from_secs(60 * minutes));
/// let guard = LoginGuard::builder(b"a secret of at least 32 bytes, from your vault")
///     .route(Method::POST, "/login")
///     .account(|request| {
///         let user = request.headers.get("x-user")?.to_str().ok()?;
///         Some(user.to_lowercase())
///     })
///     .per_device(Policy::new("login-device", Keyed::new(Gcra::new(per(10, 15)?))))
///     .per_network(Policy::new("login-network", Keyed::new(Gcra::new(per(5, 15)?))))
///     .per_account(Policy::new("login-account", Keyed::new(Gcra::new(per(50, 60)?))))
///     .build()?;
/// let limits = Limits::builder().login_guard(guard).build()?;
/// # let _ = limits;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct LoginGuard {
    pub(crate) core: Arc<GuardCore>,
    pub(crate) policies: [Policy; 3],
}

impl LoginGuard {
    /// A guard whose device tokens are signed with `secret`: at least
    /// [`MIN_SECRET_LEN`] bytes of randomness, kept out of the code, the same
    /// for every instance of the application (a token one instance issued
    /// must verify on the others), and changed only to void every token.
    pub fn builder(secret: impl AsRef<[u8]>) -> LoginGuardBuilder {
        LoginGuardBuilder {
            secret_len: secret.as_ref().len(),
            signer: Signer::new(secret.as_ref()),
            routes: Vec::new(),
            account: None,
            succeeded: Arc::new(|status: StatusCode| status.is_success()),
            cookie: CookieSettings {
                name: None,
                path: "/".to_owned(),
                secure: true,
                same_site: SameSite::Strict,
            },
            lifetime: Duration::from_secs(30 * 24 * 3600),
            wall_clock: Arc::new(SystemTime::now),
            per_device: None,
            per_network: None,
            per_account: None,
        }
    }
}

/// Builds a [`LoginGuard`].
#[must_use]
pub struct LoginGuardBuilder {
    secret_len: usize,
    signer: Signer,
    routes: Vec<(Method, String)>,
    account: Option<AccountFn>,
    succeeded: StatusFn,
    cookie: CookieSettings,
    lifetime: Duration,
    wall_clock: WallClock,
    per_device: Option<Policy>,
    per_network: Option<Policy>,
    per_account: Option<Policy>,
}

impl LoginGuardBuilder {
    /// Guard `method` requests on paths matching `pattern` (see
    /// [`Route`]); may be called several times. At least one is required.
    pub fn route(mut self, method: Method, pattern: &str) -> Self {
        self.routes.push((method, pattern.to_owned()));
        self
    }

    /// How to read the account an attempt is for from the request head
    /// (required): see [the type's docs](LoginGuard#reading-the-account).
    pub fn account<F>(mut self, account: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.account = Some(Arc::new(account));
        self
    }

    /// Which responses are successful logins: by default a `2xx` status
    /// (a form login that redirects on success says `303` here). Every
    /// other response counts as a failure.
    pub fn succeeded_when<F>(mut self, succeeded: F) -> Self
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.succeeded = Arc::new(succeeded);
        self
    }

    /// The policy for attempts from a known device, keyed by account and
    /// device (required). Its name, limiter, cost and timeout are kept; its
    /// routes, plans, key, counting and failure mode are the guard's.
    pub fn per_device(mut self, policy: Policy) -> Self {
        self.per_device = Some(policy);
        self
    }

    /// The policy for untrusted attempts, keyed by account and client
    /// network (required); see [`LoginGuardBuilder::per_device`] for what
    /// of the policy is kept.
    pub fn per_network(mut self, policy: Policy) -> Self {
        self.per_network = Some(policy);
        self
    }

    /// The policy for untrusted attempts, keyed by account, shared by every
    /// untrusted client (required): the most guesses an attacker gets,
    /// however many networks it has. See [`LoginGuardBuilder::per_device`]
    /// for what of the policy is kept.
    pub fn per_account(mut self, policy: Policy) -> Self {
        self.per_account = Some(policy);
        self
    }

    /// The cookie's name. By default `__Host-ratelab_device` where the
    /// cookie is `Secure` with `Path=/` (the default): with the `__Host-`
    /// prefix, a browser takes the cookie only from this host itself, so a
    /// sibling subdomain cannot plant or overwrite one; cookies named
    /// `ratelab_device` (the name before the prefix) are read too. Otherwise
    /// `ratelab_device`. A name set here is the only one read and written;
    /// a `__Host-` one needs `Secure` and `Path=/`.
    pub fn cookie_name(mut self, name: &str) -> Self {
        self.cookie.name = Some(name.to_owned());
        self
    }

    /// The cookie's `Path` (`/` by default): the login route's path keeps
    /// it off every other request.
    pub fn cookie_path(mut self, path: &str) -> Self {
        path.clone_into(&mut self.cookie.path);
        self
    }

    /// Whether the cookie is `Secure`, sent over HTTPS only (the default);
    /// `false` for plain-HTTP development only.
    pub fn secure_cookie(mut self, secure: bool) -> Self {
        self.cookie.secure = secure;
        self
    }

    /// The cookie's `SameSite` ([`SameSite::Strict`] by default).
    pub fn same_site(mut self, same_site: SameSite) -> Self {
        self.cookie.same_site = same_site;
        self
    }

    /// How long a device token (and its cookie) lives after its last
    /// successful login: 30 days by default, between 1 second and 400 days
    /// (the most browsers keep a cookie).
    pub fn token_lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// The wall clock tokens expire by ([`SystemTime::now`] by default).
    pub fn wall_clock<F>(mut self, now: F) -> Self
    where
        F: Fn() -> SystemTime + Send + Sync + 'static,
    {
        self.wall_clock = Arc::new(now);
        self
    }

    /// The guard, or what is wrong with its configuration.
    pub fn build(self) -> Result<LoginGuard, LoginGuardError> {
        if self.secret_len < MIN_SECRET_LEN {
            return Err(LoginGuardError::WeakSecret(self.secret_len));
        }
        if self.routes.is_empty() {
            return Err(LoginGuardError::NoRoute);
        }
        let account = self.account.ok_or(LoginGuardError::NoAccount)?;
        let name = self.cookie.name();
        if !cookie::valid_name(name) {
            return Err(LoginGuardError::CookieName(name.to_owned()));
        }
        if name.starts_with("__Host-") && !self.cookie.host_prefix_allowed() {
            return Err(LoginGuardError::HostPrefix(name.to_owned()));
        }
        if !cookie::valid_path(&self.cookie.path) {
            return Err(LoginGuardError::CookiePath(self.cookie.path));
        }
        if self.cookie.same_site == SameSite::None && !self.cookie.secure {
            return Err(LoginGuardError::SameSiteNoneWithoutSecure);
        }
        const MAX_LIFETIME: Duration = Duration::from_secs(400 * 24 * 3600);
        if self.lifetime.as_secs() == 0 || self.lifetime > MAX_LIFETIME {
            return Err(LoginGuardError::Lifetime(self.lifetime));
        }
        let routes = self
            .routes
            .iter()
            .map(|(method, pattern)| Route::new(Some(method.clone()), pattern))
            .collect::<Result<Vec<_>, _>>()?;
        let take =
            |policy: Option<Policy>, which| policy.ok_or(LoginGuardError::MissingPolicy(which));
        let per_device = take(self.per_device, "per_device")?;
        let per_network = take(self.per_network, "per_network")?;
        let per_account = take(self.per_account, "per_account")?;
        for policy in [&per_device, &per_network, &per_account] {
            if !policy.refunds {
                return Err(LoginGuardError::NoReceipts(policy.name.clone()));
            }
        }
        let succeeded = self.succeeded;
        let guarded = |policy: Policy, key: fn(&LoginAttempt) -> Option<String>| {
            let failed = succeeded.clone();
            let mut policy = policy
                .key(move |parts, _| key(LoginAttempt::in_request(parts)?))
                .count(Count::Failures)
                .failed_when(move |status| !failed(status))
                .on_failure(FailureMode::Closed);
            policy.routes = self
                .routes
                .iter()
                .map(|(method, pattern)| (Some(method.clone()), pattern.clone()))
                .collect();
            policy.plans.clear();
            policy.when = None;
            policy
        };
        let policies = [
            guarded(per_device, |a| {
                Some(format!("{}|{}", a.key, a.device?.hex()))
            }),
            guarded(per_network, |a| {
                a.device
                    .is_none()
                    .then(|| format!("{}|{}", a.key, a.network))
            }),
            guarded(per_account, |a| {
                a.device.is_none().then(|| a.key.to_string())
            }),
        ];
        Ok(LoginGuard {
            core: Arc::new(GuardCore {
                routes,
                account,
                succeeded,
                signer: self.signer,
                cookie: self.cookie,
                lifetime: self.lifetime,
                wall_clock: self.wall_clock,
            }),
            policies,
        })
    }
}

/// A login guard that cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoginGuardError {
    /// The secret is shorter than [`MIN_SECRET_LEN`] bytes.
    #[error("the login guard's secret is {0} bytes: it needs at least 32 random bytes")]
    WeakSecret(usize),
    /// No route to guard.
    #[error("the login guard has no route: say which with LoginGuardBuilder::route")]
    NoRoute,
    /// No way to read the account.
    #[error("the login guard cannot read accounts: say how with LoginGuardBuilder::account")]
    NoAccount,
    /// One of the three policies is missing.
    #[error("the login guard has no {0} policy")]
    MissingPolicy(&'static str),
    /// A policy's limiter issues no receipts: failures could not be counted
    /// without letting attempts in flight together past the quota.
    #[error(
        "the login guard's policy {0:?} is on a limiter that issues no receipts \
         (Limiter::refunds is false)"
    )]
    NoReceipts(String),
    /// The cookie name is not an RFC 6265 token.
    #[error("{0:?} cannot name a cookie")]
    CookieName(String),
    /// A `__Host-` cookie name on a cookie that is not `Secure` with
    /// `Path=/`, which browsers reject.
    #[error("the cookie name {0:?} has the __Host- prefix: it needs a Secure cookie with Path=/")]
    HostPrefix(String),
    /// The cookie path is not an absolute path without `;`.
    #[error("{0:?} cannot be a cookie's path")]
    CookiePath(String),
    /// `SameSite=None` without `Secure`, which browsers reject.
    #[error("a SameSite=None cookie must be Secure")]
    SameSiteNoneWithoutSecure,
    /// A token lifetime under a second or over 400 days.
    #[error("a device token lifetime of {0:?} is not between 1 second and 400 days")]
    Lifetime(Duration),
    /// A route pattern is not valid.
    #[error("login guard: {0}")]
    Route(#[from] RouteError),
}

impl fmt::Debug for LoginGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoginGuard")
            .field("core", &self.core)
            .field("policies", &self.policies)
            .finish()
    }
}

impl fmt::Debug for LoginGuardBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoginGuardBuilder")
            .field("routes", &self.routes)
            .field("cookie", &self.cookie)
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}
