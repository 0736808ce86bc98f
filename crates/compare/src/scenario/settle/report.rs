//! Settling in the report: its CSV and its section.

use std::fmt::Write as _;
use std::path::Path;

use super::{Outcome, Settle};
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
        write_csv(&dir.join("settle.csv"), &self.outcomes)?;
        write_csv(&dir.join("settle-http.csv"), &self.through_http)
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
        out += &self.http_part();
        out += "\n";
        out
    }
}

impl Settle {
    /// The same requests through `ratelab-http`, beside the direct figures.
    fn http_part(&self) -> String {
        let s = self;
        if s.through_http.is_empty() {
            return String::new();
        }
        let mut out = format!(
            "\n**Through `ratelab-http`.** The same {} requests, each a real HTTP request to a server on a loopback socket (hyper behind `RateLimitLayer`, one connection per request, held open while the request is in flight): the policy reserves the estimate from the request (`Policy::cost_with`) and settles from the response's `{}` header (`Policy::settle_from_header`), the application answering each request at its response time on the run's clock. The limiter decides on a clock the run moves to each event; the leaky queue's slot wait is slept by the layer on tokio's paused clock, so nothing waits in real time and two runs give the same figures. Refunds are read by a peek before and after each response. Direct figures, then through HTTP:\n\n",
            s.offered,
            super::http::USED_HEADER,
        );
        let both = |direct: String, http: String| {
            if direct == http {
                format!("{direct} (same)")
            } else {
                format!("{direct} → {http}")
            }
        };
        let rows: Vec<Vec<String>> = s
            .outcomes
            .iter()
            .zip(&s.through_http)
            .map(|(d, h)| {
                vec![
                    d.algorithm.clone(),
                    both(d.admitted.to_string(), h.admitted.to_string()),
                    both(num(d.tokens_per_minute, 0), num(h.tokens_per_minute, 0)),
                    both(
                        d.worst_minute_tokens.to_string(),
                        h.worst_minute_tokens.to_string(),
                    ),
                    both(d.debt_charged.to_string(), h.debt_charged.to_string()),
                    both(
                        format!("{} of {}", d.refund_given, d.refund_asked),
                        format!("{} of {}", h.refund_given, h.refund_asked),
                    ),
                    format!(
                        "{} of {}",
                        h.decisions_differing.unwrap_or_default(),
                        s.offered
                    ),
                    h.settle_errors.to_string(),
                ]
            })
            .collect();
        out += &table(
            &[
                "Algorithm",
                "Requests admitted",
                "Tokens per minute used (mean)",
                "Worst trailing minute, tokens",
                "Debt charged",
                "Refunds given back of asked",
                "Decisions differing through HTTP",
                "Responses not settled",
            ],
            &rows,
        );
        let differing: u64 = s
            .through_http
            .iter()
            .map(|h| h.decisions_differing.unwrap_or_default())
            .sum();
        let same_figures = s
            .outcomes
            .iter()
            .zip(&s.through_http)
            .filter(|(d, h)| {
                Outcome {
                    decisions_differing: None,
                    ..(*h).clone()
                } == **d
            })
            .count();
        let _ = writeln!(
            out,
            "\nThrough HTTP, {differing} of {} decisions differed from the direct run's, over the {} algorithms; {same_figures} of {} algorithms gave every figure above exactly as directly.",
            s.offered * s.through_http.len() as u64,
            s.through_http.len(),
            s.through_http.len(),
        );
        out
    }
}
