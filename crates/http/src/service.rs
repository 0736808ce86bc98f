//! [`RateLimit`]: the service [`RateLimitLayer`](crate::RateLimitLayer)
//! wraps around another. Per request: identify the client, match the
//! policies, let the engine decide, then call the inner service or answer
//! `429`/`503`, count after the response where a policy says so, and add
//! the headers.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::FutureExt;
use http::header::{RETRY_AFTER, SET_COOKIE};
use http::request::Parts;
use http::{HeaderValue, Request, Response};
use http_body_util::{Either, Full};
use tower::Service;

use crate::engine::{Engine, Outcome, Verdict};
use crate::future::ResponseFuture;
use crate::headers::Fields;
use crate::identity::Client;
use crate::info::RateLimitInfo;
use crate::layer::Shared;
use crate::login::LoginAttempt;
use crate::{counting, failure, headers, matching, telemetry};

/// The body of a response that went through the layer: the inner service's
/// (`Left`), or the layer's own `429`/`503` problem body (`Right`).
pub type LimitedBody<B> = Either<B, Full<Bytes>>;

/// The service [`RateLimitLayer`](crate::RateLimitLayer) wraps around `S`.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> RateLimit<S> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        RateLimit { inner, shared }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    ReqBody: Send + 'static,
    // Held while a policy counts after the response.
    ResBody: Send + 'static,
{
    type Response = Response<LimitedBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        let shared = &self.shared;
        if shared.skip.as_ref().is_some_and(|skip| skip(&parts)) {
            telemetry::skipped();
            return ResponseFuture::passed(self.inner.call(Request::from_parts(parts, body)), None);
        }
        let client = shared.identify.client(&parts);
        let attempt = login_attempt(shared, &mut parts, &client);
        let checks = matching::checks(&shared.policies, &parts, &client);
        // One in-memory policy is decided here and now, without a future.
        // Otherwise the engine's future is polled once here: in-memory
        // limiters have decided already, and the request is answered, or
        // passed on, without a future of the layer's own. A pending one
        // (Redis) is awaited in the response future.
        let mut engine = Engine::new(checks);
        let verdict = match engine.decide_now() {
            Some(verdict) => verdict,
            None => {
                let mut decision = Box::pin(engine.decide());
                let Some(verdict) = (&mut decision).now_or_never() else {
                    let shared = shared.clone();
                    let inner = take_ready(&mut self.inner);
                    return ResponseFuture::boxed(async move {
                        let verdict = decision.await;
                        match conclude(&shared, &verdict, client, &mut parts) {
                            Some(response) => Ok(response),
                            None => {
                                let request = Request::from_parts(parts, body);
                                pass(shared, verdict, attempt, inner, request).await
                            }
                        }
                    });
                };
                verdict
            }
        };
        if let Some(response) = conclude(shared, &verdict, client, &mut parts) {
            return ResponseFuture::ready(response);
        }
        let request = Request::from_parts(parts, body);
        match verdict.outcome {
            Outcome::Pass { delay }
                if delay.is_zero() && !counting::pending(&verdict) && attempt.is_none() =>
            {
                let fields = Fields::new(shared, &verdict);
                ResponseFuture::passed(self.inner.call(request), Some(fields))
            }
            _ => {
                let shared = shared.clone();
                let inner = take_ready(&mut self.inner);
                ResponseFuture::boxed(pass(shared, verdict, attempt, inner, request))
            }
        }
    }
}

/// The service that was polled ready, for a future that calls it later; a
/// fresh clone stays for the next call.
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// What follows `verdict`, but for calling the service: the alerts, the
/// metrics and the counters; then for a refusal (or `503`) the response,
/// with its fields; for a request that passes, `None`, and the client and
/// its [`RateLimitInfo`] in the request's extensions (unless the layer was
/// built without them).
fn conclude<B>(
    shared: &Shared,
    verdict: &Verdict,
    client: Client,
    parts: &mut Parts,
) -> Option<Response<LimitedBody<B>>> {
    failure::alert(shared, verdict, &client);
    telemetry::verdict(verdict);
    let refused = match verdict.outcome {
        Outcome::Pass { .. } => {
            shared.stats.count_allowed();
            if shared.request_extensions {
                let info = RateLimitInfo::new(&shared.policies, verdict, client.clone());
                parts.extensions.insert(client);
                parts.extensions.insert(info);
            }
            return None;
        }
        Outcome::Refuse => true,
        Outcome::Unavailable => false,
    };
    let info = RateLimitInfo::new(&shared.policies, verdict, client);
    let response = if refused {
        shared.stats.count_refused();
        tracing::debug!(client = %info.client, "rate limited");
        match &shared.on_refusal {
            Some(respond) => respond(&info),
            None => info.problem_response(),
        }
    } else {
        shared.stats.count_unavailable();
        match &shared.on_unavailable {
            Some(respond) => respond(&info),
            None => info.problem_response(),
        }
    };
    let mut response = with_retry_after(response, &info).map(Either::Right);
    headers::write(shared, verdict, response.headers_mut());
    Some(response)
}

/// A login attempt, and the position of the guard that read it.
type Attempt = (usize, LoginAttempt);

/// The login attempt the request is, if it is on a login guard's route:
/// put into the request's extensions, where the guard's policies read it.
/// One an outer layer put there is replaced: only the guard says what an
/// attempt is.
fn login_attempt(shared: &Shared, parts: &mut Parts, client: &Client) -> Option<Attempt> {
    if shared.guards.is_empty() {
        return None;
    }
    parts.extensions.remove::<LoginAttempt>();
    let (guard, attempt) = shared
        .guards
        .iter()
        .enumerate()
        .find_map(|(i, guard)| Some((i, guard.attempt(parts, client)?)))?;
    parts.extensions.insert(attempt.clone());
    Some((guard, attempt))
}

/// A request that passed, the slow way: after its queueing delay, if a
/// policy gave it one, then counting and settling after the response where
/// a policy says so, and the device cookie of a successful login.
async fn pass<S, ReqBody, ResBody>(
    shared: Arc<Shared>,
    mut verdict: Verdict,
    attempt: Option<Attempt>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<LimitedBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    if let Outcome::Pass { delay } = verdict.outcome
        && !delay.is_zero()
    {
        // A queueing policy (leaky bucket queue) gave the request a later
        // slot: it proceeds then. (Boxed: a timer held in place would
        // enlarge the future.)
        Box::pin(tokio::time::sleep(delay)).await;
    }
    let (mut parts, body) = inner.call(request).await?.into_parts();
    counting::settle(&mut verdict, &parts).await;
    if let Some((guard, attempt)) = &attempt
        && let Some(cookie) = shared.guards[*guard].cookie(attempt, parts.status)
    {
        parts.headers.append(SET_COOKIE, cookie);
    }
    let mut response = Response::from_parts(parts, Either::Left(body));
    headers::write(&shared, &verdict, response.headers_mut());
    Ok(response)
}

/// `response` with `Retry-After` from `info` unless it has its own: a
/// custom refusal or `503` keeps its promise to say when to come back.
fn with_retry_after<B>(mut response: Response<B>, info: &RateLimitInfo) -> Response<B> {
    if let Some(secs) = info.retry_after_secs() {
        response
            .headers_mut()
            .entry(RETRY_AFTER)
            .or_insert_with(|| HeaderValue::from(secs));
    }
    response
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::poll_fn;

    use http::StatusCode;
    use http_body_util::BodyExt;
    use ratelab_core::{AsyncRateLimiter, CheckFuture, Keyed, Limiter, ManualClock, Quota};
    use ratelab_gcra::Gcra;
    use tower::{Layer, service_fn};

    use super::*;
    use crate::{PeerAddr, Policy, RateLimitLayer};

    /// An in-memory limiter whose answer comes at the second poll, as a
    /// remote one's would: the decision is still pending in `call`.
    #[derive(Debug)]
    struct Later(Keyed<Gcra, ManualClock>);

    impl Limiter for Later {
        fn quota(&self) -> Quota {
            self.0.quota()
        }
        fn algorithm_name(&self) -> &'static str {
            self.0.algorithm_name()
        }
        fn backend(&self) -> &'static str {
            "later"
        }
    }

    impl AsyncRateLimiter for Later {
        fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
            let mut polled = false;
            Box::pin(poll_fn(move |cx| {
                if !polled {
                    polled = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Ready(self.0.check(key, cost))
            }))
        }
    }

    fn request() -> Request<()> {
        let mut request = Request::new(());
        request
            .extensions_mut()
            .insert(PeerAddr("203.0.113.9:4711".parse().unwrap()));
        request
    }

    #[test]
    fn a_pending_decision_is_awaited_in_the_response_future() {
        let limiter = Later(Keyed::with_clock(
            Gcra::new(Quota::per_minute(1).unwrap()),
            ManualClock::new(),
        ));
        let layer = RateLimitLayer::builder()
            .policy(Policy::new("later", limiter))
            .build()
            .unwrap();
        let mut service = layer.layer(service_fn(|request: Request<()>| async move {
            assert!(request.extensions().get::<RateLimitInfo>().is_some());
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
        }));
        // Called outside any runtime: the limiter's timer waits for the
        // response future.
        let first = service.call(request());
        let second = service.call(request());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let first = first.await.unwrap();
            assert_eq!(first.status(), StatusCode::OK);
            assert_eq!(first.headers()["ratelimit"], r#""later";r=0;t=60"#);
            let body = first.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"hello");
            let second = second.await.unwrap();
            assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(second.headers()["retry-after"], "60");
        });
    }
}
