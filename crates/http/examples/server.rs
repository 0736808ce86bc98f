//! A small API behind `ratelab-http`: a cheap route, a login, an SMS send and
//! an LLM-style completion, limited per client, per plan, per account, by
//! cost and by what the response says it cost; in memory by default, on
//! Redis (shared by every instance) when `REDIS_URL` is set.
//!
//! ```text
//! cargo run -p ratelab-http --example server -- 127.0.0.1:3000
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run -p ratelab-http --example server -- 127.0.0.1:3001
//!
//! curl -i http://127.0.0.1:3000/                                  # anonymous: 10 per minute per network
//! curl -i -H 'x-api-key: demo-free' http://127.0.0.1:3000/        # plan free: 60 per minute
//! curl -i -H 'x-api-key: demo-pro' http://127.0.0.1:3000/         # plan pro: 600 per minute
//! curl -i -u alice:wonderland -X POST http://127.0.0.1:3000/login # the login guard: failures only
//! curl -i -X POST 'http://127.0.0.1:3000/sms?to=5550001,5550002'  # 10 messages per hour, 1 per recipient
//! curl -i -X POST 'http://127.0.0.1:3000/complete?max_tokens=50&prompt=tell+me+a+story'
//!                                                                 # 10,000 tokens per minute, settled
//! curl http://127.0.0.1:3000/metrics                              # Prometheus metrics (not limited)
//! ```
//!
//! **Logins a stranger cannot turn against the owner** ([`LoginGuard`]).
//! Only failed logins count. A successful login sets a device cookie;
//! attempts with it are limited per account and device only (10 failures
//! per 15 minutes), so failures from elsewhere never refuse them. Attempts
//! without it are limited per account and client network (5 per 15
//! minutes: a stranger's failures use up the stranger's allowance) and per
//! account from all of them together (50 per hour: guessing spread over
//! many networks). The device tokens are signed with `LOGIN_SECRET` (at
//! least 32 bytes; the same on every instance), or a random secret when it
//! is not set (tokens then die with the process).
//!
//! **Tokens per minute, settled from the response.** `POST
//! /complete?max_tokens=N&prompt=...` reserves `N` tokens of the client's
//! 10,000 per minute before it runs, and is settled with the tokens it
//! reports in `x-tokens-used` (the prompt's words plus the completion's,
//! which echoes the prompt up to `N` words): a completion that used less
//! gives the rest back, one that used more (a long prompt) leaves a debt the
//! client's next requests wait out.
//!
//! Options: `--config FILE` (the quotas, as in `DEFAULT_CONFIG` below),
//! `--anonymous 10/min` (the anonymous quota: `N/s`, `N/min`, `N/h`, or
//! `N/15min`...), `--legacy-headers` (also `X-RateLimit-*`),
//! `--trusted-proxy CIDR` (repeatable: read `X-Forwarded-For` from these
//! peers), `--insecure-cookie` (the device cookie without `Secure`, for a
//! browser on plain HTTP). It prints `listening on http://ADDR` once it
//! accepts connections (`127.0.0.1:0` picks a free port).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
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
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use ratelab_core::{AsyncRateLimiter, Keyed, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{
    Client, HeaderStyle, Identify, Identity, LoginAttempt, LoginGuard, MIN_SECRET_LEN, Policy,
    RateLimitLayer, TrustedProxies,
};
use ratelab_redis::{Connection, RedisStore};
use serde::Deserialize;
use serde_json::{Value, json};

/// The quotas when no `--config` is given; a config file has this shape.
const DEFAULT_CONFIG: &str = r#"
# Every client is on one plan: anonymous (by IP address), or the plan of its
# API key.
[plans]
anonymous = "10/min"
free = "60/min"
pro = "600/min"

# The login guard: only failed logins count. Attempts from a device that
# logged in before: per account and device. Others: per account and client
# network, and per account from all of them together.
[login]
per_device = "10/15min"
per_account_and_network = "5/15min"
per_account = "50/h"

# One unit per recipient.
[sms]
per_client = "10/h"

# Completions: max_tokens reserved, settled with the tokens used.
[completions]
tokens_per_client = "10000/min"
"#;

/// The quotas of the demo API, from TOML.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    plans: Plans,
    login: Login,
    sms: Sms,
    #[serde(default = "Completions::default_quota")]
    completions: Completions,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Plans {
    #[serde(deserialize_with = "quota")]
    anonymous: Quota,
    #[serde(deserialize_with = "quota")]
    free: Quota,
    #[serde(deserialize_with = "quota")]
    pro: Quota,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Login {
    #[serde(deserialize_with = "quota", default = "Login::default_per_device")]
    per_device: Quota,
    // Its name before the client network replaced the address.
    #[serde(deserialize_with = "quota", alias = "per_account_and_address")]
    per_account_and_network: Quota,
    #[serde(deserialize_with = "quota")]
    per_account: Quota,
}

impl Login {
    fn default_per_device() -> Quota {
        parse_quota("10/15min").unwrap_or_else(|e| unreachable!("{e}"))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Completions {
    #[serde(deserialize_with = "quota")]
    tokens_per_client: Quota,
}

impl Completions {
    fn default_quota() -> Self {
        Completions {
            tokens_per_client: parse_quota("10000/min").unwrap_or_else(|e| unreachable!("{e}")),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sms {
    #[serde(deserialize_with = "quota")]
    per_client: Quota,
}

/// A quota written `N/unit`: parsed inside the deserializer, so that a bad
/// one is reported at its line.
fn quota<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Quota, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_quota(&text).map_err(serde::de::Error::custom)
}

impl Config {
    /// The file's config, or an error that names the file and the line.
    fn load(path: Option<&PathBuf>) -> Result<Config, String> {
        let Some(path) = path else {
            return toml::from_str(DEFAULT_CONFIG).map_err(|e| format!("built-in config: {e}"));
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The demo API of ratelab-http.
#[derive(Debug, Parser)]
struct Args {
    /// The address to listen on.
    #[arg(default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// The quotas, in TOML (the built-in ones otherwise).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The quota of anonymous clients, per IP address (N/s, N/min, N/h, or
    /// N/15min...); overrides the config's.
    #[arg(long, value_parser = parse_quota)]
    anonymous: Option<Quota>,
    /// Also send X-RateLimit-Limit, -Remaining and -Reset.
    #[arg(long)]
    legacy_headers: bool,
    /// A proxy address or network (CIDR) whose X-Forwarded-For is believed;
    /// repeatable.
    #[arg(long = "trusted-proxy", value_name = "CIDR", value_parser = parse_proxy)]
    trusted_proxies: Vec<String>,
    /// The login guard's device cookie without `Secure`: for a browser on
    /// plain HTTP (development only).
    #[arg(long)]
    insecure_cookie: bool,
    /// The most a check waits for Redis, in milliseconds; then the route's
    /// policy fails open or closed.
    #[arg(long, value_name = "MS", default_value_t = 100)]
    redis_timeout_ms: u64,
}

/// `text` if it is a proxy address or network; else the sentence saying why.
fn parse_proxy(text: &str) -> Result<String, String> {
    TrustedProxies::parse([text]).map_err(|e| e.to_string())?;
    Ok(text.to_owned())
}

/// `N/unit`, where unit is `s`, `min` or `h`, optionally with a count
/// (`5/15min`).
fn parse_quota(text: &str) -> Result<Quota, String> {
    let usage = || format!("{text:?} is not a quota: write N/s, N/min, N/h or N/15min");
    let (limit, per) = text.split_once('/').ok_or_else(usage)?;
    let limit: u32 = limit.trim().parse().map_err(|_| usage())?;
    let per = per.trim();
    let digits = per.bytes().take_while(u8::is_ascii_digit).count();
    let (count, unit) = per.split_at(digits);
    let count: u32 = if count.is_empty() {
        1
    } else {
        count.parse().map_err(|_| usage())?
    };
    let unit = match unit {
        "s" | "sec" | "second" => 1,
        "min" | "minute" => 60,
        "h" | "hour" => 3600,
        _ => return Err(usage()),
    };
    let period = Duration::from_secs(u64::from(count) * unit);
    Quota::new(limit, period).map_err(|e| format!("{text:?}: {e}"))
}

/// Where the limiters keep their state.
enum Backend {
    Memory,
    /// The connection, and each check's timeout.
    Redis(Connection, Duration),
}

impl Backend {
    /// A policy named `name` on a GCRA limiter for `quota`, in this process
    /// or on the shared Redis.
    fn policy(&self, name: &str, quota: Quota) -> Policy {
        match self {
            Backend::Memory => {
                let limiter = Arc::new(Keyed::new(Gcra::new(quota)));
                let tracked = limiter.clone();
                Policy::shared(name, limiter as Arc<dyn AsyncRateLimiter>)
                    .keys_tracked(move || tracked.len())
            }
            // Errors are returned to the layer, whose policies decide (fail
            // open or closed). The layer bounds each policy's calls by its
            // own timeout too (100 ms unless told): the same one, so that
            // `--redis-timeout-ms` is the wait it says.
            Backend::Redis(connection, timeout) => {
                let limiter = Arc::new(
                    RedisStore::builder(connection.clone(), Gcra::new(quota))
                        .timeout(*timeout)
                        .build(),
                );
                let breaker = limiter.clone();
                Policy::shared(name, limiter as Arc<dyn AsyncRateLimiter>)
                    .timeout(*timeout)
                    .breaker_open(move || breaker.stats().breaker_open)
            }
        }
    }
}

/// The account a `POST /login` is for: the user name of HTTP Basic
/// credentials (`curl -u alice:secret`), case-insensitive, as the handler
/// reads it.
fn login_account(request: &Parts) -> Option<String> {
    let (user, _) = basic_credentials(&request.headers)?;
    Some(user.to_lowercase())
}

/// The device tokens' secret: `LOGIN_SECRET`, or a random one (with a
/// warning: tokens then die with the process and no other instance accepts
/// them).
fn login_secret() -> Result<Vec<u8>, String> {
    if let Ok(secret) = std::env::var("LOGIN_SECRET") {
        if secret.len() < MIN_SECRET_LEN {
            return Err(format!(
                "LOGIN_SECRET is {} bytes: it needs at least {MIN_SECRET_LEN} random bytes",
                secret.len()
            ));
        }
        return Ok(secret.into_bytes());
    }
    tracing::warn!(
        "LOGIN_SECRET is not set: device tokens are signed with a random secret, valid until \
         this process ends and on this instance only"
    );
    let mut secret = vec![0; MIN_SECRET_LEN];
    getrandom::fill(&mut secret).map_err(|e| format!("no randomness for a secret: {e}"))?;
    Ok(secret)
}

/// The tokens a completion may produce and uses, from `max_tokens` and the
/// prompt's words: what the client reserves, and what it is charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Completion {
    max_tokens: u32,
}

/// `max_tokens` when the request does not say.
const DEFAULT_MAX_TOKENS: u32 = 256;

/// The query parameter `name` of `query`, percent-decoded (`+` is a space).
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    let value = query?
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))?;
    let bytes = value.replace('+', " ").into_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

impl Completion {
    /// The completion `POST /complete?max_tokens=N` asks for; `None` for a
    /// `max_tokens` that is not a number (the handler answers 400).
    fn of(query: Option<&str>) -> Option<Self> {
        let max_tokens = match query_param(query, "max_tokens") {
            None => DEFAULT_MAX_TOKENS,
            Some(n) => n.trim().parse().ok()?,
        };
        Some(Completion { max_tokens })
    }
}

/// The tokens reported in this header settle the completion's reservation.
const TOKENS_USED: HeaderName = HeaderName::from_static("x-tokens-used");

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

fn layer(
    args: &Args,
    config: &Config,
    backend: &Backend,
) -> Result<RateLimitLayer, Box<dyn std::error::Error>> {
    let anonymous = args.anonymous.unwrap_or(config.plans.anonymous);
    let identify = Identify::new()
        .api_key(HeaderName::from_static("x-api-key"), |key| match key {
            "demo-free" => Some(Identity::new("free-demo").with_plan("free")),
            "demo-pro" => Some(Identity::new("pro-demo").with_plan("pro")),
            _ => None,
        })
        .anonymous_plan("anonymous")
        .trusted_proxies(TrustedProxies::parse(&args.trusted_proxies)?);
    let guard = LoginGuard::builder(login_secret()?)
        .route(Method::POST, "/login")
        .account(login_account)
        .per_device(backend.policy("login-device", config.login.per_device))
        .per_network(backend.policy("login", config.login.per_account_and_network))
        .per_account(backend.policy("login-account", config.login.per_account))
        .secure_cookie(!args.insecure_cookie)
        .build()?;
    let layer = RateLimitLayer::builder()
        .identify(identify)
        .policy(backend.policy("anonymous", anonymous).plan("anonymous"))
        .policy(backend.policy("free", config.plans.free).plan("free"))
        .policy(backend.policy("pro", config.plans.pro).plan("pro"))
        .login_guard(guard)
        .policy(
            backend
                .policy("tokens", config.completions.tokens_per_client)
                .route(Method::POST, "/complete")
                // A reservation no request can exceed; a max_tokens that is
                // not a number reserves nothing (the handler refuses it).
                .cost_with(|request, _| {
                    Completion::of(request.uri.query()).map_or(0, |c| c.max_tokens)
                })
                .settle_from_header(TOKENS_USED)
                .fail_closed(),
        )
        .policy(
            backend
                .policy("sms", config.sms.per_client)
                .route(Method::POST, "/sms")
                .cost_with(|request, _| {
                    u32::try_from(recipients(request.uri.query()).len()).unwrap_or(u32::MAX)
                })
                .fail_closed(),
        )
        .headers(if args.legacy_headers {
            HeaderStyle::DraftAndLegacy
        } else {
            HeaderStyle::Draft
        })
        // Scrapes and health checks are not the clients being limited.
        .skip(|request| request.uri.path() == "/metrics")
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

async fn login(
    Extension(attempt): Extension<LoginAttempt>,
    headers: HeaderMap,
) -> (StatusCode, Json<Value>) {
    match basic_credentials(&headers) {
        Some((user, password))
            if user.eq_ignore_ascii_case("alice") && password == "wonderland" =>
        {
            let device = if attempt.known_device() {
                "known"
            } else {
                "new"
            };
            (
                StatusCode::OK,
                Json(json!({ "welcome": user, "device": device })),
            )
        }
        _ => (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": "wrong user name or password" })),
        ),
    }
}

/// A demo "model": it answers with the prompt's words, up to `max_tokens`
/// of them, and reports the tokens used (prompt and completion, a word
/// each) in `x-tokens-used`, which settles the client's reservation.
async fn complete(RawQuery(query): RawQuery) -> (StatusCode, HeaderMap, Json<Value>) {
    let mut headers = HeaderMap::new();
    let Some(completion) = Completion::of(query.as_deref()) else {
        // Nothing was produced: nothing is charged.
        headers.insert(TOKENS_USED, 0.into());
        let error =
            json!({ "error": "max_tokens is a number of tokens: /complete?max_tokens=100" });
        return (StatusCode::BAD_REQUEST, headers, Json(error));
    };
    let prompt = query_param(query.as_deref(), "prompt").unwrap_or_default();
    let words: Vec<&str> = prompt.split_whitespace().collect();
    let produced: Vec<&str> = words
        .iter()
        .copied()
        .take(usize::try_from(completion.max_tokens).unwrap_or(usize::MAX))
        .collect();
    let used = words.len() + produced.len();
    headers.insert(TOKENS_USED, used.into());
    let body = json!({
        "completion": produced.join(" "),
        "usage": {
            "prompt_tokens": words.len(),
            "completion_tokens": produced.len(),
            "total_tokens": used,
        },
    });
    (StatusCode::OK, headers, Json(body))
}

/// The Prometheus text exposition of every metric recorded.
async fn render(metrics: PrometheusHandle) -> String {
    metrics.render()
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

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match Config::load(args.config.as_ref()) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // Errors as sentences, not as Debug structs.
    match runtime.block_on(serve(args, config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args, config: Config) -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    let (backend, where_) = match std::env::var("REDIS_URL") {
        Ok(url) if !url.is_empty() => {
            let connection = Connection::single(&url)
                .await
                .map_err(|e| format!("cannot connect to Redis at {url}: {e}"))?;
            let timeout = Duration::from_millis(args.redis_timeout_ms.max(1));
            (
                Backend::Redis(connection, timeout),
                format!("on Redis at {url}"),
            )
        }
        _ => (Backend::Memory, "in memory".to_owned()),
    };
    let app = Router::new()
        .route("/", get(home))
        .route("/login", post(login))
        .route("/sms", post(sms))
        .route("/complete", post(complete))
        .route("/metrics", get(move || render(metrics.clone())))
        .layer(layer(&args, &config, &backend)?);

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
