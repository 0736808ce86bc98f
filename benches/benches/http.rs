//! Through HTTP: the same axum handler bare, behind ratelab-http and behind
//! tower_governor, on the admitted path (a quota never exhausted) and the
//! refused path (a quota exhausted before measuring).
//!
//! Groups (criterion ids `<group>/<function>`, the function being `axum`,
//! `ratelab-http` or `tower-governor`): `http-admitted`, `http-refused`.
//!
//! Terms: in process, one thread. Each app is an axum `Router` driven as a
//! tower `Service` on a current-thread tokio runtime (time enabled, as a
//! server's): one request at a time, built afresh for each call
//! (`GET /`, no body, `ConnectInfo<SocketAddr>` in its extensions, as
//! `into_make_service_with_connect_info` puts it), the response's body read
//! to its end, as a server would before writing it. No socket, no HTTP
//! parsing: what is timed is the router, the layer and the handler, which
//! is where the two layers differ.
//!
//! Policy, equal on both sides: one per-IP quota, GCRA (governor is GCRA),
//! each on its default clock (ratelab's `Keyed::new`, tower_governor's
//! quanta) and with its default headers (ratelab-http: the
//! IETF `RateLimit-Policy` and `RateLimit` on every response; tower_governor:
//! none when admitted, `x-ratelimit-after` and `retry-after` on a refusal).
//! Admitted: 1,000/s with a burst of `u32::MAX` (never exhausted in a run).
//! Refused: 1 per hour with a burst of 1, consumed before measuring. Before
//! measuring, in every mode, one request per app checks the status and the
//! headers, so that no broken setup is timed.

use std::hint::black_box;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use criterion::{BenchmarkGroup, Throughput, measurement::WallTime};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use ratelab_benches::{Metric, Mode, Recorder};
use ratelab_core::{Keyed, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{Policy, RateLimitLayer};
use tokio::runtime::Runtime;
use tower::{Service, ServiceExt};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

/// The peer every request comes from.
const PEER: &str = "203.0.113.9:4711";

/// Which path a group measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// The quota is never exhausted: every request reaches the handler.
    Admitted,
    /// The quota is exhausted: every request is refused with 429.
    Refused,
}

impl Path {
    fn group(self) -> &'static str {
        match self {
            Path::Admitted => "http-admitted",
            Path::Refused => "http-refused",
        }
    }

    /// ratelab's quota for this path.
    fn quota(self) -> Quota {
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

fn bare() -> Router {
    Router::new().route("/", get(hello))
}

fn ratelab(path: Path) -> Router {
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("per-ip", Keyed::new(Gcra::new(path.quota()))))
        .build()
        .expect("a valid layer");
    bare().layer(layer)
}

fn governor(path: Path) -> Router {
    let mut config = GovernorConfigBuilder::default();
    match path {
        Path::Admitted => config.per_millisecond(1).burst_size(u32::MAX),
        Path::Refused => config.period(Duration::from_secs(3600)).burst_size(1),
    };
    let config = config.finish().expect("a valid governor config");
    bare().layer(GovernorLayer::new(config))
}

/// `GET /` from [`PEER`], as axum's connect info gives it.
fn request() -> Request<Body> {
    let mut request = Request::get("/").body(Body::empty()).expect("a request");
    let peer: SocketAddr = PEER.parse().expect("an address");
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

/// One exchange: the app called when ready, the body read to its end.
async fn exchange(app: &mut Router) -> (Response<()>, axum::body::Bytes) {
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

/// The apps of one path, by function name.
fn apps(path: Path) -> [(&'static str, &'static str, Router); 3] {
    [
        ("axum", "axum", bare()),
        ("ratelab-http", "ratelab-http", ratelab(path)),
        ("tower-governor", "tower-governor", governor(path)),
    ]
}

/// Checks that `app` answers as `path` says it should (consuming the one
/// request a refused path's quota holds first), and panics otherwise.
fn check(rt: &Runtime, path: Path, name: &str, app: &mut Router) {
    rt.block_on(async {
        if path == Path::Refused && name != "axum" {
            let (first, _) = exchange(app).await;
            assert_eq!(first.status(), StatusCode::OK, "{name}: the one admitted");
        }
        for _ in 0..3 {
            let (response, body) = exchange(app).await;
            let headers = response.headers();
            let has = |header: &str| headers.contains_key(header);
            match (path, name) {
                (Path::Admitted, _) | (Path::Refused, "axum") => {
                    assert_eq!(response.status(), StatusCode::OK, "{name}");
                    assert_eq!(&body[..], b"hello", "{name}");
                }
                _ => assert_eq!(
                    response.status(),
                    StatusCode::TOO_MANY_REQUESTS,
                    "{name}: {body:?}"
                ),
            }
            match (path, name) {
                (_, "axum") => assert!(!has("ratelimit") && !has("retry-after"), "{name}"),
                (Path::Admitted, "ratelab-http") => {
                    assert_eq!(
                        headers["ratelimit-policy"],
                        r#""per-ip";q=4294967295;w=4294968"#
                    );
                    assert!(
                        headers["ratelimit"]
                            .to_str()
                            .is_ok_and(|v| v.starts_with(r#""per-ip";r=42949"#)),
                        "{headers:?}"
                    );
                    assert!(!has("retry-after"));
                }
                (Path::Refused, "ratelab-http") => {
                    assert_eq!(headers["ratelimit-policy"], r#""per-ip";q=1;w=3600"#);
                    assert_eq!(headers["content-type"], "application/problem+json");
                    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
                    assert!((3590..=3600).contains(&retry), "{retry}");
                    assert!(
                        headers["ratelimit"]
                            .to_str()
                            .is_ok_and(|v| v.starts_with(r#""per-ip";r=0;t=3"#)),
                        "{headers:?}"
                    );
                }
                (Path::Admitted, _) => assert!(!has("retry-after"), "{name}: {headers:?}"),
                (Path::Refused, _) => {
                    assert!(
                        has("retry-after") && has("x-ratelimit-after"),
                        "{headers:?}"
                    );
                }
            }
        }
    });
}

fn main() {
    let mode = Mode::from_args();
    let mut c = ratelab_benches::criterion(&mode);
    let mut rec = Recorder::new("http", &mode);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    for path in [Path::Admitted, Path::Refused] {
        let group_name = path.group();
        let mut apps = apps(path);
        let functions = apps.iter().map(|(f, _, _)| *f);
        if !mode.criterion_only() && !mode.wants_any(group_name, functions) {
            continue;
        }
        for (function, _, app) in &mut apps {
            check(&rt, path, function, app);
        }
        let mut group = c.benchmark_group(group_name);
        group.throughput(Throughput::Elements(1));
        for (function, backend, app) in apps {
            measure(&mut group, &rt, function, app);
            rec.criterion(
                group_name,
                function,
                ("gcra", backend),
                Metric::NsPerCheck,
                1.0,
            );
            rec.criterion(
                group_name,
                function,
                ("gcra", backend),
                Metric::ChecksPerSec,
                1.0,
            );
        }
        group.finish();
    }
    c.final_summary();
    rec.finish();
}

/// Times `app`, one exchange after another on `rt`.
fn measure(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, function: &str, app: Router) {
    group.bench_function(function, |b| {
        b.to_async(rt).iter_custom(|iters| {
            let mut app = app.clone();
            async move {
                let started = Instant::now();
                for _ in 0..iters {
                    black_box(exchange(&mut app).await);
                }
                started.elapsed()
            }
        });
    });
}
