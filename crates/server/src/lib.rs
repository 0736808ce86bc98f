//! `ratelab-server`: Envoy's global rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) on any
//! ratelab algorithm, in memory or on Redis; a drop-in for
//! envoyproxy/ratelimit that reads its YAML configuration as it is.
//!
//! The binary is what most users want (`ratelab-server --help`); this
//! library is its parts, for tests and for embedding the service in a
//! tonic server of one's own:
//!
//! - [`config`]: the YAML files (`domain`, nested `descriptors` with `key`,
//!   `value`, `rate_limit` {`unit`, `requests_per_unit`, `unlimited`,
//!   `name`, `replaces`}, `shadow_mode`, `detailed_metric`) and ratelab's
//!   one field, `rate_limit.algorithm` (`gcra` when absent; `fixed-window`
//!   counts as envoyproxy/ratelimit does). Any other field is an error
//!   naming the file, line and column.
//! - [`Service`]: the gRPC service. Each descriptor gets a status with
//!   `current_limit`, `limit_remaining` and `duration_until_reset` (until the
//!   key is full again); `hits_addend` is the cost (the request's, 0 meaning
//!   1 as Envoy defines it, or the descriptor's own); `shadow_mode` limits
//!   count and report but answer `OK`; `response_headers_to_add` carries
//!   `RateLimit-Policy` and `RateLimit` as `ratelab-http` writes them and
//!   `Retry-After` on `OVER_LIMIT`. When Redis fails, the resilience
//!   wrapper's [`FailurePolicy`](ratelab::redis::FailurePolicy) answers:
//!   `error` (the default) returns gRPC `UNAVAILABLE`, which Envoy's
//!   `failure_mode_deny` then decides; `allow` answers `OK`, `deny`
//!   `OVER_LIMIT`, `fallback` counts in memory meanwhile.
//! - All or nothing, unlike envoyproxy/ratelimit (which counts every
//!   descriptor even when another refuses): every limited descriptor of a
//!   request that has several takes its cost with a
//!   [receipt](ratelab::Receipt), and a request answered
//!   `OVER_LIMIT` (a refusal outside shadow mode) or failing with an error
//!   status gives back every admission before it is answered. A refused
//!   request costs nothing in any of its descriptors; each status still
//!   says what its own check decided (`limit_remaining` as it was then). A
//!   shadow limit's refusal refuses nothing, so it gives nothing back. A
//!   give-back that fails (Redis gone meanwhile) leaves its units taken,
//!   logged and counted in `ratelab_server_errors`.
//! - What is refused rather than ignored: in the files, any field not
//!   listed above; in a request, a `hits_addend` above `u32::MAX`, an empty
//!   domain or descriptor, a limit override ratelab cannot count (finer than
//!   a microsecond apart), and `is_negative_hits` (a descriptor giving units
//!   back): `INVALID_ARGUMENT`. Units are given back only with the receipt
//!   of the request that took them; given back on a caller's word, they
//!   would let any caller raise its own quota.
//! - [`serve`]: the service and its health check on a listener of one's
//!   own, until a shutdown future completes.
//! - [`Watch`]: the reload, every second by the files' modification times;
//!   a configuration that fails to load is logged and the last good one
//!   kept.
//!
//! ```
//! use std::sync::Arc;
//! use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
//!     RateLimitDescriptor, rate_limit_descriptor::Entry,
//! };
//! use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
//! use ratelab_server::{Backend, Service, config};
//!
//! let yaml = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";
//! let (name, domain) = config::parse("edge.yaml".as_ref(), yaml)?;
//! let config = config::Config::from_domains([(name, domain)]);
//! let service = Service::new(ratelab_server::shared(config), Backend::Memory, true);
//!
//! let request = RateLimitRequest {
//!     domain: "edge".into(),
//!     descriptors: vec![RateLimitDescriptor {
//!         entries: vec![Entry { key: "user".into(), value: "ann".into() }],
//!         ..Default::default()
//!     }],
//!     hits_addend: 0,
//! };
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let mut overall = Vec::new();
//! for _ in 0..3 {
//!     overall.push(service.decide(&request).await?.overall_code);
//! }
//! assert_eq!(overall, [1, 1, 2]); // OK, OK, OVER_LIMIT
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod config;
mod metrics;
mod service;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use parking_lot::RwLock;

pub use metrics::LATENCY_BUCKETS;
pub use service::{Backend, Service};

/// The configuration the service reads and the reloader replaces.
pub type SharedConfig = Arc<RwLock<Arc<config::Config>>>;

/// `config`, shared.
pub fn shared(config: config::Config) -> SharedConfig {
    Arc::new(RwLock::new(Arc::new(config)))
}

/// Serves `service` (`ShouldRateLimit`, and `grpc.health.v1` saying it
/// is serving) on `listener` until `shutdown` completes, then lets the
/// calls in flight finish: the binary's gRPC server without its signals,
/// metrics and reloader, for embedding it in a program of one's own.
///
/// ```no_run
/// use ratelab_server::{Backend, Service, config};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let yaml = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 10}\n";
/// let (name, domain) = config::parse("edge.yaml".as_ref(), yaml)?;
/// let config = ratelab_server::shared(config::Config::from_domains([(name, domain)]));
/// let service = Service::new(config, Backend::Memory, true);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// println!("on {}", listener.local_addr()?);
/// ratelab_server::serve(listener, service, std::future::pending()).await?;
/// # Ok(())
/// # }
/// ```
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: Service,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<RateLimitServiceServer<Service>>()
        .await;
    tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(RateLimitServiceServer::new(service))
        .serve_with_incoming_shutdown(
            // No Nagle: answers to calls multiplexed on one connection are
            // not held back waiting for an ACK.
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        )
        .await
}

/// What the files were when last read: each path, modification time and
/// length.
type Fingerprint = Vec<(PathBuf, Option<SystemTime>, u64)>;

fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    let files = config::files(paths).unwrap_or_default();
    let mut print: Fingerprint = files
        .into_iter()
        .map(|file| {
            let meta = std::fs::metadata(&file).ok();
            let modified = meta.as_ref().and_then(|m| m.modified().ok());
            let len = meta.map_or(0, |m| m.len());
            (file, modified, len)
        })
        .collect();
    // A directory gaining or losing a file changes the list itself.
    for path in paths {
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        print.push((path.clone(), modified, 0));
    }
    print
}

/// The reloader: what the files are now, taken before the configuration
/// is first read, so that a change made while it is read is seen.
#[derive(Debug)]
pub struct Watch {
    paths: Vec<PathBuf>,
    last: Fingerprint,
}

impl Watch {
    /// Notes what `paths` are now (call it before reading them).
    pub fn new(paths: Vec<PathBuf>) -> Self {
        let last = fingerprint(&paths);
        Watch { paths, last }
    }

    /// Reloads the files into `shared` whenever one changes (checked every
    /// `interval`), forever: a configuration that fails to load is logged,
    /// counted (`ratelab_server_config_load_errors`) and the last good one
    /// kept.
    pub async fn run(self, shared: SharedConfig, interval: Duration) {
        let Watch { paths, mut last } = self;
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let now = fingerprint(&paths);
            if now == last {
                continue;
            }
            last = now;
            match config::Config::load(&paths) {
                Ok(config) => {
                    tracing::info!(domains = config.len(), "configuration reloaded");
                    ::metrics::counter!("ratelab_server_config_load_success").increment(1);
                    *shared.write() = Arc::new(config);
                }
                Err(error) => {
                    tracing::error!(%error, "configuration not reloaded: the last good one stays");
                    ::metrics::counter!("ratelab_server_config_load_errors").increment(1);
                }
            }
        }
    }
}
