//! [`RateLimitLayer`] and its service: identify the client, decide every
//! policy that applies, answer `429`/`503` or call the inner service, and add
//! the headers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::join_all;
use http::request::Parts;
use http::{Request, Response};
use http_body_util::{Either, Full};
use ratelab_core::{Decision, Error, ceil_secs};
use tokio::time::Instant;
use tower::{Layer, Service};

use crate::identity::{Client, Identify};
use crate::policy::{Cost, FailureMode, Policy};
use crate::response::{self, LimitItem, PolicyItem};
use crate::route::{Route, RouteError};

/// The body of a response that went through the layer: the inner service's
/// (`Left`), or the layer's own `429`/`503` problem body (`Right`).
pub type LimitedBody<B> = Either<B, Full<Bytes>>;

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

type FailureCallback = Arc<dyn Fn(&LimiterFailure<'_>) + Send + Sync>;

/// A configuration the layer refuses to run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A policy name clients could not read back, or that could clash.
    #[error(
        "policy name {0:?} is not 1 to 64 characters among A-Z a-z 0-9 _ . - \
         (it appears in the RateLimit headers and the limiter keys)"
    )]
    InvalidName(String),
    /// Two policies share a name: their headers and keys would mix.
    #[error("two policies are named {0:?}")]
    DuplicateName(String),
    /// A route pattern of a policy is not valid.
    #[error("policy {policy:?}: {source}")]
    Route {
        /// The policy.
        policy: String,
        /// What is wrong with the pattern.
        #[source]
        source: RouteError,
    },
}

/// What the layer tells the failure callback when a limiter could not decide.
#[derive(Debug)]
#[non_exhaustive]
pub struct LimiterFailure<'a> {
    /// The policy whose limiter failed.
    pub policy: &'a str,
    /// The client of the request.
    pub client: &'a Client,
    /// What went wrong.
    pub error: &'a Error,
    /// What the layer did about it.
    pub mode: FailureMode,
}

/// Counters of what the layer decided, shared by every clone of the layer;
/// read them for metrics and alerts ([`RateLimitLayer::stats`]).
#[derive(Debug, Default)]
pub struct Stats {
    allowed: AtomicU64,
    refused: AtomicU64,
    unavailable: AtomicU64,
    failed_open: AtomicU64,
    failed_closed: AtomicU64,
}

impl Stats {
    /// Requests passed on to the service (including those some policy
    /// failed open on, and those no policy applied to).
    pub fn allowed(&self) -> u64 {
        self.allowed.load(Ordering::Relaxed)
    }

    /// Requests refused with `429`.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Requests refused with `503` because a fail-closed policy could not
    /// decide.
    pub fn unavailable(&self) -> u64 {
        self.unavailable.load(Ordering::Relaxed)
    }

    /// Limiter failures let through by a fail-open policy (one per policy and
    /// request): the alert for "requests are passing unchecked".
    pub fn failed_open(&self) -> u64 {
        self.failed_open.load(Ordering::Relaxed)
    }

    /// Limiter failures of fail-closed policies (one per policy and request).
    pub fn failed_closed(&self) -> u64 {
        self.failed_closed.load(Ordering::Relaxed)
    }
}

struct Shared {
    identify: Identify,
    policies: Vec<Compiled>,
    legacy_headers: bool,
    stats: Arc<Stats>,
    on_failure: Option<FailureCallback>,
}

struct Compiled {
    policy: Policy,
    routes: Vec<Route>,
    item: PolicyItem,
    log_gate: LogGate,
}

/// Lets one failure event per policy per second through to the log, so that
/// an outage at thousands of requests a second logs a line a second (with
/// the count of the others), not thousands. Counters and the callback still
/// see every failure.
#[derive(Default)]
struct LogGate {
    /// The second (since the process's first failure, plus one) last logged.
    second: AtomicU64,
    /// Failures not logged since.
    suppressed: AtomicU64,
}

impl LogGate {
    /// `Some(suppressed since the last line)` if this failure may be logged.
    fn admit(&self) -> Option<u64> {
        static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
        let now = ORIGIN
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs()
            + 1;
        let last = self.second.load(Ordering::Relaxed);
        if last != now
            && self
                .second
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
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
            let valid = (1..=64).contains(&policy.name.len())
                && policy
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
            let name = sfv::String::from_string(policy.name.clone())
                .ok()
                .filter(|_| valid)
                .ok_or_else(|| ConfigError::InvalidName(policy.name.clone()))?;
            if policies.iter().any(|c| c.policy.name == policy.name) {
                return Err(ConfigError::DuplicateName(policy.name));
            }
            let routes = policy
                .routes
                .iter()
                .map(|(method, pattern)| Route::new(method.clone(), pattern))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|source| ConfigError::Route {
                    policy: policy.name.clone(),
                    source,
                })?;
            let quota = policy.limiter.quota();
            let item = PolicyItem {
                name,
                q: u64::from(quota.burst()),
                // Rounded up, at least 1 s: the advertised rate is never
                // faster than the real one.
                w: ceil_secs(quota.window()).max(1),
            };
            policies.push(Compiled {
                policy,
                routes,
                item,
                log_gate: LogGate::default(),
            });
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
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around `S`.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

type BoxedResponse<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<LimitedBody<B>>, E>> + Send>>;

/// The future of [`RateLimit`]'s response.
pub struct ResponseFuture<B, E> {
    inner: BoxedResponse<B, E>,
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<LimitedBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    ReqBody: Send + 'static,
    ResBody: 'static,
{
    type Response = Response<LimitedBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service that was polled ready goes into the future; a fresh
        // clone stays for the next call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        ResponseFuture {
            inner: Box::pin(async move {
                let (mut parts, body) = request.into_parts();
                let client = shared.identify.client(&parts);
                let verdict = shared.decide(&parts, &client).await;
                let (policy_field, limit_field) = shared.fields(&verdict);
                let mut response = match verdict.outcome {
                    Outcome::Pass { delay } => {
                        shared.stats.allowed.fetch_add(1, Ordering::Relaxed);
                        if !delay.is_zero() {
                            // A queueing policy (leaky bucket queue) gave the
                            // request a later slot: it proceeds then.
                            tokio::time::sleep(delay).await;
                        }
                        parts.extensions.insert(client);
                        let response = inner.call(Request::from_parts(parts, body)).await?;
                        response.map(Either::Left)
                    }
                    Outcome::Refuse => {
                        shared.stats.refused.fetch_add(1, Ordering::Relaxed);
                        shared.refusal(&verdict, &client).map(Either::Right)
                    }
                    Outcome::Unavailable => {
                        shared.stats.unavailable.fetch_add(1, Ordering::Relaxed);
                        let mut names = Vec::new();
                        let mut retry_after = None;
                        for report in &verdict.reports {
                            if let State::FailedClosed(wait) = report.state {
                                names.push(shared.policies[report.policy].policy.name.as_str());
                                let secs = wait.map(|w| ceil_secs(w).max(1));
                                retry_after = retry_after.max(secs);
                            }
                        }
                        response::unavailable(&names, retry_after).map(Either::Right)
                    }
                };
                let headers = response.headers_mut();
                response::append_fields(headers, policy_field, limit_field);
                if shared.legacy_headers
                    && let Some((limit, remaining, reset)) = shared.legacy(&verdict)
                {
                    response::set_legacy(headers, limit, remaining, reset);
                }
                Ok(response)
            }),
        }
    }
}

/// Where one applicable policy stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not asked yet.
    Pending,
    /// Peeked (cost 0): nothing consumed.
    Peeked(Decision),
    /// Asked with the request's cost: consumed if allowed.
    Decided(Decision),
    /// The cost can never fit this policy.
    Never { capacity: u64 },
    /// The limiter failed; the request passes this policy unchecked.
    FailedOpen,
    /// The limiter failed; the request is refused with 503, retryable after
    /// the wait if the error says when.
    FailedClosed(Option<Duration>),
}

struct Report {
    policy: usize,
    key: Vec<u8>,
    cost: u32,
    /// `None`: a timeout too long to represent, no bound.
    deadline: Option<Instant>,
    state: State,
}

impl Report {
    /// The decision to report in `RateLimit`, if any.
    fn decision(&self) -> Option<&Decision> {
        match &self.state {
            State::Peeked(d) | State::Decided(d) => Some(d),
            _ => None,
        }
    }

    fn violated(&self) -> bool {
        matches!(self.state, State::Decided(d) if !d.allowed)
            || matches!(self.state, State::Never { .. })
    }
}

enum Outcome {
    Pass { delay: Duration },
    Refuse,
    Unavailable,
}

struct Verdict {
    reports: Vec<Report>,
    outcome: Outcome,
}

impl Shared {
    /// Decides every policy that applies. See the guide, "Several policies".
    async fn decide(&self, parts: &Parts, client: &Client) -> Verdict {
        let now = Instant::now();
        let mut reports: Vec<Report> = self
            .policies
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let (key, cost) = c.applies(parts, client)?;
                Some(Report {
                    policy: i,
                    key,
                    cost,
                    deadline: now.checked_add(c.policy.timeout),
                    state: State::Pending,
                })
            })
            .collect();

        if reports.len() > 1 {
            // Peek everywhere first, so that a policy that is going to refuse
            // refuses before any other consumed anything.
            let peeks = join_all(reports.iter().map(|r| self.check(r, 0))).await;
            for (report, result) in reports.iter_mut().zip(peeks) {
                report.state = self.settle(report, result, client, State::Peeked);
            }
        }

        // The policies predicted to refuse go first, alone: a refusal
        // consumes nothing, so if they do refuse, nothing was consumed
        // anywhere. Then (or if none was predicted to refuse) the rest.
        let predicted: Vec<usize> = (0..reports.len())
            .filter(|&i| matches!(reports[i].state, State::Peeked(d) if d.remaining < u64::from(reports[i].cost)))
            .collect();
        let rounds: [Vec<usize>; 2] = if predicted.is_empty() {
            [Vec::new(), (0..reports.len()).collect()]
        } else {
            let rest = (0..reports.len())
                .filter(|i| !predicted.contains(i))
                .collect();
            [predicted, rest]
        };
        for (n, round) in rounds.into_iter().enumerate() {
            // A policy failed closed at the peek: the request gets a 503
            // unless a predicted refusal (round 0, which consumes nothing)
            // makes it a 429; either way nothing else is consumed.
            if n == 1
                && reports
                    .iter()
                    .any(|r| matches!(r.state, State::FailedClosed(_)))
            {
                return Verdict {
                    reports,
                    outcome: Outcome::Unavailable,
                };
            }
            let round: Vec<usize> = round
                .into_iter()
                .filter(|&i| matches!(reports[i].state, State::Pending | State::Peeked(_)))
                .collect();
            let results = join_all(
                round
                    .iter()
                    .map(|&i| self.check(&reports[i], reports[i].cost)),
            )
            .await;
            for (&i, result) in round.iter().zip(results) {
                reports[i].state = self.settle(&reports[i], result, client, State::Decided);
            }
            if reports.iter().any(Report::violated) {
                return Verdict {
                    reports,
                    outcome: Outcome::Refuse,
                };
            }
            if reports
                .iter()
                .any(|r| matches!(r.state, State::FailedClosed(_)))
            {
                return Verdict {
                    reports,
                    outcome: Outcome::Unavailable,
                };
            }
        }
        let delay = reports
            .iter()
            .filter_map(|r| match r.state {
                State::Decided(d) => Some(d.delay),
                _ => None,
            })
            .max()
            .unwrap_or_default();
        Verdict {
            reports,
            outcome: Outcome::Pass { delay },
        }
    }

    /// One limiter call, bounded by the policy's deadline.
    async fn check(&self, report: &Report, cost: u32) -> Result<Decision, Error> {
        let policy = &self.policies[report.policy].policy;
        let call = policy.limiter.check_async(&report.key, cost);
        let Some(deadline) = report.deadline else {
            return call.await;
        };
        match tokio::time::timeout_at(deadline, call).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout(policy.timeout)),
        }
    }

    /// The state a call's result leaves the policy in, raising the alerts for
    /// a failure.
    fn settle(
        &self,
        report: &Report,
        result: Result<Decision, Error>,
        client: &Client,
        ok: fn(Decision) -> State,
    ) -> State {
        let error = match result {
            Ok(decision) => return ok(decision),
            Err(Error::CostTooHigh { capacity, .. }) => return State::Never { capacity },
            Err(error) => error,
        };
        let compiled = &self.policies[report.policy];
        let policy = &compiled.policy;
        // A keyed in-memory limiter full of keys is not an outage but a
        // flood of new clients (addresses are cheap, an IPv6 /32 holds 2^32
        // /64s): failing open there would let the flood through unlimited.
        // The limiter refuses the new key; so does the layer, whatever the
        // policy's mode.
        let (mode, retry_after) = match &error {
            Error::TooManyKeys { retry_after, .. } => (FailureMode::Closed, Some(*retry_after)),
            _ => (policy.failure, None),
        };
        let counter = match mode {
            FailureMode::Open => &self.stats.failed_open,
            FailureMode::Closed => &self.stats.failed_closed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = compiled.log_gate.admit() {
            match mode {
                FailureMode::Open => tracing::warn!(
                    policy = %policy.name,
                    client = %client,
                    error = %error,
                    suppressed,
                    "rate limiter failed; policy fails open: the request passes unchecked by it"
                ),
                FailureMode::Closed => tracing::error!(
                    policy = %policy.name,
                    client = %client,
                    error = %error,
                    suppressed,
                    "rate limiter failed; policy fails closed: the request is refused with 503"
                ),
            }
        }
        if let Some(callback) = &self.on_failure {
            callback(&LimiterFailure {
                policy: &policy.name,
                client,
                error: &error,
                mode,
            });
        }
        match mode {
            FailureMode::Open => State::FailedOpen,
            FailureMode::Closed => State::FailedClosed(retry_after),
        }
    }

    /// `RateLimit-Policy` (every applicable policy) and `RateLimit` (every
    /// one that decided).
    fn fields(&self, verdict: &Verdict) -> (Option<http::HeaderValue>, Option<http::HeaderValue>) {
        let policy = response::policy_field(
            verdict
                .reports
                .iter()
                .map(|r| &self.policies[r.policy].item),
        );
        let limit = response::limit_field(verdict.reports.iter().filter_map(|r| {
            let decision = r.decision()?;
            Some(LimitItem {
                name: &self.policies[r.policy].item.name,
                r: decision.remaining,
                t: reset_secs(decision),
            })
        }));
        (policy, limit)
    }

    /// The `429` response for a refused verdict.
    fn refusal(&self, verdict: &Verdict, client: &Client) -> Response<Full<Bytes>> {
        let violated: Vec<&Report> = verdict.reports.iter().filter(|r| r.violated()).collect();
        let names: Vec<&str> = violated
            .iter()
            .map(|r| self.policies[r.policy].policy.name.as_str())
            .collect();
        // Never earlier than any violated policy's `t`; `None` if the cost
        // can never fit some policy (no wait helps).
        let retry_after = violated
            .iter()
            .map(|r| r.decision().map(reset_secs))
            .collect::<Option<Vec<u64>>>()
            .map(|secs| secs.into_iter().max().unwrap_or(1).max(1));
        let reasons: Vec<String> = violated
            .iter()
            .map(|r| {
                let item = &self.policies[r.policy].item;
                let name = item.name.as_str();
                match r.state {
                    State::Never { capacity } => format!(
                        "a request costing {} can never pass policy \"{name}\", which admits at most {capacity} at once",
                        r.cost
                    ),
                    _ => format!(
                        "policy \"{name}\" allows {} per {} s",
                        item.q, item.w
                    ),
                }
            })
            .collect();
        let detail = match retry_after {
            Some(secs) => format!("{}; retry in {secs} s.", reasons.join("; ")),
            None => format!("{}.", reasons.join("; ")),
        };
        tracing::debug!(client = %client, policies = ?names, "rate limited");
        response::too_many_requests(&names, &detail, retry_after)
    }

    /// Legacy `(limit, remaining, reset)`: the violated policy with the
    /// longest wait, else the policy with the least remaining.
    fn legacy(&self, verdict: &Verdict) -> Option<(u64, u64, u64)> {
        let decided = verdict
            .reports
            .iter()
            .filter_map(|r| Some((r, r.decision()?)));
        let binding = match verdict.outcome {
            Outcome::Refuse => decided
                .filter(|(r, _)| r.violated())
                .max_by_key(|(_, d)| d.retry_after),
            _ => decided.min_by_key(|(_, d)| (d.remaining, std::cmp::Reverse(d.reset_after))),
        }?;
        let (report, decision) = binding;
        Some((
            self.policies[report.policy].item.q,
            decision.remaining,
            reset_secs(decision),
        ))
    }
}

/// `t`: for a refusal, the wait until the refused request would pass; else
/// the wait until the policy is back to full capacity. Whole seconds,
/// rounded up.
fn reset_secs(decision: &Decision) -> u64 {
    if decision.allowed {
        ceil_secs(decision.reset_after)
    } else {
        ceil_secs(decision.retry_after)
    }
}

impl Compiled {
    /// The key and cost if the policy applies to the request.
    fn applies(&self, parts: &Parts, client: &Client) -> Option<(Vec<u8>, u32)> {
        let policy = &self.policy;
        if !self.routes.is_empty()
            && !self
                .routes
                .iter()
                .any(|r| r.matches(&parts.method, parts.uri.path()))
        {
            return None;
        }
        if !policy.plans.is_empty()
            && !client
                .plan()
                .is_some_and(|plan| policy.plans.iter().any(|p| p == plan))
        {
            return None;
        }
        if let Some(when) = &policy.when
            && !when(parts, client)
        {
            return None;
        }
        let suffix = match &policy.key {
            Some(key) => key(parts, client)?,
            None => client.key().to_owned(),
        };
        let mut key = Vec::with_capacity(policy.name.len() + 1 + suffix.len());
        key.extend_from_slice(policy.name.as_bytes());
        key.push(b':');
        key.extend_from_slice(suffix.as_bytes());
        let cost = match &policy.cost {
            Cost::Fixed(n) => *n,
            Cost::With(f) => f(parts, client),
        };
        Some((key, cost))
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

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}
