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

/// One line of `window-edge-server.csv`.
#[derive(Serialize)]
struct ServerCsvRow<'a> {
    algorithm: &'a str,
    backend: &'a str,
    limit_per_second: u32,
    requests: usize,
    admitted: usize,
    span_secs: f64,
    own_bound_within_span: u64,
    spent_both_windows: bool,
    attempts: usize,
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
        write_csv(&dir.join("window-edge.csv"), rows)?;
        let rows = self.server_rows.iter().map(|r| ServerCsvRow {
            algorithm: &r.algorithm,
            backend: &r.backend,
            limit_per_second: self.limit,
            requests: r.requests,
            admitted: r.admitted,
            span_secs: r.span_secs,
            own_bound_within_span: r.own_bound,
            spent_both_windows: r.spent_both_windows,
            attempts: r.attempts,
        });
        write_csv(&dir.join("window-edge-server.csv"), rows)
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
            let verdict = against_limit(r.total, w.limit);
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
    write_server(out, w);
}

fn against_limit(admitted: usize, limit: u32) -> String {
    if admitted as u64 > u64::from(limit) {
        format!(
            "**{}× the limit**",
            num(admitted as f64 / f64::from(limit), 2)
        )
    } else {
        "within the limit".into()
    }
}

/// `memory` as "in memory", `redis` as "on Redis".
fn on(backend: &str) -> &'static str {
    match backend {
        "redis" => "on Redis",
        _ => "in memory",
    }
}

/// The rows through `ratelab-server`, and what they show in a sentence.
fn write_server(out: &mut String, w: &WindowEdge) {
    if w.server_rows.is_empty() {
        return;
    }
    let lead = num(server::LEAD.as_secs_f64(), 3);
    let _ = writeln!(
        out,
        "### Through ratelab-server\n\nThe same edge through `ratelab-server`, as Envoy asks it (`ShouldRateLimit` over real gRPC on a loopback port, envoy-types' client, the server started in this process), once on the real clock: the fixed window (what envoyproxy/ratelimit counts) asked by a burst of {} requests at once {lead} s before a window's edge (where the server's `duration_until_reset` put it; all answered before the edge) and another at the edge; GCRA asked by the same two bursts, as far apart, on a key of its own. Limit {} per second; the span runs from the first request sent to the last answer, so every decision fell within it, and each algorithm's own bound is computed for that span.\n",
        w.limit + 2,
        w.limit
    );
    let rows: Vec<Vec<String>> = w
        .server_rows
        .iter()
        .map(|r| {
            vec![
                r.algorithm.clone(),
                r.backend.clone(),
                r.requests.to_string(),
                format!("**{}**", r.admitted),
                format!("{} s", num(r.span_secs, 3)),
                against_limit(r.admitted, w.limit),
                r.own_bound.to_string(),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Backend",
            "Requests",
            "Admitted",
            "Within",
            "Against the limit",
            "Its own bound for that span",
        ],
        &rows,
    );
    let _ = writeln!(out, "\n**What it shows:** {}\n", server_finding(w));
}

/// The sentence under the server's rows, from their numbers.
fn server_finding(w: &WindowEdge) -> String {
    let of = |kind: AlgorithmKind| -> Vec<&server::ServerRow> {
        w.server_rows
            .iter()
            .filter(|r| r.algorithm == kind.name())
            .collect()
    };
    let (fixed, gcra) = (of(AlgorithmKind::FixedWindow), of(AlgorithmKind::Gcra));
    let limit = u64::from(w.limit);
    // "20 in memory and 20 on Redis", the longest span, the counts.
    let list = |rows: &[&server::ServerRow]| {
        rows.iter()
            .map(|r| format!("{} {}", r.admitted, on(&r.backend)))
            .collect::<Vec<_>>()
            .join(" and ")
    };
    let span =
        |rows: &[&server::ServerRow]| num(rows.iter().map(|r| r.span_secs).fold(0.0, f64::max), 2);
    let mut sentence = String::from("through the server, ");
    if !fixed.is_empty() && fixed.iter().all(|r| r.admitted as u64 > limit) {
        let most = fixed.iter().map(|r| r.admitted).max().unwrap_or(0);
        let least = fixed.iter().map(|r| r.admitted).min().unwrap_or(0);
        let _ = write!(
            sentence,
            "the fixed window admitted {} within {} s around a window edge, {}{}× the limit of {} per second, as envoyproxy/ratelimit would",
            list(&fixed),
            span(&fixed),
            if most == least { "" } else { "up to " },
            num(most as f64 / f64::from(w.limit), 2),
            w.limit
        );
    } else {
        let _ = write!(
            sentence,
            "the fixed window admitted {} within {} s around a window edge: not over the limit of {} per second everywhere in this run (its burst did not spend both windows' limits within a second: a machine too loaded)",
            list(&fixed),
            span(&fixed),
            w.limit
        );
    }
    let bounds = gcra
        .iter()
        .map(|r| r.own_bound.to_string())
        .collect::<Vec<_>>()
        .join(" and ");
    if gcra.iter().all(|r| r.admitted as u64 <= r.own_bound) {
        let _ = write!(
            sentence,
            "; GCRA admitted {} within {} s and stayed within its own bound for that span ({bounds}).",
            list(&gcra),
            span(&gcra)
        );
    } else {
        let _ = write!(
            sentence,
            "; GCRA admitted {} within {} s, **beyond its own bound** ({bounds}): a bug.",
            list(&gcra),
            span(&gcra)
        );
    }
    sentence
}
