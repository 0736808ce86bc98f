//! [`ResponseFuture`]: the future of [`RateLimit`](crate::RateLimit)'s
//! response, and [`LimitedBody`], its body.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::Response;
use http_body_util::{Either, Full};
use pin_project_lite::pin_project;
use ratelab_http_core::Fields;

/// The body of a response that went through the layer: the inner service's
/// (`Left`), or the layer's own `429`/`503` problem body (`Right`).
pub type LimitedBody<B> = Either<B, Full<Bytes>>;

type BoxedResponse<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<LimitedBody<B>>, E>> + Send>>;

pin_project! {
    /// The future of [`RateLimit`](crate::RateLimit)'s response: `F` is the
    /// inner service's future, `B` its response body, `E` its error.
    ///
    /// A request decided when the service was called (every in-memory
    /// limiter decides at once) costs no allocation here: the inner
    /// service's future is held in place, or the refusal is ready. Only a
    /// decision still pending (a Redis call), a queued request and a policy
    /// that counts after the response take the boxed path.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        /// Passed on to the inner service: its response gets `fields`.
        Passed {
            #[pin]
            future: F,
            fields: Option<Fields>,
        },
        /// Answered by the layer.
        Ready {
            response: Option<Response<LimitedBody<B>>>,
        },
        /// Anything that waits before or after the inner service.
        Boxed {
            future: BoxedResponse<B, E>,
        },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    /// The inner service's response, with `fields` (none: as it is).
    #[inline(always)]
    pub(crate) fn passed(future: F, fields: Option<Fields>) -> Self {
        ResponseFuture {
            kind: Kind::Passed { future, fields },
        }
    }

    /// The layer's own response.
    pub(crate) fn ready(response: Response<LimitedBody<B>>) -> Self {
        ResponseFuture {
            kind: Kind::Ready {
                response: Some(response),
            },
        }
    }

    /// Whatever `future` answers.
    pub(crate) fn boxed(
        future: impl Future<Output = Result<Response<LimitedBody<B>>, E>> + Send + 'static,
    ) -> Self {
        ResponseFuture {
            kind: Kind::Boxed {
                future: Box::pin(future),
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<LimitedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Passed { future, fields } => {
                let mut response = ready!(future.poll(cx))?.map(Either::Left);
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

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}
