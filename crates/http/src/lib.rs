//! Rate limiting in front of an HTTP API: a tower layer, for axum and plain
//! hyper, that identifies the client (API key, authenticated user, or IP
//! address, reading `X-Forwarded-For` only from trusted proxies), applies
//! per-route and per-plan [`Policy`]s over any ratelab limiter (any
//! algorithm, in memory or on Redis), refuses with `429 Too Many Requests`,
//! `Retry-After` and an RFC 9457 problem body, and puts the IETF
//! `RateLimit-Policy` and `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers-11)
//! on every response. Several policies on one request are all or nothing
//! (what one took for a request another refused is given back); a policy
//! can count only failures, or charge what the response says the request
//! cost (tokens, bytes); a [`LoginGuard`] protects a login route so that a
//! stranger cannot lock the owner out.
//!
//! ```
//! use http::{Method, Request, Response, StatusCode};
//! use ratelab_core::{Keyed, ManualClock, Quota};
//! use ratelab_gcra::Gcra;
//! use ratelab_http::{PeerAddr, Policy, RateLimitLayer};
//! use std::convert::Infallible;
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = ManualClock::new(); // time stands still in this example
//! let per_client = Keyed::with_clock(Gcra::new(Quota::per_minute(2)?), clock.clone());
//! let logins = Keyed::with_clock(Gcra::new(Quota::per_minute(1)?), clock.clone());
//! let layer = RateLimitLayer::builder()
//!     .policy(Policy::new("default", per_client))
//!     .policy(Policy::new("login", logins).route(Method::POST, "/login"))
//!     .build()?;
//! let app = layer.layer(service_fn(|_: Request<()>| async {
//!     Ok::<_, Infallible>(Response::new("hello"))
//! }));
//!
//! // With axum, `into_make_service_with_connect_info::<SocketAddr>()` provides the
//! // peer address; here we set it by hand.
//! let from = |method: Method, path: &str| {
//!     let mut request = Request::builder().method(method).uri(path).body(()).unwrap();
//!     request.extensions_mut().insert(PeerAddr("203.0.113.9:4711".parse().unwrap()));
//!     request
//! };
//!
//! let ok = app.clone().oneshot(from(Method::GET, "/")).await?;
//! assert_eq!(ok.status(), StatusCode::OK);
//! assert_eq!(ok.headers()["ratelimit-policy"], r#""default";q=2;w=60"#);
//! assert_eq!(ok.headers()["ratelimit"], r#""default";r=1;t=30"#);
//!
//! // The login route is under both policies.
//! let login = app.clone().oneshot(from(Method::POST, "/login")).await?;
//! assert_eq!(login.headers()["ratelimit"], r#""default";r=0;t=30, "login";r=0;t=60"#);
//!
//! let refused = app.clone().oneshot(from(Method::GET, "/")).await?;
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["retry-after"], "30");
//! assert_eq!(refused.headers()["ratelimit"], r#""default";r=0;t=30"#);
//! assert_eq!(refused.headers()["content-type"], "application/problem+json");
//! # Ok(()) }
//! ```
//!
//! The layer is `ratelab-http-core`'s [`Limits`] on top of tower: the
//! identity, the policies, the engine, the login guard and the responses
//! are the core's (re-exported here), so that another framework can drive
//! the same decisions without tower. Feature `axum` (off by default) reads
//! the peer address from axum's `ConnectInfo<SocketAddr>`; plain hyper
//! servers wrap each connection's service in [`SetPeerAddr`] and need no
//! axum. With axum, [`RateLimitLayer::with_service_body`] answers in axum's
//! own `Body`, which axum passes on as it is (the default [`LimitedBody`]
//! is boxed into one again on every response). The client side (outgoing calls that wait for their turn) is
//! `ratelab-throttle`.
//!
//! Next: [`guide`] for exactly what the layer does (identity, several
//! policies on one request, how the headers are computed, failures,
//! counting and settling after the response), [`Identify`] and
//! [`TrustedProxies`] for client identity, [`Policy`] for routes, plans,
//! keys, costs and [settlements](Policy::settle_with), [`LoginGuard`] for
//! logins. The crate's `examples/server.rs` is a runnable API (in memory,
//! or on Redis with `REDIS_URL`).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod body;
mod future;
pub mod guide;
mod layer;
mod peer;
mod service;
mod shared;

pub use body::{LimitedBody, Refusal, ResponseBody, ServiceBody, WrapBody};
pub use future::ResponseFuture;
pub use layer::{RateLimitLayer, RateLimitLayerBuilder};
pub use peer::SetPeerAddr;
pub use ratelab_http_core::telemetry;
pub use ratelab_http_core::{
    Client, ClientKind, ConfigError, Count, DEFAULT_TIMEOUT, FailureMode, ForwardedHeader,
    HeaderStyle, Identify, Identity, InvalidNetwork, LegacyReset, LimitOutcome, LimiterFailure,
    Limits, LoginAttempt, LoginGuard, LoginGuardBuilder, LoginGuardError, MIN_SECRET_LEN, PeerAddr,
    Policy, PolicyOutcome, PolicyStatus, QUOTA_EXCEEDED, RATELIMIT, RATELIMIT_POLICY,
    RateLimitInfo, Route, RouteError, SameSite, Stats, TrustedProxies, X_RATELIMIT_LIMIT,
    X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
pub use service::RateLimit;
