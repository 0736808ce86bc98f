//! `ShouldRateLimit` throughput, ratelab-server beside envoyproxy/ratelimit
//! on the same machine and the same Redis.
//!
//! The reference is yours: build it, start it against a Redis, and give
//! its gRPC address and that Redis's URL (see `benches/server-vs-reference/
//! README.md`, or `just bench-server`). This program starts ratelab-server
//! (the release binary beside it) four times: on that Redis, counting as
//! the reference does (`envoy-fixed-window`, its very keys and commands);
//! in memory; and with GCRA on Redis, once through the Lua scripts and once
//! through ratelab's native module (two redis-servers it starts, the second
//! with the module loaded). Each is configured by the same environment
//! variables and YAML as the reference (`benches/server-vs-reference/
//! ratelimit/config/bench.yaml`).
//!
//! Each row: `--seconds` of closed-loop load after a second's warm-up,
//! `--concurrency` calls in flight over eight HTTP/2 connections, one
//! descriptor a call, a limit never reached (every call a full check that
//! admits); once on one hot key, once over 10,000 distinct keys. The
//! figures: answers per second, latency percentiles, errors. Written to
//! `reports/bench/server-vs-reference.md` and `.json`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratelab_testkit::redis::RedisServer;
use tonic::transport::Channel;

const CONNECTIONS: usize = 8;
const DISTINCT_KEYS: u64 = 10_000;

struct Options {
    reference: Option<String>,
    redis: Option<String>,
    ratelab_bin: PathBuf,
    module: PathBuf,
    seconds: u64,
    concurrency: usize,
    out: PathBuf,
}

fn options() -> Options {
    let exe = std::env::current_exe().expect("this program's path");
    let dir = exe.parent().expect("a directory").to_owned();
    let mut options = Options {
        reference: None,
        redis: None,
        ratelab_bin: dir.join("ratelab-server"),
        module: dir.join(format!(
            "{}ratelab_redis_module{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        )),
        seconds: 5,
        concurrency: 64,
        out: Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/bench"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--reference" => options.reference = Some(value()),
            "--redis" => options.redis = Some(value()),
            "--ratelab-bin" => options.ratelab_bin = value().into(),
            "--module" => options.module = value().into(),
            "--seconds" => options.seconds = value().parse().expect("--seconds N"),
            "--concurrency" => options.concurrency = value().parse().expect("--concurrency N"),
            "--out" => options.out = value().into(),
            "--help" | "-h" => {
                println!(
                    "server-vs-reference --reference HOST:PORT --redis redis://HOST:PORT [--seconds 5] [--concurrency 64] [--ratelab-bin PATH] [--module PATH] [--out DIR]"
                );
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    options
}

/// A ratelab-server process, killed on drop.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts ratelab-server with the reference's environment (`redis`:
/// `host:port`, or none for memory) and `args`; its gRPC address.
fn start(bin: &Path, redis: Option<&str>, args: &[&str]) -> (Process, String) {
    let runtime = Path::new(env!("CARGO_MANIFEST_DIR")).join("server-vs-reference");
    let mut command = Command::new(bin);
    command
        .env_clear()
        .env("RUNTIME_ROOT", &runtime)
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("RUNTIME_WATCH_ROOT", "false")
        .env("USE_STATSD", "false")
        .env("LOG_LEVEL", "warn")
        .env("PORT", "0")
        .env("DEBUG_PORT", "0")
        .env("HOST", "127.0.0.1")
        .env("DEBUG_HOST", "127.0.0.1")
        .env("CACHE_KEY_PREFIX", "ratelab_")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(redis) = redis {
        command
            .env("REDIS_SOCKET_TYPE", "tcp")
            .env("REDIS_URL", redis);
    }
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e} (cargo build --release -p ratelab-server)", bin.display()));
    let stdout = child.stdout.take().expect("piped");
    let process = Process(child);
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("its output");
        if let Some(rest) = line.strip_prefix("listening on ") {
            let addr = rest.split_whitespace().next().expect("an address").to_owned();
            return (process, addr);
        }
    }
    panic!("{} exited before listening", bin.display());
}

fn host_port(url: &str) -> String {
    url.trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned()
}

fn request(value: String) -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value,
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

struct Figures {
    per_second: f64,
    p50_us: u64,
    p99_us: u64,
    errors: u64,
    over_limit: u64,
}

async fn connect(addr: &str) -> Vec<RateLimitServiceClient<Channel>> {
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("an address")
            .connect()
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
        clients.push(RateLimitServiceClient::new(channel));
    }
    clients
}

/// Closed-loop load for `seconds`, after a second's warm-up.
async fn load(clients: &[RateLimitServiceClient<Channel>], hot: bool, seconds: u64, concurrency: usize) -> Figures {
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..concurrency {
        let mut client = clients[task % clients.len()].clone();
        let (measuring, stop) = (measuring.clone(), stop.clone());
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let (mut errors, mut over) = (0u64, 0u64);
            let mut n = task as u64 * 7919;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let value = if hot {
                    "hot".to_owned()
                } else {
                    format!("u{}", n % DISTINCT_KEYS)
                };
                let start = Instant::now();
                let answer = client.should_rate_limit(request(value)).await;
                let took = start.elapsed();
                if measuring.load(Ordering::Relaxed) {
                    latencies.push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
                    match answer {
                        Ok(a) if a.get_ref().overall_code == Code::Ok as i32 => {}
                        Ok(_) => over += 1,
                        Err(_) => errors += 1,
                    }
                }
            }
            (latencies, errors, over)
        });
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    measuring.store(true, Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    let (mut errors, mut over) = (0, 0);
    while let Some(done) = tasks.join_next().await {
        let (l, e, o) = done.expect("a load task");
        latencies.extend(l);
        errors += e;
        over += o;
    }
    latencies.sort_unstable();
    let at = |q: f64| latencies.get(((latencies.len() as f64 - 1.0) * q) as usize).copied().unwrap_or(0);
    Figures {
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_us: at(0.5),
        p99_us: at(0.99),
        errors,
        over_limit: over,
    }
}

fn main() {
    let options = options();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut rows: Vec<(String, String, Figures)> = Vec::new();
    let mut targets: Vec<(String, String, Option<Process>, Option<RedisServer>)> = Vec::new();

    if let (Some(reference), Some(redis)) = (&options.reference, &options.redis) {
        targets.push((
            "envoyproxy/ratelimit".into(),
            format!("Redis at {redis}"),
            None,
            None,
        ));
        let _ = reference;
        let (process, addr) = start(&options.ratelab_bin, Some(&host_port(redis)), &[]);
        targets.push(("ratelab-server".into(), format!("{addr}|Redis at {redis}"), Some(process), None));
    } else {
        eprintln!("no --reference and --redis: the reference's rows and ratelab-server's beside them on its Redis are left out");
    }
    let (memory, addr) = start(&options.ratelab_bin, None, &[]);
    targets.push(("ratelab-server".into(), format!("{addr}|memory"), Some(memory), None));
    let scripts = RedisServer::start();
    let (process, addr) = start(
        &options.ratelab_bin,
        Some(&host_port(&scripts.url())),
        &["--default-algorithm", "gcra"],
    );
    targets.push(("ratelab-server GCRA".into(), format!("{addr}|Redis, Lua scripts"), Some(process), Some(scripts)));
    let module = options
        .module
        .to_str()
        .unwrap_or_else(|| panic!("the module's path is not UTF-8"))
        .to_owned();
    let with_module = RedisServer::try_start_with(&["--loadmodule", &module]).unwrap_or_else(|e| {
        panic!("redis-server did not start with ratelab's module {module} (cargo build --release -p ratelab-redis-module): {e}")
    });
    let (process, addr) = start(
        &options.ratelab_bin,
        Some(&host_port(&with_module.url())),
        &["--default-algorithm", "gcra"],
    );
    targets.push(("ratelab-server GCRA".into(), format!("{addr}|Redis, native module"), Some(process), Some(with_module)));

    for (who, where_, _process, redis) in &targets {
        let (addr, backend) = match where_.split_once('|') {
            Some((addr, backend)) => (addr.to_owned(), backend.to_owned()),
            None => (options.reference.clone().expect("the reference"), where_.clone()),
        };
        let clients = runtime.block_on(connect(&addr));
        // Checked before it is timed: it answers, and limits.
        let first = runtime
            .block_on(clients[0].clone().should_rate_limit(request("check".into())))
            .unwrap_or_else(|e| panic!("{who} at {addr} does not answer: {e}"))
            .into_inner();
        assert_eq!(first.overall_code, Code::Ok as i32, "{who}: {first:?}");
        assert_eq!(
            first.statuses[0].current_limit.as_ref().map(|l| l.requests_per_unit),
            Some(1_000_000),
            "{who} at {addr} is not configured with benches/server-vs-reference: {first:?}"
        );
        for (workload, hot) in [("one hot key", true), ("10,000 keys", false)] {
            let figures = runtime.block_on(load(&clients, hot, options.seconds, options.concurrency));
            eprintln!(
                "{who} ({backend}), {workload}: {:.0}/s, p50 {} µs, p99 {} µs, {} errors",
                figures.per_second, figures.p50_us, figures.p99_us, figures.errors
            );
            rows.push((format!("{who} | {backend}"), workload.into(), figures));
        }
        if let Some(redis) = redis {
            let stats = redis.command(&["INFO", "commandstats"]).unwrap_or_default();
            let ran: Vec<&str> = stats
                .lines()
                .filter(|l| l.starts_with("cmdstat_evalsha") || l.starts_with("cmdstat_ratelab.gcra"))
                .collect();
            eprintln!("  {backend}: {}", ran.join("; "));
        }
    }

    let mut table = String::from(
        "| service | backend | keys | answers/s | p50 µs | p99 µs | errors |\n|---|---|---|---:|---:|---:|---:|\n",
    );
    let mut json = Vec::new();
    for (target, workload, f) in &rows {
        table.push_str(&format!(
            "| {target} | {workload} | {:.0} | {} | {} | {} |\n",
            f.per_second, f.p50_us, f.p99_us, f.errors
        ));
        json.push(serde_json::json!({
            "target": target, "keys": workload, "answers_per_second": f.per_second.round(),
            "p50_us": f.p50_us, "p99_us": f.p99_us, "errors": f.errors, "over_limit": f.over_limit,
        }));
    }
    println!("{table}");
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let text = format!(
        "# ShouldRateLimit: ratelab-server beside envoyproxy/ratelimit\n\n\
         Written by `just bench-server` (`benches/src/bin/server-vs-reference.rs`; how to run it: \
         `benches/server-vs-reference/README.md`). One machine ({cores} cores), every service and redis-server \
         on it with the load generator; {} s of closed-loop load per row after a second's warm-up, {} calls in \
         flight over {CONNECTIONS} HTTP/2 connections, one descriptor a call, a limit never reached (1,000,000 a \
         second: every call a full check that admits). \"One hot key\": every call the same descriptor; \
         \"10,000 keys\": the calls cycle over 10,000 values. The reference and ratelab-server on Redis use the \
         same redis-server and count the same way (`INCRBY` and `EXPIRE` of a key per second, pipelined); GCRA's \
         rows use redis-servers of their own, one without and one with ratelab's module.\n\n{table}",
        options.seconds, options.concurrency
    );
    std::fs::create_dir_all(&options.out).expect("the report's directory");
    std::fs::write(options.out.join("server-vs-reference.md"), text).expect("the report");
    std::fs::write(
        options.out.join("server-vs-reference.json"),
        serde_json::to_string_pretty(&json).expect("json"),
    )
    .expect("the report");
}
