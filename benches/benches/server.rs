//! `ShouldRateLimit` through gRPC over loopback: ratelab-server's service
//! (GCRA, one descriptor, a quota never exhausted) in memory, on Redis
//! with the Lua scripts and on Redis with ratelab's native module, beside
//! the floor, a no-op `RateLimitService` answering `OK` at once, all served
//! and called the same way (tonic server and client on one multi-thread
//! tokio runtime).
//!
//! Groups: `server/should-rate-limit` (one call at a time on one
//! connection) and `server/should-rate-limit-64` (64 calls at once, eight
//! on each of eight connections; the time is per call, the inverse of the
//! throughput), each with the functions `noop` (the floor: gRPC, HTTP/2 and
//! protobuf alone), `memory-gcra`, `redis-scripts-gcra` (a redis-server the
//! testkit starts, without the module: `EVALSHA`) and `redis-module-gcra`
//! (another, started with `--loadmodule` of ratelab's module:
//! `RATELAB.GCRA`, which the server's `ScriptBackend::Auto` finds) and
//! `redis-scripts-gcra-leased` (the scripts' Redis, the hot descriptor
//! leased: `ServiceBuilder::leases` with the default `LeaseConfig`, leases
//! of up to 1000 units living 100 ms); the
//! difference from the floor is what the service adds. Before measuring,
//! each answers one call, checked, and each Redis is checked to have run
//! what its name says (`INFO commandstats`). Then 4,096 calls, 64 at once,
//! on the scripts' rows with and without leases print the Redis commands
//! per answer of each.
//!
//! The module is `ratelab_testkit::redis::module_path()`:
//! `$RATELAB_MODULE_PATH` (as `just test` sets it) or, when unset (`just
//! bench`), the module cargo builds into this bench's target directory. A
//! module that cannot be built or loaded fails the bench, saying why; no
//! row is skipped.
//!
//! Run: `cargo bench -p ratelab-benches --bench server`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use ratelab::lease::LeaseConfig;
use ratelab_server::{Backend, ResponseHeaders, Service, config};
use ratelab_testkit::redis::{RedisServer, module_path};
use tokio::runtime::Runtime;
use tonic::transport::Channel;

const CONFIG: &str = "\
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000, algorithm: gcra}
";

/// The floor: answers `OK` without looking.
struct Noop;

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        _: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        }))
    }
}

/// Serves `service` on a free loopback port; its address.
fn serve<S: RateLimitService>(rt: &Runtime, service: S) -> std::net::SocketAddr {
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RateLimitServiceServer::new(service))
                .serve_with_incoming(
                    tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                ),
        );
        addr
    })
}

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: "ann".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    }
}

fn server(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (name, domain) = config::parse("bench.yaml".as_ref(), CONFIG).unwrap();
    let shared = ratelab_server::shared(config::Config::from_domains([(name, domain)]));
    // The module first: a module that cannot be found fails before any
    // server starts.
    let module = module_path();
    // The scripts: a Redis without the module.
    let scripts = RedisServer::start();
    // The module: a Redis that loads it.
    let module_arg = module
        .to_str()
        .unwrap_or_else(|| panic!("the module's path {} is not UTF-8", module.display()));
    let with_module =
        RedisServer::try_start_with(&["--loadmodule", module_arg]).unwrap_or_else(|e| {
            panic!(
                "redis-server did not start with ratelab's module {}: {e}",
                module.display()
            )
        });
    assert_eq!(
        with_module.command(&["RATELAB.PROTOCOL"]),
        Ok(ratelab::redis::PROTOCOL_VERSION.to_string()),
        "ratelab's module {} did not load, or speaks another protocol",
        module.display()
    );
    let on_redis_leased = |server: &RedisServer, leases: Option<LeaseConfig>| {
        let connection = rt
            .block_on(ratelab::redis::Connection::single(&server.url()))
            .unwrap();
        let builder = Service::builder(shared.clone())
            .backend(Backend::Redis {
                connection,
                on_failure: ratelab::redis::FailurePolicy::Error,
                timeout: Duration::from_secs(1),
                prefix: if leases.is_some() {
                    "bench-leased"
                } else {
                    "bench"
                }
                .into(),
            })
            .headers(ResponseHeaders::Ietf);
        match leases {
            Some(leases) => builder.leases(leases).unwrap().build(),
            None => builder.build(),
        }
    };
    let on_redis = |server: &RedisServer| on_redis_leased(server, None);
    // Eight connections to each.
    let stacks: Vec<(&str, Vec<RateLimitServiceClient<Channel>>, bool)> = vec![
        ("noop", connect(&rt, serve(&rt, Noop)), false),
        (
            "memory-gcra",
            connect(
                &rt,
                serve(&rt, Service::new(shared.clone(), Backend::Memory, true)),
            ),
            true,
        ),
        (
            "redis-scripts-gcra",
            connect(&rt, serve(&rt, on_redis(&scripts))),
            true,
        ),
        (
            "redis-module-gcra",
            connect(&rt, serve(&rt, on_redis(&with_module))),
            true,
        ),
        (
            "redis-scripts-gcra-leased",
            connect(
                &rt,
                serve(&rt, on_redis_leased(&scripts, Some(LeaseConfig::default()))),
            ),
            true,
        ),
    ];

    for (name, clients, _) in &stacks {
        if name.starts_with("redis-scripts") {
            let per_answer = commands_per_answer(&rt, clients, &scripts);
            println!("{name}: {per_answer:.4} Redis commands per answer (4,096 calls, 64 at once)");
        }
    }

    let mut group = c.benchmark_group("server/should-rate-limit");
    group.measurement_time(Duration::from_secs(3));
    for (name, clients, limited) in &stacks {
        // No broken setup is timed.
        let answer = rt
            .block_on(clients[0].clone().should_rate_limit(request()))
            .unwrap()
            .into_inner();
        assert_eq!(answer.overall_code, Code::Ok as i32, "{name}");
        assert_eq!(answer.statuses.len(), usize::from(*limited), "{name}");
        // Each Redis ran what the row's name says.
        let ran = |server: &RedisServer, command: &str| {
            let stats = server.command(&["INFO", "commandstats"]).unwrap();
            stats
                .lines()
                .any(|l| l.starts_with(&format!("cmdstat_{command}:")))
        };
        match *name {
            "redis-scripts-gcra" => assert!(
                ran(&scripts, "evalsha") && !ran(&scripts, "ratelab.gcra"),
                "{name}: the check did not run as a script"
            ),
            "redis-scripts-gcra-leased" => assert!(
                ran(&scripts, "evalsha"),
                "{name}: no lease was taken on the scripts"
            ),
            "redis-module-gcra" => assert!(
                ran(&with_module, "ratelab.gcra") && !ran(&with_module, "evalsha"),
                "{name}: the check did not run on the module"
            ),
            _ => {}
        }
        let client = clients[0].clone();
        group.bench_function(*name, |b| {
            b.to_async(&rt).iter(|| {
                let mut client = client.clone();
                async move { black_box(client.should_rate_limit(request()).await.unwrap()) }
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("server/should-rate-limit-64");
    group.measurement_time(Duration::from_secs(3));
    for (name, clients, _) in &stacks {
        group.bench_function(*name, |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let clients = clients.clone();
                async move {
                    let batches = iters.div_ceil(64);
                    let start = std::time::Instant::now();
                    // Batches of 64 calls at once: 8 on each connection.
                    for _ in 0..batches {
                        let mut calls = tokio::task::JoinSet::new();
                        for i in 0..64 {
                            let mut client = clients[i % clients.len()].clone();
                            calls.spawn(async move {
                                client.should_rate_limit(request()).await.unwrap()
                            });
                        }
                        while let Some(answer) = calls.join_next().await {
                            black_box(answer.unwrap());
                        }
                    }
                    // The time of `iters` calls, at the batches' rate.
                    start
                        .elapsed()
                        .mul_f64(iters as f64 / (batches * 64) as f64)
                }
            });
        });
    }
    group.finish();
}

/// The scripts `server` ran per answer over 4,096 calls, 64 at once.
fn commands_per_answer(
    rt: &Runtime,
    clients: &[RateLimitServiceClient<Channel>],
    server: &RedisServer,
) -> f64 {
    let evalsha = || {
        let stats = server.command(&["INFO", "commandstats"]).unwrap();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse::<u64>().unwrap())
    };
    const CALLS: usize = 4096;
    let before = evalsha();
    rt.block_on(async {
        for _ in 0..CALLS / 64 {
            let mut calls = tokio::task::JoinSet::new();
            for i in 0..64 {
                let mut client = clients[i % clients.len()].clone();
                calls.spawn(async move { client.should_rate_limit(request()).await.unwrap() });
            }
            while let Some(answer) = calls.join_next().await {
                let answer = answer.unwrap().into_inner();
                assert_eq!(answer.overall_code, Code::Ok as i32);
            }
        }
    });
    (evalsha() - before) as f64 / CALLS as f64
}

/// Eight client connections to the server at `addr`.
fn connect(rt: &Runtime, addr: std::net::SocketAddr) -> Vec<RateLimitServiceClient<Channel>> {
    rt.block_on(async {
        let mut clients = Vec::new();
        for _ in 0..8 {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .connect()
                .await
                .unwrap();
            clients.push(RateLimitServiceClient::new(channel));
        }
        clients
    })
}

criterion_group!(benches, server);
criterion_main!(benches);
