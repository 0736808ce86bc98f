//! `ratelab-compare`: every ratelab algorithm through the same scenarios, in
//! memory and on Redis, and a report with charts (`reports/README.md`) that
//! tells a reader which one to choose. The binary is `just compare`.
//!
//! The scenarios reproduce the reference articles' figures (the result
//! table; the window edge, read-then-write race and per-instance counter
//! tests) and measure what a reader choosing a limiter asks: how far each
//! algorithm strays from the exact limit on realistic traffic, how smooth
//! its output is, and what a check costs. Simulated-time scenarios are
//! deterministic for a seed; real-time and Redis ones are repeated and
//! reported with their spread. [`flawed`] holds the deliberately broken
//! limiters the report measures against the correct ones.
//!
//! ```no_run
//! let config = ratelab_compare::Config::quick(7);
//! let results = ratelab_compare::run_blocking(&config, None)?;
//! ratelab_compare::report::write(&results, std::path::Path::new("reports"))?;
//! # Ok::<(), ratelab_compare::CompareError>(())
//! ```

#![forbid(unsafe_code)]

pub mod algorithms;
pub mod atomic;
pub mod backend;
pub mod charts;
pub mod costs;
pub mod flawed;
pub mod guide;
pub mod markdown;
pub mod output;
pub mod peers;
pub mod report;
pub mod scenario;
pub mod stats;
pub mod summary;
pub mod use_cases;

use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;

use backend::RedisEnv;
pub use scenario::ScenarioName;

/// Counts the heap bytes in use, for the memory-per-key measurement.
#[global_allocator]
static ALLOCATOR: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

/// Heap bytes in use by the whole process now.
pub fn heap_bytes() -> usize {
    ALLOCATOR.allocated()
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompareError {
    /// The Redis the user asked for does not answer.
    #[error(
        "cannot reach Redis at {url}: {source}\n  hint: start Redis there, fix --redis-url / $REDIS_URL, or run without Redis with --no-redis"
    )]
    RedisUnreachable {
        /// The URL given.
        url: String,
        /// What the client said.
        #[source]
        source: redis::RedisError,
    },
    /// A Redis command failed mid-run.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A limiter failed.
    #[error("limiter: {0}")]
    Limiter(#[from] ratelab::Error),
    /// Something the run needs is missing.
    #[error("{0}")]
    Unavailable(String),
    /// Writing the report failed.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Drawing a chart failed.
    #[error("chart {name}: {message}")]
    Chart {
        /// The chart.
        name: String,
        /// Why.
        message: String,
    },
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seeds every simulated arrival process.
    pub seed: u64,
    /// The scenarios, in report order.
    pub scenarios: Vec<ScenarioName>,
    /// Repeats of each real-time and Redis measurement.
    pub repeats: usize,
    /// Smaller simulations and measurements (tests, smoke runs).
    pub quick: bool,
    /// Show progress bars and per-scenario lines on stderr.
    pub progress: bool,
    /// Where a benchmark summary may be (see [`scenario::cost`]).
    pub bench_summary: Option<PathBuf>,
    /// The command line, for the report.
    pub command: String,
    /// The commit to report the run as, instead of asking git (tests).
    pub commit: Option<String>,
    /// Where the report is written: a benchmark summary of a commit that
    /// differs from this run's only there measured this run's code.
    pub report_dir: Option<PathBuf>,
}

impl Config {
    /// Every scenario at full size.
    pub fn full(seed: u64) -> Self {
        Config {
            seed,
            scenarios: ScenarioName::ALL.to_vec(),
            repeats: 30,
            quick: false,
            progress: false,
            bench_summary: None,
            command: "ratelab-compare".into(),
            commit: None,
            report_dir: None,
        }
    }

    /// Every scenario, small: seconds, for tests.
    pub fn quick(seed: u64) -> Self {
        Config {
            repeats: 3,
            quick: true,
            ..Self::full(seed)
        }
    }
}

/// Something the run could not do, said loudly on the terminal and in the
/// report.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// Which scenario.
    pub scenario: String,
    /// What part of it.
    pub what: String,
    /// Why.
    pub reason: String,
    /// How to get it.
    pub how_to_enable: String,
}

/// How the run went: where, when, on what.
#[derive(Debug, Clone, Serialize)]
pub struct Meta {
    /// The command line.
    pub command: String,
    /// The seed.
    pub seed: u64,
    /// Quick mode.
    pub quick: bool,
    /// Repeats of real-time measurements.
    pub repeats: usize,
    /// The git commit of the tree, if known.
    pub commit: String,
    /// When the run started (RFC 3339, local time zone).
    pub date: String,
    /// CPU, cores, OS.
    pub machine: String,
    /// `ratelab-compare`'s version and build profile.
    pub build: String,
    /// The Redis server, or why there was none.
    pub redis: String,
    /// The Redis server's version, when there was one.
    pub redis_version: Option<String>,
    /// Seconds each scenario took.
    pub durations: Vec<(String, f64)>,
}

/// Everything a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// How it ran.
    pub meta: Meta,
    /// What it could not do.
    pub skipped: Vec<Skipped>,
    /// The reference article's table.
    pub reference: Option<scenario::reference::Reference>,
    /// Two bursts either side of a window edge.
    pub window_edge: Option<scenario::window_edge::WindowEdge>,
    /// Simultaneous requests: atomic versus read-then-write.
    pub concurrency: Option<scenario::concurrency::Concurrency>,
    /// Two instances behind a round-robin balancer.
    pub load_balancer: Option<scenario::balancer::LoadBalancer>,
    /// Many simulated clients.
    pub traffic: Option<scenario::traffic::Traffic>,
    /// Output smoothness downstream.
    pub smoothness: Option<scenario::smoothness::Smoothness>,
    /// Time and memory per check.
    pub cost: Option<scenario::cost::Cost>,
    /// Many simulated clients, mostly well under the limit.
    pub light_traffic: Option<scenario::light::LightTraffic>,
    /// A cost known after the response, settled.
    pub settle: Option<scenario::settle::Settle>,
    /// Instances leasing one hot key of a shared limiter.
    pub leases: Option<scenario::lease::Leases>,
    /// A flood of new keys against the bounded in-memory store.
    pub flood: Option<scenario::flood::Flood>,
    /// A Redis stall, with and without the breaker.
    pub outage: Option<scenario::outage::Outage>,
    /// Masters killed, replicas promoted: over-admission and strict mode.
    pub failover: Option<scenario::failover::Failover>,
    /// ratelab-server beside envoyproxy/ratelimit, as committed.
    pub server_reference: Option<scenario::server::ServerReference>,
}

impl Results {
    /// What in this report did not come from a committed state of the code
    /// that wrote it: a dirty or unknown tree, figures read from another
    /// commit's benchmarks. Said loudly at the top of the report and on the
    /// terminal; empty when every figure is this clean commit's.
    pub fn provenance_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let commit = &self.meta.commit;
        if commit.ends_with("-dirty") {
            out.push(format!(
                "This run was built from a tree with uncommitted changes (`{commit}`): no commit holds the code that produced these figures. Commit, then run `just compare` again."
            ));
        } else if !is_commit_hash(commit) {
            out.push(format!(
                "This run's commit is {commit}: nothing ties these figures to a version of the code."
            ));
        }
        if let Some(cell) = self
            .reference
            .as_ref()
            .and_then(|r| r.redis_cell_version.as_deref())
            .filter(|v| {
                !v.starts_with(&format!(
                    "redis-cell {}",
                    ratelab_testkit::redis_cell::PEER_VERSION
                ))
            })
        {
            out.push(format!(
                "The redis-cell measured beside ratelab is {cell}, not {}: its rows are that version's.",
                ratelab_testkit::redis_cell::PEER_VERSION
            ));
        }
        if let Some(bench) = self.cost.as_ref().and_then(|c| c.bench.as_ref())
            && !bench.is_this_commit
        {
            out.push(format!(
                "The Redis backends table of [Cost](#cost) (native module, Lua scripts, redis-cell) comes from `just bench` at commit {} ({}), NOT from this run's commit `{commit}`: code changed since may have moved it. Run `just bench` and then `just compare` to measure both at one commit.",
                bench.commit, bench.date
            ));
        }
        out
    }

    /// The deterministic part of the results as JSON: identical for the same
    /// seed and configuration, run after run.
    pub fn deterministic_json(&self) -> String {
        #[derive(Serialize)]
        struct Deterministic<'a> {
            seed: u64,
            reference: Option<&'a [scenario::reference::Row]>,
            // The manual-clock rows; the rows through the server ran on the
            // real clock.
            window_edge: Option<WindowEdgeDecisions<'a>>,
            load_balancer: Option<Vec<usize>>,
            traffic: Option<&'a scenario::traffic::Traffic>,
            light_traffic: Option<&'a scenario::light::LightTraffic>,
            settle: Option<&'a scenario::settle::Settle>,
            leases: Option<&'a scenario::lease::Leases>,
            smoothness: Option<&'a scenario::smoothness::Smoothness>,
            // The flood's decisions; its heap bytes are measured, not simulated.
            flood: Option<Vec<FloodDecisions<'a>>>,
        }
        #[derive(Serialize)]
        struct WindowEdgeDecisions<'a> {
            limit: u32,
            rows: &'a [scenario::window_edge::Row],
        }
        #[derive(Serialize)]
        struct FloodDecisions<'a> {
            policy: &'a str,
            factor: u64,
            admitted: u64,
            flood_refused_pct: f64,
        }
        let d = Deterministic {
            seed: self.meta.seed,
            reference: self.reference.as_ref().map(|r| r.rows.as_slice()),
            window_edge: self.window_edge.as_ref().map(|w| WindowEdgeDecisions {
                limit: w.limit,
                rows: &w.rows,
            }),
            load_balancer: self
                .load_balancer
                .as_ref()
                .map(|b| b.rows.iter().map(|r| r.per_instance_memory).collect()),
            traffic: self.traffic.as_ref(),
            light_traffic: self.light_traffic.as_ref(),
            settle: self.settle.as_ref(),
            leases: self.leases.as_ref(),
            smoothness: self.smoothness.as_ref(),
            flood: self.flood.as_ref().map(|f| {
                f.points
                    .iter()
                    .map(|p| FloodDecisions {
                        policy: &p.policy,
                        factor: p.factor,
                        admitted: p.admitted,
                        flood_refused_pct: p.flood_refused_pct,
                    })
                    .collect()
            }),
        };
        serde_json::to_string_pretty(&d).expect("plain data serializes")
    }
}

/// The shared state of one run, handed to every scenario.
#[derive(Debug)]
pub struct Context<'a> {
    /// What to run.
    pub config: &'a Config,
    /// The Redis server, if any.
    pub redis: Option<&'a RedisEnv>,
    /// Whether the atomic Redis variants can be built (`Err` says why not).
    pub atomic: Result<(), String>,
    /// Prefixes every Redis key of this run, so runs never share state.
    pub nonce: String,
    /// The commit this run was built from, as [`Meta::commit`] says it.
    pub commit: String,
    /// The current scenario's progress bar (hidden when not wanted).
    pub bar: indicatif::ProgressBar,
    /// What could not be done.
    pub skipped: std::sync::Mutex<Vec<Skipped>>,
}

impl Context<'_> {
    /// Records that `what` of `scenario` was skipped.
    pub fn skip(&self, scenario: ScenarioName, what: &str, reason: &str, how: &str) {
        self.skipped
            .lock()
            .expect("no panic while holding it")
            .push(Skipped {
                scenario: scenario.title().into(),
                what: what.into(),
                reason: reason.into(),
                how_to_enable: how.into(),
            });
    }

    /// The Redis server, or a skip recorded for `what` of `scenario`.
    pub fn redis_or_skip(&self, scenario: ScenarioName, what: &str) -> Option<&RedisEnv> {
        if self.redis.is_none() {
            self.skip(scenario, what, "no Redis server", backend::HOW_TO_ENABLE);
        }
        self.redis
    }

    /// The Redis server when the atomic variants can be built, or a skip
    /// recorded for `what` of `scenario`.
    pub fn atomic_or_skip(&self, scenario: ScenarioName, what: &str) -> Option<&RedisEnv> {
        let redis = self.redis_or_skip(scenario, what)?;
        match &self.atomic {
            Ok(()) => Some(redis),
            Err(reason) => {
                self.skip(
                    scenario,
                    what,
                    reason,
                    "build with the ratelab-redis crate in the workspace",
                );
                None
            }
        }
    }

    /// Moves the current bar one step on.
    pub fn tick(&self) {
        self.bar.inc(1);
    }
}

/// Runs the configured scenarios on `redis` (or without Redis).
pub async fn run(config: &Config, redis: Option<&RedisEnv>) -> Result<Results, CompareError> {
    let atomic = match redis {
        Some(env) => atomic::status(env).await,
        None => Err("no Redis server".into()),
    };
    let nonce = format!(
        "ratelab-compare:{}:{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros())
    );
    let meta = meta(config, redis);
    let mut ctx = Context {
        config,
        redis,
        atomic,
        nonce,
        commit: meta.commit.clone(),
        bar: indicatif::ProgressBar::hidden(),
        skipped: std::sync::Mutex::new(Vec::new()),
    };
    let mut results = Results {
        meta,
        skipped: Vec::new(),
        reference: None,
        window_edge: None,
        concurrency: None,
        load_balancer: None,
        traffic: None,
        smoothness: None,
        cost: None,
        light_traffic: None,
        settle: None,
        leases: None,
        flood: None,
        outage: None,
        failover: None,
        server_reference: None,
    };
    let total = config.scenarios.len();
    for (i, &name) in config.scenarios.iter().enumerate() {
        ctx.bar = if config.progress {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{prefix:>22} [{bar:30}] {pos}/{len} {msg} ({elapsed})",
                )
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar.set_prefix(format!("[{}/{total}] {}", i + 1, name.title()));
            bar
        } else {
            indicatif::ProgressBar::hidden()
        };
        let started = Instant::now();
        match name {
            ScenarioName::Reference => {
                results.reference = Some(scenario::reference::run(&ctx).await?);
            }
            ScenarioName::WindowEdge => {
                results.window_edge = Some(scenario::window_edge::run(&ctx).await?);
            }
            ScenarioName::Concurrency => {
                results.concurrency = scenario::concurrency::run(&ctx).await?;
            }
            ScenarioName::LoadBalancer => {
                results.load_balancer = Some(scenario::balancer::run(&ctx).await?);
            }
            ScenarioName::Traffic => results.traffic = Some(scenario::traffic::run(&ctx)),
            ScenarioName::Smoothness => results.smoothness = Some(scenario::smoothness::run(&ctx)),
            ScenarioName::Cost => results.cost = Some(scenario::cost::run(&ctx).await?),
            ScenarioName::LightTraffic => {
                results.light_traffic = Some(scenario::light::run(&ctx));
            }
            ScenarioName::Settle => results.settle = Some(scenario::settle::run(&ctx)?),
            ScenarioName::Leases => results.leases = Some(scenario::lease::run(&ctx)?),
            ScenarioName::Flood => results.flood = Some(scenario::flood::run(&ctx)),
            ScenarioName::Outage => results.outage = scenario::outage::run(&ctx).await?,
            ScenarioName::Failover => results.failover = scenario::failover::run(&ctx).await?,
            ScenarioName::ServerReference => {
                results.server_reference = scenario::server::run(&ctx);
            }
        }
        let secs = started.elapsed().as_secs_f64();
        ctx.bar.finish_and_clear();
        if config.progress {
            eprintln!("  done [{}/{total}] {} in {secs:.1} s", i + 1, name.title());
        }
        results
            .meta
            .durations
            .push((name.slug().into(), stats::round(secs, 2)));
    }
    results.skipped = ctx.skipped.into_inner().expect("no panic while holding it");
    Ok(results)
}

/// [`run`] on a runtime of its own.
pub fn run_blocking(config: &Config, redis: Option<&RedisEnv>) -> Result<Results, CompareError> {
    runtime()?.block_on(run(config, redis))
}

/// The multi-threaded runtime the run uses.
pub fn runtime() -> Result<tokio::runtime::Runtime, CompareError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CompareError::Unavailable(format!("cannot start the async runtime: {e}")))
}

fn meta(config: &Config, redis: Option<&RedisEnv>) -> Meta {
    Meta {
        command: config.command.clone(),
        seed: config.seed,
        quick: config.quick,
        repeats: config.repeats,
        commit: config
            .commit
            .clone()
            .unwrap_or_else(|| current_commit(None)),
        date: utc_now(),
        machine: machine(),
        build: format!(
            "ratelab-compare {} ({} build)",
            env!("CARGO_PKG_VERSION"),
            if cfg!(debug_assertions) {
                "debug"
            } else {
                "release"
            }
        ),
        redis: redis.map_or_else(
            || "none: Redis scenarios skipped".into(),
            |r| format!("{} ({})", r.url(), r.origin()),
        ),
        redis_version: redis.map(|r| r.version().to_owned()),
        durations: Vec::new(),
    }
}

/// Whether `s` is a bare commit hash (no `-dirty`, not `unknown`).
pub fn is_commit_hash(s: &str) -> bool {
    s.len() >= 7 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `git rev-parse --short HEAD`, marked `-dirty` when the tree has changes
/// outside `report_dir` (the report's own files, which every run rewrites,
/// do not make the code that wrote them another).
pub fn current_commit(report_dir: Option<&std::path::Path>) -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(hash) => {
            let exclude = report_dir.map(|d| format!(":(exclude){}", d.display()));
            let mut args = vec!["status", "--porcelain", "--untracked-files=no", "--", "."];
            args.extend(exclude.as_deref());
            let dirty = git(&args).is_some_and(|s| !s.is_empty());
            if dirty { format!("{hash}-dirty") } else { hash }
        }
        None => "unknown (not a git checkout)".into(),
    }
}

/// Whether commit `measured` holds the same code as `run_commit`: the same
/// commit, or commits that differ only under `report_dir` (a bench run
/// committed with its results, the report run after it). Asks git; false
/// where git cannot tell.
pub fn same_code(measured: &str, run_commit: &str, report_dir: Option<&std::path::Path>) -> bool {
    if !is_commit_hash(measured) || !is_commit_hash(run_commit) {
        return false;
    }
    let exclude = report_dir.map(|d| format!(":(exclude){}", d.display()));
    let mut args = vec!["diff", "--quiet", measured, run_commit, "--", "."];
    args.extend(exclude.as_deref());
    std::process::Command::new("git")
        .args(&args)
        .status()
        .is_ok_and(|s| s.success())
}

/// The time now in UTC, `2026-12-01 04:28:41 UTC`: a date library for one
/// line of the report would cost the build more than this.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_date(secs)
}

/// `secs` since 1970 as a UTC date and time (Howard Hinnant's
/// days-to-civil algorithm).
fn utc_date(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// CPU model, logical cores, OS and kernel.
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!(" {}", s.trim()))
        .unwrap_or_default();
    format!(
        "{cpu}, {cores} logical cores, {}{kernel}",
        std::env::consts::OS
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(super::utc_date(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(super::utc_date(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(super::utc_date(1_796_099_321), "2026-12-01 04:28:41 UTC");
    }
}
