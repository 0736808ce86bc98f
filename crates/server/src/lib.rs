//! `ratelab-server`: Envoy's global rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), a
//! drop-in for envoyproxy/ratelimit: with that service's YAML and
//! environment unchanged it gives the same answers (fixed windows on the
//! wall clock, refused hits counted, the same statistics under the same
//! names, the same Redis keys), and ratelab's algorithms where a limit
//! asks for one (`rate_limit.algorithm: gcra`, `token-bucket`,
//! `sliding-log`, ...).
//!
//! The binary is what most users want (`ratelab-server --help`); this
//! library is its parts, for tests and for embedding the service in a
//! tonic server of one's own:
//!
//! - [`config`]: the YAML files, read, checked and matched as the
//!   reference does, with ratelab's `algorithm` field.
//! - [`Service`]: the gRPC service, built with [`Service::builder`].
//! - [`Stats`]: the reference's statistics, served as Prometheus text or
//!   sent as statsd lines.
//! - [`serve`] and [`serve_with`]: the service and its health check on a
//!   listener of one's own, its connections bounded ([`Connections`]).
//! - [`Watch`]: the reload, when the files change.
//! - [`lease`]: leasing hot descriptors (off by default,
//!   [`ServiceBuilder::leases`], `--lease-lifetime-ms`): replicas on one
//!   Redis admit from blocks of units they leased, within
//!   [`Bound::leased`](ratelab::Bound::leased): for a debt (GCRA, token
//!   bucket, leaky meter and queue) at most `ceil(L / T)` units more than
//!   its own bound in any interval over all replicas, `L` the lease
//!   lifetime and `T` the time one unit takes to come back; for
//!   `fixed-window` and `sliding-counter`, nothing more; for `sliding-log`,
//!   `limit × (1 + ceil(L / window))` per window. Only limits of the YAML
//!   counted by ratelab's algorithms are leased (not `lease: false`, not
//!   `envoy-fixed-window`, not a request's override). Call
//!   [`Service::settle_leases`] every lifetime and
//!   [`Service::release_leases`] before stopping (the binary does both).
//!   Do not lease low-rate limits or hard billing quotas.
//!
//! ```
//! use std::sync::Arc;
//! use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
//!     RateLimitDescriptor, rate_limit_descriptor::Entry,
//! };
//! use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
//! use ratelab::ManualClock;
//! use ratelab_server::{Service, config};
//!
//! let yaml = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n";
//! let (name, domain) = config::parse("edge.yaml".as_ref(), yaml)?;
//! let config = config::Config::from_domains([(name, domain)]);
//! // 2026-01-01T00:00:10Z: the wall clock, here set by hand.
//! let clock = ManualClock::new();
//! clock.set(1_767_225_610 * 1_000_000);
//! let service = Service::builder(ratelab_server::shared(config))
//!     .clock(Arc::new(clock))
//!     .build();
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
//! let mut answers = Vec::new();
//! for _ in 0..3 {
//!     let answer = service.decide(&request).await?;
//!     let status = &answer.statuses[0];
//!     let reset = status.duration_until_reset.as_ref().map(|d| d.seconds);
//!     answers.push((answer.overall_code, status.limit_remaining, reset));
//! }
//! // OK, OK, then OVER_LIMIT (2), 50 s before the minute ends on the clock.
//! assert_eq!(answers, [(1, 1, Some(50)), (1, 0, Some(50)), (2, 0, Some(50))]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod breaker;
mod clock;
pub mod config;
mod connections;
mod health;
pub mod lease;
mod service;
pub mod settings;
mod stats;
mod window;
mod yaml;

#[cfg(feature = "cli")]
pub mod http;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use parking_lot::RwLock;

pub use clock::WallClock;
pub use connections::{ConnectionLimits, Connections};
pub use health::Health;
pub use service::{Backend, DEFAULT_MAX_DESCRIPTORS, ResponseHeaders, Service, ServiceBuilder};
pub use stats::{Counter, DEFAULT_MAX_KEYS, LimitStats, Stats};

/// The configuration the service reads and the reloader replaces.
pub type SharedConfig = Arc<RwLock<Arc<config::Config>>>;

/// `config`, shared.
pub fn shared(config: config::Config) -> SharedConfig {
    Arc::new(RwLock::new(Arc::new(config)))
}

/// Serves `service` (`ShouldRateLimit`, and `grpc.health.v1` saying it is
/// serving) on `listener` until `shutdown` completes, then lets the calls
/// in flight finish, with the default connection limits: the binary's
/// gRPC server without its signals, metrics and reloader.
///
/// ```no_run
/// use ratelab_server::{Service, config};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let yaml = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 10}\n";
/// let (name, domain) = config::parse("edge.yaml".as_ref(), yaml)?;
/// let config = ratelab_server::shared(config::Config::from_domains([(name, domain)]));
/// let service = Service::builder(config).build();
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
    let health = Health::new(false).await;
    serve_with(
        listener,
        Arc::new(service),
        &health,
        ConnectionLimits::default(),
        None,
        shutdown,
    )
    .await
}

/// [`serve`], with its health (whose `grpc.health.v1` service it serves),
/// its connection limits and, when given, a maximum connection age (the
/// reference's `GRPC_MAX_CONNECTION_AGE` and its grace).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    service: Arc<Service>,
    health: &Health,
    limits: ConnectionLimits,
    max_age: Option<(Duration, Duration)>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let mut builder = tonic::transport::Server::builder();
    if let Some((age, grace)) = max_age {
        builder = builder
            .max_connection_age(age)
            .max_connection_age_grace(grace);
    }
    builder
        .add_service(health.grpc_service())
        .add_service(RateLimitServiceServer::from_arc(service))
        .serve_with_incoming_shutdown(Connections::new(listener, limits), shutdown)
        .await
}

/// Where the configuration comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// ratelab's `--config`: files, or directories whose `.yaml`/`.yml`
    /// files are read.
    Paths(Vec<PathBuf>),
    /// The reference's `RUNTIME_ROOT`/`RUNTIME_SUBDIRECTORY`/
    /// `RUNTIME_APPDIRECTORY`: every file below it.
    Runtime(config::RuntimeDirectory),
}

impl Source {
    /// The files it holds now.
    pub fn files(&self) -> Result<Vec<PathBuf>, config::ConfigError> {
        match self {
            Source::Paths(paths) => config::files(paths),
            Source::Runtime(runtime) => runtime.files(),
        }
    }

    /// Reads them; a domain in two files is an error unless `merge`.
    pub fn load(&self, merge: bool) -> Result<config::Config, config::ConfigError> {
        config::Config::load_files(&self.files()?, merge)
    }

    /// The paths watched for changes besides the files (directories gaining
    /// or losing a file).
    fn roots(&self) -> Vec<PathBuf> {
        match self {
            Source::Paths(paths) => paths.clone(),
            Source::Runtime(runtime) => vec![runtime.directory()],
        }
    }
}

/// What the files were when last read: each path, modification time and
/// length.
type Fingerprint = Vec<(PathBuf, Option<SystemTime>, u64)>;

fn fingerprint(source: &Source) -> Fingerprint {
    let files = source.files().unwrap_or_default();
    let mut print: Fingerprint = files
        .into_iter()
        .map(|file| {
            let meta = std::fs::metadata(&file).ok();
            let modified = meta.as_ref().and_then(|m| m.modified().ok());
            let len = meta.map_or(0, |m| m.len());
            (file, modified, len)
        })
        .collect();
    for path in source.roots() {
        let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
        print.push((path, modified, 0));
    }
    print
}

/// What a configuration must also pass to be served, beyond loading: the
/// checks the server made of the first one at startup (say, a limit an
/// algorithm cannot count, or a lease it cannot give), or why not.
pub type Check = Arc<dyn Fn(&config::Config) -> Result<(), String> + Send + Sync>;

/// The reloader: what the files are now, taken before the configuration
/// is first read, so that a change made while it is read is seen.
pub struct Watch {
    source: Source,
    merge: bool,
    last: Fingerprint,
    check: Option<Check>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("source", &self.source)
            .field("merge", &self.merge)
            .field("checked", &self.check.is_some())
            .finish_non_exhaustive()
    }
}

impl Watch {
    /// Notes what `paths` are now (call it before reading them).
    pub fn new(paths: Vec<PathBuf>) -> Self {
        Watch::of(Source::Paths(paths), false)
    }

    /// Notes what `source` holds now; `merge` as [`Source::load`].
    pub fn of(source: Source, merge: bool) -> Self {
        let last = fingerprint(&source);
        Watch {
            source,
            merge,
            last,
            check: None,
        }
    }

    /// Refuses a reloaded configuration that fails `check` as one that
    /// fails to load: logged, counted, the last good one kept. Give it the
    /// checks made at startup, so that a reload cannot bring in what a
    /// start would have refused.
    pub fn checked(mut self, check: Check) -> Self {
        self.check = Some(check);
        self
    }

    /// Reloads the files into `shared` whenever one changes (checked every
    /// `interval`), forever: a configuration that fails to load is logged,
    /// counted (`ratelimit.service.config_load_error`) and the last good
    /// one kept; one that loads is counted in `config_load_success`, and
    /// `health` hears whether it has a domain.
    pub async fn run(
        self,
        shared: SharedConfig,
        interval: Duration,
        stats: Arc<Stats>,
        health: Option<Health>,
    ) {
        let Watch {
            source,
            merge,
            mut last,
            check,
        } = self;
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let now = fingerprint(&source);
            if now == last {
                continue;
            }
            last = now;
            let loaded = source
                .load(merge)
                .map_err(|e| e.to_string())
                .and_then(|config| match &check {
                    Some(check) => check(&config).map(|()| config),
                    None => Ok(config),
                });
            match loaded {
                Ok(config) => {
                    tracing::info!(domains = config.len(), "configuration reloaded");
                    stats.counter("ratelimit.service.config_load_success").inc();
                    if let Some(health) = &health {
                        health.config_loaded(!config.is_empty()).await;
                    }
                    *shared.write() = Arc::new(config);
                }
                Err(error) => {
                    tracing::error!(%error, "configuration not reloaded: the last good one stays");
                    stats.counter("ratelimit.service.config_load_error").inc();
                }
            }
        }
    }
}
