//! What a check costs: time per check in memory, microseconds per call and
//! checks per second on Redis, bytes per key in both.
//!
//! The figures come from the benchmark summary (`ratelab-benches`)
//! when it is present, else from a short measurement here; every row says
//! which. The summary is a JSON file, by default `reports/bench/summary.json`:
//!
//! ```json
//! {
//!   "generated_by": "ratelab-benches",
//!   "commit": "abc1234",
//!   "date": "2026-05-01 12:00:00 UTC",
//!   "results": [
//!     { "algorithm": "gcra", "backend": "memory", "ns_per_check": 31.5, "bytes_per_key": 64 },
//!     { "algorithm": "gcra", "backend": "redis", "us_per_call": 48.0,
//!       "checks_per_sec": 91000, "bytes_per_key": 88 }
//!   ]
//! }
//! ```
//!
//! `algorithm` is one of the seven names, `backend` is `memory` or `redis`;
//! every figure is optional, and a figure the summary lacks is measured here.
//!
//! The summary's `rows` (one figure each: `group`, `algorithm`, `backend`,
//! `metric`, `value`) also give the Redis backends side by side when the
//! benches measured them (the `module` bench): the Lua scripts (`redis-lua`),
//! the native module (`redis-module`) and, for GCRA, redis-cell
//! (`redis-cell`), server µs per call and checks per second, on one hot key
//! and on 100,000 keys ([`BackendRow`]). Those are never measured here.

pub mod report;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, Keyed, KnownAlgorithm, ManualClock, Quota,
    SystemClock,
};
use serde::{Deserialize, Serialize};

use super::ScenarioName;
use crate::atomic::{self, Time};
use crate::backend::RedisEnv;
use crate::stats::{Spread, percentile_sorted, round};
use crate::{CompareError, Context};

/// Where the summary is looked for, relative to the output folder.
pub const SUMMARY_PATH: &str = "bench/summary.json";

/// The benchmark summary's shape.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Summary {
    /// What wrote it.
    #[serde(default)]
    pub generated_by: Option<String>,
    /// The commit it measured.
    #[serde(default)]
    pub commit: Option<String>,
    /// When.
    #[serde(default)]
    pub date: Option<String>,
    /// The tools it measured with (`redis-cell`: which one it loaded).
    #[serde(default)]
    pub tools: std::collections::BTreeMap<String, String>,
    /// The figures.
    pub results: Vec<SummaryEntry>,
    /// Every figure, one per row (only the `module-*` groups are read).
    #[serde(default)]
    pub rows: Vec<BenchRow>,
}

/// One figure of the summary's `rows`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct BenchRow {
    /// The bench group (`module-server-hot`, ...).
    pub group: String,
    /// The algorithm's name.
    pub algorithm: String,
    /// `redis-module`, `redis-lua`, `redis-cell`, ...
    pub backend: String,
    /// `usec_per_call`, `checks_per_sec`, ...
    pub metric: String,
    /// The figure.
    pub value: f64,
}

/// The Redis backends of the `module` bench, in the order the table shows
/// them: the bench's name and the report's.
pub const BACKENDS: [(&str, &str); 3] = [
    ("redis-lua", "Lua script"),
    ("redis-module", "native module"),
    ("redis-cell", "redis-cell"),
];

/// One algorithm on one Redis backend, from the benchmark summary: the
/// server's time per call and the checks per second of 64 tasks on one
/// connection, on one hot key and on 100,000 keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendRow {
    /// The algorithm.
    pub algorithm: String,
    /// The backend, as the report names it ([`BACKENDS`]).
    pub backend: String,
    /// Server µs per call, one hot key.
    pub server_us_hot: Option<f64>,
    /// Server µs per call, 100,000 keys.
    pub server_us_100k: Option<f64>,
    /// Checks per second, one hot key.
    pub checks_per_sec_hot: Option<f64>,
    /// Checks per second, 100,000 keys.
    pub checks_per_sec_100k: Option<f64>,
}

/// The summary's Redis backends side by side, every algorithm and backend
/// with at least one figure; empty when the benches did not measure them.
pub fn backend_rows(summary: &Summary) -> Vec<BackendRow> {
    let get = |group: &str, algorithm: &str, backend: &str, metric: &str| {
        summary
            .rows
            .iter()
            .find(|r| {
                r.group == group
                    && r.algorithm == algorithm
                    && r.backend == backend
                    && r.metric == metric
            })
            .map(|r| r.value)
    };
    let mut out = Vec::new();
    for kind in AlgorithmKind::ALL {
        let name = kind.name();
        for (backend, label) in BACKENDS {
            let row = BackendRow {
                algorithm: name.to_owned(),
                backend: label.to_owned(),
                server_us_hot: get("module-server-hot", name, backend, "usec_per_call"),
                server_us_100k: get("module-server-100k", name, backend, "usec_per_call"),
                checks_per_sec_hot: get("module-throughput-hot", name, backend, "checks_per_sec"),
                checks_per_sec_100k: get("module-throughput-100k", name, backend, "checks_per_sec"),
            };
            if row.server_us_hot.is_some()
                || row.server_us_100k.is_some()
                || row.checks_per_sec_hot.is_some()
                || row.checks_per_sec_100k.is_some()
            {
                out.push(row);
            }
        }
    }
    out
}

/// One algorithm on one backend in the summary.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct SummaryEntry {
    /// The algorithm's name.
    pub algorithm: String,
    /// `memory` or `redis`.
    pub backend: String,
    /// Nanoseconds per check (memory).
    #[serde(default)]
    pub ns_per_check: Option<f64>,
    /// Microseconds per call from one task (Redis).
    #[serde(default)]
    pub us_per_call: Option<f64>,
    /// Checks per second with concurrency (Redis).
    #[serde(default)]
    pub checks_per_sec: Option<f64>,
    /// Bytes per key.
    #[serde(default)]
    pub bytes_per_key: Option<f64>,
}

/// One figure and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    /// The value.
    pub value: f64,
    /// `true` from the benchmark summary, `false` measured here.
    pub from_bench: bool,
}

/// One algorithm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The algorithm.
    pub algorithm: String,
    /// Nanoseconds per in-memory check (keyed, 1,000 keys).
    pub memory_ns_per_check: Option<Figure>,
    /// The spread of the in-memory measurement over repeats, when measured.
    pub memory_ns_spread: Option<Spread>,
    /// Heap bytes per key in memory, at its fullest (the whole burst used).
    pub memory_bytes_per_key: Option<Figure>,
    /// Microseconds per Redis call from one task (median).
    pub redis_us_per_call: Option<Figure>,
    /// The 99th percentile of the Redis call time, µs, when measured.
    pub redis_p99_us: Option<f64>,
    /// Redis checks per second with 32 tasks on one connection.
    pub redis_checks_per_sec: Option<Figure>,
    /// Redis memory per key (`used_memory` growth), bytes.
    pub redis_bytes_per_key: Option<Figure>,
}

/// The scenario's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cost {
    /// Where the figures came from, in a sentence.
    pub source: String,
    /// How the figures measured here were measured.
    pub method: Vec<String>,
    /// One row per algorithm.
    pub rows: Vec<Row>,
    /// The Redis backends side by side (Lua, module, redis-cell), from the
    /// benchmark summary; empty without one.
    pub backends: Vec<BackendRow>,
    /// The benchmark summary read, when there was one.
    pub bench: Option<BenchOrigin>,
}

/// Which benchmark run a summary holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchOrigin {
    /// The commit (or commits, one per bench) it measured.
    pub commit: String,
    /// When.
    pub date: String,
    /// Whether every bench in it measured this run's own code (this clean
    /// commit, or one that differs from it only in the report's files):
    /// only then do its figures stand in the cost table beside this run's.
    pub is_this_commit: bool,
    /// The redis-cell it loaded, as the summary names it.
    pub redis_cell: Option<String>,
}

/// Whether a summary's `commits` (comma-separated, one per bench) all name
/// `run_commit`, a clean commit.
pub fn same_commit(commits: &str, run_commit: &str) -> bool {
    crate::is_commit_hash(run_commit)
        && commits.split(',').map(str::trim).all(|c| {
            crate::is_commit_hash(c) && (c.starts_with(run_commit) || run_commit.starts_with(c))
        })
}

/// Reads the summary at `path`: `Ok(None)` when there is none, `Err` with a
/// reason when it is there but unreadable.
pub fn read_summary(path: &Path) -> Result<Option<Summary>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{} is not a benchmark summary: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Sizes of the measurement.
struct Sizes {
    memory_checks: usize,
    memory_repeats: usize,
    memory_keys: usize,
    redis_calls: usize,
    redis_throughput_calls: usize,
    redis_keys: usize,
}

const TASKS: usize = 32;
const HOT_KEYS: usize = 1_000;

/// A quota that never refills during a measurement, so no key is forgotten
/// while memory is counted.
fn slow_quota() -> Quota {
    Quota::per_hour(10).expect("a valid quota")
}

/// Nanoseconds per check of a keyed in-memory limiter on the system clock,
/// over [`HOT_KEYS`] keys in turn; one figure per repeat.
fn memory_time(kind: AlgorithmKind, quota: Quota, checks: usize, repeats: usize) -> Vec<f64> {
    struct Measure {
        checks: usize,
        repeats: usize,
    }
    impl AlgorithmVisitor for Measure {
        type Output = Vec<f64>;
        fn visit<A: KnownAlgorithm>(self, a: A) -> Vec<f64> {
            let limiter = Keyed::with_clock(a, SystemClock);
            let keys: Vec<Vec<u8>> = (0..HOT_KEYS)
                .map(|i| format!("client-{i:08}").into_bytes())
                .collect();
            (0..self.repeats)
                .map(|_| {
                    let started = Instant::now();
                    for i in 0..self.checks {
                        let d = limiter.check(std::hint::black_box(&keys[i % HOT_KEYS]), 1);
                        std::hint::black_box(d.ok());
                    }
                    started.elapsed().as_nanos() as f64 / self.checks as f64
                })
                .collect()
        }
    }
    kind.visit(quota, Measure { checks, repeats })
}

/// Heap bytes per key of a keyed in-memory limiter, each key having used its
/// whole burst at distinct microseconds (the sliding log's largest state).
fn memory_bytes(kind: AlgorithmKind, keys: usize) -> f64 {
    struct Measure(usize);
    impl AlgorithmVisitor for Measure {
        type Output = f64;
        fn visit<A: KnownAlgorithm>(self, a: A) -> f64 {
            let keys = self.0;
            let burst = a.quota().burst();
            let clock = ManualClock::new();
            let limiter = Keyed::with_clock(a, clock.clone());
            let names: Vec<Vec<u8>> = (0..keys)
                .map(|i| format!("client-{i:08}").into_bytes())
                .collect();
            let before = crate::heap_bytes();
            for key in &names {
                for _ in 0..burst {
                    clock.advance(Duration::from_micros(1));
                    let _ = limiter.check(key, 1);
                }
            }
            let after = crate::heap_bytes();
            assert_eq!(limiter.len(), keys, "every key is still tracked");
            drop(limiter);
            after.saturating_sub(before) as f64 / keys as f64
        }
    }
    kind.visit(slow_quota(), Measure(keys))
}

async fn used_memory(redis: &RedisEnv) -> Result<f64, CompareError> {
    let info: String = redis.command(redis::cmd("INFO").arg("memory")).await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0))
}

/// Runs `calls` checks over `keys` keys from [`TASKS`] tasks sharing
/// `limiter`; returns the elapsed time.
async fn concurrent(
    limiter: &Arc<dyn AsyncRateLimiter>,
    prefix: &str,
    keys: usize,
    calls_per_key: usize,
) -> Result<Duration, CompareError> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let limiter = Arc::clone(limiter);
        let prefix = prefix.to_owned();
        tasks.push(tokio::spawn(async move {
            for k in (t..keys).step_by(TASKS) {
                let key = format!("{prefix}:{k:08}");
                for _ in 0..calls_per_key {
                    limiter.check_async(key.as_bytes(), 1).await?;
                }
            }
            Ok::<(), ratelab::Error>(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| CompareError::Unavailable(format!("a task failed: {e}")))??;
    }
    Ok(started.elapsed())
}

/// Redis figures of one algorithm: (median µs, p99 µs, checks/s, bytes/key).
async fn redis_figures(
    ctx: &Context<'_>,
    redis: &RedisEnv,
    kind: AlgorithmKind,
    sizes: &Sizes,
) -> Result<(f64, f64, Spread, f64), CompareError> {
    let name = kind.name();
    let quota = Quota::per_second(10).expect("a valid quota");
    let limiter: Arc<dyn AsyncRateLimiter> =
        Arc::from(atomic::limiter(redis, kind, quota, &Time::Redis).await?);
    // Latency: one task, one call at a time, over many keys.
    let mut times = Vec::with_capacity(sizes.redis_calls);
    for i in 0..sizes.redis_calls {
        let key = format!("{}:cost-latency:{name}:{:08}", ctx.nonce, i % HOT_KEYS);
        let started = Instant::now();
        limiter.check_async(key.as_bytes(), 1).await?;
        times.push(started.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    let median = percentile_sorted(&times, 50.0);
    let p99 = percentile_sorted(&times, 99.0);
    // Throughput: TASKS tasks on one multiplexed connection.
    let mut rates = Vec::new();
    for repeat in 0..3 {
        let prefix = format!("{}:cost-throughput:{name}:{repeat}", ctx.nonce);
        let per_key = sizes.redis_throughput_calls / HOT_KEYS;
        let elapsed = concurrent(&limiter, &prefix, HOT_KEYS, per_key.max(1)).await?;
        rates.push((HOT_KEYS * per_key.max(1)) as f64 / elapsed.as_secs_f64());
    }
    // Memory: used_memory growth over fresh keys, each at its burst.
    let slow: Arc<dyn AsyncRateLimiter> =
        Arc::from(atomic::limiter(redis, kind, slow_quota(), &Time::Redis).await?);
    slow.check_async(format!("{}:cost-warm:{name}", ctx.nonce).as_bytes(), 1)
        .await?;
    let before = used_memory(redis).await?;
    let prefix = format!("{}:cost-memory:{name}", ctx.nonce);
    let burst = usize::try_from(slow_quota().burst()).unwrap_or(1);
    concurrent(&slow, &prefix, sizes.redis_keys, burst).await?;
    let after = used_memory(redis).await?;
    Ok((
        median,
        p99,
        Spread::of(&rates),
        (after - before).max(0.0) / sizes.redis_keys as f64,
    ))
}

/// Runs the scenario.
pub async fn run(ctx: &Context<'_>) -> Result<Cost, CompareError> {
    let sizes = if ctx.config.quick {
        Sizes {
            memory_checks: 50_000,
            memory_repeats: 2,
            memory_keys: 5_000,
            redis_calls: 200,
            redis_throughput_calls: 2_000,
            redis_keys: 200,
        }
    } else {
        Sizes {
            memory_checks: 1_000_000,
            memory_repeats: 5,
            memory_keys: 100_000,
            redis_calls: 3_000,
            redis_throughput_calls: 30_000,
            redis_keys: 5_000,
        }
    };
    let summary_path = ctx.config.bench_summary.clone();
    let (summary, summary_note) = match summary_path.as_deref().map(read_summary) {
        None => (None, "no benchmark summary path was given".to_owned()),
        Some(Ok(None)) => (
            None,
            format!(
                "no benchmark summary at {} (run `just bench` to write one)",
                summary_path
                    .as_deref()
                    .map_or(String::new(), |p| p.display().to_string())
            ),
        ),
        Some(Ok(Some(s))) => {
            let origin = BenchOrigin {
                commit: s.commit.clone().unwrap_or_else(|| "unknown".into()),
                date: s.date.clone().unwrap_or_else(|| "undated".into()),
                is_this_commit: s.commit.as_deref().is_some_and(|c| {
                    same_commit(c, &ctx.commit)
                        || c.split(',').map(str::trim).all(|c| {
                            crate::same_code(c, &ctx.commit, ctx.config.report_dir.as_deref())
                        })
                }),
                redis_cell: s.tools.get("redis-cell").cloned(),
            };
            let path = summary_path
                .as_deref()
                .map_or(String::new(), |p| p.display().to_string());
            let note = if origin.is_this_commit {
                format!(
                    "the benchmark summary at {path} ({}, this commit, {})",
                    s.generated_by.as_deref().unwrap_or("unknown tool"),
                    origin.date,
                )
            } else {
                format!(
                    "no benchmark of this commit: the summary at {path} measured commit {} ({}), not this run's `{}`, so its figures are not used in this table",
                    origin.commit, origin.date, ctx.commit
                )
            };
            (Some((s, origin)), note)
        }
        Some(Err(reason)) => (None, format!("{reason}; measured here instead")),
    };
    // Only a summary of this very commit stands beside this run's figures.
    let find = |name: &str, backend: &str| {
        summary
            .as_ref()
            .filter(|(_, o)| o.is_this_commit)
            .and_then(|(s, _)| {
                s.results
                    .iter()
                    .find(|e| e.algorithm == name && e.backend == backend)
                    .cloned()
            })
    };
    let redis = ctx.atomic_or_skip(ScenarioName::Cost, "the Redis figures");
    ctx.bar
        .set_length((AlgorithmKind::ALL.len() * (1 + usize::from(redis.is_some()))) as u64);
    let quota = Quota::per_second(10).expect("a valid quota");
    let bench = |value: Option<f64>| {
        value.map(|value| Figure {
            value,
            from_bench: true,
        })
    };
    let measured = |value: f64| {
        Some(Figure {
            value,
            from_bench: false,
        })
    };
    let mut rows = Vec::new();
    for kind in AlgorithmKind::ALL {
        let name = kind.name();
        let memory = find(name, "memory").unwrap_or(SummaryEntry {
            algorithm: name.into(),
            backend: "memory".into(),
            ns_per_check: None,
            us_per_call: None,
            checks_per_sec: None,
            bytes_per_key: None,
        });
        let mut row = Row {
            algorithm: name.into(),
            memory_ns_per_check: bench(memory.ns_per_check),
            memory_ns_spread: None,
            memory_bytes_per_key: bench(memory.bytes_per_key),
            redis_us_per_call: None,
            redis_p99_us: None,
            redis_checks_per_sec: None,
            redis_bytes_per_key: None,
        };
        if row.memory_ns_per_check.is_none() {
            let spread = Spread::of(&memory_time(
                kind,
                quota,
                sizes.memory_checks,
                sizes.memory_repeats,
            ));
            row.memory_ns_per_check = measured(round(spread.median, 1));
            row.memory_ns_spread = Some(spread);
        }
        if row.memory_bytes_per_key.is_none() {
            row.memory_bytes_per_key = measured(round(memory_bytes(kind, sizes.memory_keys), 1));
        }
        ctx.tick();
        if let Some(redis) = redis {
            let entry = find(name, "redis");
            row.redis_us_per_call = bench(entry.as_ref().and_then(|e| e.us_per_call));
            row.redis_checks_per_sec = bench(entry.as_ref().and_then(|e| e.checks_per_sec));
            row.redis_bytes_per_key = bench(entry.as_ref().and_then(|e| e.bytes_per_key));
            if row.redis_us_per_call.is_none()
                || row.redis_checks_per_sec.is_none()
                || row.redis_bytes_per_key.is_none()
            {
                let (median, p99, rate, bytes) = redis_figures(ctx, redis, kind, &sizes).await?;
                row.redis_us_per_call = row.redis_us_per_call.or(measured(round(median, 1)));
                row.redis_p99_us = Some(round(p99, 1));
                row.redis_checks_per_sec =
                    row.redis_checks_per_sec.or(measured(round(rate.median, 0)));
                row.redis_bytes_per_key = row.redis_bytes_per_key.or(measured(round(bytes, 1)));
            }
            ctx.tick();
        }
        rows.push(row);
    }
    let any_measured = rows.iter().any(|r| {
        [
            r.memory_ns_per_check,
            r.memory_bytes_per_key,
            r.redis_us_per_call,
            r.redis_checks_per_sec,
            r.redis_bytes_per_key,
        ]
        .iter()
        .flatten()
        .any(|f| !f.from_bench)
    });
    let used = summary.as_ref().is_some_and(|(_, o)| o.is_this_commit);
    let source = match (used, any_measured) {
        (true, false) => format!("Every figure comes from {summary_note}."),
        (true, true) => format!(
            "Figures marked (b) come from {summary_note}; the rest were measured by this run (the summary lacked them)."
        ),
        (false, _) => format!(
            "Every figure was measured by this run, briefly: {summary_note}. The benchmarks (`just bench`) measure longer and more carefully."
        ),
    };
    let bench_method = "Figures marked (b): as the benchmark report says (reports/bench/README.md, \"How these figures were produced\"): memory, time per check of a keyed limiter on 100,000 keys (on the default `SystemClock`), heap bytes per key at 100,000 keys; Redis, one task's time per call, 64 tasks' checks per second on one connection, `MEMORY USAGE` per key.".to_owned();
    let mut method = Vec::new();
    if used {
        method.push(bench_method);
    }
    let measured_method = vec![
        format!(
            "Memory, time: a keyed limiter on the system clock, {} checks over {HOT_KEYS} keys in turn, {} repeats; the median of the repeats, in ns per check (admissions and refusals mixed).",
            sizes.memory_checks, sizes.memory_repeats
        ),
        format!(
            "Memory, bytes per key: heap bytes requested (a counting allocator; malloc's own overhead not included) after {} keys each used their whole burst of 10, divided by the keys: key, state and table slack.",
            sizes.memory_keys
        ),
        format!(
            "Redis, µs per call: one task, one call at a time, {} calls over {HOT_KEYS} keys; the median (and the 99th percentile), round trip included, on Redis `TIME`.",
            sizes.redis_calls
        ),
        format!(
            "Redis, checks per second: {TASKS} tasks sharing one multiplexed connection, {} calls; the median of 3 repeats.",
            sizes.redis_throughput_calls
        ),
        format!(
            "Redis, bytes per key: growth of `used_memory` (INFO memory) after {} fresh keys each used their whole burst of 10, divided by the keys.",
            sizes.redis_keys
        ),
    ];
    if any_measured {
        method.extend(
            measured_method
                .into_iter()
                .map(|m| format!("Measured here: {m}")),
        );
    }
    let backends = summary
        .as_ref()
        .map(|(s, _)| backend_rows(s))
        .unwrap_or_default();
    if !backends.is_empty() {
        method.push("Redis backends side by side (from the benchmark summary's `module` bench): one `redis-server` loading ratelab's native module and redis-cell; raw commands (`EVALSHA` of the script, `RATELAB.<ALGORITHM>`, redis-cell's `CL.THROTTLE` on the same GCRA quota) through one client, one multiplexed connection, 64 tasks; server µs per call from `INFO commandstats` over the run; one hot key and 100,000 keys, every check admitted.".to_owned());
    }
    Ok(Cost {
        source,
        method,
        rows,
        backends,
        bench: summary.map(|(_, origin)| origin),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_summary_of_this_clean_commit_counts_as_this_runs() {
        assert!(same_commit("927b29f1c2d3", "927b29f"));
        assert!(same_commit("927b29f1c2d3, 927b29f", "927b29f"));
        assert!(!same_commit("927b29f1c2d3, 6548f3778506", "927b29f"));
        assert!(!same_commit("927b29f1c2d3", "927b29f-dirty"));
        assert!(!same_commit("927b29f-dirty", "927b29f"));
        assert!(!same_commit("unknown", "927b29f"));
        assert!(!same_commit("927b29f", "unknown (not a git checkout)"));
    }

    #[test]
    fn the_backends_come_from_the_summary_rows() {
        let summary: Summary = serde_json::from_str(
            r#"{
              "results": [],
              "rows": [
                { "group": "module-server-hot", "algorithm": "gcra", "backend": "redis-module",
                  "metric": "usec_per_call", "value": 3.5, "unit": "us" },
                { "group": "module-server-hot", "algorithm": "gcra", "backend": "redis-cell",
                  "metric": "usec_per_call", "value": 3.9, "unit": "us" },
                { "group": "module-throughput-100k", "algorithm": "gcra", "backend": "redis-lua",
                  "metric": "checks_per_sec", "value": 40000, "unit": "checks/s" },
                { "group": "redis-latency", "algorithm": "gcra", "backend": "redis",
                  "metric": "ns_per_check", "value": 50000, "unit": "ns" }
              ]
            }"#,
        )
        .unwrap();
        let rows = backend_rows(&summary);
        let labels: Vec<&str> = rows.iter().map(|r| r.backend.as_str()).collect();
        assert_eq!(labels, ["Lua script", "native module", "redis-cell"]);
        assert_eq!(rows[0].checks_per_sec_100k, Some(40_000.0));
        assert_eq!(rows[1].server_us_hot, Some(3.5));
        assert_eq!(rows[2].server_us_hot, Some(3.9));
        assert_eq!(rows[2].server_us_100k, None);
        // A summary of an older bench: no rows, no backends.
        let old: Summary = serde_json::from_str(r#"{ "results": [] }"#).unwrap();
        assert!(backend_rows(&old).is_empty());
    }
}
