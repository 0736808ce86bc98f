//! The race in the report: its CSV, its section and its charts.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::*;
use crate::CompareError;
use crate::charts::{BAD, Bars, Canvas, GOOD, grouped_bars, render};
use crate::markdown::{chart, table};
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

    fn draw(&self, canvas: &mut Canvas) -> Result<(), CompareError> {
        let c = self;
        let median = |s: Option<&crate::stats::Spread>| s.map(|s| s.median);
        let whisker = |s: Option<&crate::stats::Spread>| s.map(|s| (s.min, s.max));
        let mut series = Vec::new();
        if c.rows.iter().any(|r| r.atomic.is_some()) {
            series.push(Bars {
                label: "atomic script (median, min–max)",
                color: GOOD,
                values: c.rows.iter().map(|r| median(r.atomic.as_ref())).collect(),
                whiskers: c.rows.iter().map(|r| whisker(r.atomic.as_ref())).collect(),
            });
        }
        series.push(Bars {
            label: "read-then-write, flawed (median, min–max)",
            color: BAD,
            values: c
                .rows
                .iter()
                .map(|r| median(Some(&r.read_then_write)))
                .collect(),
            whiskers: c
                .rows
                .iter()
                .map(|r| whisker(Some(&r.read_then_write)))
                .collect(),
        });
        render!(canvas, "concurrency", (1300, 560), |root| grouped_bars(
            &root,
            &format!(
                "Race on Redis: {} simultaneous requests, limit {}, {} repeats",
                c.requests, c.limit, c.repeats
            ),
            "requests admitted",
            &series,
            Some((f64::from(c.limit), format!("limit {}", c.limit))),
            0,
        ));

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
    chart(
        out,
        charts,
        "concurrency",
        "Race: atomic script against read-then-write",
    );
}
