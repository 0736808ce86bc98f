//! `ratelab-compare` (`just compare`): runs every rate-limiting algorithm
//! through the same scenarios and writes `reports/README.md`, its charts and
//! its data.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use ratelab_compare::backend::{self, RedisChoice};
use ratelab_compare::{Config, ScenarioName, report};

/// Every ratelab rate limiter through the same scenarios, in memory and on
/// Redis, and a report that tells you which one to choose.
///
/// Writes OUT/README.md (tables, charts, a decision guide computed from the
/// numbers), OUT/charts/*.svg|png and OUT/data/*.csv|json.
///
/// Redis: --redis-url, else $REDIS_URL, else a throwaway `redis-server`
/// started for the run when one is on PATH; without any, the in-memory
/// scenarios still run and the report says what was skipped.
#[derive(Debug, Parser)]
#[command(name = "ratelab-compare", version, about, long_about)]
struct Cli {
    /// Folder the report is written to.
    #[arg(short, long, value_name = "DIR", default_value = "reports")]
    out: PathBuf,

    /// Seed of the simulated traffic: the same seed gives the same numbers.
    #[arg(long, default_value_t = 42)]
    seed: u64,

    /// Scenarios to run (repeat or separate with commas); all by default.
    #[arg(short, long = "scenario", value_name = "NAME", value_delimiter = ',')]
    scenarios: Vec<ScenarioName>,

    /// Redis to use, e.g. redis://127.0.0.1:6379/ (else $REDIS_URL, else a
    /// throwaway redis-server if one is on PATH).
    #[arg(long, value_name = "URL", conflicts_with = "no_redis")]
    redis_url: Option<String>,

    /// Run the in-memory scenarios only, even if Redis is available.
    #[arg(long)]
    no_redis: bool,

    /// Repeats of each real-time and Redis measurement.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u16).range(1..=1000))]
    repeats: u16,

    /// Small simulations and measurements (a smoke run of a few seconds).
    #[arg(long)]
    quick: bool,

    /// The benchmark summary the cost scenario reads when present
    /// [default: OUT/bench/summary.json].
    #[arg(long, value_name = "FILE")]
    bench_summary: Option<PathBuf>,

    /// No progress bars.
    #[arg(short, long)]
    quiet: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn banner(lines: &[String]) {
    let width = lines.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let rule = "!".repeat(width + 6);
    eprintln!("\n{rule}");
    for line in lines {
        eprintln!("!! {line:width$} !!");
    }
    eprintln!("{rule}\n");
}

/// `text` in lines of at most `width` characters (longer words alone),
/// continuation lines indented by two spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("never empty");
        if !line.trim().is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(format!("  {word}"));
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}

fn run(cli: Cli) -> Result<(), ratelab_compare::CompareError> {
    let scenarios = if cli.scenarios.is_empty() {
        ScenarioName::ALL.to_vec()
    } else {
        // Report order, each once.
        ScenarioName::ALL
            .into_iter()
            .filter(|s| cli.scenarios.contains(s))
            .collect()
    };
    let command = std::iter::once("ratelab-compare".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let config = Config {
        seed: cli.seed,
        scenarios,
        repeats: usize::from(cli.repeats),
        quick: cli.quick,
        progress: !cli.quiet,
        bench_summary: Some(
            cli.bench_summary
                .clone()
                .unwrap_or_else(|| cli.out.join(ratelab_compare::scenario::cost::SUMMARY_PATH)),
        ),
        command,
        commit: Some(ratelab_compare::current_commit(Some(&cli.out))),
        report_dir: Some(cli.out.clone()),
    };
    let runtime = ratelab_compare::runtime()?;
    let choice = runtime.block_on(backend::resolve(cli.redis_url.clone(), cli.no_redis))?;
    let redis = match &choice {
        RedisChoice::Available(env) => {
            eprintln!(
                "Redis {} at {} ({})",
                env.version(),
                env.url(),
                env.origin()
            );
            match env.redis_cell() {
                Ok(_)
                    if env.redis_cell_version().starts_with(&format!(
                        "redis-cell {}",
                        ratelab_testkit::redis_cell::PEER_VERSION
                    )) =>
                {
                    eprintln!("redis-cell: {}", env.redis_cell_version());
                }
                Ok(_) => banner(&[format!(
                    "redis-cell measured: {}.",
                    env.redis_cell_version()
                )]),
                Err(why) => banner(&[format!("NO redis-cell: {why}.")]),
            }
            Some(env.as_ref())
        }
        RedisChoice::Skipped { reason } => {
            banner(&[
                format!("NO REDIS: {reason}."),
                "Running the in-memory scenarios only; every Redis row, the concurrency race"
                    .into(),
                "and the shared-Redis load balancer are SKIPPED (the report says so too).".into(),
                "To enable them: install Redis so that `redis-server` is on PATH".into(),
                "(Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis),"
                    .into(),
                "or set REDIS_URL=redis://host:6379/ (or pass --redis-url), and run again.".into(),
            ]);
            None
        }
    };
    eprintln!(
        "Running {} scenario(s), seed {}{}",
        config.scenarios.len(),
        config.seed,
        if config.quick { ", quick" } else { "" }
    );
    let results = runtime.block_on(ratelab_compare::run(&config, redis))?;
    report::write(&results, &cli.out)?;
    if !results.skipped.is_empty() {
        let mut lines = vec!["SKIPPED in this run:".to_owned()];
        for s in &results.skipped {
            lines.push(format!("- {}: {} ({})", s.scenario, s.what, s.reason));
        }
        lines.push(format!(
            "To enable: {}.",
            backend::HOW_TO_ENABLE
                .split(" and run")
                .next()
                .unwrap_or("")
        ));
        banner(&lines);
    }
    let warnings = results.provenance_warnings();
    if !warnings.is_empty() {
        let mut lines = vec!["NOT ALL OF THIS REPORT IS THIS COMMIT'S:".to_owned()];
        for w in &warnings {
            let plain = w.replace('`', "").replace("[Cost](#cost)", "Cost");
            lines.extend(wrap(&format!("- {plain}"), 88));
        }
        banner(&lines);
    }
    if let Some(r) = &results.reference {
        println!("\nReference table (capacity 10, 5 per second):\n");
        println!(
            "{:<16} {:<7} {:>12} {:>22} {:>26}",
            "algorithm",
            "backend",
            "burst of 20",
            "after 1 s, 10 calls",
            "wait indicated on refusal"
        );
        for row in r.rows.iter().chain(&r.real_time_rows) {
            let backend = if row.clock == "manual" {
                row.backend.clone()
            } else {
                format!("{}*", row.backend)
            };
            println!(
                "{:<16} {:<7} {:>12} {:>22} {:>26}",
                row.algorithm,
                backend,
                format!("{} admitted", row.burst_admitted),
                format!("{} admitted", row.later_admitted),
                row.wait_text()
            );
        }
        if !r.real_time_rows.is_empty() {
            println!("(* real clock and a real one-second wait, as the article ran it)");
        }
    }
    println!("\nDecision guide:\n");
    for line in report::guide(&results) {
        println!("- {}\n", line.replace("**", ""));
    }
    println!("Report: {}", cli.out.join(report::README).display());
    Ok(())
}
