//! [`Shared`]: what the layer and every service it wraps share: the
//! [`Limits`], and the responses the application chose for refusals.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use ratelab_http_core::{LimitOutcome, Limits, RateLimitInfo, Refused};

use crate::body::{Refusal, ResponseBody};

/// A response built from what was decided, instead of the default problem.
pub(crate) type Responder = Arc<dyn Fn(&RateLimitInfo) -> Response<Full<Bytes>> + Send + Sync>;

/// The configuration, checked once and shared by every clone of the layer
/// and every service it wraps.
pub(crate) struct Shared {
    pub(crate) limits: Limits,
    pub(crate) on_refusal: Option<Responder>,
    pub(crate) on_unavailable: Option<Responder>,
}

impl Shared {
    /// The response to a request refused (`429`) or not decided (`503`):
    /// the application's, or the default problem, finished with
    /// `Retry-After` and the fields.
    pub(crate) fn refusal<B, M: ResponseBody<B>>(&self, refused: Refused<'_>) -> Response<M::Body> {
        let info = refused.info();
        let respond = match info.outcome {
            LimitOutcome::Unavailable => &self.on_unavailable,
            _ => &self.on_refusal,
        };
        let mut response = match respond {
            Some(respond) => respond(info).map(|full| M::refused(Refusal::Responder(full))),
            None => info
                .problem_response()
                .map(|bytes| M::refused(Refusal::Problem(bytes))),
        };
        refused.finish(&self.limits, response.headers_mut());
        response
    }
}
