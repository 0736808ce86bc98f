//! Which body the layer's responses have: [`LimitedBody`], the inner
//! service's body or the layer's own (the default, for any service), or
//! the inner service's body type itself ([`ServiceBody`], for a body that
//! can hold the layer's bytes, such as axum's `Body`).

use bytes::Bytes;
use futures::FutureExt;
use http_body_util::{BodyExt, Either, Full};

/// The body of a response that went through the layer: the inner service's
/// (`Left`), or the layer's own `429`/`503` problem body (`Right`).
pub type LimitedBody<B> = Either<B, Full<Bytes>>;

/// How the layer's responses carry their body, for an inner service whose
/// responses have a body of type `B`: [`WrapBody`] (the default) or
/// [`ServiceBody`]. Sealed: those two are the choices.
pub trait ResponseBody<B>: sealed::Sealed {
    /// The body of every response the layer answers with.
    type Body;

    /// The body of a response from the inner service.
    fn passed(body: B) -> Self::Body;

    /// The body of the layer's own response: its problem document, or what
    /// the application's [responder](crate::RateLimitLayerBuilder::refusal_response)
    /// wrote.
    fn refused(body: Refusal) -> Self::Body;
}

/// The body of a response the layer answers with itself.
#[derive(Debug)]
pub enum Refusal {
    /// The default problem document.
    Problem(Bytes),
    /// The application's responder's body.
    Responder(Full<Bytes>),
}

/// The default: responses carry a [`LimitedBody`], either the inner
/// service's body or the layer's own, for an inner service of any body type.
#[derive(Debug, Clone, Copy, Default)]
pub struct WrapBody;

/// Responses carry the inner service's own body type, which holds the
/// layer's refusals too (any `B: From<Bytes>`, such as axum's `Body`):
/// axum takes such a response as it is, where a [`LimitedBody`] is boxed
/// into a `Body` again on every response. Choose it with
/// [`RateLimitLayer::with_service_body`](crate::RateLimitLayer::with_service_body).
#[derive(Debug, Clone, Copy, Default)]
pub struct ServiceBody;

impl<B> ResponseBody<B> for WrapBody {
    type Body = LimitedBody<B>;

    #[inline]
    fn passed(body: B) -> Self::Body {
        Either::Left(body)
    }

    fn refused(body: Refusal) -> Self::Body {
        Either::Right(match body {
            Refusal::Problem(bytes) => Full::new(bytes),
            Refusal::Responder(full) => full,
        })
    }
}

impl<B: From<Bytes>> ResponseBody<B> for ServiceBody {
    type Body = B;

    #[inline]
    fn passed(body: B) -> Self::Body {
        body
    }

    fn refused(body: Refusal) -> Self::Body {
        let bytes = match body {
            Refusal::Problem(bytes) => bytes,
            // A full body has its one frame ready at once.
            Refusal::Responder(full) => match full.collect().now_or_never() {
                Some(Ok(collected)) => collected.to_bytes(),
                Some(Err(never)) => match never {},
                None => unreachable!("a full body is ready at once"),
            },
        };
        B::from(bytes)
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::WrapBody {}
    impl Sealed for super::ServiceBody {}
}
