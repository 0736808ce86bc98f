//! [`ResponseFuture`]: the future of [`RateLimit`](crate::RateLimit)'s
//! response.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use crate::service::LimitedBody;

type BoxedResponse<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<LimitedBody<B>>, E>> + Send>>;

/// The future of [`RateLimit`](crate::RateLimit)'s response.
pub struct ResponseFuture<B, E> {
    inner: BoxedResponse<B, E>,
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn new(
        inner: impl Future<Output = Result<Response<LimitedBody<B>>, E>> + Send + 'static,
    ) -> Self {
        ResponseFuture {
            inner: Box::pin(inner),
        }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<LimitedBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}
