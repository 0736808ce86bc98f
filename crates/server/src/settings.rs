//! envoyproxy/ratelimit's environment variables, read as it reads them
//! (its defaults, Go's forms of booleans and durations), into what
//! ratelab-server does with each. Every variable its Docker image and Helm
//! charts set is honoured, or refused at startup with the reason, or
//! named in a warning when it has nothing to act on here: none is ignored
//! in silence.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use crate::config::RuntimeDirectory;
use crate::service::ResponseHeaders;

/// Where gRPC is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// `GRPC_HOST:GRPC_PORT`.
    Tcp(String),
    /// `GRPC_UDS`.
    Unix(PathBuf),
}

/// How to reach one Redis deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One node: its URL (`redis://`, `redis+unix://`).
    Single(String),
    /// A Cluster: its nodes' URLs.
    Cluster(Vec<String>),
    /// The master Sentinel names: the service, and the sentinels' URLs.
    Sentinel {
        /// The master's name.
        service: String,
        /// The sentinels.
        sentinels: Vec<String>,
    },
}

/// The Redis settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// `REDIS_TYPE`, `REDIS_URL`, `REDIS_SOCKET_TYPE`, `REDIS_AUTH`.
    pub target: RedisTarget,
    /// `REDIS_TIMEOUT`, when set.
    pub timeout: Option<Duration>,
    /// `REDIS_PERSECOND*`: a second Redis for the limits per second.
    pub per_second: Option<RedisTarget>,
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`.
    pub health_check: bool,
}

/// Where statistics go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsSettings {
    /// `USE_STATSD` (the default) with `STATSD_HOST:STATSD_PORT`.
    pub statsd: Option<String>,
    /// `USE_PROMETHEUS`: `PROMETHEUS_ADDR` and `PROMETHEUS_PATH`.
    pub prometheus: Option<(String, String)>,
    /// `STATS_FLUSH_INTERVAL`.
    pub flush_interval: Duration,
}

/// What the environment says.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `RUNTIME_*`: where the configuration is.
    pub runtime: RuntimeDirectory,
    /// Whether any `RUNTIME_*` variable is set.
    pub runtime_set: bool,
    /// `MERGE_DOMAIN_CONFIG`.
    pub merge_domains: bool,
    /// `GRPC_UDS`, or `GRPC_HOST:GRPC_PORT`.
    pub grpc: Listen,
    /// `HOST:PORT`: `/healthcheck` and `/json`.
    pub http: String,
    /// `DEBUG_HOST:DEBUG_PORT`: `/rlconfig`, `/stats`.
    pub debug: String,
    /// `GRPC_MAX_CONNECTION_AGE` and `_GRACE`.
    pub max_connection_age: (Duration, Duration),
    /// `LOG_LEVEL`, when set.
    pub log_level: Option<String>,
    /// `LOG_FORMAT=json`.
    pub log_json: bool,
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`.
    pub force_start: bool,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`.
    pub healthy_with_config: bool,
    /// `USE_STATSD`, `USE_PROMETHEUS`, `DISABLE_STATS`, ...
    pub stats: StatsSettings,
    /// `REDIS_*`, when a Redis is configured (`REDIS_URL` or
    /// `BACKEND_TYPE` set).
    pub redis: Option<RedisSettings>,
    /// `CACHE_KEY_PREFIX`.
    pub cache_key_prefix: String,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    pub stop_increment_when_over_limit: bool,
    /// `NEAR_LIMIT_RATIO`.
    pub near_limit_ratio: f32,
    /// `EXPIRATION_JITTER_MAX_SECONDS`.
    pub expiration_jitter_max_seconds: u64,
    /// `LOCAL_CACHE_SIZE_IN_BYTES`.
    pub local_cache_bytes: usize,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED` and the header names.
    pub headers: ResponseHeaders,
    /// `SHADOW_MODE`.
    pub global_shadow_mode: bool,
    /// `QUOTA_MODE`.
    pub global_quota_mode: bool,
    /// `RESPONSE_DYNAMIC_METADATA`.
    pub dynamic_metadata: bool,
    /// What the environment asks that this server does not do, each a
    /// sentence for the log.
    pub warnings: Vec<String>,
}

/// Go's `strconv.ParseBool`.
fn parse_bool(name: &str, value: &str) -> Result<bool, String> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("{name}={value:?} is not a boolean")),
    }
}

/// Go's `time.ParseDuration`: `300ms`, `1.5h`, `2h45m`, `0`.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let s = text.strip_prefix('+').unwrap_or(text);
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return None;
        }
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * nanos;
    }
    // Non-negative; a duration past u64 nanoseconds (584 years) is clamped.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let nanos = total.round().min(u64::MAX as f64) as u64;
    Some(Duration::from_nanos(nanos))
}

/// Go's `net.JoinHostPort`.
fn join_host_port(host: &str, port: &str) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// An address as Go listens on it: `:9090` is every interface.
pub fn listen_address(address: &str) -> Result<SocketAddr, String> {
    let address = if address.starts_with(':') {
        format!("0.0.0.0{address}")
    } else {
        address.to_owned()
    };
    address
        .to_socket_addrs()
        .map_err(|e| format!("{address}: {e}"))?
        .next()
        .ok_or_else(|| format!("{address}: no address"))
}

/// `user:password` or `password` as a URL's user information.
fn userinfo(auth: &str) -> String {
    let encode = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    match auth.split_once(':') {
        Some((user, password)) => format!("{}:{}@", encode(user), encode(password)),
        None => format!(":{}@", encode(auth)),
    }
}

/// One `host:port` (or URL) of the reference's as a redis URL.
fn tcp_url(address: &str, auth: &str) -> String {
    if address.starts_with("redis://") || address.starts_with("rediss://") {
        let (scheme, rest) = address.split_once("://").expect("checked");
        if auth.is_empty() || rest.contains('@') {
            return address.to_owned();
        }
        return format!("{scheme}://{}{rest}", userinfo(auth));
    }
    let auth = if auth.is_empty() {
        String::new()
    } else {
        userinfo(auth)
    };
    format!("redis://{auth}{address}")
}

fn redis_target(
    get: &dyn Fn(&str) -> Option<String>,
    prefix: &str,
    warnings: &mut Vec<String>,
) -> Result<RedisTarget, String> {
    let var = |name: &str| get(&format!("{prefix}{name}"));
    let kind = var("TYPE")
        .unwrap_or_else(|| "SINGLE".into())
        .to_ascii_lowercase();
    let socket = var("SOCKET_TYPE").unwrap_or_else(|| "unix".into());
    let default_url = if prefix == "REDIS_PERSECOND_" {
        "/var/run/nutcracker/ratelimitpersecond.sock"
    } else {
        "/var/run/nutcracker/ratelimit.sock"
    };
    let url = var("URL").unwrap_or_else(|| default_url.into());
    let auth = var("AUTH").unwrap_or_default();
    if var("TLS")
        .map(|v| parse_bool(&format!("{prefix}TLS"), &v))
        .transpose()?
        == Some(true)
    {
        return Err(format!(
            "{prefix}TLS=true: TLS to Redis is not supported by this build; reach Redis over a TLS proxy (stunnel, a service mesh) or without TLS"
        ));
    }
    match kind.as_str() {
        "single" => match socket.as_str() {
            "tcp" => Ok(RedisTarget::Single(tcp_url(&url, &auth))),
            "unix" => {
                if !url.starts_with('/') && url.contains(':') {
                    warnings.push(format!(
                        "{prefix}SOCKET_TYPE is unix (its default) but {prefix}URL={url:?} looks like host:port: set {prefix}SOCKET_TYPE=tcp"
                    ));
                }
                let mut target = format!("redis+unix://{url}");
                if !auth.is_empty() {
                    let (user, password) = auth.split_once(':').unwrap_or(("", &auth));
                    target.push_str(&format!(
                        "?pass={}",
                        userinfo(password)
                            .trim_start_matches(':')
                            .trim_end_matches('@')
                    ));
                    if !user.is_empty() {
                        target.push_str(&format!("&user={user}"));
                    }
                }
                Ok(RedisTarget::Single(target))
            }
            other => Err(format!("{prefix}SOCKET_TYPE={other:?}: tcp or unix")),
        },
        "cluster" => Ok(RedisTarget::Cluster(
            url.split(',').map(|a| tcp_url(a.trim(), &auth)).collect(),
        )),
        "sentinel" => {
            let mut parts = url.split(',').map(str::trim);
            let service = parts.next().unwrap_or_default().to_owned();
            let sentinel_auth = var("SENTINEL_AUTH").unwrap_or_default();
            let sentinels: Vec<String> = parts.map(|a| tcp_url(a, &sentinel_auth)).collect();
            if sentinels.is_empty() {
                return Err(format!(
                    "{prefix}URL={url:?}: expected the master's name and the sentinels, as <master name>,<sentinel1>,...,<sentineln>"
                ));
            }
            if !auth.is_empty() {
                return Err(format!(
                    "{prefix}AUTH with {prefix}TYPE=sentinel: a password on the master is not supported with Sentinel yet"
                ));
            }
            Ok(RedisTarget::Sentinel { service, sentinels })
        }
        other => Err(format!(
            "{prefix}TYPE={other:?}: single, sentinel or cluster"
        )),
    }
}

/// The variables the reference reads that this server has nothing to do
/// with, and why (warned about when set).
const NOT_NEEDED: &[(&str, &str)] = &[
    (
        "REDIS_POOL_SIZE",
        "one multiplexed connection carries every call",
    ),
    (
        "REDIS_PERSECOND_POOL_SIZE",
        "one multiplexed connection carries every call",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "calls made at once are written together by the multiplexed connection, and a request's descriptors go in one pipeline",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "calls made at once are written together by the multiplexed connection",
    ),
    (
        "REDIS_PERSECOND_PIPELINE_WINDOW",
        "calls made at once are written together by the multiplexed connection",
    ),
    (
        "REDIS_PERSECOND_PIPELINE_LIMIT",
        "calls made at once are written together by the multiplexed connection",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "a request's keys on a cluster are all sent at once",
    ),
    (
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        "a request's keys on a cluster are all sent at once",
    ),
    (
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "the server starts without waiting for Redis; the failure policy answers until Redis is reachable",
    ),
    (
        "REDIS_STARTUP_MAX_INTERVAL",
        "the server starts without waiting for Redis; the failure policy answers until Redis is reachable",
    ),
    (
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "the server starts without waiting for Redis; the failure policy answers until Redis is reachable",
    ),
    ("EXTRA_TAGS", "statistics carry no extra tags"),
    (
        "PROMETHEUS_MAPPER_YAML",
        "Prometheus series keep the default mapping's names",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "the response time histogram is in seconds",
    ),
    (
        "TRACING_ENABLED",
        "no OpenTelemetry spans are exported (logs are tracing's, `--log-json` for JSON)",
    ),
    ("GRPC_CLIENT_TLS_SAN", "TLS is not served"),
];

/// Reads the environment through `get` (for the process's own:
/// `|name| std::env::var(name).ok()`).
pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
    let get = &get;
    let mut warnings = Vec::new();
    let flag = |name: &str, default: bool| -> Result<bool, String> {
        get(name).map_or(Ok(default), |v| parse_bool(name, &v))
    };
    let duration = |name: &str, default: Duration| -> Result<Duration, String> {
        match get(name) {
            None => Ok(default),
            Some(v) => parse_go_duration(&v)
                .ok_or_else(|| format!("{name}={v:?} is not a duration (300ms, 10s, 1h)")),
        }
    };
    let number = |name: &str, default: u64| -> Result<u64, String> {
        match get(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{name}={v:?} is not a number")),
        }
    };
    let text = |name: &str, default: &str| get(name).unwrap_or_else(|| default.to_owned());

    for (name, why) in NOT_NEEDED {
        if let Some(value) = get(name)
            && !value.is_empty()
        {
            if *name == "TRACING_ENABLED" && !flag(name, false)? {
                continue;
            }
            warnings.push(format!("{name}={value:?} has no effect here: {why}"));
        }
    }

    match text("CONFIG_TYPE", "FILE").as_str() {
        "FILE" => {}
        other => {
            return Err(format!(
                "CONFIG_TYPE={other}: only FILE is supported (configuration from an xDS server is not)"
            ));
        }
    }
    match text("BACKEND_TYPE", "redis").as_str() {
        "redis" | "" => {}
        other => {
            return Err(format!(
                "BACKEND_TYPE={other}: only redis is supported (or none: in memory)"
            ));
        }
    }
    if flag("GRPC_SERVER_USE_TLS", false)? {
        return Err(
            "GRPC_SERVER_USE_TLS=true: TLS on the gRPC port is not supported by this build; terminate TLS in front (an Envoy sidecar) instead".into(),
        );
    }
    if get("MEMCACHE_HOST_PORT").is_some() || get("MEMCACHE_SRV").is_some() {
        warnings.push(
            "MEMCACHE_* is set but the backend is Redis: ignored, as the reference does".into(),
        );
    }
    for name in [
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
    ] {
        if let Some(value) = get(name) {
            match value.to_ascii_uppercase().as_str() {
                "WAIT" => {}
                "CREATE" | "ERROR" => {
                    return Err(format!(
                        "{name}={value} is not supported (as in the reference since radix v4): remove it or set WAIT"
                    ));
                }
                _ => warnings.push(format!(
                    "{name}={value:?} is not a known behaviour: ignored"
                )),
            }
        }
    }

    let use_statsd = flag("USE_STATSD", true)?;
    let use_prometheus = flag("USE_PROMETHEUS", false)?;
    if flag("USE_DOG_STATSD", false)? {
        return Err("USE_DOG_STATSD=true: DogStatsD is not supported; use USE_STATSD (statsd over TCP) or USE_PROMETHEUS".into());
    }
    if use_statsd && use_prometheus {
        return Err("Error: unable to use more than one stats sink at the same time. Set one of USE_DOG_STATSD, USE_STATSD, USE_PROMETHEUS.".into());
    }
    let disabled = flag("DISABLE_STATS", false)?;
    let stats = StatsSettings {
        statsd: (use_statsd && !disabled).then(|| {
            join_host_port(
                &text("STATSD_HOST", "localhost"),
                &text("STATSD_PORT", "8125"),
            )
        }),
        prometheus: (use_prometheus && !disabled).then(|| {
            (
                text("PROMETHEUS_ADDR", ":9090"),
                text("PROMETHEUS_PATH", "/metrics"),
            )
        }),
        flush_interval: duration("STATS_FLUSH_INTERVAL", Duration::from_secs(10))?,
    };

    let runtime_set = [
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "RUNTIME_APPDIRECTORY",
    ]
    .iter()
    .any(|n| get(n).is_some());
    let runtime = RuntimeDirectory {
        root: text("RUNTIME_ROOT", "/srv/runtime_data/current").into(),
        subdirectory: text("RUNTIME_SUBDIRECTORY", "").into(),
        app_directory: text("RUNTIME_APPDIRECTORY", "config").into(),
        ignore_dot_files: flag("RUNTIME_IGNOREDOTFILES", false)?,
        watch_root: flag("RUNTIME_WATCH_ROOT", true)?,
    };

    let grpc = match get("GRPC_UDS").filter(|s| !s.is_empty()) {
        Some(path) => Listen::Unix(path.into()),
        None => Listen::Tcp(join_host_port(
            &text("GRPC_HOST", "0.0.0.0"),
            &text("GRPC_PORT", "8081"),
        )),
    };

    let redis_configured =
        get("REDIS_URL").is_some() || get("BACKEND_TYPE").is_some() || get("REDIS_TYPE").is_some();
    let redis = if redis_configured {
        let target = redis_target(get, "REDIS_", &mut warnings)?;
        let per_second = if flag("REDIS_PERSECOND", false)? {
            Some(redis_target(get, "REDIS_PERSECOND_", &mut warnings)?)
        } else {
            None
        };
        let timeout = get("REDIS_TIMEOUT")
            .map(|v| {
                parse_go_duration(&v)
                    .ok_or_else(|| format!("REDIS_TIMEOUT={v:?} is not a duration"))
            })
            .transpose()?;
        if get("REDIS_PERSECOND_TIMEOUT").is_some() {
            warnings.push("REDIS_PERSECOND_TIMEOUT has no effect here: REDIS_TIMEOUT (or --redis-timeout-ms) bounds every call".into());
        }
        Some(RedisSettings {
            target,
            timeout,
            per_second,
            health_check: flag("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)?,
        })
    } else {
        None
    };

    let headers = if flag("LIMIT_RESPONSE_HEADERS_ENABLED", false)? {
        ResponseHeaders::Reference {
            limit: text("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
            remaining: text("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
            reset: text("LIMIT_RESET_HEADER", "RateLimit-Reset"),
        }
    } else {
        ResponseHeaders::None
    };
    let near_limit_ratio = match get("NEAR_LIMIT_RATIO") {
        None => 0.8,
        Some(v) => v
            .trim()
            .parse::<f32>()
            .map_err(|_| format!("NEAR_LIMIT_RATIO={v:?} is not a number"))?,
    };
    let log_level = get("LOG_LEVEL");
    Ok(Settings {
        runtime,
        runtime_set,
        merge_domains: flag("MERGE_DOMAIN_CONFIG", false)?,
        grpc,
        http: join_host_port(&text("HOST", "0.0.0.0"), &text("PORT", "8080")),
        debug: join_host_port(&text("DEBUG_HOST", "0.0.0.0"), &text("DEBUG_PORT", "6070")),
        max_connection_age: (
            duration("GRPC_MAX_CONNECTION_AGE", Duration::from_secs(24 * 3600))?,
            duration("GRPC_MAX_CONNECTION_AGE_GRACE", Duration::from_secs(3600))?,
        ),
        log_level,
        log_json: text("LOG_FORMAT", "text").eq_ignore_ascii_case("json"),
        force_start: flag("FORCE_START_WITHOUT_INITIAL_CONFIG", false)?,
        healthy_with_config: flag("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
        stats,
        redis,
        cache_key_prefix: text("CACHE_KEY_PREFIX", ""),
        stop_increment_when_over_limit: flag("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)?,
        near_limit_ratio,
        expiration_jitter_max_seconds: number("EXPIRATION_JITTER_MAX_SECONDS", 300)?,
        local_cache_bytes: usize::try_from(number("LOCAL_CACHE_SIZE_IN_BYTES", 0)?)
            .unwrap_or(usize::MAX),
        headers,
        global_shadow_mode: flag("SHADOW_MODE", false)?,
        global_quota_mode: flag("QUOTA_MODE", false)?,
        dynamic_metadata: flag("RESPONSE_DYNAMIC_METADATA", false)?,
        warnings,
    })
}

/// The `tracing` filter for `LOG_LEVEL` (logrus's names).
pub fn log_filter(level: &str) -> &'static str {
    match level.to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        _ => "error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(vars: &[(&str, &str)]) -> Result<Settings, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        from_env(|name| vars.get(name).cloned())
    }

    #[test]
    fn the_references_docker_compose_environment() {
        let s = read(&[
            ("USE_STATSD", "false"),
            ("LOG_LEVEL", "debug"),
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis:6379"),
            ("RUNTIME_ROOT", "/data"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("MEMCACHE_HOST_PORT", "memcached:11211"),
        ])
        .unwrap();
        assert_eq!(
            s.runtime.directory(),
            PathBuf::from("/data/ratelimit/config")
        );
        assert_eq!(
            s.redis.unwrap().target,
            RedisTarget::Single("redis://redis:6379".into())
        );
        assert_eq!(s.stats.statsd, None);
        assert_eq!(s.grpc, Listen::Tcp("0.0.0.0:8081".into()));
        assert_eq!(s.http, "0.0.0.0:8080");
        assert_eq!(s.headers, ResponseHeaders::None);
        assert!(
            s.warnings.iter().any(|w| w.contains("MEMCACHE")),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn defaults_are_the_references() {
        let s = read(&[]).unwrap();
        assert_eq!(s.stats.statsd.as_deref(), Some("localhost:8125"));
        assert_eq!(s.stats.flush_interval, Duration::from_secs(10));
        assert!(s.redis.is_none());
        assert_eq!(s.near_limit_ratio, 0.8);
        assert_eq!(s.expiration_jitter_max_seconds, 300);
        assert_eq!(
            s.max_connection_age,
            (Duration::from_secs(86_400), Duration::from_secs(3600))
        );
        assert!(!s.runtime_set);
    }

    #[test]
    fn redis_types_auth_and_headers() {
        let s = read(&[
            ("REDIS_TYPE", "cluster"),
            ("REDIS_URL", "a:7000,b:7001"),
            ("REDIS_AUTH", "user:p@ss"),
            ("REDIS_PERSECOND", "true"),
            ("REDIS_PERSECOND_TYPE", "sentinel"),
            ("REDIS_PERSECOND_URL", "mymaster,s1:26379,s2:26379"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_REMAINING_HEADER", "X-Left"),
            ("USE_STATSD", "false"),
            ("USE_PROMETHEUS", "true"),
            ("GRPC_HOST", "::"),
            ("REDIS_TIMEOUT", "1.5s"),
        ])
        .unwrap();
        let redis = s.redis.unwrap();
        assert_eq!(
            redis.target,
            RedisTarget::Cluster(vec![
                "redis://user:p%40ss@a:7000".into(),
                "redis://user:p%40ss@b:7001".into()
            ])
        );
        assert_eq!(
            redis.per_second,
            Some(RedisTarget::Sentinel {
                service: "mymaster".into(),
                sentinels: vec!["redis://s1:26379".into(), "redis://s2:26379".into()],
            })
        );
        assert_eq!(redis.timeout, Some(Duration::from_millis(1500)));
        assert_eq!(
            s.headers,
            ResponseHeaders::Reference {
                limit: "RateLimit-Limit".into(),
                remaining: "X-Left".into(),
                reset: "RateLimit-Reset".into(),
            }
        );
        assert_eq!(
            s.stats.prometheus,
            Some((":9090".into(), "/metrics".into()))
        );
        assert_eq!(s.grpc, Listen::Tcp("[::]:8081".into()));
    }

    #[test]
    fn what_cannot_be_honoured_is_an_error_or_a_warning() {
        for (vars, expected) in [
            (vec![("CONFIG_TYPE", "GRPC_XDS_SOTW")], "CONFIG_TYPE"),
            (vec![("BACKEND_TYPE", "memcache")], "BACKEND_TYPE"),
            (vec![("GRPC_SERVER_USE_TLS", "true")], "TLS"),
            (
                vec![("REDIS_URL", "x:1"), ("REDIS_TLS", "true")],
                "REDIS_TLS",
            ),
            (vec![("USE_PROMETHEUS", "true")], "more than one stats sink"),
            (vec![("SHADOW_MODE", "yes")], "not a boolean"),
            (
                vec![
                    ("REDIS_URL", "x:1"),
                    ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "CREATE"),
                ],
                "not supported",
            ),
            (
                vec![("REDIS_URL", "x:1"), ("REDIS_TYPE", "sentinel")],
                "expected the master's name",
            ),
        ] {
            let error = read(&vars).unwrap_err();
            assert!(error.contains(expected), "{vars:?}: {error}");
        }
        let s = read(&[
            ("REDIS_URL", "redis:6379"),
            ("REDIS_POOL_SIZE", "20"),
            ("EXTRA_TAGS", "a:b"),
        ])
        .unwrap();
        assert!(
            s.warnings.iter().any(|w| w.contains("REDIS_POOL_SIZE")),
            "{:?}",
            s.warnings
        );
        assert!(
            s.warnings
                .iter()
                .any(|w| w.contains("looks like host:port")),
            "{:?}",
            s.warnings
        );
        assert!(
            s.warnings.iter().any(|w| w.contains("EXTRA_TAGS")),
            "{:?}",
            s.warnings
        );
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("150us"), Some(Duration::from_micros(150)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_go_duration("-1s"), None);
    }
}
