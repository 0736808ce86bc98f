//! The cost in the report: its CSV, its section and its charts.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::*;
use crate::CompareError;
use crate::charts::{
    BAD, Bars, Canvas, GOOD, OFFERED, THIRD, grouped_bars, no_whiskers, note, render,
};
use crate::markdown::{chart, num, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;

/// One line of `cost-backends.csv`.
#[derive(Serialize)]
struct BackendCsvRow<'a> {
    algorithm: &'a str,
    backend: &'a str,
    server_us_hot: Option<f64>,
    server_us_100k: Option<f64>,
    checks_per_sec_hot: Option<f64>,
    checks_per_sec_100k: Option<f64>,
}

/// One line of `cost.csv`.
#[derive(Serialize)]
struct CsvRow<'a> {
    algorithm: &'a str,
    memory_ns_per_check: Option<f64>,
    memory_bytes_per_key: Option<f64>,
    redis_us_per_call: Option<f64>,
    redis_p99_us: Option<f64>,
    redis_checks_per_sec: Option<f64>,
    redis_bytes_per_key: Option<f64>,
    from_bench_summary: bool,
}

impl Part for Cost {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::Cost
    }

    fn draw(&self, canvas: &mut Canvas) -> Result<(), CompareError> {
        let c = self;
        let value = |f: Option<Figure>| f.map(|f| f.value);
        let ns: Vec<Option<f64>> = c
            .rows
            .iter()
            .map(|r| value(r.memory_ns_per_check))
            .collect();
        let us: Vec<Option<f64>> = c.rows.iter().map(|r| value(r.redis_us_per_call)).collect();
        let mem: Vec<Option<f64>> = c
            .rows
            .iter()
            .map(|r| value(r.memory_bytes_per_key))
            .collect();
        let red: Vec<Option<f64>> = c
            .rows
            .iter()
            .map(|r| value(r.redis_bytes_per_key))
            .collect();
        let none = no_whiskers();
        let has_redis = us.iter().any(Option::is_some);
        // Where the in-memory times come from decides what the title says.
        let from_bench = c
            .rows
            .iter()
            .any(|r| r.memory_ns_per_check.is_some_and(|f| f.from_bench));
        let repeats = c
            .rows
            .iter()
            .filter_map(|r| r.memory_ns_spread.map(|s| s.runs))
            .max()
            .unwrap_or(1);
        let memory_title = if from_bench {
            "In memory: ns per check (100,000 keys), the benchmarks' medians".to_owned()
        } else {
            format!(
                "In memory: ns per check ({HOT_KEYS} keys), median of {repeats} repeats here, min–max"
            )
        };
        let ns_whiskers: Vec<Option<(f64, f64)>> = c
            .rows
            .iter()
            .map(|r| r.memory_ns_spread.map(|s| (s.min, s.max)))
            .collect();
        let bytes_from_bench = c
            .rows
            .iter()
            .any(|r| r.memory_bytes_per_key.is_some_and(|f| f.from_bench));
        let bytes_title = if bytes_from_bench {
            "Bytes per key: memory from the benchmarks (one check per key), Redis as the table says"
        } else {
            "Bytes per key, each key at its fullest (burst of 10 used), counted by this run"
        };
        render!(canvas, "cost", (1300, 900), |root| {
            let parts = root.split_evenly((2, 1));
            grouped_bars(
                &parts[0],
                &memory_title,
                "ns per check",
                &[Bars {
                    label: "memory (time on a shared machine: instruction counts in reports/bench judge CPU cost)",
                    color: GOOD,
                    values: ns.clone(),
                    whiskers: ns_whiskers.clone(),
                }],
                None,
                0,
            )
            .and_then(|()| {
                if has_redis {
                    grouped_bars(
                        &parts[1],
                        "Time per Redis call, µs (one task, median, round trip included)",
                        "µs per call",
                        &[Bars {
                            label: "redis",
                            color: THIRD,
                            values: us.clone(),
                            whiskers: none.clone(),
                        }],
                        None,
                        0,
                    )
                } else {
                    note(
                        &parts[1],
                        "Time per Redis call",
                        "skipped: no Redis in this run",
                    )
                }
            })
        });
        render!(canvas, "cost-memory", (1300, 500), |root| {
            let mut series = vec![Bars {
                label: "memory (heap bytes)",
                color: GOOD,
                values: mem.clone(),
                whiskers: none.clone(),
            }];
            if red.iter().any(Option::is_some) {
                series.push(Bars {
                    label: "redis (used_memory growth)",
                    color: THIRD,
                    values: red.clone(),
                    whiskers: none.clone(),
                });
            }
            grouped_bars(&root, bytes_title, "bytes per key", &series, None, 0)
        });
        if !c.backends.is_empty() {
            draw_backends(c, canvas)?;
        }
        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        let value = |f: Option<Figure>| f.map(|f| f.value);
        let rows = self.rows.iter().map(|r| CsvRow {
            algorithm: &r.algorithm,
            memory_ns_per_check: value(r.memory_ns_per_check),
            memory_bytes_per_key: value(r.memory_bytes_per_key),
            redis_us_per_call: value(r.redis_us_per_call),
            redis_p99_us: r.redis_p99_us,
            redis_checks_per_sec: value(r.redis_checks_per_sec),
            redis_bytes_per_key: value(r.redis_bytes_per_key),
            from_bench_summary: [
                r.memory_ns_per_check,
                r.memory_bytes_per_key,
                r.redis_us_per_call,
                r.redis_checks_per_sec,
                r.redis_bytes_per_key,
            ]
            .iter()
            .flatten()
            .any(|f| f.from_bench),
        });
        write_csv(&dir.join("cost.csv"), rows)?;
        if self.backends.is_empty() {
            return Ok(());
        }
        let backends = self.backends.iter().map(|b| BackendCsvRow {
            algorithm: &b.algorithm,
            backend: &b.backend,
            server_us_hot: b.server_us_hot,
            server_us_100k: b.server_us_100k,
            checks_per_sec_hot: b.checks_per_sec_hot,
            checks_per_sec_100k: b.checks_per_sec_100k,
        });
        write_csv(&dir.join("cost-backends.csv"), backends)
    }

    fn section(&self, charts: &[String]) -> String {
        let mut out = String::new();
        write_section(&mut out, self, charts);
        out
    }
}

fn write_section(out: &mut String, c: &Cost, charts: &[String]) {
    let _ = writeln!(out, "## Cost\n\n{}\n", c.source);
    let fig = |f: Option<Figure>, d: usize| {
        f.map_or("–".into(), |f| {
            format!(
                "{}{}",
                num(f.value, d),
                if f.from_bench { " (b)" } else { "" }
            )
        })
    };
    let rows: Vec<Vec<String>> = c
        .rows
        .iter()
        .map(|r| {
            vec![
                r.algorithm.clone(),
                fig(r.memory_ns_per_check, 1),
                fig(r.memory_bytes_per_key, 0),
                match (r.redis_us_per_call, r.redis_p99_us) {
                    (Some(f), Some(p99)) => format!("{} (p99 {})", fig(Some(f), 1), num(p99, 1)),
                    (f, _) => fig(f, 1),
                },
                fig(r.redis_checks_per_sec, 0),
                fig(r.redis_bytes_per_key, 0),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Memory: ns per check",
            "Memory: bytes per key",
            "Redis: µs per call",
            "Redis: checks per second",
            "Redis: bytes per key",
        ],
        &rows,
    );
    write_backends(out, c, charts);
    *out += "\nTwo ways of counting bytes per key give different figures, and this table says which it holds: the benchmarks (`just bench`, the `footprint` bench) count heap bytes after one check of each of 100,000 integer keys, the state after one admission; without a benchmark summary of this commit, this run counts them after each of its string keys (15 bytes) used its whole burst of 10, so the sliding log holds ten timestamps a key, and every algorithm pays for the key's bytes. Compare algorithms within one method, never across. In-memory time per check, measured here, is the median of a few repeats on a machine that may be running other work: instruction counts (reports/bench, `instructions-*` groups), which load does not move, judge CPU cost between algorithms.\n";
    *out += "\nHow:\n\n";
    for m in &c.method {
        let _ = writeln!(out, "- {m}");
    }
    chart(
        out,
        charts,
        "cost",
        "Time per check, in memory and on Redis",
    );
    chart(
        out,
        charts,
        "cost-memory",
        "Bytes per key, in memory and on Redis",
    );
}

/// `cost-backends`: server µs per call of each algorithm through the Lua
/// script, the native module and redis-cell, on one hot key and on 100,000
/// keys (from the bench summary).
fn draw_backends(c: &Cost, canvas: &mut Canvas) -> Result<(), CompareError> {
    let colors = [OFFERED, GOOD, BAD];
    let series = |pick: fn(&BackendRow) -> Option<f64>| -> Vec<(&'static str, Vec<Option<f64>>)> {
        BACKENDS
            .iter()
            .map(|&(_, label)| {
                let values = AlgorithmKind::ALL
                    .iter()
                    .map(|kind| {
                        c.backends
                            .iter()
                            .find(|b| b.algorithm == kind.name() && b.backend == label)
                            .and_then(pick)
                    })
                    .collect();
                (label, values)
            })
            .filter(|(_, values): &(_, Vec<Option<f64>>)| values.iter().any(Option::is_some))
            .collect()
    };
    let bars = |series: &[(&'static str, Vec<Option<f64>>)]| -> Vec<Bars<'static>> {
        series
            .iter()
            .zip(colors)
            .map(|((label, values), color)| Bars {
                label,
                color,
                values: values.clone(),
                whiskers: no_whiskers(),
            })
            .collect()
    };
    let hot = bars(&series(|b| b.server_us_hot));
    let many = bars(&series(|b| b.server_us_100k));
    // Whose figures these are, in the titles: the benches', maybe of
    // another commit.
    let origin = c.bench.as_ref().map_or_else(String::new, |b| {
        if b.is_this_commit {
            " (`just bench`, this commit)".to_owned()
        } else {
            format!(
                " (`just bench` at {}, NOT this run's commit)",
                short_commits(&b.commit)
            )
        }
    });
    let hot_title = format!("Redis server time per check, µs, one hot key{origin}");
    let many_title = format!("Redis server time per check, µs, 100,000 keys{origin}");
    render!(canvas, "cost-backends", (1300, 900), |root| {
        let parts = root.split_evenly((2, 1));
        grouped_bars(&parts[0], &hot_title, "server µs per call", &hot, None, 1).and_then(|()| {
            grouped_bars(&parts[1], &many_title, "server µs per call", &many, None, 1)
        })
    });
    Ok(())
}

/// `6548f3778506, d14ec9c36046` as `6548f37, d14ec9c`: short enough for a
/// chart's title.
fn short_commits(commits: &str) -> String {
    commits
        .split(',')
        .map(|c| c.trim().chars().take(7).collect::<String>())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Redis backends side by side: the Lua script, the native module and
/// redis-cell, with the module's time as a share of the script's.
fn write_backends(out: &mut String, c: &Cost, charts: &[String]) {
    if c.backends.is_empty() {
        return;
    }
    let origin = c.bench.as_ref().map_or_else(
        || "from the benchmark summary".to_owned(),
        |b| {
            if b.is_this_commit {
                format!("from `just bench` at this commit, {}", b.date)
            } else {
                format!(
                    "**⚠ not this run: from `just bench` at commit {}, {}**",
                    b.commit, b.date
                )
            }
        },
    );
    let cell_loaded = c
        .bench
        .as_ref()
        .and_then(|b| b.redis_cell.as_deref())
        .map_or_else(
            || "the summary does not record which redis-cell version the bench loaded".to_owned(),
            |cell| format!("the bench loaded {cell}"),
        );
    let _ = write!(
        out,
        "\nOn Redis, the same check through the Lua script, the native module \
         and, for GCRA, redis-cell ({origin}; {cell_loaded}; server µs per call, lower is \
         better; checks per second, higher is better):\n\n"
    );
    let lua = |algorithm: &str, pick: fn(&BackendRow) -> Option<f64>| {
        c.backends
            .iter()
            .find(|b| b.algorithm == algorithm && b.backend == BACKENDS[0].1)
            .and_then(pick)
    };
    let cell = |v: Option<f64>, d: usize| v.map_or("–".into(), |v| num(v, d));
    let versus_lua = |b: &BackendRow, pick: fn(&BackendRow) -> Option<f64>| {
        if b.backend == BACKENDS[0].1 {
            return String::new();
        }
        match (pick(b), lua(&b.algorithm, pick)) {
            (Some(v), Some(l)) if l > 0.0 => format!(" ({}x Lua)", num(v / l, 2)),
            _ => String::new(),
        }
    };
    let rows: Vec<Vec<String>> = c
        .backends
        .iter()
        .map(|b| {
            vec![
                b.algorithm.clone(),
                b.backend.clone(),
                format!(
                    "{}{}",
                    cell(b.server_us_hot, 2),
                    versus_lua(b, |b| b.server_us_hot)
                ),
                format!(
                    "{}{}",
                    cell(b.server_us_100k, 2),
                    versus_lua(b, |b| b.server_us_100k)
                ),
                cell(b.checks_per_sec_hot, 0),
                cell(b.checks_per_sec_100k, 0),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Redis backend",
            "Server µs per call, hot key",
            "Server µs per call, 100k keys",
            "Checks per second, hot key",
            "Checks per second, 100k keys",
        ],
        &rows,
    );
    chart(
        out,
        charts,
        "cost-backends",
        "Redis server time per check: Lua script, native module, redis-cell",
    );
}
