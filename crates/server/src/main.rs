//! `ratelab-server`: Envoy's rate limit service, a drop-in for
//! envoyproxy/ratelimit. See the crate docs and `ratelab-server --help`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use ratelab::lease::LeaseConfig;
use ratelab::redis::{Connection, FailurePolicy};
use ratelab_server::config::Algorithm;
use ratelab_server::settings::{self, Listen, RedisTarget, Settings};
use ratelab_server::{
    Backend, ConnectionLimits, Connections, Health, ResponseHeaders, Service, Source, Stats,
};

/// Envoy's global rate limit service (envoy.service.ratelimit.v3,
/// ShouldRateLimit), a drop-in for envoyproxy/ratelimit: configured by its
/// environment variables (RUNTIME_ROOT, REDIS_URL, USE_PROMETHEUS, ...)
/// and its YAML, answering as it does, with ratelab's algorithms where a
/// limit names one (`algorithm: gcra`). Every flag also reads the
/// environment variable it names.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// A configuration file, or a directory whose .yaml/.yml files are read
    /// (repeatable). Without it, the files under RUNTIME_ROOT/
    /// RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY are, as the reference
    /// reads them, and the HTTP and debug ports are served as it serves
    /// them.
    #[arg(long, short)]
    config: Vec<PathBuf>,
    /// The gRPC address (ShouldRateLimit and grpc.health.v1); by default
    /// GRPC_HOST:GRPC_PORT (0.0.0.0:8081), or GRPC_UDS.
    #[arg(long, env = "RATELAB_LISTEN")]
    listen: Option<SocketAddr>,
    /// Serve /healthcheck and /json (HTTP/1.1) here; by default HOST:PORT
    /// (0.0.0.0:8080) without --config, none with it.
    #[arg(long, env = "RATELAB_HTTP")]
    http: Option<SocketAddr>,
    /// Serve /rlconfig and /stats here; by default DEBUG_HOST:DEBUG_PORT
    /// (0.0.0.0:6070) without --config, none with it.
    #[arg(long, env = "RATELAB_DEBUG")]
    debug: Option<SocketAddr>,
    /// Serve Prometheus metrics on http://ADDR/metrics (as USE_PROMETHEUS
    /// with PROMETHEUS_ADDR does).
    #[arg(long, env = "RATELAB_METRICS")]
    metrics: Option<SocketAddr>,
    /// Count on Redis at this URL (redis://host:port); several are one
    /// Redis Cluster. Without it (or --sentinel, or REDIS_URL), counts are
    /// kept in memory, for a single replica.
    #[arg(long)]
    redis: Vec<String>,
    /// Count on the master these Redis Sentinels name (repeatable; with
    /// --sentinel-service).
    #[arg(long, requires = "sentinel_service", conflicts_with = "redis")]
    sentinel: Vec<String>,
    /// The service name the sentinels know the master by.
    #[arg(long)]
    sentinel_service: Option<String>,
    /// What a check answers while Redis fails: error (gRPC UNAVAILABLE,
    /// for Envoy's failure_mode_deny to decide), allow (OK), deny
    /// (OVER_LIMIT), fallback (count in memory meanwhile).
    #[arg(long, value_enum, env = "RATELAB_ON_REDIS_FAILURE", default_value_t = OnFailure::Error)]
    on_redis_failure: OnFailure,
    /// Each Redis call's timeout, milliseconds (REDIS_TIMEOUT when set,
    /// else 200 with --config and the reference's 10 s without); a
    /// request's timeout grows by 20 µs per descriptor.
    #[arg(long, env = "RATELAB_REDIS_TIMEOUT_MS")]
    redis_timeout_ms: Option<u64>,
    /// The prefix of the Redis keys of ratelab's algorithms (the
    /// reference's counters use CACHE_KEY_PREFIX).
    #[arg(long, env = "RATELAB_REDIS_PREFIX", default_value = "ratelab-server")]
    redis_prefix: String,
    /// The algorithm of limits that name none: envoy-fixed-window (as
    /// envoyproxy/ratelimit counts), or one of ratelab's (gcra,
    /// token-bucket, sliding-log, sliding-counter, leaky-meter,
    /// leaky-queue, fixed-window).
    #[arg(
        long,
        env = "RATELAB_DEFAULT_ALGORITHM",
        default_value = "envoy-fixed-window"
    )]
    default_algorithm: Algorithm,
    /// The headers added to answers: reference (RateLimit-Limit,
    /// -Remaining, -Reset, as LIMIT_RESPONSE_HEADERS_ENABLED gives them),
    /// ietf (RateLimit-Policy, RateLimit, Retry-After) or none; by default
    /// what LIMIT_RESPONSE_HEADERS_ENABLED says.
    #[arg(long, value_enum, env = "RATELAB_RESPONSE_HEADERS")]
    response_headers: Option<HeaderStyle>,
    /// The same as --response-headers none.
    #[arg(long, hide = true)]
    no_response_headers: bool,
    /// At most this many descriptors in one request (0: no bound); more is
    /// INVALID_ARGUMENT.
    #[arg(long, env = "RATELAB_MAX_DESCRIPTORS", default_value_t = ratelab_server::DEFAULT_MAX_DESCRIPTORS)]
    max_descriptors: usize,
    /// Client connections open at once, at most, on each port (0: the
    /// process's file limit less 128). Past it, the connection silent the
    /// longest is closed to make room.
    #[arg(long, env = "RATELAB_MAX_CONNECTIONS", default_value_t = 0)]
    max_connections: usize,
    /// A connection with no byte in either direction for this long is
    /// closed, milliseconds (0: never).
    #[arg(long, env = "RATELAB_IDLE_TIMEOUT_MS", default_value_t = 300_000)]
    idle_timeout_ms: u64,
    /// A connection that has not sent its HTTP/2 preface (gRPC) or a byte
    /// (HTTP) within this is closed, milliseconds.
    #[arg(long, env = "RATELAB_HANDSHAKE_TIMEOUT_MS", default_value_t = 10_000)]
    handshake_timeout_ms: u64,
    /// How often the configuration files are checked for changes,
    /// milliseconds.
    #[arg(long, env = "RATELAB_RELOAD_INTERVAL_MS", default_value_t = 1000)]
    reload_interval_ms: u64,
    /// On SIGTERM or ctrl-c, how long calls in flight and connections are
    /// given to finish before the server exits anyway, milliseconds.
    #[arg(long, env = "RATELAB_SHUTDOWN_GRACE_MS", default_value_t = 10_000)]
    shutdown_grace_ms: u64,
    /// Lease hot descriptors, each lease living at most this long,
    /// milliseconds (0: no leases, the default). Every limit counted by
    /// one of ratelab's algorithms on Redis, unless its YAML says
    /// `lease: false`, is then admitted from blocks of units this replica
    /// leases from Redis: most checks never reach Redis, and a debt's
    /// limit may admit up to rate × lifetime more in any interval.
    #[arg(long, env = "RATELAB_LEASE_LIFETIME_MS", default_value_t = 0)]
    lease_lifetime_ms: u64,
    /// The most units one lease holds.
    #[arg(long, env = "RATELAB_LEASE_MAX_UNITS", default_value_t = 1_000)]
    lease_max_units: u32,
    /// The most a lease takes of what the limit has left, in percent: a
    /// nearly spent quota is not hoarded by one replica.
    #[arg(long, env = "RATELAB_LEASE_SHARE_PERCENT", default_value_t = 50)]
    lease_share_percent: u8,
    /// Descriptors holding a lease at once, at most, per leased limit;
    /// beyond them a descriptor is checked on Redis directly.
    #[arg(long, env = "RATELAB_LEASE_MAX_KEYS", default_value_t = 10_000)]
    lease_max_keys: usize,
    /// Log lines as JSON objects (as LOG_FORMAT=json).
    #[arg(long)]
    log_json: bool,
}

impl Args {
    /// The lease settings, when leasing is asked for.
    fn leases(&self) -> Result<Option<LeaseConfig>, Failure> {
        if self.lease_lifetime_ms == 0 {
            return Ok(None);
        }
        let config = LeaseConfig::default()
            .max_lifetime(Duration::from_millis(self.lease_lifetime_ms))
            .max_units(self.lease_max_units)
            .share_percent(self.lease_share_percent)
            .max_keys(self.lease_max_keys);
        config.validate().map_err(|e| format!("--lease-*: {e}"))?;
        Ok(Some(config))
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnFailure {
    Error,
    Allow,
    Deny,
    Fallback,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum HeaderStyle {
    Reference,
    Ietf,
    None,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let env = match settings::from_env(|name| std::env::var(name).ok()) {
        Ok(env) => env,
        Err(e) => {
            eprintln!("ratelab-server: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let default_level = env
        .log_level
        .as_deref()
        .map_or("info", settings::log_filter);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_level.into());
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    if args.log_json || env.log_json {
        logs.json().init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    for warning in &env.warnings {
        tracing::warn!("{warning}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("ratelab-server: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args, env)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ratelab-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

type Failure = Box<dyn std::error::Error>;

/// Connects to `target`, now for a cluster or Sentinel (retrying as the
/// reference does at startup), lazily for one node (the failure policy
/// answers until it is reachable).
async fn connect(target: &RedisTarget) -> Result<(Connection, String), Failure> {
    let mut wait = Duration::from_secs(1);
    loop {
        let attempt = match target {
            RedisTarget::Single(url) => {
                let connection = Connection::single_lazy(url)
                    .map_err(|e| format!("bad Redis URL {}: {e}", masked(url)))?;
                return Ok((connection, format!("on Redis at {}", masked(url))));
            }
            RedisTarget::Cluster(urls) => Connection::cluster(urls).await.map(|c| {
                (
                    c,
                    format!(
                        "on the Redis Cluster at {:?}",
                        urls.iter().map(|u| masked(u)).collect::<Vec<_>>()
                    ),
                )
            }),
            RedisTarget::Sentinel { service, sentinels } => {
                Connection::sentinel(sentinels, service)
                    .await
                    .map(|c| (c, format!("on the Redis master {service:?} (Sentinel)")))
            }
        };
        match attempt {
            Ok(connected) => return Ok(connected),
            Err(error) => {
                tracing::warn!(%error, retry_in = ?wait, "cannot reach Redis yet");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// A URL without its password, for the logs.
fn masked(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}*****{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

async fn serve(args: Args, env: Settings) -> Result<(), Failure> {
    // --config is ratelab's own way; the reference's environment gets the
    // reference's files, ports and statistics.
    let from_flags = !args.config.is_empty();
    let source = if from_flags {
        Source::Paths(args.config.clone())
    } else {
        if env.runtime.subdirectory.as_os_str().is_empty() {
            tracing::warn!(
                "neither --config nor RUNTIME_SUBDIRECTORY is set: no limits are configured"
            );
        }
        Source::Runtime(env.runtime.clone())
    };
    let watch = ratelab_server::Watch::of(source.clone(), env.merge_domains);
    let stats = Arc::new(Stats::default());
    let health = Health::new(env.healthy_with_config).await;
    // Files that do not load stop the server started with --config; with
    // the reference's environment (or FORCE_START_WITHOUT_INITIAL_CONFIG)
    // it starts as the reference does, answering every call with an error
    // until the files are fixed.
    let config = match source.load(env.merge_domains) {
        Ok(config) => {
            stats.counter("ratelimit.service.config_load_success").inc();
            health.config_loaded(!config.is_empty()).await;
            config
        }
        Err(e) if !from_flags || env.force_start => {
            tracing::error!(error = %e, "the configuration does not load: every call is answered with an error until it does");
            stats.counter("ratelimit.service.config_load_error").inc();
            ratelab_server::config::Config::refused(e.to_string())
        }
        Err(e) => return Err(e.into()),
    };
    let shared = ratelab_server::shared(config);

    let on_failure = match args.on_redis_failure {
        OnFailure::Error => FailurePolicy::Error,
        OnFailure::Allow => FailurePolicy::Allow,
        OnFailure::Deny => FailurePolicy::Deny,
        OnFailure::Fallback => FailurePolicy::Fallback,
    };
    // Unset, the reference's 10 s with its environment, 200 ms with
    // ratelab's flags.
    let default_timeout = if from_flags { 200 } else { 10_000 };
    let timeout = Duration::from_millis(
        args.redis_timeout_ms
            .or_else(|| {
                env.redis
                    .as_ref()
                    .and_then(|r| r.timeout)
                    .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
            })
            .unwrap_or(default_timeout)
            .max(1),
    );
    let target = if !args.sentinel.is_empty() {
        Some(RedisTarget::Sentinel {
            service: args.sentinel_service.clone().unwrap_or_default(),
            sentinels: args.sentinel.clone(),
        })
    } else {
        match args.redis.as_slice() {
            [] => env.redis.as_ref().map(|r| r.target.clone()),
            [url] => Some(RedisTarget::Single(url.clone())),
            urls => Some(RedisTarget::Cluster(urls.to_vec())),
        }
    };
    let mut builder = Service::builder(shared.clone())
        .stats(stats.clone())
        .default_algorithm(args.default_algorithm)
        .global_shadow_mode(env.global_shadow_mode)
        .global_quota_mode(env.global_quota_mode)
        .dynamic_metadata(env.dynamic_metadata)
        .max_descriptors(args.max_descriptors)
        .cache_key_prefix(env.cache_key_prefix.clone())
        .stop_increment_when_over_limit(env.stop_increment_when_over_limit)
        .near_limit_ratio(env.near_limit_ratio)
        .expiration_jitter_max_seconds(env.expiration_jitter_max_seconds)
        .local_cache_bytes(env.local_cache_bytes)
        .headers(match (args.no_response_headers, args.response_headers) {
            (true, _) | (_, Some(HeaderStyle::None)) => ResponseHeaders::None,
            (_, Some(HeaderStyle::Ietf)) => ResponseHeaders::Ietf,
            (_, Some(HeaderStyle::Reference)) => match &env.headers {
                ResponseHeaders::None => ResponseHeaders::reference(),
                named => named.clone(),
            },
            (_, None) => env.headers.clone(),
        });
    // The limits a ratelab algorithm cannot count fail at startup, with
    // where they are written.
    check_algorithms(&shared.read(), args.default_algorithm)?;
    let leases = args.leases()?;
    if leases.is_some() && target.is_none() {
        return Err("--lease-lifetime-ms: leases share a Redis limit between replicas; counting in memory (no --redis, REDIS_URL or --sentinel) there is nothing to lease from".into());
    }
    ratelab_server::lease::check(&shared.read(), args.default_algorithm, leases.as_ref())?;
    if let Some(config) = leases {
        builder = builder.leases(config)?;
        tracing::info!(
            lifetime = ?config.lifetime(),
            max_units = config.units(),
            "leasing the limits of ratelab's algorithms (not lease: false); envoy-fixed-window limits are counted on Redis at every call"
        );
    }
    let mut redis_connection = None;
    let where_ = match &target {
        None => {
            tracing::info!(
                "no Redis configured (--redis, REDIS_URL): counting in memory, for one replica"
            );
            "in memory".to_owned()
        }
        Some(target) => {
            let (connection, where_) = connect(target).await?;
            if let Some(per_second) = env.redis.as_ref().and_then(|r| r.per_second.as_ref())
                && args.redis.is_empty()
                && args.sentinel.is_empty()
            {
                let (second, _) = connect(per_second).await?;
                builder = builder.per_second_redis(second);
            }
            redis_connection = Some(connection.clone());
            builder = builder.backend(Backend::Redis {
                connection,
                on_failure,
                timeout,
                prefix: args.redis_prefix.clone(),
            });
            where_
        }
    };
    let service = Arc::new(builder.build());
    if let Some(config) = service.leasing() {
        // Leases of descriptors gone quiet give back what they did not
        // use once they expire, not at their next check.
        let service = service.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(config.lifetime());
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                service.settle_leases().await;
            }
        });
    }

    if let (Some(connection), true) = (
        redis_connection,
        env.redis.as_ref().is_some_and(|r| r.health_check),
    ) {
        let health = health.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_secs(1));
            loop {
                ticker.tick().await;
                let ping = tokio::time::timeout(
                    Duration::from_secs(1),
                    connection.query::<String>(&redis::cmd("PING")),
                )
                .await;
                health.redis(matches!(ping, Ok(Ok(_)))).await;
            }
        });
    }

    let limits = ConnectionLimits {
        max_connections: args.max_connections,
        handshake_timeout: Duration::from_millis(args.handshake_timeout_ms.max(1)),
        handshake_bytes: 24,
        idle_timeout: Duration::from_millis(args.idle_timeout_ms),
    };
    let http_limits = ConnectionLimits {
        handshake_bytes: 1,
        ..limits
    };
    let mut stdout = std::io::stdout();

    let prometheus = match (args.metrics, &env.stats.prometheus) {
        (Some(addr), _) => Some((addr, "/metrics".to_owned())),
        (None, Some((addr, path))) => Some((settings::listen_address(addr)?, path.clone())),
        (None, None) => None,
    };
    if let Some((addr, path)) = prometheus {
        let app = ratelab_server::http::metrics_router(stats.clone(), &path);
        let bound = spawn_http(addr, app, http_limits, "metrics").await?;
        tracing::info!(%bound, %path, "Prometheus metrics");
        writeln!(stdout, "metrics on http://{bound}{path}")?;
    }
    if let Some(statsd) = env.stats.statsd.clone()
        && (!from_flags || std::env::var("USE_STATSD").is_ok())
    {
        tokio::spawn(statsd_sink(
            statsd,
            stats.clone(),
            service.clone(),
            env.stats.flush_interval,
        ));
    }
    {
        // The local cache's gauges, for Prometheus and /stats too.
        let service = service.clone();
        let interval = env.stats.flush_interval.max(Duration::from_secs(1));
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(interval);
            loop {
                ticker.tick().await;
                service.refresh_gauges();
            }
        });
    }
    let http = match (args.http, from_flags) {
        (Some(addr), _) => Some(addr),
        (None, false) => Some(settings::listen_address(&env.http)?),
        (None, true) => None,
    };
    if let Some(addr) = http {
        let app = ratelab_server::http::router(service.clone(), health.clone());
        let bound = spawn_http(addr, app, http_limits, "HTTP").await?;
        tracing::info!(%bound, "HTTP: /healthcheck, /json");
        writeln!(stdout, "http on http://{bound}")?;
    }
    let debug = match (args.debug, from_flags) {
        (Some(addr), _) => Some(addr),
        (None, false) => Some(settings::listen_address(&env.debug)?),
        (None, true) => None,
    };
    if let Some(addr) = debug {
        let app = ratelab_server::http::debug_router(service.clone());
        match spawn_http(addr, app, http_limits, "debug").await {
            Ok(bound) => {
                tracing::info!(%bound, "debug: /rlconfig, /stats");
                writeln!(stdout, "debug on http://{bound}")?;
            }
            // As the reference: the debug port failing is not fatal.
            Err(error) => tracing::error!(%error, "the debug port is not served"),
        }
    }

    // A reload is refused what a start would have been.
    let (default_algorithm, lease_settings) = (args.default_algorithm, leases);
    let watch = watch.checked(Arc::new(move |config| {
        check_algorithms(config, default_algorithm).map_err(|e| e.to_string())?;
        ratelab_server::lease::check(config, default_algorithm, lease_settings.as_ref())
    }));
    tokio::spawn(watch.run(
        shared.clone(),
        Duration::from_millis(args.reload_interval_ms.max(10)),
        stats.clone(),
        Some(health.clone()),
    ));

    let (leasing, releasing) = (service.leasing(), service.clone());
    let signalled = Arc::new(tokio::sync::Notify::new());
    let shutdown = {
        let signalled = signalled.clone();
        let health = health.clone();
        async move {
            shutdown_signal().await;
            tracing::info!("shutting down: finishing the calls in flight");
            health.sigterm().await;
            signalled.notify_one();
        }
    };
    let max_age = Some(env.max_connection_age);
    let serve: std::pin::Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>>>> =
        match (&args.listen, &env.grpc) {
            (Some(addr), _) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
                let addr = listener.local_addr()?;
                announce(&mut stdout, &addr.to_string(), &where_)?;
                Box::pin(ratelab_server::serve_with(
                    listener, service, &health, limits, max_age, shutdown,
                ))
            }
            (None, Listen::Tcp(addr)) => {
                let addr = settings::listen_address(addr)?;
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
                let addr = listener.local_addr()?;
                announce(&mut stdout, &addr.to_string(), &where_)?;
                Box::pin(ratelab_server::serve_with(
                    listener, service, &health, limits, max_age, shutdown,
                ))
            }
            (None, Listen::Unix(path)) => {
                let _ = std::fs::remove_file(path);
                let listener = tokio::net::UnixListener::bind(path)
                    .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
                announce(&mut stdout, &format!("unix:{}", path.display()), &where_)?;
                Box::pin(serve_unix(
                    listener,
                    service,
                    health.clone(),
                    limits,
                    max_age,
                    shutdown,
                ))
            }
        };
    // Graceful, within a bound: a peer that keeps its connection open
    // without answering the GOAWAY does not keep the process alive.
    let grace = Duration::from_millis(args.shutdown_grace_ms);
    let served = tokio::select! {
        served = serve => served,
        () = async {
            signalled.notified().await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!(?grace, "connections still open after the grace period: exiting");
            Ok(())
        }
    };
    if leasing.is_some() {
        // What the leases hold unused goes back to Redis for the other
        // replicas; bounded, so an unreachable Redis does not hold the
        // exit (its units then come back as the limit frees them).
        match tokio::time::timeout(
            grace.max(Duration::from_secs(1)),
            releasing.release_leases(),
        )
        .await
        {
            Ok(settled) => tracing::info!(settled, "leases released"),
            Err(_) => tracing::warn!(
                "leases not all released in time: their unused units stay charged until the limits free them"
            ),
        }
    }
    served?;
    tracing::info!("stopped");
    Ok(())
}

fn announce(stdout: &mut std::io::Stdout, addr: &str, where_: &str) -> Result<(), Failure> {
    tracing::info!(%addr, backend = %where_, "serving ShouldRateLimit");
    // On stdout, once bound: scripts and tests wait for this line.
    writeln!(stdout, "listening on {addr} (limits {where_})")?;
    stdout.flush()?;
    Ok(())
}

async fn serve_unix(
    listener: tokio::net::UnixListener,
    service: Arc<Service>,
    health: Health,
    limits: ConnectionLimits,
    max_age: Option<(Duration, Duration)>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
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

/// Binds `addr` and serves `app` on it in the background; the bound
/// address.
async fn spawn_http(
    addr: SocketAddr,
    app: axum::Router,
    limits: ConnectionLimits,
    what: &'static str,
) -> Result<SocketAddr, Failure> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} for {what}: {e}"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(Connections::new(listener, limits), app).await {
            tracing::error!(%error, "the {what} endpoint stopped");
        }
    });
    Ok(bound)
}

/// Sends the statistics to statsd over TCP every `interval`, as the
/// reference's default sink does; a statsd away is retried at the next
/// flush (what it missed is sent then).
async fn statsd_sink(
    address: String,
    stats: Arc<Stats>,
    service: Arc<Service>,
    interval: Duration,
) {
    use tokio::io::AsyncWriteExt;
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(100)));
    let mut connection: Option<tokio::net::TcpStream> = None;
    let mut warned = false;
    loop {
        ticker.tick().await;
        service.refresh_gauges();
        if connection.is_none() {
            match tokio::time::timeout(
                Duration::from_secs(1),
                tokio::net::TcpStream::connect(&address),
            )
            .await
            {
                Ok(Ok(stream)) => {
                    warned = false;
                    connection = Some(stream);
                }
                Ok(Err(error)) if !warned => {
                    warned = true;
                    tracing::warn!(%address, %error, "cannot reach statsd (USE_STATSD): statistics kept until it is back");
                    continue;
                }
                _ => continue,
            }
        }
        let lines = stats.statsd_lines();
        if lines.is_empty() {
            continue;
        }
        if let Some(stream) = &mut connection
            && stream.write_all(lines.as_bytes()).await.is_err()
        {
            connection = None;
        }
    }
}

/// Limits a ratelab algorithm cannot count (finer than a microsecond
/// apart) are an error at startup, with where they are written.
fn check_algorithms(
    config: &ratelab_server::config::Config,
    default: Algorithm,
) -> Result<(), Failure> {
    for limit in config.limits() {
        let algorithm = limit.algorithm.unwrap_or(default);
        if let (Algorithm::Ratelab(kind), false, Some(unit)) =
            (algorithm, limit.unlimited, limit.unit)
            && limit.requests_per_unit > 0
            && let Err(e) = ratelab_server::config::quota(limit.requests_per_unit, unit)
        {
            let at = limit
                .origin
                .as_ref()
                .map(|(path, (line, col))| format!("{}:{line}:{col}: ", path.display()))
                .unwrap_or_default();
            return Err(format!(
                "{at}{}: {kind} (--default-algorithm) cannot count {e}",
                limit.full_key
            )
            .into());
        }
    }
    Ok(())
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
