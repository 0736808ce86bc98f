//! HTTP rate limiting with ratelab, for any server: identify the client
//! (API key, authenticated user, or IP address, reading `X-Forwarded-For`
//! only from trusted proxies), apply per-route and per-plan [`Policy`]s
//! over any ratelab limiter (any algorithm, in memory or on Redis), all or
//! nothing (what one policy took for a request another refused is given
//! back), count or settle after the response, protect a login route with a
//! [`LoginGuard`] a stranger cannot turn against the owner, and answer
//! `429 Too Many Requests` with `Retry-After` and an RFC 9457 problem body,
//! with the IETF `RateLimit-Policy` and `RateLimit` fields
//! (draft-ietf-httpapi-ratelimit-headers-11) on every response. It depends
//! on [`http`]'s types and the ratelab traits only: no tower, hyper or axum.
//! `ratelab-http` is its tower layer, for axum and hyper; another framework
//! drives the same [`Limits`] in four steps, as here:
//!
//! ```
//! use bytes::Bytes;
//! use http::{Request, Response, StatusCode};
//! use ratelab_core::{Keyed, ManualClock, Quota};
//! use ratelab_gcra::Gcra;
//! use ratelab_http_core::{Conclusion, Limits, Policy};
//!
//! /// What a server does with each request.
//! async fn serve(limits: &Limits, request: Request<()>) -> Response<Bytes> {
//!     let (mut parts, ()) = request.into_parts();
//!     let peer = "203.0.113.9".parse().ok(); // the connection's, from `accept`
//!     // 1. The request head: who, and which policies apply.
//!     let Some(mut pending) = limits.start(&mut parts, |_| peer) else {
//!         return hello(); // skipped: served as it is
//!     };
//!     // 2. The limiters decide (in memory at once; on Redis, awaited).
//!     let ruling = pending.decide().await;
//!     let delay = ruling.delay(); // a queue's slot, if a policy gives one
//!     // 3. A refusal is answered now; a request that passes is served.
//!     match limits.conclude(ruling, &mut parts) {
//!         Conclusion::Refuse(refused) => {
//!             let mut response = refused.info().problem_response();
//!             refused.finish(limits, response.headers_mut());
//!             response
//!         }
//!         Conclusion::Pass(admitted) => {
//!             tokio::time::sleep(delay).await;
//!             let (mut head, body) = hello().into_parts();
//!             // 4. After the response: settle, and write the fields.
//!             admitted.settle(limits, &mut head).await;
//!             Response::from_parts(head, body)
//!         }
//!     }
//! }
//!
//! fn hello() -> Response<Bytes> {
//!     Response::new(Bytes::from_static(b"hello"))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = ManualClock::new(); // time stands still in this example
//! let per_client = Keyed::with_clock(Gcra::new(Quota::per_minute(2)?), clock);
//! let limits = Limits::builder().policy(Policy::new("default", per_client)).build()?;
//!
//! let ok = serve(&limits, Request::new(())).await;
//! assert_eq!(ok.status(), StatusCode::OK);
//! assert_eq!(ok.headers()["ratelimit-policy"], r#""default";q=2;w=60"#);
//! assert_eq!(ok.headers()["ratelimit"], r#""default";r=1;t=30"#);
//!
//! serve(&limits, Request::new(())).await;
//! let refused = serve(&limits, Request::new(())).await;
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["retry-after"], "30");
//! assert_eq!(refused.headers()["content-type"], "application/problem+json");
//! # Ok(()) }
//! ```
//!
//! A request decided at once (one in-memory policy) need not await
//! anything: [`Pending::decide_now`]; one whose response decides nothing
//! has its fields at once: [`Admitted::fields`]; a server that holds the
//! request whole need not take it apart:
//! [`Limits::start_in_place`] and [`Limits::conclude_in_place`] read its
//! headers and extensions when the limits need no more, and
//! [`Limits::decide_in_place`] passes one that a single in-memory policy
//! admits without making a [`Pending`] request at all. Next: [`Identify`] and
//! [`TrustedProxies`] for client identity, [`Policy`] for routes, plans,
//! keys, costs, counting and [settlements](Policy::settle_with),
//! [`LoginGuard`] for logins, [`LimitsBuilder`] for the fields and the
//! alerts, [`telemetry`] for the metrics. What the steps do, exactly, is
//! ratelab-http's guide (`ratelab_http::guide`).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod client;
mod config;
mod engine;
mod failure;
mod headers;
mod identity;
mod info;
mod limits;
mod login;
mod matching;
mod policy;
mod proxy;
mod request;
mod response;
mod route;
mod small;
mod stats;
pub mod telemetry;

pub use client::{Client, ClientKind, Identity};
pub use config::ConfigError;
pub use engine::wait_for_next_unit;
pub use failure::LimiterFailure;
pub use headers::{Fields, HeaderStyle, LegacyReset};
pub use identity::{Identify, PeerAddr};
pub use info::{LimitOutcome, PolicyOutcome, PolicyStatus, RateLimitInfo};
pub use limits::{Limits, LimitsBuilder};
pub use login::{
    LoginAttempt, LoginGuard, LoginGuardBuilder, LoginGuardError, MIN_SECRET_LEN, SameSite,
};
pub use policy::{Count, DEFAULT_TIMEOUT, FailureMode, Policy};
pub use proxy::{ForwardedHeader, InvalidNetwork, TrustedProxies};
pub use request::{Admitted, Conclusion, InPlace, Pending, Refused, Ruling};
pub use response::{
    QUOTA_EXCEEDED, RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING,
    X_RATELIMIT_RESET,
};
pub use route::{Route, RouteError};
pub use stats::Stats;
