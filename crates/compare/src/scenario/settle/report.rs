//! Settling in the report: its CSV and its section.

use std::fmt::Write as _;
use std::path::Path;

use super::Settle;
use crate::CompareError;
use crate::charts::Canvas;
use crate::markdown::{num, pct, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;

impl Part for Settle {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::Settle
    }

    fn draw(&self, _: &mut Canvas) -> Result<(), CompareError> {
        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        write_csv(&dir.join("settle.csv"), &self.outcomes)
    }

    fn section(&self, _: &[String]) -> String {
        let s = self;
        let w = &s.workload;
        let quota = w.tokens_per_minute;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## {}\n\nA cost known only after the response, as an LLM endpoint's tokens: one API key, a quota of {quota} tokens per minute (the capacity too), simulated time, {} s. Requests arrive at {} per second (Poisson); each reserves an estimate (`check_with_receipt`), runs {}–{} s with others in flight, then settles to the tokens it actually used (`settle`), {}–{} each. Estimates are {}–{}× the actual: {} of {} requests under-estimated (the difference is charged as debt the next requests wait out), {} over-estimated (the difference asked back). Every algorithm sees the same requests, in memory, on a clock moved to each event. Tokens are counted when their request was admitted.\n",
            ScenarioName::Settle.title(),
            w.seconds,
            num(w.rate, 2),
            num(w.latency_secs.0, 0),
            num(w.latency_secs.1, 0),
            w.actual.0,
            w.actual.1,
            num(w.estimate_factor.0, 2),
            num(w.estimate_factor.1, 2),
            s.under_estimated,
            s.offered,
            s.over_estimated,
        );
        let rows: Vec<Vec<String>> = s
            .outcomes
            .iter()
            .map(|o| {
                vec![
                    o.algorithm.clone(),
                    format!("{} of {}", o.admitted, s.offered),
                    format!(
                        "{} ({} % of the quota)",
                        num(o.tokens_per_minute, 0),
                        pct(100.0 * o.tokens_per_minute / f64::from(quota))
                    ),
                    format!(
                        "{} ({}×)",
                        o.worst_minute_tokens,
                        num(o.worst_minute_tokens as f64 / f64::from(quota), 2)
                    ),
                    o.max_in_flight.to_string(),
                    o.debt_charged.to_string(),
                    format!(
                        "{} of {} ({} %)",
                        o.refund_given,
                        o.refund_asked,
                        pct(100.0 * o.refund_given as f64 / (o.refund_asked.max(1)) as f64)
                    ),
                ]
            })
            .collect();
        out += &table(
            &[
                "Algorithm",
                "Requests admitted",
                "Tokens per minute used (mean)",
                "Worst trailing minute, tokens (× quota)",
                "Most in flight",
                "Debt charged (tokens beyond estimates)",
                "Refunds given back of asked",
            ],
            &rows,
        );
        if let (Some(low), Some(high)) = (
            s.outcomes.iter().min_by_key(|o| o.worst_minute_tokens),
            s.outcomes.iter().max_by_key(|o| o.worst_minute_tokens),
        ) {
            let _ = writeln!(
                out,
                "\n**What it shows:** the worst trailing minute ranged from {} tokens ({}) to {} ({}) for a quota of {quota}: what a minute can hold beyond the quota is the overrun of requests already admitted when their actual was known (debt repaid by the next ones), and, for the window algorithms and the buckets, what their own bound allows across a window edge or a burst. Refunds come back only as far as the limiter can prove the admission still holds them: {}.",
                low.worst_minute_tokens,
                low.algorithm,
                high.worst_minute_tokens,
                high.algorithm,
                s.outcomes
                    .iter()
                    .map(|o| format!(
                        "{} {} %",
                        o.algorithm,
                        pct(100.0 * o.refund_given as f64 / (o.refund_asked.max(1)) as f64)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        out += "\n";
        out
    }
}
