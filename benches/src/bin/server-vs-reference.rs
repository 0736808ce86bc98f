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
    reference_pid: Option<u32>,
    redis: Option<String>,
    ratelab_bin: PathBuf,
    module: PathBuf,
    seconds: u64,
    rounds: usize,
    concurrency: usize,
    out: PathBuf,
}

fn options() -> Options {
    let exe = std::env::current_exe().expect("this program's path");
    let dir = exe.parent().expect("a directory").to_owned();
    let mut options = Options {
        reference: None,
        reference_pid: None,
        redis: None,
        ratelab_bin: dir.join("ratelab-server"),
        module: dir.join(format!(
            "{}ratelab_redis_module{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        )),
        seconds: 2,
        rounds: 5,
        concurrency: 64,
        out: Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/bench"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| panic!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--reference" => options.reference = Some(value()),
            "--reference-pid" => {
                options.reference_pid = Some(value().parse().expect("--reference-pid PID"));
            }
            "--rounds" => options.rounds = value().parse().expect("--rounds N"),
            "--redis" => options.redis = Some(value()),
            "--ratelab-bin" => options.ratelab_bin = value().into(),
            "--module" => options.module = value().into(),
            "--seconds" => options.seconds = value().parse().expect("--seconds N"),
            "--concurrency" => options.concurrency = value().parse().expect("--concurrency N"),
            "--out" => options.out = value().into(),
            "--help" | "-h" => {
                println!(
                    "server-vs-reference --reference HOST:PORT [--reference-pid PID] --redis redis://HOST:PORT [--rounds 5] [--seconds 2] [--concurrency 64] [--ratelab-bin PATH] [--module PATH] [--out DIR]"
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
    let mut child = command.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot start {}: {e} (cargo build --release -p ratelab-server)",
            bin.display()
        )
    });
    let stdout = child.stdout.take().expect("piped");
    let process = Process(child);
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("its output");
        if let Some(rest) = line.strip_prefix("listening on ") {
            let addr = rest
                .split_whitespace()
                .next()
                .expect("an address")
                .to_owned();
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
async fn load(
    clients: &[RateLimitServiceClient<Channel>],
    hot: bool,
    seconds: u64,
    concurrency: usize,
) -> Figures {
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
    // The q-quantile's index, in thousandths: no float rounds it.
    let at = |per_mille: usize| {
        latencies
            .get(latencies.len().saturating_sub(1) * per_mille / 1000)
            .copied()
            .unwrap_or(0)
    };
    Figures {
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_us: at(500),
        p99_us: at(990),
        errors,
        over_limit: over,
    }
}

/// The process's CPU time so far (user and system), µs, from
/// `/proc/<pid>/stat`; none elsewhere.
fn cpu_micros(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's closing parenthesis: utime is the
    // 14th field of the line, stime the 15th.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux's USER_HZ is 100 on every architecture it exports to users.
    Some(ticks * 10_000)
}

/// A service under load: who and where, its address, its process (for its
/// CPU time) and the Redis it alone uses (for `INFO commandstats`).
struct Target {
    who: String,
    backend: String,
    addr: String,
    pid: Option<u32>,
    _process: Option<Process>,
    redis: Option<RedisServer>,
}

/// One round of one target: answers per second, latency, CPU per answer.
struct Round {
    figures: Figures,
    cpu_per_answer_us: Option<f64>,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    if values.is_empty() {
        return 0.0;
    }
    values[values.len() / 2]
}

fn main() {
    let options = options();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut targets: Vec<Target> = Vec::new();
    match (&options.reference, &options.redis) {
        (Some(reference), Some(redis)) => {
            targets.push(Target {
                who: "envoyproxy/ratelimit".into(),
                backend: "Redis".into(),
                addr: reference.clone(),
                pid: options.reference_pid,
                _process: None,
                redis: None,
            });
            let (process, addr) = start(&options.ratelab_bin, Some(&host_port(redis)), &[]);
            targets.push(Target {
                who: "ratelab-server".into(),
                backend: "Redis (the same)".into(),
                addr,
                pid: Some(process.0.id()),
                _process: Some(process),
                redis: None,
            });
        }
        _ => eprintln!(
            "no --reference and --redis: the reference's rows and ratelab-server's beside them on its Redis are left out"
        ),
    }
    let (memory, addr) = start(&options.ratelab_bin, None, &[]);
    targets.push(Target {
        who: "ratelab-server".into(),
        backend: "memory".into(),
        addr,
        pid: Some(memory.0.id()),
        _process: Some(memory),
        redis: None,
    });
    let scripts = RedisServer::start();
    let (process, addr) = start(
        &options.ratelab_bin,
        Some(&host_port(&scripts.url())),
        &["--default-algorithm", "gcra"],
    );
    targets.push(Target {
        who: "ratelab-server, GCRA".into(),
        backend: "Redis, Lua scripts".into(),
        addr,
        pid: Some(process.0.id()),
        _process: Some(process),
        redis: Some(scripts),
    });
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
    targets.push(Target {
        who: "ratelab-server, GCRA".into(),
        backend: "Redis, native module".into(),
        addr,
        pid: Some(process.0.id()),
        _process: Some(process),
        redis: Some(with_module),
    });

    let mut clients = Vec::new();
    for target in &targets {
        let connected = runtime.block_on(connect(&target.addr));
        // Checked before it is timed: it answers, on the bench's limit.
        let first = runtime
            .block_on(
                connected[0]
                    .clone()
                    .should_rate_limit(request("check".into())),
            )
            .unwrap_or_else(|e| panic!("{} at {} does not answer: {e}", target.who, target.addr))
            .into_inner();
        assert_eq!(
            first.overall_code,
            Code::Ok as i32,
            "{}: {first:?}",
            target.who
        );
        assert_eq!(
            first.statuses[0]
                .current_limit
                .as_ref()
                .map(|l| l.requests_per_unit),
            Some(1_000_000),
            "{} at {} is not configured with benches/server-vs-reference: {first:?}",
            target.who,
            target.addr
        );
        clients.push(connected);
    }

    // Paired rounds: every target in turn each round, the order rotating,
    // so that whatever else the machine does falls on all of them alike.
    let mut table = String::from(
        "| service | backend | keys | answers/s (median of rounds) | / the reference, per round (median) | p50 µs | p99 µs | server CPU µs per answer | errors |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut json = Vec::new();
    for (workload, hot) in [("one hot key", true), ("10,000 keys", false)] {
        let mut rounds: Vec<Vec<Round>> = targets.iter().map(|_| Vec::new()).collect();
        for round in 0..options.rounds {
            for k in 0..targets.len() {
                let i = (k + round) % targets.len();
                let before = targets[i].pid.and_then(cpu_micros);
                let figures =
                    runtime.block_on(load(&clients[i], hot, options.seconds, options.concurrency));
                let after = targets[i].pid.and_then(cpu_micros);
                let answers = figures.per_second * options.seconds as f64;
                let cpu_per_answer_us = match (before, after) {
                    (Some(b), Some(a)) if answers > 0.0 => Some((a - b) as f64 / answers),
                    _ => None,
                };
                rounds[i].push(Round {
                    figures,
                    cpu_per_answer_us,
                });
            }
            eprintln!("{workload}: round {} of {}", round + 1, options.rounds);
        }
        for (i, target) in targets.iter().enumerate() {
            let mine = &rounds[i];
            let per_second = median(mine.iter().map(|r| r.figures.per_second).collect());
            let ratio = (options.reference.is_some() && options.redis.is_some()).then(|| {
                median(
                    mine.iter()
                        .zip(&rounds[0])
                        .map(|(r, reference)| r.figures.per_second / reference.figures.per_second)
                        .collect(),
                )
            });
            let p50 = median(mine.iter().map(|r| r.figures.p50_us as f64).collect());
            let p99 = median(mine.iter().map(|r| r.figures.p99_us as f64).collect());
            let cpu: Vec<f64> = mine.iter().filter_map(|r| r.cpu_per_answer_us).collect();
            let cpu = (!cpu.is_empty()).then(|| median(cpu));
            let errors: u64 = mine.iter().map(|r| r.figures.errors).sum();
            let over: u64 = mine.iter().map(|r| r.figures.over_limit).sum();
            table.push_str(&format!(
                "| {} | {} | {workload} | {per_second:.0} | {} | {p50:.0} | {p99:.0} | {} | {errors} |\n",
                target.who,
                target.backend,
                ratio.map_or("".into(), |r| format!("{r:.2}")),
                cpu.map_or("".into(), |c| format!("{c:.1}")),
            ));
            json.push(serde_json::json!({
                "service": target.who, "backend": target.backend, "keys": workload,
                "answers_per_second": per_second.round(), "ratio_to_reference": ratio,
                "p50_us": p50, "p99_us": p99, "cpu_us_per_answer": cpu,
                "errors": errors, "over_limit": over,
            }));
        }
    }
    let mut redis_cost = String::new();
    for target in &targets {
        if let Some(redis) = &target.redis {
            let stats = redis.command(&["INFO", "commandstats"]).unwrap_or_default();
            for line in stats.lines() {
                for command in ["evalsha", "ratelab.gcra"] {
                    if let Some(rest) = line.strip_prefix(&format!("cmdstat_{command}:")) {
                        let per_call = rest
                            .split(',')
                            .find_map(|f| f.strip_prefix("usec_per_call="))
                            .unwrap_or("?");
                        redis_cost.push_str(&format!(
                            "- {}, {}: Redis spent {per_call} µs per `{}` (`INFO commandstats`).\n",
                            target.who,
                            target.backend,
                            command.to_uppercase()
                        ));
                    }
                }
            }
        }
    }
    println!("{table}\n{redis_cost}");
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let text = format!(
        "# ShouldRateLimit: ratelab-server beside envoyproxy/ratelimit\n\n\
         Written by `just bench-server` (`benches/src/bin/server-vs-reference.rs`; how to run it: \
         `benches/server-vs-reference/README.md`). One machine ({cores} cores; load average at the end \
         {load}), every service and redis-server on it with the load generator. {rounds} paired rounds of \
         {seconds} s of closed-loop load each, every service in turn each round (the order rotating), after a \
         second's warm-up: {concurrency} calls in flight over {CONNECTIONS} HTTP/2 connections, one descriptor a \
         call, a limit never reached (1,000,000 a second: every call a full check that admits). \"One hot key\": \
         every call the same descriptor; \"10,000 keys\": the calls cycle over 10,000 values. The figures are \
         the medians over the rounds; \"/ the reference\" is the ratio to the reference's answers per second in \
         the same round; server CPU is the service process's user and system time over the round divided by \
         its answers (the reference's when its pid is given). The reference and ratelab-server on Redis use \
         the same redis-server and count the same way (`INCRBY` and `EXPIRE` of a key per second, one pipeline a \
         request); GCRA's rows use redis-servers of their own, one without ratelab's module (`EVALSHA`) and one \
         with it (`RATELAB.GCRA`).\n\n{table}\n{redis_cost}",
        rounds = options.rounds,
        seconds = options.seconds,
        concurrency = options.concurrency,
    );
    std::fs::create_dir_all(&options.out).expect("the report's directory");
    std::fs::write(options.out.join("server-vs-reference.md"), text).expect("the report");
    std::fs::write(
        options.out.join("server-vs-reference.json"),
        serde_json::to_string_pretty(&json).expect("json"),
    )
    .expect("the report");
}
