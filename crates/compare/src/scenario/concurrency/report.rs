//! The race in the report: its CSV, its section and its charts.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::*;
use crate::CompareError;
use crate::charts::Canvas;
use crate::markdown::table;
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;
use crate::stats::Spread;

/// One line of `concurrency.csv`: a read-then-write repeat, or the atomic
/// script's least or most.
#[derive(Serialize)]
struct CsvRow<'a> {
    algorithm: &'a str,
    variant: &'static str,
    repeat: Option<usize>,
    admitted: f64,
}

impl Part for Concurrency {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::Concurrency
    }

    fn draw(&self, _canvas: &mut Canvas) -> Result<(), CompareError> {
        // Seven algorithms giving the same two numbers draw a wall of equal
        // bars: the section says it in a sentence instead.
        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        let mut rows = Vec::new();
        for row in &self.rows {
            for (i, &n) in row.read_then_write_runs.iter().enumerate() {
                rows.push(CsvRow {
                    algorithm: &row.algorithm,
                    variant: "read-then-write",
                    repeat: Some(i),
                    admitted: n as f64,
                });
            }
            if let Some(a) = &row.atomic {
                for (variant, admitted) in [("atomic (min)", a.min), ("atomic (max)", a.max)] {
                    rows.push(CsvRow {
                        algorithm: &row.algorithm,
                        variant,
                        repeat: None,
                        admitted,
                    });
                }
            }
        }
        write_csv(&dir.join("concurrency.csv"), rows)
    }

    fn section(&self, charts: &[String]) -> String {
        let mut out = String::new();
        write_section(&mut out, self, charts);
        out
    }
}

fn write_section(out: &mut String, c: &Concurrency, charts: &[String]) {
    let _ = writeln!(
        out,
        "## Concurrency\n\n{} simultaneous requests, limit {}, on a real Redis, from {} app instances (one connection each), released together; repeated {} times. \
The atomic variant is each algorithm's Lua script (EVALSHA). The **deliberately flawed** variant reads the same state with `GET`, decides in the client and writes it back with `SET` (the article's second test). Time is frozen (the clients pass `now`), so only the interleaving varies.\n",
        c.requests, c.limit, c.requests, c.repeats
    );
    let rows: Vec<Vec<String>> = c
        .rows
        .iter()
        .map(|r| {
            let over = r
                .read_then_write_runs
                .iter()
                .filter(|&&n| n > c.limit as usize)
                .count();
            vec![
                r.algorithm.clone(),
                r.atomic
                    .as_ref()
                    .map_or("skipped".into(), Spread::counts_text),
                Spread::counts_text(&r.read_then_write),
                format!("{over} of {}", r.read_then_write_runs.len()),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Atomic script: admitted",
            "Read-then-write (flawed): admitted",
            "Repeats over the limit",
        ],
        &rows,
    );
    let _ = charts;
    let _ = writeln!(out, "\n{}", verdict(c));
}

/// What the table proves, in one sentence.
pub fn verdict(c: &Concurrency) -> String {
    let runs: usize = c.rows.iter().map(|r| r.read_then_write_runs.len()).sum();
    let over: usize = c
        .rows
        .iter()
        .map(|r| {
            r.read_then_write_runs
                .iter()
                .filter(|&&n| n > c.limit as usize)
                .count()
        })
        .sum();
    let worst = c
        .rows
        .iter()
        .flat_map(|r| r.read_then_write_runs.iter().copied())
        .max()
        .unwrap_or(0);
    let mut out = format!(
        "**What it shows:** read-then-write went over the limit of {} in {over} of {runs} runs over all {} algorithms (up to {worst} admitted)",
        c.limit,
        c.rows.len()
    );
    let atomic = c
        .rows
        .iter()
        .filter_map(|r| r.atomic.map(|a| a.max))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    match atomic {
        Some(a) => {
            let _ = write!(
                out,
                "; the atomic scripts admitted at most {} in every run.",
                crate::markdown::num(a, 0)
            );
        }
        None => out += "; the atomic scripts were skipped.",
    }
    out
}
