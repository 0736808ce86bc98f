//! The statistics envoyproxy/ratelimit keeps, under its names, so that
//! dashboards and alerts built on it keep working: counters named as its
//! statsd names (`ratelimit.service.rate_limit.<domain>.<key>.over_limit`,
//! ...), sent as statsd lines, or served in the Prometheus form its
//! built-in exporter gives them (its default mapping:
//! `ratelimit_service_rate_limit_over_limit{domain="..",key1="..",key2=".."}`,
//! `ratelimit_service_should_rate_limit_error{err_type=".."}`,
//! `ratelimit_service_total_requests{grpc_method=".."}`,
//! `ratelimit_service_response_time_seconds`, and any other name with its
//! dots as underscores).
//!
//! Per limit: `total_hits`, `over_limit`, `near_limit` (hits past
//! `NEAR_LIMIT_RATIO` of the limit, 0.8 by default), `within_limit`,
//! `shadow_mode` (over the limit, answered `OK` by shadow mode),
//! `over_limit_with_local_cache`. Per domain not configured:
//! `<domain>.domain_not_found`. Per call: `ratelimit.service.call.
//! should_rate_limit.redis_error` and `.service_error`,
//! `ratelimit_server.ShouldRateLimit.total_requests` and `.response_time`
//! (milliseconds). Per service: `config_load_success`, `config_load_error`,
//! `global_shadow_mode`. The local cache of keys over their limit:
//! `ratelimit.localcache.hitCount`, `.missCount`, `.entryCount`.
//!
//! Memory is bounded: past [`DEFAULT_MAX_KEYS`] statistics keys (a client
//! may send any values, and `detailed_metric` names them), further keys
//! are counted together under `ratelimit.service.rate_limit.overflow`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

/// How many statistics keys (limits, and values under `detailed_metric`)
/// are named before further ones are counted together.
pub const DEFAULT_MAX_KEYS: usize = 10_000;

const RATE_LIMIT: &str = "ratelimit.service.rate_limit.";

/// One counter: its total, and what the last statsd flush sent.
#[derive(Debug, Default)]
pub struct Counter {
    value: AtomicU64,
    flushed: AtomicU64,
}

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    pub fn inc(&self) {
        self.add(1);
    }

    /// The total so far.
    pub fn value(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// The counters of one limit (one statistics key).
#[derive(Debug)]
pub struct LimitStats {
    /// `total_hits`.
    pub total_hits: Arc<Counter>,
    /// `over_limit`.
    pub over_limit: Arc<Counter>,
    /// `near_limit`.
    pub near_limit: Arc<Counter>,
    /// `over_limit_with_local_cache`.
    pub over_limit_with_local_cache: Arc<Counter>,
    /// `within_limit`.
    pub within_limit: Arc<Counter>,
    /// `shadow_mode`.
    pub shadow_mode: Arc<Counter>,
}

/// A histogram of milliseconds, with Prometheus's default buckets (in
/// seconds, as the reference's exporter scales its timers).
#[derive(Debug)]
struct Histogram {
    /// Counts per bucket (not cumulative), then the count above the last.
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_ms: AtomicU64,
}

const BUCKETS_SECONDS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

impl Histogram {
    fn new() -> Self {
        Histogram {
            buckets: (0..=BUCKETS_SECONDS.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            count: AtomicU64::new(0),
            sum_ms: AtomicU64::new(0),
        }
    }

    fn observe_ms(&self, ms: u64) {
        let seconds = ms as f64 / 1000.0;
        let at = BUCKETS_SECONDS
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(BUCKETS_SECONDS.len());
        self.buckets[at].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ms.fetch_add(ms, Ordering::Relaxed);
    }
}

/// Every statistic of one server. Cheap to share.
#[derive(Debug)]
pub struct Stats {
    counters: RwLock<HashMap<String, Arc<Counter>>>,
    gauges: RwLock<HashMap<String, Arc<AtomicU64>>>,
    limits: RwLock<HashMap<String, Arc<LimitStats>>>,
    overflow: Arc<LimitStats>,
    overflowed: AtomicBool,
    max_keys: usize,
    response_time: Histogram,
    /// Timer values not yet sent to statsd (each is sent as it comes, as
    /// the reference's statsd sink does).
    pending_timers: Mutex<Vec<u64>>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new(DEFAULT_MAX_KEYS)
    }
}

/// The reference's `SanitizeStatName`: `:` and `|` become `_`, and so do
/// the dots of anything that looks like an IPv4 address.
pub(crate) fn sanitize(name: &str) -> String {
    let replaced: String = name
        .chars()
        .map(|c| if c == ':' || c == '|' { '_' } else { c })
        .collect();
    let bytes = replaced.as_bytes();
    let mut out = String::with_capacity(replaced.len());
    let mut i = 0;
    while i < bytes.len() {
        if let Some(len) = ipv4_at(&bytes[i..]) {
            out.push_str(&replaced[i..i + len].replace('.', "_"));
            i += len;
        } else {
            let c = replaced[i..].chars().next().expect("in bounds");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The length of `\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}` at the start of
/// `s` (leftmost-first, as Go's regexp finds it: the longest digit runs).
fn ipv4_at(s: &[u8]) -> Option<usize> {
    let mut at = 0;
    for group in 0..4 {
        if group > 0 {
            if s.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
        let digits = s[at..]
            .iter()
            .take(3)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        at += digits;
    }
    Some(at)
}

impl Stats {
    /// Statistics that name at most `max_keys` limits and values.
    pub fn new(max_keys: usize) -> Self {
        let counters = RwLock::new(HashMap::new());
        let overflow = Arc::new(Stats::limit_counters(&counters, "overflow"));
        Stats {
            counters,
            gauges: RwLock::new(HashMap::new()),
            limits: RwLock::new(HashMap::new()),
            overflow,
            overflowed: AtomicBool::new(false),
            max_keys,
            response_time: Histogram::new(),
            pending_timers: Mutex::new(Vec::new()),
        }
    }

    fn get_or_insert(counters: &RwLock<HashMap<String, Arc<Counter>>>, name: &str) -> Arc<Counter> {
        if let Some(counter) = counters.read().get(name) {
            return counter.clone();
        }
        counters.write().entry(name.to_owned()).or_default().clone()
    }

    fn limit_counters(counters: &RwLock<HashMap<String, Arc<Counter>>>, key: &str) -> LimitStats {
        let c = |stat: &str| Stats::get_or_insert(counters, &format!("{RATE_LIMIT}{key}.{stat}"));
        LimitStats {
            total_hits: c("total_hits"),
            over_limit: c("over_limit"),
            near_limit: c("near_limit"),
            over_limit_with_local_cache: c("over_limit_with_local_cache"),
            within_limit: c("within_limit"),
            shadow_mode: c("shadow_mode"),
        }
    }

    /// The counter named `name` (a statsd name), made on first use.
    pub fn counter(&self, name: &str) -> Arc<Counter> {
        Stats::get_or_insert(&self.counters, name)
    }

    /// The counters of the limit whose statistics key is `key`
    /// (`domain.key_value.key`, sanitized here), or the shared overflow
    /// ones once [`DEFAULT_MAX_KEYS`] keys are named.
    pub fn limit(&self, key: &str) -> Arc<LimitStats> {
        if let Some(stats) = self.limits.read().get(key) {
            return stats.clone();
        }
        let mut limits = self.limits.write();
        if let Some(stats) = limits.get(key) {
            return stats.clone();
        }
        if limits.len() >= self.max_keys {
            if !self.overflowed.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    max = self.max_keys,
                    "too many statistics keys: further limits are counted under ratelimit.service.rate_limit.overflow"
                );
            }
            return self.overflow.clone();
        }
        let stats = Arc::new(Stats::limit_counters(&self.counters, &sanitize(key)));
        limits.insert(key.to_owned(), stats.clone());
        stats
    }

    /// `<domain>.domain_not_found`, bounded like the limits' keys.
    pub fn domain_not_found(&self, domain: &str) {
        let name = format!("{RATE_LIMIT}{}.domain_not_found", sanitize(domain));
        if self.counters.read().len() >= self.max_keys * 7
            && !self.counters.read().contains_key(&name)
        {
            self.counter(&format!("{RATE_LIMIT}overflow.domain_not_found"))
                .inc();
            return;
        }
        self.counter(&name).inc();
    }

    /// Sets the gauge `name`.
    pub fn gauge(&self, name: &str, value: u64) {
        if let Some(gauge) = self.gauges.read().get(name) {
            gauge.store(value, Ordering::Relaxed);
            return;
        }
        self.gauges
            .write()
            .entry(name.to_owned())
            .or_default()
            .store(value, Ordering::Relaxed);
    }

    /// One `ShouldRateLimit` call: `total_requests` and `response_time`.
    pub fn call(&self, elapsed: Duration) {
        self.counter("ratelimit_server.ShouldRateLimit.total_requests")
            .inc();
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        self.response_time.observe_ms(ms);
        let mut pending = self.pending_timers.lock();
        // Bounded: a statsd sink that is away does not grow memory.
        if pending.len() < 100_000 {
            pending.push(ms);
        }
    }

    /// The value of the counter `name` (0 if never counted).
    pub fn value(&self, name: &str) -> u64 {
        self.counters.read().get(name).map_or(0, |c| c.value())
    }

    /// Every counter and gauge, `name: value` a line, sorted: what the
    /// debug port's `/stats` prints.
    pub fn dump(&self) -> String {
        let mut lines: Vec<String> = self
            .counters
            .read()
            .iter()
            .map(|(name, c)| format!("{name}: {}\n", c.value()))
            .chain(
                self.gauges
                    .read()
                    .iter()
                    .map(|(name, g)| format!("{name}: {}\n", g.load(Ordering::Relaxed))),
            )
            .collect();
        lines.sort();
        lines.concat()
    }

    /// What changed since the last call, as statsd lines: counters as
    /// `name:delta|c`, gauges `name:value|g`, timers `name:ms|ms`.
    pub fn statsd_lines(&self) -> String {
        let mut out = String::new();
        for (name, counter) in self.counters.read().iter() {
            let value = counter.value();
            let before = counter.flushed.swap(value, Ordering::Relaxed);
            if value > before {
                let _ = writeln!(out, "{name}:{}|c", value - before);
            }
        }
        for (name, gauge) in self.gauges.read().iter() {
            let _ = writeln!(out, "{name}:{}|g", gauge.load(Ordering::Relaxed));
        }
        for ms in std::mem::take(&mut *self.pending_timers.lock()) {
            let _ = writeln!(
                out,
                "ratelimit_server.ShouldRateLimit.response_time:{ms}|ms"
            );
        }
        out
    }

    /// Everything in Prometheus's text format, named as the reference's
    /// exporter names it with its default mapping.
    pub fn prometheus(&self) -> String {
        let mut families: std::collections::BTreeMap<String, Family> = Default::default();
        for (name, counter) in self.counters.read().iter() {
            // A counter still at zero was never sent by the reference's
            // statsd sink, so its exporter has no series for it.
            if counter.value() == 0 {
                continue;
            }
            let (family, labels) = prometheus_name(name);
            let entry = families.entry(family).or_insert(("counter", Vec::new()));
            // Two names may map to one series (as they do in the
            // reference's exporter): added together.
            match entry.1.iter_mut().find(|(l, _)| *l == labels) {
                Some((_, v)) => *v += counter.value(),
                None => entry.1.push((labels, counter.value())),
            }
        }
        for (name, gauge) in self.gauges.read().iter() {
            families.insert(
                escape_name(name),
                (
                    "gauge",
                    vec![(String::new(), gauge.load(Ordering::Relaxed))],
                ),
            );
        }
        let mut out = String::new();
        for (family, (kind, mut series)) in families {
            series.sort();
            let _ = writeln!(out, "# TYPE {family} {kind}");
            for (labels, value) in series {
                let _ = writeln!(out, "{family}{labels} {value}");
            }
        }
        let family = "ratelimit_service_response_time_seconds";
        let labels = "grpc_method=\"ShouldRateLimit\"";
        let _ = writeln!(out, "# TYPE {family} histogram");
        let mut cumulative = 0;
        for (i, bound) in BUCKETS_SECONDS.iter().enumerate() {
            cumulative += self.response_time.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{family}_bucket{{{labels},le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.response_time.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{family}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let sum = self.response_time.sum_ms.load(Ordering::Relaxed) as f64 / 1000.0;
        let _ = writeln!(out, "{family}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{family}_count{{{labels}}} {count}");
        out
    }
}

/// A Prometheus family: its type, and each series' labels and value.
type Family = (&'static str, Vec<(String, u64)>);

/// The five statistics the default mapping gives labels to.
const MAPPED: [&str; 5] = [
    "near_limit",
    "over_limit",
    "total_hits",
    "within_limit",
    "shadow_mode",
];

/// A statsd name's Prometheus family and labels, as the reference's
/// default mapping makes them.
fn prometheus_name(name: &str) -> (String, String) {
    if let Some(rest) = name.strip_prefix(RATE_LIMIT) {
        let parts: Vec<&str> = rest.split('.').collect();
        // The exporter tries its glob patterns (exactly two parts before
        // the statistic) first, then its regular expressions in order.
        if parts.len() == 3 && MAPPED.contains(&parts[2]) {
            return (
                format!("ratelimit_service_rate_limit_{}", parts[2]),
                labels(&[("domain", parts[0]), ("key1", parts[1])]),
            );
        }
        for stat in MAPPED {
            // Unanchored at the end, as the exporter's expressions are:
            // `..K2.over_limit_with_local_cache` is `over_limit` too when
            // the key has three parts or more.
            if let Some(head) = regex_prefix(rest, stat) {
                let p: Vec<&str> = head.splitn(3, '.').collect();
                let key2 = p[2].split('.').next().unwrap_or("");
                return (
                    format!("ratelimit_service_rate_limit_{stat}"),
                    labels(&[("domain", p[0]), ("key1", p[1]), ("key2", key2)]),
                );
            }
        }
    }
    if let Some(err) = name.strip_prefix("ratelimit.service.call.should_rate_limit.")
        && !err.contains('.')
    {
        return (
            "ratelimit_service_should_rate_limit_error".to_owned(),
            labels(&[("err_type", err)]),
        );
    }
    if let Some(method) = name
        .strip_prefix("ratelimit_server.")
        .and_then(|m| m.strip_suffix(".total_requests"))
        && !method.contains('.')
    {
        return (
            "ratelimit_service_total_requests".to_owned(),
            labels(&[("grpc_method", method)]),
        );
    }
    (escape_name(name), String::new())
}

/// The part of `rest` before `.stat` that
/// `([^.]*)\.([^.]*)\.([^.]*)(\..*)?\.stat` matches (three parts at
/// least), leftmost and longest as Go's regexp takes it.
fn regex_prefix<'a>(rest: &'a str, stat: &str) -> Option<&'a str> {
    let needle = format!(".{stat}");
    // The greedy `(\..*)?` takes the last occurrence that leaves three
    // parts before it.
    let mut best = None;
    let mut from = 0;
    while let Some(at) = rest[from..].find(&needle) {
        let at = from + at;
        if rest[..at].matches('.').count() >= 2 {
            best = Some(&rest[..at]);
        }
        from = at + 1;
    }
    best
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let body: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{{{}}}", body.join(","))
}

/// The exporter's escaping of a name it has no mapping for: any character
/// but `[a-zA-Z0-9_]` becomes `_`, and a leading digit gets a `_` before.
fn escape_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        out.push('_');
    }
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitized_as_the_reference_does() {
        assert_eq!(
            sanitize("d.remote_address_10.0.0.1"),
            "d.remote_address_10_0_0_1"
        );
        assert_eq!(sanitize("d.k_a:b|c"), "d.k_a_b_c");
        assert_eq!(sanitize("d.version_1.2.3"), "d.version_1.2.3");
    }

    #[test]
    fn the_default_mapping_names_series_as_the_exporter_does() {
        let stats = Stats::default();
        stats.limit("basic.key1").total_hits.add(3);
        stats.limit("another.key2_x.key3").over_limit.add(2);
        stats
            .limit("another.key2_x.key3")
            .over_limit_with_local_cache
            .add(1);
        stats
            .counter("ratelimit.service.call.should_rate_limit.redis_error")
            .inc();
        stats.counter("ratelimit.service.config_load_success").inc();
        stats.limit("basic.key1").over_limit_with_local_cache.add(5);
        stats.call(Duration::from_millis(3));
        let text = stats.prometheus();
        for line in [
            "ratelimit_service_rate_limit_total_hits{domain=\"basic\",key1=\"key1\"} 3",
            // The exporter's unanchored expressions add the local cache's
            // count into over_limit for keys of three parts.
            "ratelimit_service_rate_limit_over_limit{domain=\"another\",key1=\"key2_x\",key2=\"key3\"} 3",
            "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} 1",
            "ratelimit_service_config_load_success 1",
            "ratelimit_service_rate_limit_basic_key1_over_limit_with_local_cache 5",
            "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 1",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.005\"} 1",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        let lines = stats.statsd_lines();
        assert!(
            lines.contains("ratelimit.service.rate_limit.basic.key1.total_hits:3|c\n"),
            "{lines}"
        );
        assert!(
            lines.contains("ratelimit_server.ShouldRateLimit.response_time:3|ms\n"),
            "{lines}"
        );
        // Deltas: nothing new, nothing sent.
        stats.limit("basic.key1").total_hits.add(1);
        assert_eq!(
            stats.statsd_lines(),
            "ratelimit.service.rate_limit.basic.key1.total_hits:1|c\n"
        );
    }

    #[test]
    fn keys_past_the_bound_share_one_set_of_counters() {
        let stats = Stats::new(2);
        stats.limit("d.a").total_hits.inc();
        stats.limit("d.b").total_hits.inc();
        stats.limit("d.c").total_hits.inc();
        stats.limit("d.e").total_hits.inc();
        assert_eq!(
            stats.value("ratelimit.service.rate_limit.overflow.total_hits"),
            2
        );
        assert_eq!(
            stats.value("ratelimit.service.rate_limit.d.a.total_hits"),
            1
        );
    }
}
