//! The reference table in the report: its CSV and its section (no chart).

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::{BURST, LATER, Reference, Row};
use crate::CompareError;
use crate::charts::Canvas;
use crate::markdown::{num, table};
use crate::output::write_csv;
use crate::peers::GOVERNOR;
use crate::report::Part;
use crate::scenario::ScenarioName;

/// One line of `reference.csv`.
#[derive(Serialize)]
struct CsvRow<'a> {
    algorithm: &'a str,
    backend: &'a str,
    clock: &'a str,
    burst_of_20_admitted: usize,
    after_1s_10_calls_admitted: usize,
    burst_wait_secs: Option<u64>,
    later_wait_secs: Option<u64>,
    burst_retry_ms: Option<f64>,
}

impl<'a> From<&'a Row> for CsvRow<'a> {
    fn from(row: &'a Row) -> Self {
        CsvRow {
            algorithm: &row.algorithm,
            backend: &row.backend,
            clock: &row.clock,
            burst_of_20_admitted: row.burst_admitted,
            after_1s_10_calls_admitted: row.later_admitted,
            burst_wait_secs: row.burst_wait_secs,
            later_wait_secs: row.later_wait_secs,
            burst_retry_ms: row.burst_retry_ms,
        }
    }
}

impl Part for Reference {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::Reference
    }

    fn draw(&self, _: &mut Canvas) -> Result<(), CompareError> {
        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        let rows = self
            .rows
            .iter()
            .chain(&self.peer_rows)
            .chain(&self.redis_cell_rows)
            .chain(&self.real_time_rows);
        write_csv(&dir.join("reference.csv"), rows.map(CsvRow::from))
    }

    fn section(&self, _: &[String]) -> String {
        let r = self;
        let mut out = String::new();
        let _ = writeln!(out, "## Reference table\n");
        let _ = writeln!(
            out,
            "The reference article's test ({}): a burst of {} simultaneous requests; one second later, {} more; the wait a refusal indicates (`Retry-After`, whole seconds, rounded up). The article's token bucket gives **10, 5, 1 s**. \
The window algorithms map the quota to {} per 2-second window (same capacity, same long-run rate), so one second into the window nothing has come back for them. \
These rows run on a clock moved by hand, starting at a window boundary (the Redis scripts get `now` from it): deterministic, and the same instants on both backends.\n",
            r.quota, BURST, LATER, 10
        );
        let rows: Vec<Vec<String>> = r
            .rows
            .iter()
            .chain(&r.peer_rows)
            .map(|row| {
                vec![
                    if r.peer_rows.contains(row) {
                        format!("{} (peer)", row.algorithm)
                    } else {
                        row.algorithm.clone()
                    },
                    row.backend.clone(),
                    format!("{} admitted", row.burst_admitted),
                    format!("{} admitted", row.later_admitted),
                    row.wait_text(),
                    row.burst_retry_ms
                        .map_or("–".into(), |ms| format!("{} ms", num(ms, 1))),
                ]
            })
            .collect();
        out += &table(
            &[
                "Algorithm",
                "Backend",
                "Burst of 20",
                "After 1 s, 10 calls",
                "Wait indicated on refusal",
                "Exact wait, first refusals",
            ],
            &rows,
        );
        let secs = |w: Option<u64>| w.map_or("none refused".to_owned(), |w| format!("{w} s"));
        if r.redis_cell_rows.is_empty() {
            let _ = writeln!(
                out,
                "\n**⚠ redis-cell rows missing**: the redis-cell (`CL.THROTTLE`) and matching gcra-on-Redis rows are not in this table because {}.",
                r.redis_cell_missing
                    .as_deref()
                    .unwrap_or("redis-cell did not run")
            );
        } else {
            let cell_rounding = r.agreement.iter().find_map(|a| a.rounding);
            let _ = writeln!(
                out,
                "\n**redis-cell** ({}; `CL.THROTTLE`, a native Redis module running GCRA, loaded into this run's `redis-server`) beside ratelab gcra on the same server, same quota (`CL.THROTTLE key 9 5 1 1`: its `max_burst` is the capacity less one). redis-cell reads the server's own clock, so both run on Redis time with a real one-second sleep between the rounds, one request after another. redis-cell reports `retry_after` in whole seconds; {} ratelab rounds up for `Retry-After` and keeps the exact wait:\n",
                r.redis_cell_version.as_deref().unwrap_or("version unknown"),
                cell_rounding.map_or(String::new(), |c| format!(
                    "set beside ratelab's exact wait at the same moment, its seconds were that wait **{}** in {} of {} refusals by both (rounded up in {}, down in {}; a whole-second wait counts in both).",
                    c.text(),
                    if c.rounds_up() { c.up } else { c.down },
                    c.refusals,
                    c.up,
                    c.down
                ))
            );
            // `redis-cell 0.5.0` beside its rows.
            let cell_name = r
                .redis_cell_version
                .as_deref()
                .and_then(|v| v.split(" (").next())
                .unwrap_or("redis-cell");
            let rows: Vec<Vec<String>> = r
                .redis_cell_rows
                .iter()
                .map(|row| {
                    let rounding = match cell_rounding {
                        Some(c) if row.algorithm == "redis-cell" => c.text(),
                        None if row.algorithm == "redis-cell" => "whole seconds",
                        _ => "rounded up",
                    };
                    vec![
                        if row.algorithm == "redis-cell" {
                            format!("{} (peer)", cell_name)
                        } else {
                            format!("ratelab {}", row.algorithm)
                        },
                        format!("{} ({})", row.backend, row.clock),
                        format!("{} admitted", row.burst_admitted),
                        format!("{} admitted", row.later_admitted),
                        format!(
                            "{}, then {} ({rounding})",
                            secs(row.burst_wait_secs),
                            secs(row.later_wait_secs)
                        ),
                        row.burst_retry_ms
                            .map_or("not reported".into(), |ms| format!("{} ms", num(ms, 1))),
                    ]
                })
                .collect();
            out += &table(
                &[
                    "Algorithm",
                    "Backend (clock)",
                    "Burst of 20",
                    "After 1 s, 10 calls",
                    "Whole-second wait on refusal",
                    "Exact wait, first refusals",
                ],
                &rows,
            );
        }
        for a in &r.agreement {
            let _ = writeln!(
                out,
                "\n**{} against ratelab gcra**, same quota, {}, one request after another: **{} of {} decisions differ**, and {} refusals indicate a different wait ({}).{}",
                a.peer,
                if a.peer == GOVERNOR {
                    "same instants (governor on its `FakeRelativeClock`, moved to each request's instant)"
                } else {
                    "the same server, on Redis time"
                },
                a.differing,
                a.decisions,
                a.differing_waits,
                match a.rounding {
                    None => "to the microsecond".to_owned(),
                    Some(c) => format!(
                        "its whole seconds against ratelab's exact wait {}, the rule measured above",
                        c.text()
                    ),
                },
                if a.differing == 0 && a.differing_waits == 0 {
                    " The same GCRA: equal quotas give equal decisions."
                } else {
                    " They should be equal at equal quota: this is a discrepancy to investigate."
                }
            );
        }
        if !r.real_time_rows.is_empty() {
            let _ = writeln!(
                out,
                "\nAs the article ran it: the token bucket on a real clock (Redis `TIME` on Redis), with a real one-second sleep between the rounds:\n"
            );
            let rows: Vec<Vec<String>> = r
                .real_time_rows
                .iter()
                .map(|row| {
                    vec![
                        row.algorithm.clone(),
                        format!("{} ({})", row.backend, row.clock),
                        format!("{} admitted", row.burst_admitted),
                        format!("{} admitted", row.later_admitted),
                        row.wait_text(),
                    ]
                })
                .collect();
            out += &table(
                &[
                    "Algorithm",
                    "Backend (clock)",
                    "Burst of 20",
                    "After 1 s, 10 calls",
                    "Wait indicated on refusal",
                ],
                &rows,
            );
        }
        out += "\n";
        out
    }
}
