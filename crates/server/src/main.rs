//! `ratelab-server`: Envoy's rate limit service on ratelab's algorithms.
//! See the crate docs and `ratelab-server --help`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use ratelab::redis::{Connection, FailurePolicy};
use ratelab_server::{Backend, Service, config::Config};

/// Envoy's global rate limit service (envoy.service.ratelimit.v3,
/// ShouldRateLimit) on any ratelab algorithm, in memory or on Redis, reading
/// envoyproxy/ratelimit's YAML configuration.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// A configuration file, or a directory whose .yaml/.yml files are read
    /// (repeatable). Reloaded when they change.
    #[arg(long, short, required = true)]
    config: Vec<PathBuf>,
    /// The gRPC address (ShouldRateLimit and grpc.health.v1).
    #[arg(long, default_value = "0.0.0.0:8081")]
    listen: SocketAddr,
    /// Serve Prometheus metrics on http://ADDR/metrics.
    #[arg(long)]
    metrics: Option<SocketAddr>,
    /// Count on Redis at this URL (redis://host:port); several are one
    /// Redis Cluster. Without it (or --sentinel), counts are kept in memory,
    /// for a single replica.
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
    #[arg(long, value_enum, default_value_t = OnFailure::Error)]
    on_redis_failure: OnFailure,
    /// Each Redis call's timeout, milliseconds.
    #[arg(long, default_value_t = 200)]
    redis_timeout_ms: u64,
    /// The prefix of every Redis key.
    #[arg(long, default_value = "ratelab-server")]
    redis_prefix: String,
    /// Do not add RateLimit-Policy, RateLimit and Retry-After to answers.
    #[arg(long)]
    no_response_headers: bool,
    /// How often the configuration files are checked for changes,
    /// milliseconds.
    #[arg(long, default_value_t = 1000)]
    reload_interval_ms: u64,
    /// On SIGTERM or ctrl-c, how long calls in flight and connections are
    /// given to finish before the server exits anyway, milliseconds.
    #[arg(long, default_value_t = 10_000)]
    shutdown_grace_ms: u64,
    /// Log lines as JSON objects (one per line) rather than text.
    #[arg(long)]
    log_json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OnFailure {
    Error,
    Allow,
    Deny,
    Fallback,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    if args.log_json {
        logs.json().init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
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
    match runtime.block_on(serve(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ratelab-server: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let watch = ratelab_server::Watch::new(args.config.clone());
    let config = Config::load(&args.config)?;
    let shared = ratelab_server::shared(config);

    let on_failure = match args.on_redis_failure {
        OnFailure::Error => FailurePolicy::Error,
        OnFailure::Allow => FailurePolicy::Allow,
        OnFailure::Deny => FailurePolicy::Deny,
        OnFailure::Fallback => FailurePolicy::Fallback,
    };
    let redis = |connection| Backend::Redis {
        connection,
        on_failure,
        timeout: Duration::from_millis(args.redis_timeout_ms.max(1)),
        prefix: args.redis_prefix.clone(),
    };
    let (backend, where_) = if !args.sentinel.is_empty() {
        let service = args.sentinel_service.as_deref().unwrap_or_default();
        let connection = Connection::sentinel(&args.sentinel, service)
            .await
            .map_err(|e| {
                format!(
                    "cannot reach the master of {service:?} through {:?}: {e}",
                    args.sentinel
                )
            })?;
        (
            redis(connection),
            format!("on the Redis master {service:?} (Sentinel)"),
        )
    } else {
        match args.redis.as_slice() {
            [] => (Backend::Memory, "in memory".to_owned()),
            // Lazy: the server starts while Redis is away, and the failure
            // policy answers until it is back.
            [url] => (
                redis(
                    Connection::single_lazy(url)
                        .map_err(|e| format!("bad Redis URL {url}: {e}"))?,
                ),
                format!("on Redis at {url}"),
            ),
            urls => (
                redis(
                    Connection::cluster(urls)
                        .await
                        .map_err(|e| format!("cannot reach the Redis Cluster at {urls:?}: {e}"))?,
                ),
                format!("on the Redis Cluster at {urls:?}"),
            ),
        }
    };

    if let Some(addr) = args.metrics {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
            .set_buckets(ratelab_server::LATENCY_BUCKETS)?
            .install_recorder()
            .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || std::future::ready(handle.render())),
        );
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr} for metrics: {e}"))?;
        let bound = listener.local_addr()?;
        tracing::info!(%bound, "metrics on /metrics");
        println!("metrics on http://{bound}/metrics");
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::error!(%error, "the metrics endpoint stopped");
            }
        });
    }

    tokio::spawn(watch.run(
        shared.clone(),
        Duration::from_millis(args.reload_interval_ms.max(10)),
    ));

    let service = Service::new(shared, backend, !args.no_response_headers);
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<RateLimitServiceServer<Service>>()
        .await;

    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, backend = %where_, "serving ShouldRateLimit");
    // On stdout, once bound: scripts and tests wait for this line.
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on {addr} (limits {where_})")?;
    stdout.flush()?;

    let signalled = Arc::new(tokio::sync::Notify::new());
    let shutdown = {
        let signalled = signalled.clone();
        async move {
            shutdown_signal().await;
            tracing::info!("shutting down: finishing the calls in flight");
            health
                .set_not_serving::<RateLimitServiceServer<Service>>()
                .await;
            signalled.notify_one();
        }
    };
    let serve = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(RateLimitServiceServer::new(service))
        .serve_with_incoming_shutdown(
            // No Nagle: answers to calls multiplexed on one connection (as
            // Envoy's are) are not held back waiting for an ACK.
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
            shutdown,
        );
    // Graceful, within a bound: a peer that keeps its connection open
    // without answering the GOAWAY does not keep the process alive.
    let grace = Duration::from_millis(args.shutdown_grace_ms);
    tokio::select! {
        served = serve => served?,
        () = async {
            signalled.notified().await;
            tokio::time::sleep(grace).await;
        } => tracing::warn!(?grace, "connections still open after the grace period: exiting"),
    }
    tracing::info!("stopped");
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
