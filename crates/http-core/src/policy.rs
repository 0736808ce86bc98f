//! [`Policy`]: one quota, its limiter, what it applies to, what a request
//! costs, and what to do when the limiter cannot decide.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{HeaderName, Method, StatusCode, response};
use ratelab_core::AsyncRateLimiter;

use crate::client::Client;
use crate::telemetry::PolicyMetrics;

/// What a policy does when its limiter cannot decide (its backend is down or
/// too slow: [`ratelab_core::Error::is_unavailable`], or any other error but
/// a cost that can never fit).
///
/// Except [`Error::TooManyKeys`](ratelab_core::Error::TooManyKeys) (an
/// in-memory limiter full of keys, under a flood of new clients: failing
/// open would let the flood through unlimited) and
/// [`Error::Data`](ratelab_core::Error::Data) (state no one can read:
/// waiting repairs nothing), which always fail closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum FailureMode {
    /// Let the request pass unchecked by this policy, and raise an alert: a
    /// `tracing` warning, the [`Stats::failed_open`](crate::Stats::failed_open)
    /// counter and the
    /// [`on_limiter_failure`](crate::LimitsBuilder::on_limiter_failure)
    /// callback. The default: an outage of the limiter is not an outage of
    /// the API. The other policies still apply.
    #[default]
    Open,
    /// Refuse the request with `503 Service Unavailable` and a problem body
    /// (and the same alerts): for policies that protect something costly or
    /// abusable, such as logins or SMS sends.
    Closed,
}

impl FailureMode {
    /// The mode's label in the metrics.
    pub(crate) fn label(self) -> &'static str {
        match self {
            FailureMode::Open => "open",
            FailureMode::Closed => "closed",
        }
    }
}

/// Which responses a policy counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Count {
    /// Every request that passes counts (the default).
    #[default]
    All,
    /// Only requests whose response is a failure (by default a status of 400
    /// or more; see [`Policy::failed_when`]): failed logins, not successful
    /// ones. express-rate-limit's `skipSuccessfulRequests`.
    Failures,
    /// Only requests whose response is a success: express-rate-limit's
    /// `skipFailedRequests`.
    Successes,
}

pub(crate) type Predicate = Arc<dyn Fn(&Parts, &Client) -> bool + Send + Sync>;
pub(crate) type KeyFn = Arc<dyn Fn(&Parts, &Client) -> Option<String> + Send + Sync>;
pub(crate) type CostFn = Arc<dyn Fn(&Parts, &Client) -> u32 + Send + Sync>;
pub(crate) type StatusFn = Arc<dyn Fn(StatusCode) -> bool + Send + Sync>;
pub(crate) type SettleFn = Arc<dyn Fn(&response::Parts) -> Option<u32> + Send + Sync>;
pub(crate) type KeyCountFn = Arc<dyn Fn() -> usize + Send + Sync>;
pub(crate) type BreakerFn = Arc<dyn Fn() -> bool + Send + Sync>;

/// The default bound on one limiter call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// One quota policy: a name, a limiter (any algorithm, in memory or on
/// Redis), the requests it applies to, the key it counts them under, their
/// cost, and its failure mode.
///
/// **Applies to** a request when all of these hold: one of its routes matches
/// (or it has none: every route), the client's plan is one of its plans (or
/// it has none: every client), its [`when`](Policy::when) predicate says yes,
/// and its key function gives a key. Several policies can apply to one
/// request: it passes only if every one admits it, all or nothing (what one
/// took for a request another refused is given back).
///
/// **Key**: by default the [`Client`] (API key account, user or IP), so each
/// client has its own quota. [`Policy::key`] counts by something else, such
/// as the account a login attempt is for, or one shared key for a global
/// limit. The limiter sees `<policy name>:<key>`, so policies never share
/// state even on one Redis.
///
/// **Cost**: 1 unit per request by default; [`Policy::cost`] and
/// [`Policy::cost_with`] say otherwise (an SMS to three numbers costs 3). A
/// cost of 0 consumes nothing but still reports the policy's state. A cost
/// above the policy's burst can never pass: the request is refused with
/// `429` without `Retry-After`, since no wait would help.
///
/// ```
/// use http::Method;
/// use ratelab_core::{Keyed, Quota};
/// use ratelab_gcra::Gcra;
/// use ratelab_http_core::Policy;
/// use std::time::Duration;
///
/// // Five login attempts per account per 15 minutes, whoever tries them,
/// // refused (503) rather than unchecked if the limiter is down.
/// let login = Policy::new("login", Keyed::new(Gcra::new(Quota::new(5, Duration::from_secs(900))?)))
///     .route(Method::POST, "/login")
///     .key(|request, _client| {
///         let account = request.headers.get("x-account")?.to_str().ok()?;
///         Some(account.to_ascii_lowercase())
///     })
///     .fail_closed();
///
/// // Ten text messages per client per hour; a request costs one unit per
/// // recipient (`?to=a,b,c` costs 3).
/// let sms = Policy::new("sms", Keyed::new(Gcra::new(Quota::per_hour(10)?)))
///     .route(Method::POST, "/sms")
///     .cost_with(|request, _client| {
///         let to = request.uri.query().unwrap_or("").split('&').find_map(|p| p.strip_prefix("to="));
///         to.map_or(1, |to| u32::try_from(to.split(',').count()).unwrap_or(u32::MAX))
///     })
///     .fail_closed();
///
/// // A pro plan gets more than a free one.
/// let free = Policy::new("free", Keyed::new(Gcra::new(Quota::per_minute(60)?))).plan("free");
/// let pro = Policy::new("pro", Keyed::new(Gcra::new(Quota::per_minute(600)?))).plan("pro");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Policy {
    pub(crate) name: String,
    pub(crate) limiter: Arc<dyn AsyncRateLimiter>,
    pub(crate) routes: Vec<(Option<Method>, String)>,
    pub(crate) plans: Vec<String>,
    pub(crate) when: Option<Predicate>,
    pub(crate) key: Option<KeyFn>,
    pub(crate) cost: Cost,
    pub(crate) failure: FailureMode,
    pub(crate) timeout: Duration,
    pub(crate) count: Count,
    /// What a request finally costs, read from its response.
    pub(crate) settle: Option<SettleFn>,
    /// The limiter issues receipts and settles them
    /// ([`Limiter::refunds`](ratelab_core::Limiter::refunds)), read once.
    pub(crate) refunds: bool,
    pub(crate) failed_when: StatusFn,
    pub(crate) keys_tracked: Option<KeyCountFn>,
    pub(crate) breaker_open: Option<BreakerFn>,
    /// Its metric keys, built once (the name never changes).
    pub(crate) metrics: Arc<PolicyMetrics>,
}

#[derive(Clone)]
pub(crate) enum Cost {
    Fixed(u32),
    With(CostFn),
}

impl Policy {
    /// A policy named `name` enforced by `limiter`, on every request of every
    /// client, costing 1, failing open, with a
    /// [`DEFAULT_TIMEOUT`] of 100 ms per limiter call.
    ///
    /// The name is what clients see in the `RateLimit` headers: 1 to 64
    /// characters among `A-Z a-z 0-9 _ . -`, unique within a layer (checked
    /// by [`LimitsBuilder::build`](crate::LimitsBuilder::build)).
    pub fn new(name: impl Into<String>, limiter: impl AsyncRateLimiter + 'static) -> Self {
        Self::shared(name, Arc::new(limiter))
    }

    /// A policy on a limiter shared with other code (or other policies).
    ///
    /// A limiter that issues receipts ([`Limiter::refunds`]: every ratelab
    /// limiter, in memory or on Redis) lets the policy take back what a
    /// request did not use: [`Count`] modes consume before the request and
    /// refund after, [`Policy::settle_with`] charges what the response says,
    /// and a request another policy refuses gives back what this one took.
    /// A
    /// limiter of your own gets the same by implementing
    /// [`AsyncRateLimiter::check_with_receipt_async`] and
    /// [`AsyncRateLimiter::settle_async`] (issue its receipts with
    /// [`ratelab_core::toolkit::Issuer`]) and answering `true` to
    /// [`Limiter::refunds`].
    ///
    /// [`Limiter::refunds`]: ratelab_core::Limiter::refunds
    pub fn shared(name: impl Into<String>, limiter: Arc<dyn AsyncRateLimiter>) -> Self {
        let name = name.into();
        let refunds = limiter.refunds();
        Policy {
            metrics: Arc::new(PolicyMetrics::new(&name)),
            name,
            limiter,
            routes: Vec::new(),
            plans: Vec::new(),
            when: None,
            key: None,
            cost: Cost::Fixed(1),
            failure: FailureMode::Open,
            timeout: DEFAULT_TIMEOUT,
            count: Count::All,
            settle: None,
            refunds,
            failed_when: Arc::new(|status: StatusCode| {
                status.is_client_error() || status.is_server_error()
            }),
            keys_tracked: None,
            breaker_open: None,
        }
    }

    /// Count only some responses (failed logins, say): see [`Count`]. The
    /// request is decided before its response is known: on a limiter with
    /// receipts ([`Limiter::refunds`](ratelab_core::Limiter::refunds)) it
    /// takes its cost with a receipt, refunded if the response does not
    /// count, so that requests in flight together never pass beyond the
    /// quota; on one without, it is only peeked (refused if fewer than its
    /// cost remain) and charged after the response if it counts, so that
    /// requests in flight together all see the same peek.
    pub fn count(mut self, count: Count) -> Self {
        self.count = count;
        self
    }

    /// What a request finally costs, read from its response: `settle`
    /// answers the units it used (tokens an LLM produced, bytes served), or
    /// `None` to keep what it was charged. The request is charged its
    /// [cost](Policy::cost_with) before it runs, with a receipt, and settled
    /// once the response head is known: less than charged gives back what
    /// the limiter can prove the admission still holds; more charges the
    /// difference as debt, whatever the room, which the client's next
    /// requests wait out ([`RateLimiter::settle`]). The response's
    /// `RateLimit` fields show the key as the settlement left it.
    ///
    /// Only the response head is seen (status, headers, extensions): a cost
    /// known once the body is written must be put there by the handler (a
    /// header, or an extension the closure reads). An answer above the
    /// policy's burst charges the burst (the most a limiter takes at once).
    /// With [`Policy::count`], a response that does not count is refunded
    /// whatever `settle` says.
    ///
    /// Needs a limiter that issues receipts ([`Limiter::refunds`]): a layer
    /// with such a policy on another limiter is refused by
    /// [`build`](crate::LimitsBuilder::build).
    ///
    /// ```
    /// use http::Method;
    /// use ratelab_core::{Keyed, Quota};
    /// use ratelab_gcra::Gcra;
    /// use ratelab_http_core::Policy;
    ///
    /// // 10,000 tokens per minute per client: a completion reserves its
    /// // `max_tokens` and is settled with the tokens it really used.
    /// let tokens = Policy::new("tokens", Keyed::new(Gcra::new(Quota::per_minute(10_000)?)))
    ///     .route(Method::POST, "/complete")
    ///     .cost_with(|request, _| {
    ///         let query = request.uri.query().unwrap_or("");
    ///         let max = query.split('&').find_map(|p| p.strip_prefix("max_tokens="));
    ///         max.and_then(|n| n.parse().ok()).unwrap_or(256)
    ///     })
    ///     .settle_with(|response| {
    ///         response.headers.get("x-tokens-used")?.to_str().ok()?.parse().ok()
    ///     });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`RateLimiter::settle`]: ratelab_core::RateLimiter::settle
    /// [`Limiter::refunds`]: ratelab_core::Limiter::refunds
    pub fn settle_with<F>(mut self, settle: F) -> Self
    where
        F: Fn(&response::Parts) -> Option<u32> + Send + Sync + 'static,
    {
        self.settle = Some(Arc::new(settle));
        self
    }

    /// [`Policy::settle_with`] the cost in the response header `header`: a
    /// decimal number of units. A response without it, or with anything
    /// else in it, keeps what the request was charged.
    pub fn settle_from_header(self, header: HeaderName) -> Self {
        self.settle_with(move |response| {
            let value = response.headers.get(&header)?.to_str().ok()?;
            value.trim().parse().ok()
        })
    }

    /// Which responses are failures for [`Count`]: by default a status of
    /// 400 or more.
    pub fn failed_when<F>(mut self, failed: F) -> Self
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.failed_when = Arc::new(failed);
        self
    }

    /// How many keys the limiter tracks now (`Keyed::len` of an in-memory
    /// limiter), exported as the `ratelab_http_keys_tracked` gauge after
    /// each decision of this policy.
    pub fn keys_tracked<F>(mut self, count: F) -> Self
    where
        F: Fn() -> usize + Send + Sync + 'static,
    {
        self.keys_tracked = Some(Arc::new(count));
        self
    }

    /// Whether the limiter's circuit breaker is open now (for a Redis
    /// limiter: `limiter.stats().breaker_open`), exported as the
    /// `ratelab_http_breaker_open` gauge (1 or 0) after each decision of this
    /// policy.
    pub fn breaker_open<F>(mut self, open: F) -> Self
    where
        F: Fn() -> bool + Send + Sync + 'static,
    {
        self.breaker_open = Some(Arc::new(open));
        self
    }

    /// Apply to `method` requests on paths matching `pattern` (see
    /// [`Route`](crate::Route) for the syntax). May be called several times:
    /// any of the routes. An invalid pattern is reported by `build`.
    pub fn route(mut self, method: Method, pattern: &str) -> Self {
        self.routes.push((Some(method), pattern.to_owned()));
        self
    }

    /// Apply to requests of any method on paths matching `pattern`.
    pub fn path(mut self, pattern: &str) -> Self {
        self.routes.push((None, pattern.to_owned()));
        self
    }

    /// Apply to clients on `plan` (see [`Identity::with_plan`](crate::Identity::with_plan)
    /// and [`Identify::anonymous_plan`](crate::Identify::anonymous_plan)). May
    /// be called several times: any of the plans.
    pub fn plan(mut self, plan: impl Into<String>) -> Self {
        self.plans.push(plan.into());
        self
    }

    /// Apply only to requests for which `predicate` is true (in addition to
    /// the routes and plans).
    pub fn when<F>(mut self, predicate: F) -> Self
    where
        F: Fn(&Parts, &Client) -> bool + Send + Sync + 'static,
    {
        self.when = Some(Arc::new(predicate));
        self
    }

    /// Count requests under the key `key` returns instead of the client's;
    /// `None` means the policy does not apply to this request.
    ///
    /// The function sees the request head only (the body has not been read
    /// when the layer runs): for a key in the body, parse it in an earlier
    /// layer and put it into the extensions, which the function can read.
    pub fn key<F>(mut self, key: F) -> Self
    where
        F: Fn(&Parts, &Client) -> Option<String> + Send + Sync + 'static,
    {
        self.key = Some(Arc::new(key));
        self
    }

    /// Every request costs `cost` units (1 by default).
    pub fn cost(mut self, cost: u32) -> Self {
        self.cost = Cost::Fixed(cost);
        self
    }

    /// Each request costs what `cost` says.
    pub fn cost_with<F>(mut self, cost: F) -> Self
    where
        F: Fn(&Parts, &Client) -> u32 + Send + Sync + 'static,
    {
        self.cost = Cost::With(Arc::new(cost));
        self
    }

    /// What to do when the limiter cannot decide.
    pub fn on_failure(mut self, mode: FailureMode) -> Self {
        self.failure = mode;
        self
    }

    /// [`FailureMode::Open`]: pass unchecked, with an alert (the default).
    pub fn fail_open(self) -> Self {
        self.on_failure(FailureMode::Open)
    }

    /// [`FailureMode::Closed`]: refuse with `503`, with an alert.
    pub fn fail_closed(self) -> Self {
        self.on_failure(FailureMode::Closed)
    }

    /// The longest this policy may hold a request deciding it (all its
    /// limiter calls for that request together); past it, the limiter has
    /// failed ([`ratelab_core::Error::Timeout`]) and the failure mode applies.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Something about the request is decided once its response is known:
    /// whether it counts, or what it costs.
    pub(crate) fn after_response(&self) -> bool {
        self.count != Count::All || self.settle.is_some()
    }

    /// Whether the policy counts a response of `status`.
    pub(crate) fn counts(&self, status: StatusCode) -> bool {
        let failed = (self.failed_when)(status);
        match self.count {
            Count::All => true,
            Count::Failures => failed,
            Count::Successes => !failed,
        }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The limiter.
    pub fn limiter(&self) -> &Arc<dyn AsyncRateLimiter> {
        &self.limiter
    }
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("name", &self.name)
            .field("quota", &self.limiter.quota())
            .field("algorithm", &self.limiter.algorithm_name())
            .field("backend", &self.limiter.backend())
            .field("routes", &self.routes)
            .field("plans", &self.plans)
            .field("when", &self.when.is_some())
            .field("custom_key", &self.key.is_some())
            .field(
                "cost",
                &match self.cost {
                    Cost::Fixed(n) => Some(n),
                    Cost::With(_) => None,
                },
            )
            .field("failure", &self.failure)
            .field("timeout", &self.timeout)
            .field("count", &self.count)
            .field("settles", &self.settle.is_some())
            .field("refunds", &self.refunds)
            .finish()
    }
}
