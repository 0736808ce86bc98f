//! [`RateLimit`]: the service [`RateLimitLayer`](crate::RateLimitLayer)
//! wraps around another. Per request: identify the client, match the
//! policies, let the engine decide, then call the inner service or answer
//! `429`/`503`, and add the headers.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{Either, Full};
use tower::Service;

use crate::engine::{Engine, Outcome};
use crate::future::ResponseFuture;
use crate::layer::Shared;
use crate::{failure, headers, matching, response};

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
        ResponseFuture::new(async move {
            let (mut parts, body) = request.into_parts();
            let client = shared.identify.client(&parts);
            let checks = matching::checks(&shared.policies, &parts, &client);
            let verdict = Engine::new(checks).decide().await;
            failure::alert(&shared, &verdict, &client);
            let (policy_field, limit_field) = headers::fields(&shared.policies, &verdict);
            let legacy = shared
                .legacy_headers
                .then(|| headers::legacy(&shared.policies, &verdict))
                .flatten();
            let mut response = match verdict.outcome {
                Outcome::Pass { delay } => {
                    shared.stats.count_allowed();
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
                    shared.stats.count_refused();
                    headers::refusal(&shared.policies, &verdict, &client).map(Either::Right)
                }
                Outcome::Unavailable => {
                    shared.stats.count_unavailable();
                    headers::unavailable(&verdict).map(Either::Right)
                }
            };
            let headers = response.headers_mut();
            response::append_fields(headers, policy_field, limit_field);
            if let Some((limit, remaining, reset)) = legacy {
                response::set_legacy(headers, limit, remaining, reset);
            }
            Ok(response)
        })
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}
