//! The load balancer in the report: its CSV, its section and its charts.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::*;
use crate::CompareError;
use crate::charts::Canvas;
use crate::markdown::{num, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;
use crate::stats::Spread;

/// One line of `load-balancer.csv`.
#[derive(Serialize)]
struct CsvRow<'a> {
    algorithm: &'a str,
    per_instance_memory: usize,
    shared_redis_min: Option<f64>,
    shared_redis_median: Option<f64>,
    shared_redis_max: Option<f64>,
    http_per_instance_memory: Option<usize>,
    http_shared_redis: Option<usize>,
}

impl Part for LoadBalancer {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::LoadBalancer
    }

    fn draw(&self, _canvas: &mut Canvas) -> Result<(), CompareError> {
        // Seven algorithms giving the same two numbers draw a wall of equal
        // bars: the section says it in a sentence instead.
        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        let rows = self.rows.iter().map(|r| CsvRow {
            algorithm: &r.algorithm,
            per_instance_memory: r.per_instance_memory,
            shared_redis_min: r.shared_redis.map(|s| s.min),
            shared_redis_median: r.shared_redis.map(|s| s.median),
            shared_redis_max: r.shared_redis.map(|s| s.max),
            http_per_instance_memory: r.http_per_instance_memory,
            http_shared_redis: r.http_shared_redis,
        });
        write_csv(&dir.join("load-balancer.csv"), rows)
    }

    fn section(&self, charts: &[String]) -> String {
        let mut out = String::new();
        write_section(&mut out, self, charts);
        out
    }
}

fn write_section(out: &mut String, b: &LoadBalancer, charts: &[String]) {
    let _ = writeln!(
        out,
        "## Load balancer\n\n{} requests from one client, round-robin over {} app instances, limit {} (the article's third test). The **deliberately flawed** setup keeps a limiter in each instance's memory; the correct one shares one count on Redis. Transport: {}. Time is frozen, so only where the count lives differs; the Redis variant is repeated {} times.\n",
        b.requests, b.instances, b.limit, b.transport, b.repeats
    );
    let rows: Vec<Vec<String>> = b
        .rows
        .iter()
        .map(|r| {
            vec![
                r.algorithm.clone(),
                r.per_instance_memory.to_string(),
                r.shared_redis
                    .as_ref()
                    .map_or("skipped".into(), Spread::counts_text),
                r.http_per_instance_memory
                    .map_or("skipped".into(), |n| n.to_string()),
                r.http_shared_redis
                    .map_or("skipped".into(), |n| n.to_string()),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Memory in each instance (flawed): admitted",
            "Shared Redis: admitted",
            "Through HTTP, memory in each server (flawed)",
            "Through HTTP, shared Redis",
        ],
        &rows,
    );
    let _ = charts;
    let _ = writeln!(out, "\n{}", verdict(b));
}

/// What the table proves, in one sentence: the range of each column over
/// the algorithms (one number when they all agree).
pub fn verdict(b: &LoadBalancer) -> String {
    let range = |values: Vec<f64>| -> Option<String> {
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (!values.is_empty()).then(|| {
            if lo == hi {
                num(hi, 0)
            } else {
                format!("{} to {}", num(lo, 0), num(hi, 0))
            }
        })
    };
    let n = b.rows.len();
    let memory = range(
        b.rows
            .iter()
            .map(|r| r.per_instance_memory as f64)
            .collect(),
    );
    let http_memory = range(
        b.rows
            .iter()
            .filter_map(|r| r.http_per_instance_memory.map(|v| v as f64))
            .collect(),
    );
    let shared = range(
        b.rows
            .iter()
            .filter_map(|r| r.shared_redis.map(|s| s.max))
            .collect(),
    );
    let http_shared = range(
        b.rows
            .iter()
            .filter_map(|r| r.http_shared_redis.map(|v| v as f64))
            .collect(),
    );
    let mut out = format!(
        "**What it shows:** the algorithm does not matter here, where the count lives does. With a count in each instance's memory, all {n} algorithms admitted {} of {} for a limit of {}",
        memory.unwrap_or_default(),
        b.requests,
        b.limit
    );
    if let Some(h) = http_memory {
        let _ = write!(out, " ({h} through HTTP)");
    }
    match shared {
        Some(s) => {
            let _ = write!(
                out,
                "; with one count on Redis, at most {s} in any of {} repeats",
                b.repeats
            );
            if let Some(h) = http_shared {
                let _ = write!(out, " ({h} through HTTP)");
            }
            out += ".";
        }
        None => out += "; the shared-Redis runs were skipped.",
    }
    out
}
