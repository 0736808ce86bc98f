//! [`RateLimit`]: the service [`RateLimitLayer`](crate::RateLimitLayer)
//! wraps around another. Per request: identify the client, match the
//! policies, let the engine decide, then call the inner service or answer
//! `429`/`503`, count after the response where a policy says so, and add
//! the headers.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{HeaderValue, Request, Response};
use http_body_util::{Either, Full};
use tower::Service;

use crate::engine::{Engine, Outcome};
use crate::future::ResponseFuture;
use crate::info::RateLimitInfo;
use crate::layer::Shared;
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
        ResponseFuture::new(async move {
            let (mut parts, body) = request.into_parts();
            if shared.skip.as_ref().is_some_and(|skip| skip(&parts)) {
                telemetry::skipped();
                let response = inner.call(Request::from_parts(parts, body)).await?;
                return Ok(response.map(Either::Left));
            }
            let client = shared.identify.client(&parts);
            let checks = matching::checks(&shared.policies, &parts, &client);
            let verdict = Engine::new(checks).decide().await;
            failure::alert(&shared, &verdict, &client);
            telemetry::verdict(&verdict);
            let info = RateLimitInfo::new(&shared.policies, &verdict, client.clone());
            let mut response = match verdict.outcome {
                Outcome::Pass { delay } => {
                    shared.stats.count_allowed();
                    if !delay.is_zero() {
                        // A queueing policy (leaky bucket queue) gave the
                        // request a later slot: it proceeds then.
                        // (Boxed: a timer held in place would enlarge every
                        // request's future.)
                        Box::pin(tokio::time::sleep(delay)).await;
                    }
                    parts.extensions.insert(client);
                    parts.extensions.insert(info);
                    let response = inner.call(Request::from_parts(parts, body)).await?;
                    counting::settle(&verdict, response.status()).await;
                    response.map(Either::Left)
                }
                Outcome::Refuse => {
                    shared.stats.count_refused();
                    tracing::debug!(client = %info.client, "rate limited");
                    let response = match &shared.on_refusal {
                        Some(respond) => respond(&info),
                        None => info.problem_response(),
                    };
                    with_retry_after(response, &info).map(Either::Right)
                }
                Outcome::Unavailable => {
                    shared.stats.count_unavailable();
                    let response = match &shared.on_unavailable {
                        Some(respond) => respond(&info),
                        None => info.problem_response(),
                    };
                    with_retry_after(response, &info).map(Either::Right)
                }
            };
            headers::write(&shared, &verdict, response.headers_mut());
            Ok(response)
        })
    }
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
