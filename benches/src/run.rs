//! How a bench binary runs: the mode criterion would run in, criterion's
//! configuration, and the [`Recorder`] that turns what was measured into
//! summary rows.
//!
//! Each bench binary writes its rows to
//! `<criterion home>/ratelab-rows/<binary>.json` (criterion's home is
//! `$CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`, else the target
//! directory `cargo metadata` names, as criterion itself decides). The
//! `bench-summary` binary merges those files into `reports/bench/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use criterion::Criterion;
use serde::{Deserialize, Serialize};

/// Set to `1` for a quick run: shorter measurements, fewer samples, smaller
/// `redis-benchmark` runs. Same benches, noisier figures.
pub const QUICK_ENV: &str = "RATELAB_BENCH_QUICK";

/// The backend of the instructions bench's HTTP rows, whose algorithm is
/// the stack: written by the bench and read by the summary, from here.
pub const HTTP_BACKEND: &str = "http";

/// What the binary was asked to do, read from its arguments the way
/// criterion reads them (criterion does not expose its mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mode {
    kind: Kind,
    quick: bool,
    filter: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `cargo bench`: measure and record.
    Bench,
    /// `cargo test --benches` or `cargo bench -- --test`: run everything
    /// once, small, record nothing.
    Test,
    /// `--list`: criterion lists its benchmarks; nothing else runs.
    List,
    /// `--profile-time`: criterion iterates for a profiler; no custom steps.
    Profile,
}

/// Criterion's options that take a value (the value is not a filter).
const VALUED: [&str; 17] = [
    "-c",
    "--color",
    "--colour",
    "-s",
    "--save-baseline",
    "-b",
    "--baseline",
    "--baseline-lenient",
    "--load-baseline",
    "--sample-size",
    "--warm-up-time",
    "--measurement-time",
    "--nresamples",
    "--noise-threshold",
    "--confidence-level",
    "--significance-level",
    "--profile-time",
];

impl Mode {
    /// The mode of this process, from its arguments and [`QUICK_ENV`].
    pub fn from_args() -> Self {
        let quick = std::env::var(QUICK_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
        Self::parse(std::env::args().skip(1), quick)
    }

    fn parse(args: impl IntoIterator<Item = String>, quick: bool) -> Self {
        let (mut bench, mut test, mut list, mut profile) = (false, false, false, false);
        let mut filter = None;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--bench" => bench = true,
                "--test" => test = true,
                "--list" => list = true,
                _ if arg.starts_with("--profile-time") => {
                    profile = true;
                    if !arg.contains('=') {
                        args.next();
                    }
                }
                _ if VALUED.contains(&arg.as_str()) => {
                    args.next();
                }
                _ if arg.starts_with('-') => {}
                _ => filter = filter.or(Some(arg)),
            }
        }
        // Criterion's rule: without --bench (cargo test --benches) it tests.
        let kind = if list {
            Kind::List
        } else if !bench || test {
            Kind::Test
        } else if profile {
            Kind::Profile
        } else {
            Kind::Bench
        };
        Mode {
            kind,
            quick,
            filter,
        }
    }

    /// Measuring for real: the figures are recorded.
    pub fn is_bench(&self) -> bool {
        self.kind == Kind::Bench
    }

    /// Criterion's test mode: everything runs once, on small inputs.
    pub fn is_test(&self) -> bool {
        self.kind == Kind::Test
    }

    /// Only criterion's own benchmarks should run (listing or profiling).
    pub fn criterion_only(&self) -> bool {
        matches!(self.kind, Kind::List | Kind::Profile)
    }

    /// A quick run ([`QUICK_ENV`]).
    pub fn is_quick(&self) -> bool {
        self.quick
    }

    /// Whether a step named `id` passes the filter given on the command line
    /// (a substring, as criterion matches by default).
    pub fn wants(&self, id: &str) -> bool {
        self.filter.as_deref().is_none_or(|f| id.contains(f))
    }

    /// Whether any of `group/function` passes the filter.
    pub fn wants_any<'a>(&self, group: &str, functions: impl IntoIterator<Item = &'a str>) -> bool {
        functions
            .into_iter()
            .any(|f| self.wants(&format!("{group}/{f}")))
    }

    /// `full` in a real run, `small` in test mode (and when listing),
    /// `quick` in a quick run.
    pub fn size<T>(&self, full: T, quick: T, small: T) -> T {
        if matches!(self.kind, Kind::Test | Kind::List) {
            small
        } else if self.quick {
            quick
        } else {
            full
        }
    }
}

/// Criterion configured for this suite: 1 s of warm-up and 3 s of
/// measurement per benchmark (0.3 s and 1 s quick), no plots; options on the
/// command line still win (`-- --measurement-time 10`).
pub fn criterion(mode: &Mode) -> Criterion {
    let c = Criterion::default().without_plots();
    let c = if mode.is_quick() {
        c.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_secs(1))
            .sample_size(20)
            .nresamples(10_000)
    } else {
        c.warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .sample_size(50)
            .nresamples(20_000)
    };
    c.configure_from_args()
}

/// Where criterion writes its results, decided as criterion decides it.
pub fn criterion_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    let from_metadata = std::env::var_os("CARGO").and_then(|cargo| {
        let output = std::process::Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .output()
            .ok()?;
        let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
        metadata["target_directory"].as_str().map(PathBuf::from)
    });
    from_metadata.map_or_else(
        || PathBuf::from("target/criterion"),
        |t| t.join("criterion"),
    )
}

/// Where the bench binaries leave their rows for `bench-summary`.
pub fn rows_dir() -> PathBuf {
    criterion_home().join("ratelab-rows")
}

/// One figure: the shape of `rows` in `reports/bench/summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The bench: `memory-direct`, `redis-throughput-64`, ...
    pub group: String,
    /// One of the seven algorithm names (`gcra`, ...); governor is `gcra`
    /// (it is GCRA), or `gcra-foldhash` for its store with foldhash.
    pub algorithm: String,
    /// `memory`, `redis`, `redis-cluster`, `governor` or `redis-benchmark`.
    pub backend: String,
    /// `ns_per_check`, `checks_per_sec`, `bytes_per_key`, `usec_per_call`,
    /// `round_trips_per_check`.
    pub metric: String,
    /// The figure.
    pub value: f64,
    /// Its unit: `ns`, `checks/s`, `bytes`, `us`, `commands`.
    pub unit: String,
}

impl Row {
    /// A row.
    pub fn new(group: &str, algorithm: &str, backend: &str, metric: Metric, value: f64) -> Self {
        Row {
            group: group.to_owned(),
            algorithm: algorithm.to_owned(),
            backend: backend.to_owned(),
            metric: metric.name().to_owned(),
            value,
            unit: metric.unit().to_owned(),
        }
    }

    fn key(&self) -> (&str, &str, &str, &str) {
        (&self.group, &self.algorithm, &self.backend, &self.metric)
    }
}

/// The metrics the suite records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Nanoseconds per check (the median of criterion's samples).
    NsPerCheck,
    /// Checks per second (from the median time per iteration).
    ChecksPerSec,
    /// Bytes per key.
    BytesPerKey,
    /// Server time per call, µs (`INFO commandstats`).
    UsecPerCall,
    /// Commands the server received per check.
    RoundTripsPerCheck,
    /// Instructions executed per check, counted by callgrind.
    InstructionsPerCheck,
    /// A ratio to the group's reference side taken round by round in
    /// paired rounds: its median.
    RatioPerRound,
    /// The same ratio's lower quartile.
    RatioPerRoundLowerQuartile,
    /// The same ratio's upper quartile.
    RatioPerRoundUpperQuartile,
}

impl Metric {
    /// The name in the summary.
    pub fn name(self) -> &'static str {
        match self {
            Metric::NsPerCheck => "ns_per_check",
            Metric::ChecksPerSec => "checks_per_sec",
            Metric::BytesPerKey => "bytes_per_key",
            Metric::UsecPerCall => "usec_per_call",
            Metric::RoundTripsPerCheck => "round_trips_per_check",
            Metric::InstructionsPerCheck => "instructions_per_check",
            Metric::RatioPerRound => "ratio_per_round",
            Metric::RatioPerRoundLowerQuartile => "ratio_per_round_q1",
            Metric::RatioPerRoundUpperQuartile => "ratio_per_round_q3",
        }
    }

    /// The unit in the summary.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::NsPerCheck => "ns",
            Metric::ChecksPerSec => "checks/s",
            Metric::BytesPerKey => "bytes",
            Metric::UsecPerCall => "us",
            Metric::RoundTripsPerCheck => "commands",
            Metric::InstructionsPerCheck => "instructions",
            Metric::RatioPerRound
            | Metric::RatioPerRoundLowerQuartile
            | Metric::RatioPerRoundUpperQuartile => "ratio",
        }
    }
}

/// What one bench binary leaves for `bench-summary`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RowsFile {
    /// Facts about the run: `load_before`, `load_after`, `redis_version`, ...
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
    /// The figures.
    #[serde(default)]
    pub rows: Vec<Row>,
}

impl RowsFile {
    /// Reads `path`; `None` if it is missing or unreadable.
    pub fn read(path: &Path) -> Option<Self> {
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
    }
}

/// A criterion benchmark whose estimate becomes a row once criterion is done.
#[derive(Debug)]
struct Pending {
    row: Row,
    directory: PathBuf,
    /// Checks one criterion iteration makes.
    checks_per_iteration: f64,
}

/// Collects one bench binary's rows: criterion's estimates (read from its
/// `estimates.json` once the benchmarks ran) and figures measured by hand.
#[derive(Debug)]
pub struct Recorder {
    binary: &'static str,
    mode: Mode,
    started: SystemTime,
    pending: Vec<Pending>,
    file: RowsFile,
}

impl Recorder {
    /// A recorder for the bench binary `binary`.
    pub fn new(binary: &'static str, mode: &Mode) -> Self {
        let mut file = RowsFile::default();
        file.meta.insert("load_before".into(), load_average());
        file.meta.insert("commit".into(), commit());
        Recorder {
            binary,
            mode: mode.clone(),
            started: SystemTime::now(),
            pending: Vec::new(),
            file,
        }
    }

    /// Notes that criterion benchmark `group/function` measures `metric`
    /// for `algorithm` on `backend`, making `checks_per_iteration` checks per
    /// iteration. Its median becomes a row when [`Recorder::finish`] runs
    /// (if criterion ran it in this process).
    pub fn criterion(
        &mut self,
        group: &str,
        function: &str,
        (algorithm, backend): (&str, &str),
        metric: Metric,
        checks_per_iteration: f64,
    ) {
        self.pending.push(Pending {
            row: Row::new(group, algorithm, backend, metric, f64::NAN),
            directory: criterion_home().join(group).join(function),
            checks_per_iteration,
        });
    }

    /// Records a figure measured by hand.
    pub fn push(&mut self, row: Row) {
        if !self.mode.is_test() {
            println!(
                "{:<40} {:>14.1} {}",
                format!("{}/{}/{}", row.group, row.algorithm, row.backend),
                row.value,
                row.unit
            );
        }
        self.file.rows.push(row);
    }

    /// Records a fact about the run.
    pub fn meta(&mut self, key: &str, value: impl Into<String>) {
        self.file.meta.insert(key.to_owned(), value.into());
    }

    /// Reads criterion's estimates and merges every row into this binary's
    /// rows file (rows measured again replace the old ones; the others
    /// stay). Does nothing unless measuring for real.
    pub fn finish(mut self) {
        if !self.mode.is_bench() {
            return;
        }
        for pending in std::mem::take(&mut self.pending) {
            if let Some(median) = median_ns(&pending.directory, self.started) {
                let mut row = pending.row;
                row.value = match row.metric.as_str() {
                    "checks_per_sec" => pending.checks_per_iteration * 1e9 / median,
                    _ => median / pending.checks_per_iteration,
                };
                self.file.rows.push(row);
            }
        }
        if self.file.rows.is_empty() {
            // Filtered out: leave the last run's figures and facts alone.
            return;
        }
        self.file.meta.insert("load_after".into(), load_average());
        let dir = rows_dir();
        let path = dir.join(format!("{}.json", self.binary));
        let mut merged = RowsFile::read(&path).unwrap_or_default();
        merged
            .rows
            .retain(|old| !self.file.rows.iter().any(|new| new.key() == old.key()));
        merged.rows.append(&mut self.file.rows);
        merged.meta.append(&mut self.file.meta);
        let written = std::fs::create_dir_all(&dir).and_then(|()| {
            let json = serde_json::to_string_pretty(&merged).expect("rows serialize");
            std::fs::write(&path, json)
        });
        match written {
            Ok(()) => println!("{}: rows written to {}", self.binary, path.display()),
            Err(e) => eprintln!("{}: cannot write {}: {e}", self.binary, path.display()),
        }
    }
}

/// The median time per iteration, ns, criterion found for the benchmark in
/// `directory`, if it was measured after `since`.
fn median_ns(directory: &Path, since: SystemTime) -> Option<f64> {
    let path = directory.join("new").join("estimates.json");
    let fresh = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .is_ok_and(|modified| modified >= since);
    if !fresh {
        return None;
    }
    let estimates: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
    estimates["median"]["point_estimate"].as_f64()
}

/// The code the benches measure: every crate they run and the Lua scripts
/// (the workspace's other crates do not change the figures).
const MEASURED: [&str; 10] = [
    "crates/core",
    "crates/gcra",
    "crates/token-bucket",
    "crates/leaky-bucket",
    "crates/fixed-window",
    "crates/sliding-window",
    "crates/redis",
    "crates/http",
    "lua",
    "benches",
];

/// `HEAD`, short, with `+dirty` when the measured code (`MEASURED`) has
/// uncommitted changes; `unknown` outside a git checkout.
pub fn commit() -> String {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."));
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(workspace)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".to_owned();
    };
    let mut status = vec!["status", "--porcelain", "--"];
    status.extend(MEASURED);
    let dirty = git(&status).is_some_and(|s| !s.is_empty());
    if dirty { format!("{head}+dirty") } else { head }
}

/// `/proc/loadavg`'s three load averages, or `unknown`.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Mode {
        Mode::parse(args.iter().map(|s| (*s).to_owned()), false)
    }

    #[test]
    fn modes_as_criterion_reads_them() {
        assert!(parse(&[]).is_test(), "cargo test --benches");
        assert!(parse(&["--bench"]).is_bench());
        assert!(parse(&["--bench", "--test"]).is_test());
        assert!(parse(&["--bench", "--list"]).criterion_only());
        assert!(parse(&["--bench", "--profile-time", "5", "gcra"]).criterion_only());
    }

    #[test]
    fn the_filter_is_the_first_free_argument() {
        let mode = parse(&["--bench", "--measurement-time", "10", "keyed"]);
        assert!(mode.wants("memory-keyed-100k") && !mode.wants("memory-direct"));
        assert!(parse(&["--bench", "--warm-up-time=1"]).wants("anything"));
        assert!(parse(&["--bench", "-s", "base"]).wants("anything"));
    }
}

/// The median of `values` (the mean of the middle two for an even count),
/// for figures taken in paired rounds.
///
/// # Panics
///
/// On no values.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    assert!(n > 0, "no values");
    if n % 2 == 1 {
        values[n / 2]
    } else {
        f64::midpoint(values[n / 2 - 1], values[n / 2])
    }
}

/// Paired rounds: `rounds` times, each of `sides` runs once (`run(side)`,
/// answering its figure for the round), the order rotating each round
/// (ABC, BCA, CAB, ...), so that a drift of the machine's speed falls on
/// every side alike. Answers each side's figures, round by round.
pub fn paired_rounds<T>(
    rounds: usize,
    sides: usize,
    mut run: impl FnMut(usize) -> T,
) -> Vec<Vec<T>> {
    let mut figures: Vec<Vec<T>> = (0..sides).map(|_| Vec::with_capacity(rounds)).collect();
    for round in 0..rounds {
        for k in 0..sides {
            let i = (round + k) % sides;
            figures[i].push(run(i));
        }
    }
    figures
}

/// The spread of a ratio taken round by round in paired rounds: its median,
/// quartiles and range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The median ([`median`]).
    pub median: f64,
    /// The lower quartile (the value a quarter of the way up the sorted
    /// ratios).
    pub lower_quartile: f64,
    /// The upper quartile.
    pub upper_quartile: f64,
    /// The least ratio.
    pub min: f64,
    /// The greatest ratio.
    pub max: f64,
}

impl Spread {
    /// The rows of this spread: its median and quartiles, as `row` makes
    /// them from a metric and a value.
    pub fn rows(&self, row: impl Fn(Metric, f64) -> Row) -> [Row; 3] {
        [
            row(Metric::RatioPerRound, self.median),
            row(Metric::RatioPerRoundLowerQuartile, self.lower_quartile),
            row(Metric::RatioPerRoundUpperQuartile, self.upper_quartile),
        ]
    }

    /// The spread of `ours[i] / reference[i]`, round by round.
    ///
    /// # Panics
    ///
    /// On no rounds.
    pub fn of_ratios(ours: &[f64], reference: &[f64]) -> Self {
        Self::of(ours.iter().zip(reference).map(|(a, b)| a / b).collect())
    }

    /// The spread of `ratios`.
    ///
    /// # Panics
    ///
    /// On no ratios.
    pub fn of(mut ratios: Vec<f64>) -> Self {
        ratios.sort_by(f64::total_cmp);
        let quartile = |q: usize| ratios[(ratios.len() - 1) * q / 4];
        Spread {
            median: median(&mut ratios.clone()),
            lower_quartile: quartile(1),
            upper_quartile: quartile(3),
            min: quartile(0),
            max: quartile(4),
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "median {:.3}, quartiles {:.3} to {:.3}, range {:.3} to {:.3}",
            self.median, self.lower_quartile, self.upper_quartile, self.min, self.max
        )
    }
}

#[cfg(test)]
mod median_tests {
    use super::median;

    #[test]
    fn the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    #[test]
    fn paired_rounds_rotate_the_order() {
        let mut order = Vec::new();
        let figures = super::paired_rounds(3, 3, |side| {
            order.push(side);
            order.len() as f64
        });
        assert_eq!(order, [0, 1, 2, 1, 2, 0, 2, 0, 1]);
        assert_eq!(figures[0], [1.0, 6.0, 8.0]);
    }

    #[test]
    fn the_spread_of_ratios_round_by_round() {
        let spread = super::Spread::of_ratios(&[2.0, 3.0, 4.0, 10.0, 1.0], &[1.0; 5]);
        assert_eq!(spread.median, 3.0);
        assert_eq!((spread.lower_quartile, spread.upper_quartile), (2.0, 4.0));
        assert_eq!((spread.min, spread.max), (1.0, 10.0));
        assert_eq!(
            spread.to_string(),
            "median 3.000, quartiles 2.000 to 4.000, range 1.000 to 10.000"
        );
    }
}
