//! `ShouldRateLimit` through one gRPC connection over loopback: ratelab-server's
//! service in memory (GCRA, one descriptor, a quota never exhausted) beside
//! the floor, a no-op `RateLimitService` answering `OK` at once, served and
//! called the same way (tonic server and client on one multi-thread tokio
//! runtime, one `Channel`, one call at a time).
//!
//! Groups: `server/should-rate-limit`, functions `noop` (the floor: gRPC,
//! HTTP/2 and protobuf alone) and `memory-gcra`; the difference is what the
//! service adds. Before measuring, each answers one call, checked.
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
use ratelab_server::{Backend, Service, config};
use tokio::runtime::Runtime;
use tonic::transport::Channel;

const CONFIG: &str = "\
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
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

/// Serves `service` on a free loopback port; a client channel to it.
fn serve<S: RateLimitService>(rt: &Runtime, service: S) -> RateLimitServiceClient<Channel> {
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RateLimitServiceServer::new(service))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        RateLimitServiceClient::new(channel)
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
    let clients = [
        ("noop", serve(&rt, Noop), false),
        (
            "memory-gcra",
            serve(&rt, Service::new(shared, Backend::Memory, true)),
            true,
        ),
    ];
    let mut group = c.benchmark_group("server/should-rate-limit");
    group.measurement_time(Duration::from_secs(3));
    for (name, client, limited) in clients {
        // No broken setup is timed.
        let answer = rt
            .block_on(client.clone().should_rate_limit(request()))
            .unwrap()
            .into_inner();
        assert_eq!(answer.overall_code, Code::Ok as i32, "{name}");
        assert_eq!(answer.statuses.len(), usize::from(limited), "{name}");
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                let mut client = client.clone();
                async move { black_box(client.should_rate_limit(request()).await.unwrap()) }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, server);
criterion_main!(benches);
