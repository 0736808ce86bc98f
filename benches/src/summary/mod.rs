//! `reports/bench/summary.json` and `reports/bench/README.md`, from the rows
//! the bench binaries recorded; the performance targets as ratios with pass
//! or miss.
//!
//! The summary's shape (read by `ratelab-compare`'s cost scenario):
//!
//! ```json
//! {
//!   "generated": "2026-11-29T20:30:00Z",
//!   "commit": "10fe9c2a1b2c",
//!   "machine": { "cpu": "AMD EPYC", "cores": 2, "load_average": { "memory": "..." } },
//!   "redis_version": "7.0.15",
//!   "rows": [
//!     { "group": "memory-direct", "algorithm": "gcra", "backend": "memory",
//!       "metric": "ns_per_check", "value": 31.2, "unit": "ns" }
//!   ],
//!   "targets": [
//!     { "target": "one key: ours / governor direct", "group": "memory-direct",
//!       "algorithm": "gcra", "value": 0.93, "limit": 0.8, "comparison": "<=", "pass": false }
//!   ]
//! }
//! ```
//!
//! `backend` is `memory`, `redis`, `redis-cluster`, `governor`,
//! `redis-benchmark-pipelined` (`-c 1 -P 64`) or
//! `redis-benchmark`. For the compare crate as first written, the same file
//! also carries `generated_by`, `date` and `results` (one entry per algorithm
//! and backend with `ns_per_check`, `us_per_call`, `checks_per_sec`,
//! `bytes_per_key`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use ratelab::AlgorithmKind;

use crate::algorithms::{NAMES, constant_time};
use crate::run::Row;

// Each file adds its targets and its section of the README.
mod clocks;
mod flood;
mod http;
mod instructions;
mod lease;
mod module;

pub use lease::calls_group as lease_calls_group;

/// The machine the figures were measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// The CPU model (`/proc/cpuinfo`).
    pub cpu: String,
    /// Cores available to the process.
    pub cores: usize,
    /// The load averages (1, 5, 15 min) before and after each bench binary:
    /// other work on the machine makes the figures noisy.
    pub load_average: BTreeMap<String, String>,
}

/// One performance target, measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    /// What is compared: `one key: ours / governor direct`, ...
    pub target: String,
    /// The bench group the figures come from.
    pub group: String,
    /// The algorithm held to it.
    pub algorithm: String,
    /// The measure that judges it: `instructions` (callgrind's exact count,
    /// the figure of record for CPU-bound work, which the machine's load
    /// does not move), `time` (work bound by memory, a clock read, a socket
    /// or contention, and throughput), `bytes` or `commands`.
    pub judged_by: &'static str,
    /// The measured ratio (or figure, for absolute targets).
    pub value: f64,
    /// The bound.
    pub limit: f64,
    /// `<=` or `>=`.
    pub comparison: &'static str,
    /// Whether `value comparison limit` holds.
    pub pass: bool,
    /// Beside a target judged by instructions, the time ratio of the same
    /// comparison in this run, where one was measured: shown, not judged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_beside: Option<f64>,
}

/// An entry of the summary's `results`, the shape `ratelab-compare` first
/// read.
#[derive(Debug, Clone, Serialize)]
pub struct CompatEntry {
    algorithm: String,
    backend: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ns_per_check: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    us_per_call: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checks_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_per_key: Option<f64>,
}

/// `reports/bench/summary.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// When, ISO 8601 UTC.
    pub generated: String,
    /// The commit measured (`+dirty` when the measured code had uncommitted
    /// changes).
    pub commit: String,
    /// Where.
    pub machine: Machine,
    /// The Redis server the Redis benches started.
    pub redis_version: String,
    /// The outside tools the figures depend on, as the benches found them:
    /// `redis-cell` (its version and where it was built from), `valgrind`.
    pub tools: BTreeMap<String, String>,
    /// Every figure.
    pub rows: Vec<Row>,
    /// The targets, as ratios with pass or miss.
    pub targets: Vec<Target>,
    /// Compatibility: `ratelab-benches`.
    pub generated_by: &'static str,
    /// Compatibility: the date, as `generated`.
    pub date: String,
    /// Compatibility: one entry per algorithm and backend.
    pub results: Vec<CompatEntry>,
}

impl Summary {
    /// The summary of `rows`.
    pub fn new(
        generated: String,
        commit: String,
        machine: Machine,
        redis_version: String,
        rows: Vec<Row>,
    ) -> Self {
        let targets = targets(&rows);
        let results = compat(&rows);
        Summary {
            date: generated.clone(),
            generated,
            commit,
            machine,
            redis_version,
            tools: BTreeMap::new(),
            rows,
            targets,
            generated_by: "ratelab-benches",
            results,
        }
    }

    fn get(&self, group: &str, algorithm: &str, backend: &str, metric: &str) -> Option<f64> {
        get(&self.rows, group, algorithm, backend, metric)
    }
}

pub(crate) fn get(
    rows: &[Row],
    group: &str,
    algorithm: &str,
    backend: &str,
    metric: &str,
) -> Option<f64> {
    rows.iter()
        .find(|r| {
            r.group == group
                && r.algorithm == algorithm
                && r.backend == backend
                && r.metric == metric
        })
        .map(|r| r.value)
}

/// A summary of `rows` alone, for the tests of a part's section.
#[cfg(test)]
pub(crate) fn summary_of(rows: Vec<Row>) -> Summary {
    Summary::new(
        String::new(),
        String::new(),
        Machine {
            cpu: String::new(),
            cores: 2,
            load_average: BTreeMap::new(),
        },
        String::new(),
        rows,
    )
}

/// The bench groups, as the README names them.
pub const GROUPS: [(&str, &str); 45] = [
    (
        "memory-direct",
        "one key (`Direct`), one thread, default clocks",
    ),
    ("memory-clock", "the clock read alone"),
    (
        "memory-direct-manual-clock",
        "one key, on a clock that never moves (no clock read)",
    ),
    (
        "memory-keyed-100k-manual-clock",
        "keyed 100k, on a clock that never moves",
    ),
    (
        "memory-keyed-1m-manual-clock",
        "keyed 1M, on a clock that never moves",
    ),
    (
        "memory-direct-upkeep",
        "one key, both on one quanta upkeep clock",
    ),
    (
        "memory-keyed-100k-upkeep",
        "keyed 100k, both on one quanta upkeep clock, foldhash",
    ),
    (
        "memory-keyed-1m-upkeep",
        "keyed 1M, both on one quanta upkeep clock, foldhash",
    ),
    (
        "memory-two-threads-upkeep",
        "one key, two threads, both on one quanta upkeep clock",
    ),
    (
        "memory-two-threads-keyed-upkeep",
        "two threads each on its half of 100k keys, one quanta upkeep clock, foldhash",
    ),
    (
        "memory-two-threads",
        "one key (`Direct`), two threads, default clocks",
    ),
    (
        "memory-keyed-100k",
        "keyed, 100,000 keys, random access, default clocks",
    ),
    (
        "memory-keyed-1m",
        "keyed, 1,000,000 keys, random access, default clocks",
    ),
    (
        "memory-keyed-100k-returning",
        "the returning client, 100,000 keys (1,000/s, each key back after its unit refilled), default clocks, foldhash (paired rounds only)",
    ),
    (
        "memory-keyed-1m-returning",
        "the returning client, 1,000,000 keys, default clocks, foldhash (paired rounds only)",
    ),
    (
        "instructions-direct",
        "instructions per check (callgrind): one key, frozen clock",
    ),
    (
        "instructions-keyed-100k",
        "instructions per check: keyed 100k, steady state, frozen clock, foldhash",
    ),
    (
        "instructions-keyed-1m",
        "instructions per check: keyed 1M, steady state, frozen clock, foldhash",
    ),
    (
        "instructions-returning-100k",
        "instructions per check: the returning client, 100k keys, the clock stepped 1 µs a check",
    ),
    (
        "instructions-returning-1m",
        "instructions per check: the returning client, 1M keys, the clock stepped 1 µs a check",
    ),
    (
        "memory-footprint-100k",
        "heap bytes per key, 100,000 keys, max_keys 4,000,000",
    ),
    (
        "memory-footprint-100k-bound-n",
        "heap bytes per key, 100,000 keys, max_keys 100,000 (GCRA)",
    ),
    (
        "memory-footprint-100k-bound-2n",
        "heap bytes per key, 100,000 keys, max_keys 200,000 (GCRA)",
    ),
    (
        "memory-footprint-1m",
        "heap bytes per key, 1,000,000 keys, max_keys 4,000,000",
    ),
    (
        "memory-footprint-1m-bound-n",
        "heap bytes per key, 1,000,000 keys, max_keys 1,000,000 (GCRA)",
    ),
    (
        "memory-footprint-1m-bound-2n",
        "heap bytes per key, 1,000,000 keys, max_keys 2,000,000 (GCRA)",
    ),
    ("redis-latency", "Redis, one task, one check at a time"),
    ("redis-cluster-latency", "Redis Cluster, one task"),
    ("redis-throughput-64", "Redis, 64 tasks, one connection"),
    (
        "redis-cluster-throughput-64",
        "Redis Cluster, 64 tasks, one connection",
    ),
    ("redis-evalsha", "raw EVALSHA, one task"),
    ("redis-eval", "raw EVAL (script source sent), one task"),
    ("redis-server-evalsha", "server time per EVALSHA"),
    ("redis-server-eval", "server time per EVAL"),
    ("redis-round-trips", "commands received per check"),
    ("redis-memory", "MEMORY USAGE per key"),
    ("redis-benchmark", "redis-benchmark"),
    (
        "module-paired-refused-hot",
        "module GCRA and redis-cell refusing one key (1 per hour, burst 1, spent), paired rounds",
    ),
    (
        "module-paired-refused-100k",
        "the same over 100,000 keys, each spent",
    ),
    (
        "module-instructions-admitted",
        "instructions inside Redis's processCommand per call, one key, admitted (callgrind)",
    ),
    (
        "module-instructions-refused",
        "instructions inside Redis's processCommand per call, one key, refused (callgrind)",
    ),
    (
        "module-memory-name-<n>",
        "MEMORY USAGE of one GCRA key, module and redis-cell, under a name of n bytes",
    ),
    (
        "flood",
        "a new key in a full 1M-key store at the defaults, the flood going on (`new-key-sketch-defaults`) or refused (`refused-key-defaults`)",
    ),
    (
        "flood-first-keys",
        "the first 65,536 keys of that flood, mean",
    ),
    (
        "flood-first-keys-worst-batch",
        "the first 65,536 keys of that flood, the worst batch of 1,024",
    ),
];

pub(crate) const LE: &str = "<=";
pub(crate) const GE: &str = ">=";

/// The measures a target is judged by ([`Target::judged_by`]).
pub(crate) const TIME: &str = "time";
pub(crate) const INSTRUCTIONS: &str = "instructions";
pub(crate) const BYTES: &str = "bytes";
pub(crate) const COMMANDS: &str = "commands";

/// Adds one target judged by time: see [`push_judged`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn push_ratio(
    out: &mut Vec<Target>,
    target: &str,
    group: &str,
    algorithm: &str,
    ours: Option<f64>,
    reference: Option<f64>,
    comparison: &'static str,
    limit: f64,
) {
    push_judged(
        out, TIME, target, group, algorithm, ours, reference, comparison, limit,
    );
}

/// Adds one target judged by `judged_by`: `ours / reference`, or `ours`
/// alone when `reference` is NaN (an absolute bound); nothing when either
/// figure is missing.
#[allow(clippy::too_many_arguments)]
pub(crate) fn push_judged(
    out: &mut Vec<Target>,
    judged_by: &'static str,
    target: &str,
    group: &str,
    algorithm: &str,
    ours: Option<f64>,
    reference: Option<f64>,
    comparison: &'static str,
    limit: f64,
) {
    let (Some(ours), Some(reference)) = (ours, reference) else {
        return;
    };
    let value = if reference.is_nan() {
        ours
    } else {
        ours / reference
    };
    out.push(Target {
        target: target.to_owned(),
        group: group.to_owned(),
        algorithm: algorithm.to_owned(),
        judged_by,
        value,
        limit,
        comparison,
        pass: if comparison == LE {
            value <= limit
        } else {
            value >= limit
        },
        time_beside: None,
    });
}

/// The performance targets that the rows allow to judge.
pub fn targets(rows: &[Row]) -> Vec<Target> {
    let mut out = Vec::new();
    let mut ratio = |judged_by: &'static str,
                     target: &str,
                     group: &str,
                     algorithm: &str,
                     ours: Option<f64>,
                     reference: Option<f64>,
                     comparison: &'static str,
                     limit: f64| {
        push_judged(
            &mut out, judged_by, target, group, algorithm, ours, reference, comparison, limit,
        );
    };
    let ns = |group: &str, algorithm: &str, backend: &str| {
        get(rows, group, algorithm, backend, "ns_per_check")
    };
    let absolute = Some(f64::NAN);
    // ratelab against governor, default against default, on the same clock
    // and in contention: `clocks::targets`, each target naming its terms.
    let per_sec = |group: &str, algorithm: &str, backend: &str| {
        get(rows, group, algorithm, backend, "checks_per_sec")
    };
    // In time at a million keys, where memory decides; one key and 100k
    // keys are CPU-bound, judged by their instruction counts
    // (`instructions::targets`, with these time ratios beside).
    for plain in ["memory-keyed-1m"] {
        let others = AlgorithmKind::ALL
            .into_iter()
            .filter(|&k| constant_time(k) && k != AlgorithmKind::Gcra);
        for algorithm in others.map(AlgorithmKind::name) {
            // From the paired rounds where the run has both (the token
            // bucket's: taken in turn with our GCRA), else from criterion.
            let paired = format!("{plain}-paired");
            let group = if ns(&paired, algorithm, "memory").is_some()
                && ns(&paired, "gcra", "memory").is_some()
            {
                paired.as_str()
            } else {
                plain
            };
            ratio(
                TIME,
                "O(1) algorithm / our GCRA",
                group,
                algorithm,
                ns(group, algorithm, "memory"),
                ns(group, "gcra", "memory"),
                LE,
                2.0,
            );
        }
    }
    // GCRA alone against governor, which implements no other algorithm:
    // the token bucket's bytes per key stand in the memory table. Every
    // bound from the number of keys to 4x it.
    for group in [
        "memory-footprint-100k",
        "memory-footprint-100k-bound-n",
        "memory-footprint-100k-bound-2n",
        "memory-footprint-1m",
        "memory-footprint-1m-bound-n",
        "memory-footprint-1m-bound-2n",
    ] {
        ratio(
            BYTES,
            "bytes per key: ours / governor keyed",
            group,
            "gcra",
            get(rows, group, "gcra", "memory", "bytes_per_key"),
            get(rows, group, "gcra", "governor", "bytes_per_key"),
            LE,
            1.25,
        );
    }
    for algorithm in NAMES {
        for backend in ["redis", "redis-cluster"] {
            ratio(
                COMMANDS,
                &format!("round trips per check ({backend})"),
                "redis-round-trips",
                algorithm,
                get(
                    rows,
                    "redis-round-trips",
                    algorithm,
                    backend,
                    "round_trips_per_check",
                ),
                absolute,
                LE,
                1.0,
            );
        }
    }
    for algorithm in NAMES {
        // From the paired rounds when the run has them (client and
        // redis-benchmark back to back, drift on both), else from the
        // criterion run and the redis-benchmark run after it.
        let paired = |paired: &'static str, plain: &'static str| {
            if rows
                .iter()
                .any(|r| r.group == paired && r.algorithm == algorithm)
            {
                paired
            } else {
                plain
            }
        };
        // Like with like: 64 tasks on one multiplexed connection against
        // `redis-benchmark -c 1 -P 64` (one connection, 64 in flight).
        let group = paired("redis-paired-throughput-64", "redis-throughput-64");
        ratio(
            TIME,
            "Redis throughput, one connection, 64 in flight: client / redis-benchmark -P 64",
            group,
            algorithm,
            per_sec(group, algorithm, "redis"),
            per_sec(group, algorithm, "redis-benchmark-pipelined"),
            GE,
            0.8,
        );
        // And one request at a time on one connection on both sides.
        let group = paired("redis-paired-latency", "redis-latency");
        ratio(
            TIME,
            "Redis, one connection, one in flight: redis-benchmark -c 1 time / client time",
            group,
            algorithm,
            ns(group, algorithm, "redis-benchmark"),
            ns(group, algorithm, "redis"),
            GE,
            0.8,
        );
    }
    for algorithm in ["gcra", "token-bucket"] {
        ratio(
            BYTES,
            "Redis MEMORY USAGE per key, bytes",
            "redis-memory",
            algorithm,
            get(rows, "redis-memory", algorithm, "redis", "bytes_per_key"),
            absolute,
            LE,
            100.0,
        );
    }
    instructions::targets(rows, &mut out);
    module::targets(rows, &mut out);
    clocks::targets(rows, &mut out);
    flood::targets(rows, &mut out);
    lease::targets(rows, &mut out);
    http::targets(rows, &mut out);
    out
}

fn compat(rows: &[Row]) -> Vec<CompatEntry> {
    let mut out = Vec::new();
    for algorithm in NAMES {
        let g =
            |group: &str, backend: &str, metric: &str| get(rows, group, algorithm, backend, metric);
        let memory = CompatEntry {
            algorithm: algorithm.to_owned(),
            backend: "memory",
            ns_per_check: g("memory-keyed-100k", "memory", "ns_per_check"),
            us_per_call: None,
            checks_per_sec: None,
            bytes_per_key: g("memory-footprint-100k", "memory", "bytes_per_key"),
        };
        let redis = CompatEntry {
            algorithm: algorithm.to_owned(),
            backend: "redis",
            ns_per_check: None,
            us_per_call: g("redis-latency", "redis", "ns_per_check").map(|ns| ns / 1000.0),
            checks_per_sec: g("redis-throughput-64", "redis", "checks_per_sec"),
            bytes_per_key: g("redis-memory", "redis", "bytes_per_key"),
        };
        for entry in [memory, redis] {
            if entry.ns_per_check.is_some()
                || entry.us_per_call.is_some()
                || entry.checks_per_sec.is_some()
                || entry.bytes_per_key.is_some()
            {
                out.push(entry);
            }
        }
    }
    out
}

/// `1234.5` as `1.23 k` style: three significant figures with a suffix.
fn si(value: f64) -> String {
    let (scaled, suffix) = if value >= 1e6 {
        (value / 1e6, " M")
    } else if value >= 1e4 {
        (value / 1e3, " k")
    } else {
        (value, "")
    };
    let digits = if scaled >= 100.0 {
        0
    } else if scaled >= 10.0 {
        1
    } else {
        2
    };
    format!("{scaled:.digits$}{suffix}")
}

fn cell(value: Option<f64>, format: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "–".to_owned(), format)
}

fn one(value: f64) -> String {
    format!("{value:.1}")
}

fn three(value: f64) -> String {
    format!("{value:.3}")
}

fn two(value: f64) -> String {
    format!("{value:.2}")
}

/// The targets table, in Markdown.
pub fn targets_table(summary: &Summary) -> String {
    let mut out = String::new();
    out.push_str(
        "| target | judged by | group | algorithm | measured | bound | | time ratio beside (not judged) |\n",
    );
    out.push_str("|---|---|---|---|---:|---:|---|---:|\n");
    for t in &summary.targets {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} {} | {} | {} |",
            t.target,
            t.judged_by,
            t.group,
            t.algorithm,
            three(t.value),
            t.comparison,
            t.limit,
            if t.pass { "pass" } else { "**miss**" },
            t.time_beside.map_or_else(String::new, three),
        );
    }
    let passed = summary.targets.iter().filter(|t| t.pass).count();
    let _ = writeln!(out, "\n{passed} of {} targets met.", summary.targets.len());
    out
}

/// The in-memory table, in Markdown.
pub fn memory_table(summary: &Summary) -> String {
    let mut out = String::new();
    out.push_str(
        "| algorithm | one key, ns | keyed 100k, ns | keyed 1M, ns | two threads, one key, checks/s | bytes/key (100k) | bytes/key (1M) |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    let mut lines: Vec<(String, &str, &str)> = NAMES
        .iter()
        .map(|n| ((*n).to_owned(), *n, "memory"))
        .collect();
    for name in ["gcra", "token-bucket"] {
        lines.push((
            format!("{name} (coarse clock, opt-in)"),
            name,
            "memory-coarse-clock",
        ));
    }
    lines.push(("governor".to_owned(), "gcra", "governor"));
    lines.push(("governor, foldhash".to_owned(), "gcra-foldhash", "governor"));
    for (label, algorithm, backend) in lines {
        let ns = |group| summary.get(group, algorithm, backend, "ns_per_check");
        let bytes = |group| summary.get(group, algorithm, backend, "bytes_per_key");
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} | {} | {} |",
            cell(ns("memory-direct"), one),
            cell(ns("memory-keyed-100k"), one),
            cell(ns("memory-keyed-1m"), one),
            cell(
                summary.get("memory-two-threads", algorithm, backend, "checks_per_sec"),
                si
            ),
            cell(bytes("memory-footprint-100k"), one),
            cell(bytes("memory-footprint-1m"), one),
        );
    }
    out.push_str(
        "\nClocks and hashers: each side on its defaults. ratelab's rows read its default clock, \
         the precise `SystemClock` (the `(coarse clock, opt-in)` rows: `CoarseClock::shared()`), and hash keys with \
         foldhash; governor reads its default `QuantaClock` and hashes with std's SipHash \
         (`governor, foldhash`: foldhash).\n",
    );
    out
}

/// Where the time of a check goes: the same limiters on their default
/// clocks, on clocks that never move, and on one upkeep clock, and the clock
/// reads alone.
pub fn clock_table(summary: &Summary) -> String {
    let mut out = String::new();
    out.push_str(
        "| limiter | one key, default clocks, ns | one key, frozen, ns | one key, upkeep, ns | keyed 100k, default clocks, ns | keyed 100k, frozen, ns | keyed 100k, upkeep, ns |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
    for (label, algorithm, backend) in [
        ("gcra", "gcra", "memory"),
        ("token-bucket", "token-bucket", "memory"),
        ("governor", "gcra", "governor"),
        ("governor, foldhash", "gcra-foldhash", "governor"),
    ] {
        let ns = |group| summary.get(group, algorithm, backend, "ns_per_check");
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} | {} | {} |",
            cell(ns("memory-direct"), one),
            cell(ns("memory-direct-manual-clock"), one),
            cell(ns("memory-direct-upkeep"), one),
            cell(ns("memory-keyed-100k"), one),
            cell(ns("memory-keyed-100k-manual-clock"), one),
            cell(ns("memory-keyed-100k-upkeep"), one),
        );
    }
    out.push_str(
        "\nClocks: default, ratelab `SystemClock` and governor `QuantaClock`; frozen, \
         ratelab `ManualClock` and governor `FakeRelativeClock`; upkeep, one governor \
         `QuantaUpkeepClock` read by both. Keyed on the frozen and upkeep clocks, governor runs \
         on foldhash only.\n",
    );
    let clock =
        |algorithm, backend| summary.get("memory-clock", algorithm, backend, "ns_per_check");
    let _ = writeln!(
        out,
        "\nThe clock read alone: `Instant::now()` {} ns, ratelab's `SystemClock::now_micros()` {} ns, `CoarseClock::now_micros()` {} ns, governor's quanta clock {} ns.",
        cell(clock("instant", "memory"), one),
        cell(clock("system-clock", "memory"), one),
        cell(clock("coarse-clock", "memory"), one),
        cell(clock("quanta", "governor"), one),
    );
    out
}

/// The Redis tables, in Markdown.
pub fn redis_tables(summary: &Summary) -> String {
    let mut out = String::new();
    let us = |ns: f64| one(ns / 1e3);
    out.push_str(
        "| algorithm | one task, µs | redis-benchmark -c 1, µs | cluster, one task, µs | raw EVALSHA, µs | raw EVAL, µs |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|\n");
    for algorithm in NAMES {
        let ns = |group, backend| summary.get(group, algorithm, backend, "ns_per_check");
        let _ = writeln!(
            out,
            "| {algorithm} | {} | {} | {} | {} | {} |",
            cell(ns("redis-latency", "redis"), us),
            cell(ns("redis-latency", "redis-benchmark"), us),
            cell(ns("redis-cluster-latency", "redis-cluster"), us),
            cell(ns("redis-evalsha", "redis"), us),
            cell(ns("redis-eval", "redis"), us),
        );
    }
    out.push('\n');
    out.push_str(
        "| algorithm | client: 1 connection, 64 tasks, checks/s | redis-benchmark -c 1 -P 64 (1 connection, 64 in flight), req/s | client / redis-benchmark -P 64 | redis-benchmark -c 64 (64 connections, 1 in flight each), req/s | cluster, 64 tasks, checks/s |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|\n");
    for algorithm in NAMES {
        let per_sec = |group, backend| summary.get(group, algorithm, backend, "checks_per_sec");
        let client = per_sec("redis-throughput-64", "redis");
        let pipelined = per_sec("redis-throughput-64", "redis-benchmark-pipelined");
        let _ = writeln!(
            out,
            "| {algorithm} | {} | {} | {} | {} | {} |",
            cell(client, si),
            cell(pipelined, si),
            cell(client.zip(pipelined).map(|(c, r)| c / r), two),
            cell(per_sec("redis-throughput-64", "redis-benchmark"), si),
            cell(per_sec("redis-cluster-throughput-64", "redis-cluster"), si),
        );
    }
    let paired = NAMES.iter().any(|algorithm| {
        summary
            .get(
                "redis-paired-throughput-64",
                algorithm,
                "redis",
                "checks_per_sec",
            )
            .is_some()
    });
    if paired {
        out.push_str(
            "\nThe client and redis-benchmark in paired rounds (the targets' figures): each round \
             runs one then the other, the order alternating, the same checks each; medians over \
             the rounds.\n\n",
        );
        out.push_str(
            "| algorithm | client, 64 tasks, checks/s | redis-benchmark -c 1 -P 64, req/s | ratio | client, one task, µs | redis-benchmark -c 1, µs | ratio (time) |\n",
        );
        out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
        for algorithm in NAMES {
            let g = |group, backend, metric| summary.get(group, algorithm, backend, metric);
            let client = g("redis-paired-throughput-64", "redis", "checks_per_sec");
            let pipelined = g(
                "redis-paired-throughput-64",
                "redis-benchmark-pipelined",
                "checks_per_sec",
            );
            let client_ns = g("redis-paired-latency", "redis", "ns_per_check");
            let benchmark_ns = g("redis-paired-latency", "redis-benchmark", "ns_per_check");
            let _ = writeln!(
                out,
                "| {algorithm} | {} | {} | {} | {} | {} | {} |",
                cell(client, si),
                cell(pipelined, si),
                cell(client.zip(pipelined).map(|(c, r)| c / r), two),
                cell(client_ns, us),
                cell(benchmark_ns, us),
                cell(benchmark_ns.zip(client_ns).map(|(b, c)| b / c), two),
            );
        }
    }
    out.push('\n');
    out.push_str(
        "| algorithm | server µs per EVALSHA | server µs per EVAL | round trips per check | round trips (cluster) | MEMORY USAGE, bytes/key |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|\n");
    for algorithm in NAMES {
        let g = |group, backend, metric| summary.get(group, algorithm, backend, metric);
        let _ = writeln!(
            out,
            "| {algorithm} | {} | {} | {} | {} | {} |",
            cell(g("redis-server-evalsha", "redis", "usec_per_call"), two),
            cell(g("redis-server-eval", "redis", "usec_per_call"), two),
            cell(
                g("redis-round-trips", "redis", "round_trips_per_check"),
                two
            ),
            cell(
                g(
                    "redis-round-trips",
                    "redis-cluster",
                    "round_trips_per_check"
                ),
                two
            ),
            cell(g("redis-memory", "redis", "bytes_per_key"), one),
        );
    }
    out
}

/// How the figures were produced, for the README.
const METHOD: &str = "\
## How these figures were produced

`just bench` runs `cargo bench -p ratelab-benches` (the bench binaries
`memory`, `instructions`, `footprint`, `flood`, `redis`, `module`, `http` and `lease`,
whose figures are here, and `server`, whose criterion figures stay in
criterion's reports), then
`cargo run --release -p ratelab-benches --bin bench-summary`, which merges the
rows the binaries left in
`<criterion home>/ratelab-rows/` into this folder and prints the tables.
`RATELAB_BENCH_QUICK=1` makes every measurement shorter (same benches, noisier
figures). Criterion's own reports are under `target/criterion/`.

**What judges a target.** The targets table says, for each target, the
measure that judges it. Work bound by the CPU (one key, 100k keys, the
returning client, the O(1) algorithms against our GCRA, an HTTP request in
process, a call inside Redis) is judged by the **instructions** it runs,
counted by callgrind, exact and unmoved by the machine's load: on this
shared 2-core machine a time ratio lands on either side of a bound from one
quiet run to the next. Its time ratio from the same run stands beside it,
not judged. Work bound by memory (a million keys), by a clock read (each
side on its default clock), by sockets or contention, and throughput, is
judged by **time**; bytes and round trips by their counts.

**Instructions.** The `instructions` bench runs each case in a process of
its own under `valgrind --tool=callgrind --collect-atstart=no
--toggle-collect=*counted*`: only the instructions of the function that
makes one check (or one HTTP request) are counted, not building or filling
the limiter, stepping the clock or choosing the key. N checks warm up, then
N and 2N are counted (callgrind dumps at the end of each), and the figure
is the difference over N. Terms: the same clock (a counter moved by hand,
each library's own: ratelab's `ManualClock`, governor's
`FakeRelativeClock`, stepped together outside the count), `u64` keys,
foldhash on both, cost 1 as a literal on both sides (governor's `check()`
and `check_key(&k)` have no cost argument), ratelab's cost as an argument
beside governor's `check_n`. Inside Redis, a `redis-server` loading both
modules runs under callgrind with `--toggle-collect=processCommand`;
`callgrind_control` zeroes and dumps the counts around N and 2N calls. The
counts of a library's code depend on how the compiler inlined it in the
binary that counts it (governor's `check_n` counted 65 in one build and 116
in another, when `measure_and_replace` stopped being inlined): figures from
one build compare; figures across builds move by that much.

**Timing.** Criterion, 1 s warm-up and 3 s of measurement per benchmark (quick:
0.3 s and 1 s); the figure is the median of criterion's samples, in ns per
check (or checks per second from the median time of an iteration). Each
check's result is observed where it lies (`black_box(&result)`), for ratelab
and governor alike: moving ratelab's `Decision` (48 bytes) by value adds
store-forwarding stalls (about 11 ns on this machine when it was 72 bytes),
which would time the harness, not the limiter.

**Clocks.** The main groups run each side on its defaults: ratelab's
limiters on `SystemClock`, its default clock (a TSC read through quanta,
calibrated once per process, exact to the µs, so the quota holds over every
interval of real time), governor on its default `QuantaClock` (the same
kind of read) and, keyed, std's SipHash.
GCRA and the token bucket are also measured on ratelab's opt-in
`CoarseClock::shared()` (an atomic the system clock is copied into every
millisecond by a background thread, read in a fraction of a nanosecond; it
lags by up to a millisecond, so the quota holds only over intervals of real
time lengthened by that lag, which is why it is not the default), in the
rows `<algorithm> (coarse clock, opt-in)`.
The equal-terms groups put both on the same clock: frozen
(ratelab's `ManualClock`, governor's `FakeRelativeClock`) or one governor
`QuantaUpkeepClock` refreshed every millisecond (quanta's `Instant::recent`),
which ratelab reads through an adapter of its `Clock` trait (declared
monotonic, as quanta's readings are: ratelab's own `CoarseClock`, the same
kind of clock, says so too); keyed, both on foldhash. GCRA's lean check
(`check_lean`, read only for `allowed`: `gcra-lean`) runs beside its `check`
in every paired group.

**Fairness.** Same quota for ratelab and governor, one under which every
check is admitted (the path that writes state); each bench checks that before
measuring and fails rather than time a limiter on its refusal path. One key:
1,000/s with a burst of `u32::MAX`. Keyed and Redis: 1/s with a burst of
1,000,000, so that no key is back to full capacity (and forgotten) between
two of its checks; the keys are inserted before measuring, for ratelab and
governor alike (before the keyed paired rounds, each key is charged 600
units, ten minutes of debt: a key waits seconds between two of its checks
on one side there, and charged one unit it would be back to full capacity,
forgotten by ratelab and tracked afresh, while governor keeps it). The sliding log, whose state is O(limit), runs keyed and on
Redis on 1,000/s (a 1 s window) to keep its log bounded; no target compares
it.

- **one key**: `Direct::new(algorithm).check(1)` (the default clock) vs governor's
  `RateLimiter::direct(quota).check()`, one thread.
- **two threads, one key**: the same limiters, two threads checking at once
  (`iter_custom`: each thread makes one check per iteration; the time is the
  slower thread's); checks per second = 2 / time per iteration.
- **keyed**: `Keyed::builder(algorithm).keys().max_keys(4_000_000).build()` (the default clock)
  with `u64` keys, `check_key(&key, 1)`, vs governor's `RateLimiter::keyed`
  (DashMap, std's SipHash) and, for reference, governor's DashMap with
  foldhash (ratelab's hasher). 100,000 or 1,000,000 random `u64` keys, visited
  in a pre-generated random order (4M accesses, cycled); the same keys and
  order for every limiter.
- **where the time goes**: the clock read alone (`Instant::now`,
  `SystemClock::now_micros`, governor's quanta clock), and GCRA, token bucket
  and governor again on clocks that never move (ratelab's `ManualClock`,
  governor's `FakeRelativeClock`): the difference is what the clock costs in
  place, which can exceed the read alone (the vDSO's ordered `rdtsc` also
  keeps the CPU from overlapping one check's cache misses with the next).
- **same clock**: GCRA, the token bucket and governor on one frozen or one
  upkeep clock, one key and keyed over 100,000 and 1,000,000 keys (governor
  keyed with `DashMapStateStore::with_hasher(foldhash)`).
- **contention**: on the upkeep clock, two threads on one key, and two
  threads each checking its own half of 100,000 keys (in the access order)
  in one keyed limiter; checks per second = 2 / time per iteration.
- **bytes per key**: a counting global allocator (the `footprint` bench only):
  heap bytes requested after one check of each of N keys, minus before, / N;
  the store's whole footprint (table, slack, padding), not malloc's own
  overhead. governor: `RateLimiter::keyed` with the same keys. Ours with
  `max_keys` 4,000,000 (every algorithm), and for GCRA also with `max_keys`
  equal to the number of keys and twice it (`-bound-n`, `-bound-2n`); `u64`
  keys, the default shard count.
- **Redis**: each bench starts its own `redis-server` and a 3-master cluster
  (loopback, no persistence). One `RedisLimiter` per algorithm on one
  multiplexed connection (`Connection::single` / `Connection::cluster`),
  Redis `TIME`, a 10 s timeout (so a busy machine does not turn into errors),
  a tokio current-thread runtime (the client uses one core, like
  redis-benchmark). 1,000 keys `bench:000000000000`...
  - one task: one check at a time, keys in turn;
  - 64 tasks: 64 tokio tasks sharing the limiter, checks per second;
  - EVALSHA vs EVAL: the same call built by hand (`Connection::query`), with
    the SHA1 or with the script's source;
  - server µs per call: `INFO commandstats` `usec_per_call` of `evalsha`
    (and `eval`) over the run (`CONFIG RESETSTAT` first);
  - round trips per check: commands the server received from clients
    (`MONITOR`, script-internal commands excluded) over 1,000 checks from 64
    tasks, divided by 1,000; on the cluster, summed over the masters;
  - MEMORY USAGE: one check on each of 100 fresh keys, `MEMORY USAGE` of each,
    averaged;
  - redis-benchmark: `redis-benchmark -c 1 -P 64 -r 1000 -n N EVALSHA <sha> 1
    ratelab:{bench:__rand_int__}:<algorithm> \"\" 1 0 <params>`: the same
    script, keys and arguments as the client, on the same connection model.
    The client's 64 tasks share one multiplexed connection and keep up to 64
    requests in flight on it; `-c 1 -P 64` is one connection with 64 requests
    in flight, so the throughput target compares like with like. (`-P`
    sends its 64 in batches and waits for a batch's replies before the next;
    the client refills its window as replies arrive, so neither side gets
    the other's pipelining for free.) `-c 64` (64 connections, one request
    in flight on each) is shown beside it for reference only: the client
    pipelines where it does not, so a ratio against it would flatter the
    client. And `-c 1` alone, one connection with one request at a time on
    both sides: the floor of one round trip on this machine, which the
    one-task latency is judged against.
  - paired rounds (the Redis targets' figures): the client and
    redis-benchmark back to back, 8 rounds, the order alternating (40,000
    checks a side with 64 in flight, 4,000 with one), each side's median
    over the rounds. The criterion run and redis-benchmark's lie minutes
    apart, and this machine drifts by up to a fifth over minutes; paired,
    the drift falls on both sides.
";

/// The README, in Markdown.
pub fn readme(summary: &Summary) -> String {
    let mut out = String::new();
    out.push_str("# Benchmarks\n\n");
    out.push_str(
        "Generated by `just bench` (`ratelab-benches`); do not edit by hand. \
         The same figures, machine-readable: [`summary.json`](summary.json).\n\n",
    );
    let loads: Vec<String> = summary
        .machine
        .load_average
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    let tools: Vec<String> = summary
        .tools
        .iter()
        .map(|(tool, what)| format!("{tool}: {what}"))
        .collect();
    if !tools.is_empty() {
        let _ = writeln!(out, "Tools: {}.\n", tools.join("; "));
    }
    let _ = writeln!(
        out,
        "Measured {} at commit `{}` on {} ({} cores), Redis {}. Load averages (1, 5, 15 min): {}.\n",
        summary.generated,
        summary.commit,
        summary.machine.cpu,
        summary.machine.cores,
        summary.redis_version,
        if loads.is_empty() {
            "unknown".to_owned()
        } else {
            loads.join("; ")
        }
    );
    out.push_str("## Targets, each a ratio from this one run\n\n");
    out.push_str(&targets_table(summary));
    out.push_str("\n## In memory\n\nTime per check (median, ns; lower is better), throughput of two threads on one key, heap bytes per key.\n\n");
    out.push_str(&memory_table(summary));
    out.push_str("\n### Where the time goes\n\n");
    out.push_str(&clock_table(summary));
    out.push_str(&instructions::section(summary));
    out.push_str("\n## Redis\n\n");
    out.push_str(&redis_tables(summary));
    out.push_str(&module::section(summary));
    out.push_str(&clocks::section(summary));
    out.push_str(&flood::section(summary));
    out.push_str(&lease::section(summary));
    out.push_str(&http::section(summary));
    out.push('\n');
    out.push_str(METHOD);
    out.push_str("\n### The groups\n\n");
    for (group, what) in GROUPS {
        let _ = writeln!(out, "- `{group}`: {what}");
    }
    out
}

/// `seconds` since 1970 as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn iso8601(seconds: u64) -> String {
    let days = seconds / 86_400;
    let rest = seconds % 86_400;
    // Howard Hinnant's civil-from-days, for days since 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Metric;

    #[test]
    fn dates() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601(1_795_982_929), "2026-11-29T20:08:49Z");
    }

    fn rows() -> Vec<Row> {
        vec![
            Row::new("memory-direct", "gcra", "memory", Metric::NsPerCheck, 20.0),
            // A million keys, where memory decides: the O(1) algorithms are
            // held to our GCRA in time there.
            Row::new(
                "memory-keyed-1m",
                "gcra",
                "memory",
                Metric::NsPerCheck,
                20.0,
            ),
            Row::new(
                "memory-keyed-1m",
                "token-bucket",
                "memory",
                Metric::NsPerCheck,
                30.0,
            ),
            Row::new(
                "memory-keyed-1m",
                "leaky-meter",
                "memory",
                Metric::NsPerCheck,
                50.0,
            ),
            Row::new(
                "memory-direct",
                "gcra",
                "governor",
                Metric::NsPerCheck,
                29.0,
            ),
            Row::new(
                "redis-round-trips",
                "gcra",
                "redis",
                Metric::RoundTripsPerCheck,
                1.0,
            ),
            Row::new("redis-memory", "gcra", "redis", Metric::BytesPerKey, 72.0),
            Row::new(
                "redis-throughput-64",
                "gcra",
                "redis",
                Metric::ChecksPerSec,
                70e3,
            ),
            Row::new(
                "redis-throughput-64",
                "gcra",
                "redis-benchmark-pipelined",
                Metric::ChecksPerSec,
                100e3,
            ),
            // 64 connections without pipelining: shown, never judged.
            Row::new(
                "redis-throughput-64",
                "gcra",
                "redis-benchmark",
                Metric::ChecksPerSec,
                50e3,
            ),
        ]
    }

    #[test]
    fn targets_are_ratios_with_pass_or_miss() {
        let targets = targets(&rows());
        let find = |target: &str, algorithm: &str| {
            targets
                .iter()
                .find(|t| t.target.starts_with(target) && t.algorithm == algorithm)
                .unwrap_or_else(|| panic!("{target} {algorithm}: {targets:#?}"))
        };
        let gcra = find("one key", "gcra");
        assert!((gcra.value - 20.0 / 29.0).abs() < 1e-9 && gcra.pass);
        // governor implements GCRA alone: the token bucket is held to our
        // GCRA, never to governor.
        assert!(
            !targets
                .iter()
                .any(|t| t.algorithm == "token-bucket" && t.target.contains("governor")),
            "{targets:#?}"
        );
        assert!(!find("O(1)", "leaky-meter").pass, "50/20 > 2");
        let token = find("O(1)", "token-bucket");
        assert!((token.value - 1.5).abs() < 1e-9 && token.pass, "30/20");
        assert_eq!(token.judged_by, TIME);
        assert!(find("round trips", "gcra").pass);
        assert_eq!(find("round trips", "gcra").judged_by, COMMANDS);
        assert_eq!(find("Redis MEMORY", "gcra").value, 72.0);
        assert_eq!(find("Redis MEMORY", "gcra").judged_by, BYTES);
        let ceiling = find("Redis throughput", "gcra");
        assert!((ceiling.value - 0.7).abs() < 1e-9 && !ceiling.pass);
        assert!(
            !targets.iter().any(|t| t.target.contains("-c 64")),
            "the unpipelined redis-benchmark is no target's reference"
        );
        // Nothing is judged without its figures; one key and 100k keys are
        // CPU-bound, judged by instructions only.
        assert!(!targets.iter().any(|t| t.group == "memory-keyed-100k"));
        assert!(
            !targets
                .iter()
                .any(|t| t.group == "memory-direct" && t.target.starts_with("O(1)"))
        );
    }

    #[test]
    fn the_summary_serializes_to_the_agreed_shape() {
        let summary = Summary::new(
            iso8601(0),
            "abc".into(),
            Machine {
                cpu: "cpu".into(),
                cores: 2,
                load_average: BTreeMap::new(),
            },
            "7.0.15".into(),
            rows(),
        );
        let json: serde_json::Value = serde_json::to_value(&summary).unwrap();
        for key in [
            "generated",
            "commit",
            "machine",
            "redis_version",
            "rows",
            "targets",
        ] {
            assert!(json.get(key).is_some(), "{key}");
        }
        assert_eq!(json["machine"]["cores"], 2);
        let row = &json["rows"][0];
        let mut keys: Vec<&str> = row
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["algorithm", "backend", "group", "metric", "unit", "value"]
        );
        assert_eq!(json["results"][0]["algorithm"], "gcra");
        let readme = readme(&summary);
        assert!(readme.contains("| gcra | 20.0 |"), "{readme}");
        assert!(readme.contains("| judged by |"), "{readme}");
        assert!(readme.contains("**miss**"));
    }

    #[test]
    fn numbers() {
        assert_eq!(si(1_234_567.0), "1.23 M");
        assert_eq!(si(98_765.0), "98.8 k");
        assert_eq!(si(512.0), "512");
    }
}
