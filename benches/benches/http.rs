//! Through HTTP: the same axum handler bare, behind ratelab-http and behind
//! tower_governor, on the admitted path (a quota never exhausted) and the
//! refused path (a quota exhausted before measuring).
//!
//! Groups (criterion ids `<group>/<function>`, the function being a stack:
//! `axum`, `ratelab-http`, `tower-governor`, and each layer as the other
//! sends, `ratelab-http-lean` and `tower-governor-headers`):
//! `http-admitted`, `http-refused`.
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
//! quanta). Output: each layer as it comes (ratelab-http: the IETF
//! `RateLimit-Policy` and `RateLimit` on every response, and `Client` and
//! `RateLimitInfo` in an admitted request's extensions; tower_governor:
//! nothing when admitted, `x-ratelimit-after` and `retry-after` on a
//! refusal), and each as the other sends: `ratelab-http-lean`, no rate
//! limit fields and no request extensions (`Retry-After` and the problem
//! body on a refusal); `tower-governor-headers` (`use_headers`), its
//! `x-ratelimit-limit` and `x-ratelimit-remaining` on every response.
//! Admitted: 1,000/s with a burst of `u32::MAX` (never exhausted in a run).
//! Refused: 1 per hour with a burst of 1, consumed before measuring. Before
//! measuring, in every mode, one request per app checks the status and the
//! headers, so that no broken setup is timed.

use std::hint::black_box;
use std::time::Instant;

use axum::Router;
use criterion::{BenchmarkGroup, Throughput, measurement::WallTime};
use http::StatusCode;
use ratelab_benches::{Metric, Mode, Recorder, Row, median};
use tokio::runtime::Runtime;

#[path = "../src/http_apps.rs"]
mod http_apps;

use http_apps::{Path, STACKS, app, exchange};

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
            let refused = path == Path::Refused && name != "axum";
            if refused {
                assert_eq!(
                    response.status(),
                    StatusCode::TOO_MANY_REQUESTS,
                    "{name}: {body:?}"
                );
                assert!(has("retry-after"), "{name}: {headers:?}");
            } else {
                assert_eq!(response.status(), StatusCode::OK, "{name}");
                assert_eq!(&body[..], b"hello", "{name}");
                assert!(!has("retry-after"), "{name}: {headers:?}");
            }
            // Each stack's fields, and none of another's.
            let fields = match name {
                "ratelab-http" => ["ratelimit-policy", "ratelimit"].as_slice(),
                "tower-governor-headers" if refused => [
                    "x-ratelimit-limit",
                    "x-ratelimit-remaining",
                    "x-ratelimit-after",
                ]
                .as_slice(),
                "tower-governor-headers" => {
                    ["x-ratelimit-limit", "x-ratelimit-remaining"].as_slice()
                }
                "tower-governor" if refused => ["x-ratelimit-after"].as_slice(),
                _ => [].as_slice(),
            };
            for field in [
                "ratelimit-policy",
                "ratelimit",
                "x-ratelimit-limit",
                "x-ratelimit-remaining",
                "x-ratelimit-after",
            ] {
                assert_eq!(has(field), fields.contains(&field), "{name}: {headers:?}");
            }
            match (path, name) {
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
                }
                (Path::Refused, "ratelab-http" | "ratelab-http-lean") => {
                    assert_eq!(headers["content-type"], "application/problem+json");
                    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
                    assert!((3590..=3600).contains(&retry), "{retry}");
                    if name == "ratelab-http" {
                        assert_eq!(headers["ratelimit-policy"], r#""per-ip";q=1;w=3600"#);
                        assert!(
                            headers["ratelimit"]
                                .to_str()
                                .is_ok_and(|v| v.starts_with(r#""per-ip";r=0;t=3"#)),
                            "{headers:?}"
                        );
                    }
                }
                _ => {}
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
        let mut apps: Vec<(&str, Router)> = STACKS
            .iter()
            .map(|&stack| (stack, app(path, stack).expect("a known stack")))
            .collect();
        if !mode.criterion_only() && !mode.wants_any(group_name, STACKS.iter().copied()) {
            continue;
        }
        for (stack, app) in &mut apps {
            check(&rt, path, stack, app);
        }
        let mut group = c.benchmark_group(group_name);
        group.throughput(Throughput::Elements(1));
        for (stack, app) in apps {
            measure(&mut group, &rt, stack, app);
            for metric in [Metric::NsPerCheck, Metric::ChecksPerSec] {
                rec.criterion(group_name, stack, ("gcra", stack), metric, 1.0);
            }
        }
        group.finish();
        paired(&mut rec, &mode, &rt, path);
    }
    c.final_summary();
    rec.finish();
}

/// Paired rounds (`<group>-paired`, the targets' figures): the stacks run
/// in turn, the order rotating each round, the same number of exchanges
/// each, and each stack's figure is its median over the rounds. Criterion
/// measures one stack after another, seconds apart, and this machine's
/// speed moves by a third over that time with no change to the code; in
/// turn, the drift falls on every stack alike.
fn paired(rec: &mut Recorder, mode: &Mode, rt: &Runtime, path: Path) {
    if mode.criterion_only() {
        return;
    }
    let rounds = mode.size(15, 5, 2);
    let exchanges: u32 = mode.size(40_000, 10_000, 100);
    let mut apps: Vec<(&str, Router)> = STACKS
        .iter()
        .map(|&stack| (stack, app(path, stack).expect("a known stack")))
        .collect();
    for (stack, app) in &mut apps {
        // Consumes the refused path's one admitted request, and checks.
        check(rt, path, stack, app);
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); apps.len()];
    for round in 0..rounds {
        for k in 0..apps.len() {
            let i = (round + k) % apps.len();
            let app = &mut apps[i].1;
            let took = rt.block_on(async {
                let started = Instant::now();
                for _ in 0..exchanges {
                    black_box(exchange(app).await);
                }
                started.elapsed()
            });
            times[i].push(took.as_secs_f64() * 1e9 / f64::from(exchanges));
        }
    }
    let group = format!("{}-paired", path.group());
    for ((stack, _), times) in apps.iter().zip(&mut times) {
        let ns = median(times);
        eprintln!("{group}/{stack}: median of {rounds} rounds: {ns:.1} ns");
        rec.push(Row::new(&group, "gcra", stack, Metric::NsPerCheck, ns));
        rec.push(Row::new(
            &group,
            "gcra",
            stack,
            Metric::ChecksPerSec,
            1e9 / ns,
        ));
    }
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
