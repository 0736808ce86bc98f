//! The window edge in the report: its CSV, its section and its charts.

use std::fmt::Write as _;
use std::path::Path;

use ratelab::AlgorithmKind;
use serde::Serialize;

use super::*;
use crate::CompareError;
use crate::charts::{Bars, Canvas, GOOD, THIRD, grouped_bars, no_whiskers, render};
use crate::markdown::{chart, num, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;

/// One line of `window-edge.csv`.
#[derive(Serialize)]
struct CsvRow<'a> {
    algorithm: &'a str,
    backend: &'a str,
    #[serde(rename = "at_0.95s")]
    first: usize,
    #[serde(rename = "at_1.05s")]
    second: usize,
    #[serde(rename = "within_0.11s")]
    total: usize,
    #[serde(rename = "own_bound_within_0.1s")]
    own_bound: u64,
}

impl Part for WindowEdge {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::WindowEdge
    }

    fn draw(&self, canvas: &mut Canvas) -> Result<(), CompareError> {
        let w = self;
        let pick = |backend: &str| -> Vec<Option<f64>> {
            AlgorithmKind::ALL
                .into_iter()
                .map(|kind| {
                    w.rows
                        .iter()
                        .find(|r| r.algorithm == kind.name() && r.backend == backend)
                        .map(|r| r.total as f64)
                })
                .collect()
        };
        let (memory, redis) = (pick("memory"), pick("redis"));
        let mut series = vec![Bars {
            label: "memory",
            color: GOOD,
            values: memory,
            whiskers: no_whiskers(),
        }];
        if redis.iter().any(Option::is_some) {
            series.push(Bars {
                label: "redis",
                color: THIRD,
                values: redis,
                whiskers: no_whiskers(),
            });
        }
        render!(canvas, "window-edge", (1300, 560), |root| grouped_bars(
            &root,
            "Window edge: 10 requests at 0.95 s + 10 at 1.05 s; admitted within 0.11 s",
            "requests admitted",
            &series,
            Some((f64::from(w.limit), format!("limit {} per second", w.limit))),
            0,
        ));

        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        let rows = self.rows.iter().map(|r| CsvRow {
            algorithm: &r.algorithm,
            backend: &r.backend,
            first: r.first,
            second: r.second,
            total: r.total,
            own_bound: r.own_bound,
        });
        write_csv(&dir.join("window-edge.csv"), rows)
    }

    fn section(&self, charts: &[String]) -> String {
        let mut out = String::new();
        write_section(&mut out, self, charts);
        out
    }
}

fn write_section(out: &mut String, w: &WindowEdge, charts: &[String]) {
    let _ = writeln!(
        out,
        "## Window edge\n\nLimit {} per second; {} requests at 0.95 s and {} at 1.05 s (the first test of the article). How many pass within 0.11 s, against the limit and against what each algorithm itself promises for an interval of 0.1 s.\n",
        w.limit, PER_INSTANT, PER_INSTANT
    );
    let rows: Vec<Vec<String>> = w
        .rows
        .iter()
        .map(|r| {
            let verdict = if r.total as u64 > u64::from(w.limit) {
                format!(
                    "**{}× the limit**",
                    num(r.total as f64 / f64::from(w.limit), 2)
                )
            } else {
                "within the limit".into()
            };
            vec![
                r.algorithm.clone(),
                r.backend.clone(),
                r.first.to_string(),
                r.second.to_string(),
                format!("**{}**", r.total),
                verdict,
                r.own_bound.to_string(),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Backend",
            "At 0.95 s",
            "At 1.05 s",
            "Within 0.11 s",
            "Against the limit",
            "Its own bound for 0.1 s",
        ],
        &rows,
    );
    chart(
        out,
        charts,
        "window-edge",
        "Window edge: admitted within 0.11 s per algorithm",
    );
}
