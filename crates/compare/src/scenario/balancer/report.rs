//! The load balancer in the report: its CSV, its section and its charts.

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use super::*;
use crate::CompareError;
use crate::charts::{BAD, Bars, Canvas, GOOD, grouped_bars, no_whiskers, render};
use crate::markdown::{chart, table};
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

    fn draw(&self, canvas: &mut Canvas) -> Result<(), CompareError> {
        let b = self;
        let mut series = vec![Bars {
            label: "memory in each instance (flawed)",
            color: BAD,
            values: b
                .rows
                .iter()
                .map(|r| Some(r.per_instance_memory as f64))
                .collect(),
            whiskers: no_whiskers(),
        }];
        if b.rows.iter().any(|r| r.shared_redis.is_some()) {
            series.push(Bars {
                label: "shared Redis (median)",
                color: GOOD,
                values: b
                    .rows
                    .iter()
                    .map(|r| r.shared_redis.map(|s| s.median))
                    .collect(),
                whiskers: b
                    .rows
                    .iter()
                    .map(|r| r.shared_redis.map(|s| (s.min, s.max)))
                    .collect(),
            });
        }
        if b.rows.iter().any(|r| r.http_per_instance_memory.is_some()) {
            series.push(Bars {
                label: "through HTTP: memory in each server (flawed)",
                color: RGBColor(240, 170, 120),
                values: b
                    .rows
                    .iter()
                    .map(|r| r.http_per_instance_memory.map(|n| n as f64))
                    .collect(),
                whiskers: no_whiskers(),
            });
        }
        if b.rows.iter().any(|r| r.http_shared_redis.is_some()) {
            series.push(Bars {
                label: "through HTTP: shared Redis",
                color: RGBColor(110, 170, 220),
                values: b
                    .rows
                    .iter()
                    .map(|r| r.http_shared_redis.map(|n| n as f64))
                    .collect(),
                whiskers: no_whiskers(),
            });
        }
        render!(canvas, "load-balancer", (1300, 600), |root| grouped_bars(
            &root,
            &format!(
                "Load balancer: {} requests round-robin over {} instances, limit {}",
                b.requests, b.instances, b.limit
            ),
            "requests admitted",
            &series,
            Some((f64::from(b.limit), format!("limit {}", b.limit))),
            0,
        ));

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
    chart(
        out,
        charts,
        "load-balancer",
        "Load balancer: per-instance memory against shared Redis",
    );
}
