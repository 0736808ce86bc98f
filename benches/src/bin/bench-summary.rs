//! Merges the rows the bench binaries recorded into
//! `reports/bench/summary.json` and `reports/bench/README.md`, and prints
//! the tables.
//!
//! ```text
//! cargo run --release -p ratelab-benches --bin bench-summary [-- --out DIR] [--rows DIR]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use ratelab_benches::run::{RowsFile, rows_dir};
use ratelab_benches::summary::{self, Machine, Summary};

/// The bench binaries, in the order their rows are listed.
const BINARIES: [&str; 8] = [
    "memory",
    "instructions",
    "footprint",
    "flood",
    "redis",
    "module",
    "http",
    "lease",
];

/// The facts of the rows files that name an outside tool the figures
/// depend on, as the summary names them.
const TOOLS: [(&str, &str); 2] = [("redis_cell", "redis-cell"), ("valgrind", "valgrind")];

fn main() -> ExitCode {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the benches crate sits in the workspace")
        .to_owned();
    let mut out = workspace.join("reports").join("bench");
    let mut rows = rows_dir();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--out", Some(dir)) => out = PathBuf::from(dir),
            ("--rows", Some(dir)) => rows = PathBuf::from(dir),
            _ => {
                eprintln!("usage: bench-summary [--out DIR] [--rows DIR]");
                return ExitCode::from(2);
            }
        }
    }

    let mut all = Vec::new();
    let mut load_average = BTreeMap::new();
    let mut redis_version = None;
    let mut tools = BTreeMap::new();
    let mut commits: Vec<String> = Vec::new();
    for binary in BINARIES {
        let path = rows.join(format!("{binary}.json"));
        let Some(file) = RowsFile::read(&path) else {
            eprintln!(
                "bench-summary: no figures from the `{binary}` bench ({} is missing)",
                path.display()
            );
            continue;
        };
        if let (Some(before), Some(after)) =
            (file.meta.get("load_before"), file.meta.get("load_after"))
        {
            load_average.insert(binary.to_owned(), format!("{before} before, {after} after"));
        }
        if let Some(commit) = file.meta.get("commit")
            && !commits.contains(commit)
        {
            commits.push(commit.clone());
        }
        if let Some(version) = file.meta.get("redis_version") {
            redis_version = Some(version.clone());
        }
        for (fact, tool) in TOOLS {
            if let Some(what) = file.meta.get(fact) {
                tools.insert(tool.to_owned(), what.clone());
            }
        }
        all.extend(file.rows);
    }
    if all.is_empty() {
        eprintln!(
            "bench-summary: nothing to summarize in {}; run `cargo bench -p ratelab-benches` first",
            rows.display()
        );
        return ExitCode::FAILURE;
    }

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let machine = Machine {
        cpu: cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        load_average,
    };
    let mut summary = Summary::new(
        summary::iso8601(now),
        // The commit each bench binary measured; one, normally.
        if commits.is_empty() {
            ratelab_benches::run::commit()
        } else {
            commits.join(", ")
        },
        machine,
        redis_version.unwrap_or_else(|| "unknown".to_owned()),
        all,
    );

    summary.tools = tools;
    let json = serde_json::to_string_pretty(&summary).expect("the summary serializes");
    let readme = summary::readme(&summary);
    let written = std::fs::create_dir_all(&out)
        .and_then(|()| std::fs::write(out.join("summary.json"), json + "\n"))
        .and_then(|()| std::fs::write(out.join("README.md"), &readme));
    if let Err(e) = written {
        eprintln!("bench-summary: cannot write {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    println!("{}", summary::targets_table(&summary));
    println!("{}", summary::memory_table(&summary));
    println!("{}", summary::clock_table(&summary));
    println!("{}", summary::redis_tables(&summary));
    println!(
        "Written: {} and {}",
        out.join("summary.json").display(),
        out.join("README.md").display()
    );
    ExitCode::SUCCESS
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned())
}
