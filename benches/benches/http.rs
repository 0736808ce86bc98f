//! Through HTTP: the same axum handler bare, behind ratelab-http and behind
//! tower_governor, on the admitted path (a quota never exhausted) and the
//! refused path (a quota exhausted before measuring); over loopback sockets
//! (the targets' figures), and in process (a diagnostic).
//!
//! Groups (the function, or the row's backend, being a stack: `axum`,
//! `ratelab-http`, `tower-governor`, and each layer as the other sends,
//! `ratelab-http-lean` and `tower-governor-headers`):
//!
//! - `http-socket-admitted`, `http-socket-refused`: over loopback TCP. Each
//!   app is served by `axum::serve` (`into_make_service_with_connect_info`,
//!   `TCP_NODELAY`) on a current-thread tokio runtime on one thread, every
//!   app on its own port; the load generator, on another thread, is a
//!   hyper HTTP/1.1 client with 16 keep-alive connections to each app,
//!   each connection sending `GET /` as soon as the last response was read.
//!   The two threads are pinned to two distinct cores (other processes may
//!   still run there). Paired rounds (41 of 0.25 s; 11 of 0.15 s quick):
//!   the stacks in turn, the order rotating each round, each for the same
//!   time, after one round each to warm up; each stack's figure is
//!   its median over the rounds: requests per second admitted (200) on the
//!   admitted path, refused (429) on the refused path (the bare handler
//!   admits all), and the server thread's CPU time per request (from
//!   `/proc`, Linux). Recorded too, and printed: each stack's ratio to
//!   tower_governor round by round (median and quartiles: metrics
//!   `ratio_per_round`, `_q1`, `_q3`; what the targets judge, a drift of the
//!   machine falling on both sides of each ratio), of requests per second,
//!   and in `<group>-server-cpu` of requests per second of the server's CPU
//!   time. Printed: each stack's ratio to tower_governor
//!   round by round (median, quartiles, range), of requests per second and
//!   of requests per second of the server's CPU time (which other processes
//!   on the machine move less), and the share of each round the server
//!   thread and the load generator were on a CPU (near 1: that thread is
//!   the bottleneck; both well below: the machine is busy).
//! - `http-in-process-admitted`, `http-in-process-refused` (criterion) and
//!   `<group>-paired` (paired rounds, as above): in process, one thread.
//!   Each app is an axum `Router` driven as a tower `Service` on a
//!   current-thread tokio runtime (time enabled, as a server's): one request
//!   at a time, built afresh for each call (`GET /`, no body,
//!   `ConnectInfo<SocketAddr>` in its extensions, as
//!   `into_make_service_with_connect_info` puts it), the response's body
//!   read to its end, as a server would before writing it. No socket, no
//!   HTTP parsing: what is timed is the router, the layer and the handler,
//!   which is where the two layers differ, and a ceiling no user sees.
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
//! measuring, in every mode, each app's answers are checked (status, body,
//! which rate limit fields are there and their values), over the socket as
//! in process, so that no broken setup is timed; in test mode
//! (`cargo test --bench http`) the socket groups check, run one short round
//! each, and stop their threads.

use std::hint::black_box;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use criterion::{BenchmarkGroup, Throughput, measurement::WallTime};
use http::{Response, StatusCode};
use ratelab_benches::run::load_average;
use ratelab_benches::{Metric, Mode, Recorder, Row, Spread, median, paired_rounds};
use tokio::runtime::Runtime;

#[path = "../src/http_apps.rs"]
mod http_apps;
#[path = "../src/http_socket.rs"]
mod http_socket;

use http_apps::{Path, STACKS, app, exchange};
use http_socket::{Round, with_sockets};

/// The stack every other is compared with, round by round.
const REFERENCE: &str = "tower-governor";

/// Keep-alive connections the load generator keeps to each app.
const CONNECTIONS: usize = 16;

/// Checks that a stack answers as `path` says it should (consuming the one
/// request a refused path's quota holds first), and panics otherwise;
/// `exchange` makes one request and answers the response's head and body.
fn check(path: Path, name: &str, mut exchange: impl FnMut() -> (Response<()>, Bytes)) {
    if path == Path::Refused && name != "axum" {
        let (first, _) = exchange();
        assert_eq!(first.status(), StatusCode::OK, "{name}: the one admitted");
    }
    for _ in 0..3 {
        let (response, body) = exchange();
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
            "tower-governor-headers" => ["x-ratelimit-limit", "x-ratelimit-remaining"].as_slice(),
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
}

fn apps(path: Path) -> Vec<(&'static str, Router)> {
    STACKS
        .iter()
        .map(|&stack| (stack, app(path, stack).expect("a known stack")))
        .collect()
}

fn main() {
    let mode = Mode::from_args();
    let mut c = ratelab_benches::criterion(&mode);
    let mut rec = Recorder::new("http", &mode);
    for path in [Path::Admitted, Path::Refused] {
        socket(&mut rec, &mode, path);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    for path in [Path::Admitted, Path::Refused] {
        let group_name = path.group();
        if !mode.criterion_only() && !mode.wants_any(group_name, STACKS.iter().copied()) {
            continue;
        }
        let mut apps = apps(path);
        for (stack, app) in &mut apps {
            check(path, stack, || rt.block_on(exchange(app)));
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
        in_process_paired(&mut rec, &mode, &rt, path);
    }
    c.final_summary();
    rec.finish();
}

/// The socket groups (see the crate docs): paired rounds over loopback.
fn socket(rec: &mut Recorder, mode: &Mode, path: Path) {
    let group = path.socket_group();
    if mode.criterion_only() || !mode.wants_any(group, STACKS.iter().copied()) {
        return;
    }
    let rounds = mode.size(41, 11, 1);
    let round_time = Duration::from_millis(mode.size(250, 150, 20));
    let connections = mode.size(CONNECTIONS, CONNECTIONS, 2);
    let load_before = load_average();
    let (stacks, apps): (Vec<&str>, Vec<Router>) = apps(path).into_iter().unzip();
    let names = stacks.clone();
    let mut rounds_of: Vec<Vec<Round>> = with_sockets(apps, connections, move |client| {
        for (i, stack) in names.iter().enumerate() {
            check(path, stack, || client.exchange(i));
        }
        // Warm-up: every connection's buffers, the limiters' keys, the
        // allocator's pools.
        for i in 0..names.len() {
            client.round(i, round_time);
        }
        paired_rounds(rounds, names.len(), |i| client.round(i, round_time))
    });
    // What every round answered, against what the path promises.
    for (stack, rounds) in stacks.iter().zip(&rounds_of) {
        for round in rounds {
            let refusing = path == Path::Refused && *stack != "axum";
            let (answered, never) = if refusing {
                (round.refused, round.admitted)
            } else {
                (round.admitted, round.refused)
            };
            assert!(
                answered > 0 && never == 0,
                "{group}/{stack}: {round:?} on the {path:?} path"
            );
        }
    }
    if mode.is_test() {
        let requests: u64 = rounds_of
            .iter()
            .flatten()
            .map(|r| r.admitted + r.refused)
            .sum();
        eprintln!(
            "{group}: {} stacks checked over loopback, {requests} requests in one round each",
            stacks.len()
        );
        return;
    }
    let per_sec = |stack: &str, round: &Round| {
        if path == Path::Refused && stack != "axum" {
            round.refused_per_sec()
        } else {
            round.admitted_per_sec()
        }
    };
    let figures: Vec<Vec<f64>> = stacks
        .iter()
        .zip(&rounds_of)
        .map(|(stack, rounds)| rounds.iter().map(|r| per_sec(stack, r)).collect())
        .collect();
    let reference = stacks
        .iter()
        .position(|s| *s == REFERENCE)
        .expect("the reference stack");
    eprintln!(
        "{group}: {rounds} rounds of {round_time:?}, {connections} connections per stack; load average {load_before} before, {} after",
        load_average()
    );
    // The server's CPU time per request, round by round: throughput while
    // the server runs (the reference's time over this stack's), which the
    // other processes on the machine move less than requests per second.
    let server_ns: Vec<Vec<f64>> = rounds_of
        .iter()
        .map(|rounds| {
            rounds
                .iter()
                .filter_map(Round::server_ns_per_request)
                .collect()
        })
        .collect();
    for (k, stack) in stacks.iter().enumerate() {
        if k != reference {
            let spread = Spread::of_ratios(&figures[k], &figures[reference]);
            eprintln!("{group}/{stack}: requests/s per round / {REFERENCE}: {spread}");
            for row in spread.rows(|metric, value| Row::new(group, "gcra", stack, metric, value)) {
                rec.push(row);
            }
            if server_ns[k].len() == rounds && server_ns[reference].len() == rounds {
                let spread = Spread::of_ratios(&server_ns[reference], &server_ns[k]);
                eprintln!(
                    "{group}/{stack}: requests per server CPU second per round / {REFERENCE}: {spread}"
                );
                let cpu_group = format!("{group}-server-cpu");
                for row in
                    spread.rows(|metric, value| Row::new(&cpu_group, "gcra", stack, metric, value))
                {
                    rec.push(row);
                }
            }
        }
    }
    for ((stack, figures), rounds) in stacks.iter().zip(figures).zip(&mut rounds_of) {
        let per_sec = median(&mut figures.clone());
        rec.push(Row::new(
            group,
            "gcra",
            stack,
            Metric::ChecksPerSec,
            per_sec,
        ));
        let mut server_ns: Vec<f64> = rounds
            .iter()
            .filter_map(Round::server_ns_per_request)
            .collect();
        let mut busy: Vec<f64> = rounds.iter().filter_map(Round::server_busy).collect();
        let mut client_busy: Vec<f64> = rounds.iter().filter_map(Round::client_busy).collect();
        if !server_ns.is_empty() {
            let ns = median(&mut server_ns);
            rec.push(Row::new(group, "gcra", stack, Metric::NsPerCheck, ns));
            eprintln!(
                "{group}/{stack}: median of {} rounds: {per_sec:.0} requests/s, server {ns:.0} ns of CPU per request, on a CPU {:.0} % of the round (the load generator {:.0} %)",
                figures.len(),
                median(&mut busy) * 100.0,
                median(&mut client_busy) * 100.0,
            );
        }
    }
}

/// Paired rounds in process (`<group>-paired`): the stacks run in turn, the
/// order rotating each round, the same number of exchanges each, and each
/// stack's figure is its median over the rounds. Criterion measures one
/// stack after another, seconds apart, and this machine's speed moves by a
/// third over that time with no change to the code; in turn, the drift
/// falls on every stack alike.
fn in_process_paired(rec: &mut Recorder, mode: &Mode, rt: &Runtime, path: Path) {
    if mode.criterion_only() {
        return;
    }
    let rounds = mode.size(15, 5, 2);
    let exchanges: u32 = mode.size(40_000, 10_000, 100);
    let mut apps = apps(path);
    for (stack, app) in &mut apps {
        // Consumes the refused path's one admitted request, and checks.
        check(path, stack, || rt.block_on(exchange(app)));
    }
    let mut times = paired_rounds(rounds, apps.len(), |i| {
        let app = &mut apps[i].1;
        let took = rt.block_on(async {
            let started = Instant::now();
            for _ in 0..exchanges {
                black_box(exchange(app).await);
            }
            started.elapsed()
        });
        took.as_secs_f64() * 1e9 / f64::from(exchanges)
    });
    let group = format!("{}-paired", path.group());
    let reference = apps
        .iter()
        .position(|(s, _)| *s == REFERENCE)
        .expect("the reference stack");
    for (k, (stack, _)) in apps.iter().enumerate() {
        if k != reference && !mode.is_test() {
            // Throughput: the reference's time over this stack's.
            let spread = Spread::of_ratios(&times[reference], &times[k]);
            eprintln!("{group}/{stack}: requests/s per round / {REFERENCE}: {spread}");
        }
    }
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
