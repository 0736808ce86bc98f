//! A small API behind `ratelab-http`: a cheap route, a login and an SMS send,
//! limited per client, per plan, per account and by cost; in memory by
//! default, on Redis (shared by every instance) when `REDIS_URL` is set.
//!
//! ```text
//! cargo run -p ratelab-http --example server -- 127.0.0.1:3000
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run -p ratelab-http --example server -- 127.0.0.1:3001
//!
//! curl -i http://127.0.0.1:3000/                                  # anonymous: 10 per minute per IP
//! curl -i -H 'x-api-key: demo-free' http://127.0.0.1:3000/        # plan free: 60 per minute
//! curl -i -H 'x-api-key: demo-pro' http://127.0.0.1:3000/         # plan pro: 600 per minute
//! curl -i -u alice:wonderland -X POST http://127.0.0.1:3000/login # 5 attempts per account per 15 min
//! curl -i -X POST 'http://127.0.0.1:3000/sms?to=5550001,5550002'  # 10 messages per hour, 1 per recipient
//! ```
//!
//! Options: `--anonymous 10/min` (the anonymous quota: `N/s`, `N/min` or
//! `N/h`), `--legacy-headers` (also `X-RateLimit-*`), `--trusted-proxy CIDR`
//! (repeatable: read `X-Forwarded-For` from these peers). It prints
//! `listening on http://ADDR` once it accepts connections (`127.0.0.1:0`
//! picks a free port).

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, RawQuery};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use clap::Parser;
use http::request::Parts;
use http::{HeaderName, Method};
use ratelab_core::{AsyncRateLimiter, Keyed, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{Client, Identify, Identity, Policy, RateLimitLayer, TrustedProxies};
use ratelab_redis::{Connection, RedisLimiter};
use serde_json::{Value, json};

/// The demo API of ratelab-http.
#[derive(Debug, Parser)]
struct Args {
    /// The address to listen on.
    #[arg(default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// The quota of anonymous clients, per IP address: N/s, N/min or N/h.
    #[arg(long, default_value = "10/min", value_parser = parse_quota)]
    anonymous: Quota,
    /// Also send X-RateLimit-Limit, -Remaining and -Reset.
    #[arg(long)]
    legacy_headers: bool,
    /// A proxy network (CIDR) whose X-Forwarded-For is believed; repeatable.
    #[arg(long = "trusted-proxy")]
    trusted_proxies: Vec<String>,
}

fn parse_quota(text: &str) -> Result<Quota, String> {
    let (limit, per) = text.split_once('/').ok_or("expected N/s, N/min or N/h")?;
    let limit: u32 = limit
        .trim()
        .parse()
        .map_err(|e| format!("{limit:?}: {e}"))?;
    let period = match per.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        other => return Err(format!("unknown period {other:?}: use s, min or h")),
    };
    Quota::new(limit, period).map_err(|e| e.to_string())
}

/// Where the limiters keep their state.
enum Backend {
    Memory,
    Redis(Connection),
}

impl Backend {
    /// A GCRA limiter for `quota`, in this process or on the shared Redis.
    fn limiter(&self, quota: Quota) -> Arc<dyn AsyncRateLimiter> {
        match self {
            Backend::Memory => Arc::new(Keyed::new(Gcra::new(quota))),
            // Errors are returned to the layer, whose policies decide (fail
            // open or closed); the layer bounds each call by its own timeout.
            Backend::Redis(connection) => Arc::new(
                RedisLimiter::builder(connection.clone(), Gcra::new(quota))
                    .timeout(Duration::from_millis(100))
                    .build(),
            ),
        }
    }
}

/// The account a `POST /login` is for: the user name of HTTP Basic
/// credentials (`curl -u alice:secret`), case-insensitive.
fn login_account(request: &Parts) -> Option<String> {
    let (user, _) = basic_credentials(&request.headers)?;
    Some(user.to_lowercase())
}

fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let (user, password) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// The recipients of `POST /sms?to=a,b,c`.
fn recipients(query: Option<&str>) -> Vec<String> {
    query
        .unwrap_or("")
        .split('&')
        .filter_map(|pair| pair.strip_prefix("to="))
        .flat_map(|to| to.split(','))
        .filter(|number| !number.is_empty())
        .map(str::to_owned)
        .collect()
}

fn layer(args: &Args, backend: &Backend) -> Result<RateLimitLayer, Box<dyn std::error::Error>> {
    let identify = Identify::new()
        .api_key(HeaderName::from_static("x-api-key"), |key| match key {
            "demo-free" => Some(Identity::new("free-demo").with_plan("free")),
            "demo-pro" => Some(Identity::new("pro-demo").with_plan("pro")),
            _ => None,
        })
        .anonymous_plan("anonymous")
        .trusted_proxies(TrustedProxies::parse(&args.trusted_proxies)?);
    let layer = RateLimitLayer::builder()
        .identify(identify)
        .policy(Policy::shared("anonymous", backend.limiter(args.anonymous)).plan("anonymous"))
        .policy(Policy::shared("free", backend.limiter(Quota::per_minute(60)?)).plan("free"))
        .policy(Policy::shared("pro", backend.limiter(Quota::per_minute(600)?)).plan("pro"))
        .policy(
            Policy::shared(
                "login",
                backend.limiter(Quota::new(5, Duration::from_secs(15 * 60))?),
            )
            .route(Method::POST, "/login")
            .key(|request, _| login_account(request))
            .fail_closed(),
        )
        .policy(
            Policy::shared("sms", backend.limiter(Quota::per_hour(10)?))
                .route(Method::POST, "/sms")
                .cost_with(|request, _| {
                    u32::try_from(recipients(request.uri.query()).len()).unwrap_or(u32::MAX)
                })
                .fail_closed(),
        )
        .legacy_headers(args.legacy_headers)
        .build()?;
    Ok(layer)
}

async fn home(Extension(client): Extension<Client>) -> Json<Value> {
    Json(json!({
        "message": "hello",
        "client": client.key(),
        "plan": client.plan(),
    }))
}

async fn login(headers: HeaderMap) -> (StatusCode, Json<Value>) {
    match basic_credentials(&headers) {
        Some((user, password))
            if user.eq_ignore_ascii_case("alice") && password == "wonderland" =>
        {
            (StatusCode::OK, Json(json!({ "welcome": user })))
        }
        _ => (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": "wrong user name or password" })),
        ),
    }
}

async fn sms(RawQuery(query): RawQuery) -> (StatusCode, Json<Value>) {
    let to = recipients(query.as_deref());
    if to.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": "say who to send to: /sms?to=5550001,5550002" })),
        );
    }
    (StatusCode::OK, Json(json!({ "sent": to.len(), "to": to })))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let (backend, where_) = match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => {
            let connection = Connection::single(&url)
                .await
                .map_err(|e| format!("cannot connect to Redis at {url}: {e}"))?;
            (Backend::Redis(connection), format!("on Redis at {url}"))
        }
        _ => (Backend::Memory, "in memory".to_owned()),
    };
    let app = Router::new()
        .route("/", get(home))
        .route("/login", post(login))
        .route("/sms", post(sms))
        .layer(layer(&args, &backend)?);

    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let addr = listener.local_addr()?;
    // On stdout, once bound: scripts and tests wait for this line.
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on http://{addr} (limits {where_})")?;
    stdout.flush()?;

    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
