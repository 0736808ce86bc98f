//! [`RateLimit`]: the service [`RateLimitLayer`](crate::RateLimitLayer)
//! wraps around another. It drives the core's steps for each request
//! ([`Limits::start`](ratelab_http_core::Limits::start), the decision,
//! [`conclude`](ratelab_http_core::Limits::conclude), and after the
//! response [`settle`](ratelab_http_core::Admitted::settle)) as cheaply as
//! each request allows: a request decided at once, with nothing to wait
//! for, costs no future of the layer's own.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::request::Parts;
use http::{Request, Response};
use ratelab_http_core::{Admitted, Conclusion, InPlace, LimitOutcome, Pending, Ruling};
use tower::Service;

use crate::body::{ResponseBody, WrapBody};
use crate::future::ResponseFuture;
use crate::peer::connection_peer;
use crate::shared::Shared;

/// The service [`RateLimitLayer`](crate::RateLimitLayer) wraps around `S`;
/// `M` is how its responses carry their body ([`ResponseBody`]).
pub struct RateLimit<S, M = WrapBody> {
    inner: S,
    shared: Arc<Shared>,
    body: PhantomData<fn() -> M>,
}

impl<S, M> RateLimit<S, M> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>) -> Self {
        RateLimit {
            inner,
            shared,
            body: PhantomData,
        }
    }
}

impl<S: Clone, M> Clone for RateLimit<S, M> {
    fn clone(&self) -> Self {
        RateLimit::new(self.inner.clone(), self.shared.clone())
    }
}

impl<S, M, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, M>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    ReqBody: Send + 'static,
    // Held while a policy counts after the response.
    ResBody: Send + 'static,
    M: ResponseBody<ResBody>,
    M::Body: Send + 'static,
{
    type Response = Response<M::Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error, M>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let limits = &self.shared.limits;
        // Limits that read no more of a request than its headers and
        // extensions (no skip, login guard, peer resolver, or policy with
        // routes, a predicate, a key or a cost function) take it as it is,
        // and it goes on as it came: one in-memory policy that admits it
        // passes it at once, and it is taken apart only to wait.
        let mut started = limits.decide_in_place(&mut request, connection_peer);
        // Borrowed where it was started: the request's state is large, and
        // moving it costs more than the decision.
        let pending = match &mut started {
            InPlace::Passed(fields) => {
                return ResponseFuture::passed(self.inner.call(request), fields.take());
            }
            InPlace::Started(pending) => pending,
            InPlace::NotInPlace => return self.call_parts(request),
        };
        let Some(ruling) = pending.decide_now().filter(|r| !must_wait(r)) else {
            let InPlace::Started(pending) = started else {
                unreachable!("started")
            };
            let (parts, body) = request.into_parts();
            return later::<_, _, _, M>(&self.shared, &mut self.inner, pending, parts, body);
        };
        match limits.conclude_in_place(ruling, request.extensions_mut()) {
            Conclusion::Refuse(refused) => {
                ResponseFuture::ready(self.shared.refusal::<ResBody, M>(refused))
            }
            Conclusion::Pass(admitted) => {
                let fields = admitted.fields(limits);
                ResponseFuture::passed(self.inner.call(request), fields)
            }
        }
    }
}

impl<S, M> RateLimit<S, M> {
    /// [`Service::call`] for limits that read the whole request head: it
    /// is taken apart, and put together again to pass.
    fn call_parts<ReqBody, ResBody>(
        &mut self,
        request: Request<ReqBody>,
    ) -> ResponseFuture<S::Future, ResBody, S::Error, M>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send,
        ReqBody: Send + 'static,
        ResBody: Send + 'static,
        M: ResponseBody<ResBody>,
        M::Body: Send + 'static,
    {
        let (mut parts, body) = request.into_parts();
        let limits = &self.shared.limits;
        let peer = |parts: &Parts| connection_peer(&parts.extensions);
        let Some(mut pending) = limits.start(&mut parts, peer) else {
            return ResponseFuture::passed(self.inner.call(Request::from_parts(parts, body)), None);
        };
        // One in-memory policy is decided here and now; a request refused
        // then, or passed on with nothing to wait for, costs no future of
        // the layer's own. Anything else (several policies, Redis, a queue's
        // slot, a response to settle) goes on in the response future, with
        // the request's state.
        let Some(ruling) = pending.decide_now() else {
            return later::<_, _, _, M>(&self.shared, &mut self.inner, pending, parts, body);
        };
        if must_wait(&ruling) {
            return later::<_, _, _, M>(&self.shared, &mut self.inner, pending, parts, body);
        }
        match limits.conclude(ruling, &mut parts) {
            Conclusion::Refuse(refused) => {
                ResponseFuture::ready(self.shared.refusal::<ResBody, M>(refused))
            }
            Conclusion::Pass(admitted) => {
                let fields = admitted.fields(limits);
                let request = Request::from_parts(parts, body);
                ResponseFuture::passed(self.inner.call(request), fields)
            }
        }
    }
}

/// A ruling decided at once that passes the request only after a wait:
/// its queue slot's delay, or its response, to settle.
fn must_wait(ruling: &Ruling<'_>) -> bool {
    ruling.outcome() == LimitOutcome::Allowed
        && (!ruling.delay().is_zero() || ruling.waits_for_response())
}

/// The response future of a request that waits for something: its
/// decision (several policies, a limiter on Redis), its queue slot, or its
/// response, to settle. It owns the request's state, and calls the service
/// (polled ready, taken from `inner`) if the request passes.
fn later<S, ReqBody, ResBody, M>(
    shared: &Arc<Shared>,
    inner: &mut S,
    mut pending: Pending,
    mut parts: Parts,
    body: ReqBody,
) -> ResponseFuture<S::Future, ResBody, S::Error, M>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
    M: ResponseBody<ResBody>,
    M::Body: Send + 'static,
{
    let shared = shared.clone();
    let inner = take_ready(inner);
    ResponseFuture::boxed(async move {
        let ruling = pending.decide().await;
        let delay = ruling.delay();
        match shared.limits.conclude(ruling, &mut parts) {
            Conclusion::Refuse(refused) => Ok(shared.refusal::<ResBody, M>(refused)),
            Conclusion::Pass(admitted) => {
                let request = Request::from_parts(parts, body);
                pass::<_, _, _, M>(&shared, delay, admitted, inner, request).await
            }
        }
    })
}

/// The service that was polled ready, for a future that calls it later; a
/// fresh clone stays for the next call.
fn take_ready<S: Clone>(inner: &mut S) -> S {
    let clone = inner.clone();
    std::mem::replace(inner, clone)
}

/// A request that passed, the slow way: after its queueing `delay`, if a
/// policy gave it one, then settled with its response head (counting,
/// settling, a login's device cookie) before the fields are written.
async fn pass<S, ReqBody, ResBody, M>(
    shared: &Shared,
    delay: Duration,
    admitted: Admitted<'_>,
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<M::Body>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    M: ResponseBody<ResBody>,
{
    if !delay.is_zero() {
        // A queueing policy (leaky bucket queue) gave the request a later
        // slot: it proceeds then. (Boxed: a timer held in place would
        // enlarge the future.)
        Box::pin(tokio::time::sleep(delay)).await;
    }
    let (mut parts, body) = inner.call(request).await?.into_parts();
    admitted.settle(&shared.limits, &mut parts).await;
    Ok(Response::from_parts(parts, M::passed(body)))
}

impl<S: fmt::Debug, M> fmt::Debug for RateLimit<S, M> {
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

    use bytes::Bytes;
    use http::StatusCode;
    use http_body_util::{BodyExt, Full};
    use ratelab_core::{AsyncRateLimiter, CheckFuture, Keyed, Limiter, ManualClock, Quota};
    use ratelab_gcra::Gcra;
    use tower::{Layer, service_fn};

    use super::*;
    use crate::{PeerAddr, Policy, RateLimitInfo, RateLimitLayer};

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
        fn bound(&self) -> ratelab_core::Bound {
            self.0.bound()
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

    fn later_layer() -> RateLimitLayer {
        let limiter = Later(Keyed::with_clock(
            Gcra::new(Quota::per_minute(1).unwrap()),
            ManualClock::new(),
        ));
        RateLimitLayer::builder()
            .policy(Policy::new("later", limiter))
            .build()
            .unwrap()
    }

    #[test]
    fn a_pending_decision_in_the_service_body() {
        let layer = later_layer().with_service_body();
        let mut service = layer.layer(service_fn(|_: Request<()>| async move {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
        }));
        let first = service.call(request());
        let second = service.call(request());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            // The inner service's body type: `Full<Bytes>`, not a `LimitedBody`.
            let first: Response<Full<Bytes>> = first.await.unwrap();
            let body = first.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"hello");
            let second = second.await.unwrap();
            assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(second.headers()["retry-after"], "60");
            let body = second.into_body().collect().await.unwrap().to_bytes();
            let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(problem["status"], 429);
        });
    }

    #[test]
    fn a_pending_decision_is_awaited_in_the_response_future() {
        let layer = later_layer();
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
