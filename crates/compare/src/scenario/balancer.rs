//! The load balancer: 30 requests round-robin over 2 app instances, limit
//! 10. Each instance counting in its own memory
//! ([`crate::flawed::PerInstance`]) against both instances sharing one
//! Redis. Time is frozen, so the only difference is where the count lives.
//!
//! Run twice: with in-process calls to the instances' limiters, and through
//! real HTTP servers (one hyper server per instance on loopback, each behind
//! `ratelab-http`'s layer; a plain HTTP/1.1 client sends the requests in
//! turn and counts the `200`s against the `429`s).

pub mod report;

use std::net::SocketAddr;
use std::sync::Arc;

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use ratelab::AsyncRateLimiter;
use ratelab::http::{Policy, RateLimitLayer, SetPeerAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::{Layer, service_fn};

use ratelab::{AlgorithmKind, ManualClock, Quota};
use serde::Serialize;

use super::ScenarioName;
use crate::algorithms;
use crate::atomic::{self, Time};
use crate::flawed::PerInstance;
use crate::stats::Spread;
use crate::{CompareError, Context};

/// Requests sent.
pub const REQUESTS: usize = 30;
/// App instances behind the balancer.
pub const INSTANCES: usize = 2;
/// The frozen instant, µs: inside a window, far from its edges.
const FROZEN_AT: u64 = 1_000_500_000;

/// The quota: 10 per second.
pub fn quota() -> Quota {
    Quota::per_second(10).expect("a valid quota")
}

/// One algorithm.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The algorithm.
    pub algorithm: String,
    /// Admitted with a limiter in each instance's memory.
    pub per_instance_memory: usize,
    /// Admitted with one count on Redis shared by the instances, per repeat.
    pub shared_redis: Option<Spread>,
    /// Through HTTP servers, a limiter in each server's memory.
    pub http_per_instance_memory: Option<usize>,
    /// Through HTTP servers sharing one count on Redis.
    pub http_shared_redis: Option<usize>,
}

/// The scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct LoadBalancer {
    /// The limit.
    pub limit: u32,
    /// Requests sent.
    pub requests: usize,
    /// Instances.
    pub instances: usize,
    /// How the requests reach the instances.
    pub transport: String,
    /// Repeats of the Redis variant.
    pub repeats: usize,
    /// One row per algorithm.
    pub rows: Vec<Row>,
}

/// Runs the scenario.
pub async fn run(ctx: &Context<'_>) -> Result<LoadBalancer, CompareError> {
    let quota = quota();
    let redis = ctx.atomic_or_skip(ScenarioName::LoadBalancer, "the shared-Redis rows");
    let repeats = ctx.config.repeats.clamp(1, 10);
    ctx.bar.set_length(AlgorithmKind::ALL.len() as u64);
    let mut rows = Vec::new();
    for kind in AlgorithmKind::ALL {
        let name = kind.name();
        let clock = ManualClock::starting_at(FROZEN_AT);
        let balancer = PerInstance::new(
            (0..INSTANCES)
                .map(|_| kind.keyed(quota, clock.clone()))
                .collect(),
        );
        let mut per_instance = 0;
        for _ in 0..REQUESTS {
            per_instance +=
                usize::from(ratelab::RateLimiter::check(&balancer, b"client", 1)?.allowed);
        }
        let shared_redis = match redis {
            Some(redis) => {
                let mut instances = Vec::new();
                for _ in 0..INSTANCES {
                    instances.push(
                        atomic::limiter(redis, kind, quota, &Time::Manual(clock.clone())).await?,
                    );
                }
                let mut counts = Vec::new();
                for repeat in 0..repeats {
                    let key = format!("{}:balancer:{name}:{repeat}", ctx.nonce);
                    let mut admitted = 0;
                    for i in 0..REQUESTS {
                        let instance = &instances[i % INSTANCES];
                        admitted +=
                            usize::from(instance.check_async(key.as_bytes(), 1).await?.allowed);
                    }
                    counts.push(admitted);
                }
                Some(Spread::of_counts(&counts))
            }
            None => None,
        };
        let memory: Vec<Arc<dyn AsyncRateLimiter>> = (0..INSTANCES)
            .map(|_| algorithms::keyed_shared(kind, quota, clock.clone()))
            .collect();
        let http_per_instance_memory = Some(through_http(memory, REQUESTS).await?);
        let http_shared_redis = match redis {
            Some(redis) => {
                let mut shared: Vec<Arc<dyn AsyncRateLimiter>> = Vec::new();
                for _ in 0..INSTANCES {
                    shared.push(Arc::from(
                        atomic::limiter(redis, kind, quota, &Time::Manual(clock.clone())).await?,
                    ));
                }
                Some(through_http(shared, REQUESTS).await?)
            }
            None => None,
        };
        rows.push(Row {
            algorithm: name.into(),
            per_instance_memory: per_instance,
            shared_redis,
            http_per_instance_memory,
            http_shared_redis,
        });
        ctx.tick();
    }
    Ok(LoadBalancer {
        limit: quota.burst(),
        requests: REQUESTS,
        instances: INSTANCES,
        transport: "in-process calls to the instances' limiters, and real HTTP servers (hyper + ratelab-http on loopback, one per instance)".into(),
        repeats,
        rows,
    })
}

fn io_error(what: &str, e: std::io::Error) -> CompareError {
    CompareError::Unavailable(format!("{what}: {e}"))
}

/// One HTTP server per limiter (hyper behind `ratelab-http`'s layer, on a
/// loopback port); `requests` GETs sent to them in turn, all at once; how
/// many were answered `200`.
async fn through_http(
    limiters: Vec<Arc<dyn AsyncRateLimiter>>,
    requests: usize,
) -> Result<usize, CompareError> {
    let mut addresses = Vec::new();
    let mut servers = Vec::new();
    for limiter in limiters {
        let layer = RateLimitLayer::builder()
            .policy(Policy::shared("default", limiter))
            .build()
            .map_err(|e| CompareError::Unavailable(format!("rate-limit layer: {e}")))?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| io_error("bind a loopback port", e))?;
        addresses.push(
            listener
                .local_addr()
                .map_err(|e| io_error("read the bound port", e))?,
        );
        servers.push(tokio::spawn(async move {
            while let Ok((stream, peer)) = listener.accept().await {
                // Without it the response's second write waits out the
                // client's delayed ACK: 40 ms a request.
                let _ = stream.set_nodelay(true);
                let service = SetPeerAddr::new(layer.layer(service_fn(ok)), peer);
                tokio::spawn(async move {
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                        .await;
                });
            }
        }));
    }
    // All at once: the clock is frozen, so the count does not depend on the
    // order, and the leaky queue's held requests wait side by side rather
    // than one after the other.
    let mut sent = tokio::task::JoinSet::new();
    for i in 0..requests {
        sent.spawn(status(addresses[i % addresses.len()]));
    }
    let mut admitted = 0;
    let mut result = Ok(());
    while let Some(answer) = sent.join_next().await {
        match answer {
            Ok(Ok(200)) => admitted += 1,
            Ok(Ok(429)) => {}
            Ok(Ok(other)) => {
                result = Err(CompareError::Unavailable(format!(
                    "the test server answered {other}, not 200 or 429"
                )));
                break;
            }
            Ok(Err(e)) => {
                result = Err(e);
                break;
            }
            Err(e) => {
                result = Err(CompareError::Unavailable(format!(
                    "a test request failed: {e}"
                )));
                break;
            }
        }
    }
    sent.abort_all();
    for server in servers {
        server.abort();
    }
    result.map(|()| admitted)
}

/// The application behind the limiter: `200 ok`.
async fn ok<B>(_request: http::Request<B>) -> Result<http::Response<Full<Bytes>>, Infallible> {
    Ok(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
}

/// The status code of `GET /` on `address`.
async fn status(address: SocketAddr) -> Result<u16, CompareError> {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| io_error("connect to the test server", e))?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: compare\r\nConnection: close\r\n\r\n")
        .await
        .map_err(|e| io_error("send a request", e))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .map_err(|e| io_error("read a response", e))?;
    let head = String::from_utf8_lossy(&response[..response.len().min(32)]).into_owned();
    head.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| CompareError::Unavailable(format!("not an HTTP response: {head:?}")))
}
