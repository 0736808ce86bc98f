//! [`ResponseFuture`]: the future of [`RateLimit`](crate::RateLimit)'s
//! response.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::Response;
use pin_project_lite::pin_project;
use ratelab_http_core::Fields;

use crate::body::{ResponseBody, WrapBody};

type BoxedResponse<R, E> = Pin<Box<dyn Future<Output = Result<Response<R>, E>> + Send>>;

pin_project! {
    /// The future of [`RateLimit`](crate::RateLimit)'s response: `F` is the
    /// inner service's future, `B` its response body, `E` its error, `M`
    /// how the layer's responses carry their body ([`ResponseBody`]).
    ///
    /// A request decided when the service was called (every in-memory
    /// limiter decides at once) costs no allocation here: the inner
    /// service's future is held in place, or the refusal is ready. Only a
    /// decision still pending (a Redis call), a queued request and a policy
    /// that counts after the response take the boxed path.
    pub struct ResponseFuture<F, B, E, M = WrapBody>
    where
        M: ResponseBody<B>,
    {
        #[pin]
        kind: Kind<F, M::Body, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, R, E> {
        /// Passed on to the inner service: its response gets `fields`.
        Passed {
            #[pin]
            future: F,
            fields: Option<Fields>,
        },
        /// Answered by the layer.
        Ready {
            response: Option<Response<R>>,
        },
        /// Anything that waits before or after the inner service.
        Boxed {
            future: BoxedResponse<R, E>,
        },
    }
}

impl<F, B, E, M: ResponseBody<B>> ResponseFuture<F, B, E, M> {
    /// The inner service's response, with `fields` (none: as it is).
    #[inline(always)]
    pub(crate) fn passed(future: F, fields: Option<Fields>) -> Self {
        ResponseFuture {
            kind: Kind::Passed { future, fields },
        }
    }

    /// The layer's own response.
    pub(crate) fn ready(response: Response<M::Body>) -> Self {
        ResponseFuture {
            kind: Kind::Ready {
                response: Some(response),
            },
        }
    }

    /// Whatever `future` answers.
    pub(crate) fn boxed(
        future: impl Future<Output = Result<Response<M::Body>, E>> + Send + 'static,
    ) -> Self {
        ResponseFuture {
            kind: Kind::Boxed {
                future: Box::pin(future),
            },
        }
    }
}

impl<F, B, E, M> Future for ResponseFuture<F, B, E, M>
where
    F: Future<Output = Result<Response<B>, E>>,
    M: ResponseBody<B>,
{
    type Output = Result<Response<M::Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Passed { future, fields } => {
                let mut response = ready!(future.poll(cx))?.map(M::passed);
                if let Some(fields) = fields.take() {
                    fields.write(response.headers_mut());
                }
                Poll::Ready(Ok(response))
            }
            KindProj::Ready { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after it completed"))),
            KindProj::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B, E, M: ResponseBody<B>> fmt::Debug for ResponseFuture<F, B, E, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}
