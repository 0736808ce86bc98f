//! The apps the HTTP bench compares, and one exchange with them: shared by
//! `benches/http.rs`, `benches/instructions.rs` and `examples/http_path.rs`
//! (included by path: they
//! use the bench's dev-dependencies, which the library cannot).

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::{Request, Response};
use http_body_util::BodyExt;
use ratelab_core::{Keyed, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{HeaderStyle, Policy, RateLimitLayer};
use tower::{Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

/// The peer every request comes from.
pub(crate) const PEER: &str = "203.0.113.9:4711";

/// Which path a group measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// The quota is never exhausted: every request reaches the handler.
    Admitted,
    /// The quota is exhausted: every request is refused with 429.
    Refused,
}

impl Path {
    /// The in-process group (a diagnostic: the router, the layer and the
    /// handler, with no socket and no HTTP parsing).
    #[allow(
        dead_code,
        reason = "the bench's and the example's, not the instruction count's"
    )]
    pub(crate) fn group(self) -> &'static str {
        match self {
            Path::Admitted => "http-in-process-admitted",
            Path::Refused => "http-in-process-refused",
        }
    }

    /// The group over loopback sockets (the targets' figures).
    #[allow(dead_code, reason = "the bench's, not the example's")]
    pub(crate) fn socket_group(self) -> &'static str {
        match self {
            Path::Admitted => "http-socket-admitted",
            Path::Refused => "http-socket-refused",
        }
    }

    /// ratelab's quota for this path.
    pub(crate) fn quota(self) -> Quota {
        let quota = match self {
            Path::Admitted => Quota::per_second(1_000).and_then(|q| q.with_burst(u32::MAX)),
            Path::Refused => Quota::per_hour(1),
        };
        quota.expect("a valid quota")
    }
}

/// The handler every app runs.
async fn hello() -> &'static str {
    "hello"
}

pub(crate) fn bare() -> Router {
    Router::new().route("/", get(hello))
}

/// ratelab-http as it comes (`lean`: without what tower_governor does not
/// do either: no rate limit fields, no request extensions), as its docs
/// set it up for axum: its responses in axum's own body type.
pub(crate) fn ratelab(path: Path, lean: bool) -> Router {
    let mut layer = RateLimitLayer::builder()
        .policy(Policy::new("per-ip", Keyed::new(Gcra::new(path.quota()))));
    if lean {
        layer = layer.headers(HeaderStyle::None).request_extensions(false);
    }
    let layer = layer.build().expect("a valid layer").with_service_body();
    bare().layer(layer)
}

/// tower_governor as it comes (`headers`: with its `x-ratelimit-limit` and
/// `x-ratelimit-remaining` on every response, as ratelab-http sends its
/// fields).
pub(crate) fn governor(path: Path, headers: bool) -> Router {
    let mut config = GovernorConfigBuilder::default();
    match path {
        Path::Admitted => config.per_millisecond(1).burst_size(u32::MAX),
        Path::Refused => config.period(Duration::from_secs(3600)).burst_size(1),
    };
    if headers {
        let config = config
            .use_headers()
            .finish()
            .expect("a valid governor config");
        return bare().layer(GovernorLayer::new(config));
    }
    let config = config.finish().expect("a valid governor config");
    bare().layer(GovernorLayer::new(config))
}

/// `GET /` from [`PEER`], as axum's connect info gives it.
pub(crate) fn request() -> Request<Body> {
    let mut request = Request::get("/").body(Body::empty()).expect("a request");
    let peer: SocketAddr = PEER.parse().expect("an address");
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

/// One exchange: the app called when ready, the body read to its end.
pub(crate) async fn exchange(app: &mut Router) -> (Response<()>, axum::body::Bytes) {
    let response = ServiceExt::<Request<Body>>::ready(app)
        .await
        .expect("axum is always ready")
        .call(request())
        .await
        .expect("axum never fails");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("a body").to_bytes();
    (Response::from_parts(parts, ()), body)
}

/// The stacks, by function name: each layer as it comes, then each as the
/// other sends (equal output: the lean ratelab-http adds nothing to an
/// admitted response, like tower_governor; tower_governor with its headers
/// adds its fields to every response, like ratelab-http).
pub(crate) const STACKS: [&str; 5] = [
    "axum",
    "ratelab-http",
    "tower-governor",
    "ratelab-http-lean",
    "tower-governor-headers",
];

/// The app of `stack` (one of [`STACKS`]) on one path.
pub(crate) fn app(path: Path, stack: &str) -> Option<Router> {
    Some(match stack {
        "axum" => bare(),
        "ratelab-http" => ratelab(path, false),
        "tower-governor" => governor(path, false),
        "ratelab-http-lean" => ratelab(path, true),
        "tower-governor-headers" => governor(path, true),
        _ => return None,
    })
}
