//! The Redis stall in the report: its CSV, its section and its chart.

use std::fmt::Write as _;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

use super::{Outage, Run};
use crate::CompareError;
use crate::charts::{BAD, Canvas, Drawn, GOOD, LIMIT, font, num_label, render};
use crate::markdown::{chart, num, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;

/// One line of `outage.csv`: one check.
#[derive(Serialize)]
struct CsvRow<'a> {
    limiter: &'a str,
    at_ms: f64,
    latency_ms: f64,
    by_redis: bool,
    breaker_open: bool,
}

impl Part for Outage {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::Outage
    }

    fn draw(&self, canvas: &mut Canvas) -> Result<(), CompareError> {
        let o = self;
        render!(canvas, "outage", (1400, 900), |root| draw(&root, o));
        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        let rows = self.runs.iter().flat_map(|r| {
            r.samples.iter().map(move |s| CsvRow {
                limiter: &r.limiter,
                at_ms: s.at_ms,
                latency_ms: s.latency_ms,
                by_redis: s.by_redis,
                breaker_open: s.breaker_open,
            })
        });
        write_csv(&dir.join("outage.csv"), rows)
    }

    fn section(&self, charts: &[String]) -> String {
        let o = self;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## {}\n\nA real `redis-server` of this scenario's own, frozen with SIGSTOP from {} ms to {} ms (a stuck host, a long fork), then thawed with SIGCONT. Two gcra limiters on it, both failing open (`FailurePolicy::Allow`) with a {} ms timeout, each checking one key every 10 ms: one with the circuit breaker ({} consecutive failures open it for {} ms, then one probe goes to Redis), one without (`breaker(0, _)`). Every check's latency is recorded, with whether Redis or the failure policy answered it.\n",
            ScenarioName::Outage.title(),
            num(o.stall_ms.0, 0),
            num(o.stall_ms.1, 0),
            num(o.timeout_ms, 0),
            o.threshold,
            num(o.cool_down_ms, 0)
        );
        let rows: Vec<Vec<String>> = o
            .runs
            .iter()
            .map(|r| {
                vec![
                    r.limiter.clone(),
                    format!("{} ms", num(r.before_p50_ms, 2)),
                    r.stall_checks.to_string(),
                    format!(
                        "{} ({} %)",
                        r.stall_fast,
                        num(
                            100.0 * r.stall_fast as f64 / r.stall_checks.max(1) as f64,
                            0
                        )
                    ),
                    format!("{} ms", num(r.stall_p50_ms, 2)),
                    format!("{} ms", num(r.stall_p99_ms, 1)),
                    times(&r.opened_ms),
                    r.recovered_after_ms
                        .map_or("not within the run".into(), |m| format!("{} ms", num(m, 0))),
                ]
            })
            .collect();
        out += &table(
            &[
                "Limiter",
                "Median check before",
                "Checks during the stall",
                "Of those, under 1 ms",
                "Median during",
                "99th percentile during",
                "Breaker opened at",
                "Redis decides again after the thaw",
            ],
            &rows,
        );
        chart(
            &mut out,
            charts,
            "outage",
            "Per-check latency before, during and after a Redis stall",
        );
        out += "\n";
        out
    }
}

/// "1050 ms, 2600 ms", or "never".
fn times(ms: &[f64]) -> String {
    if ms.is_empty() {
        "never".into()
    } else {
        ms.iter()
            .map(|m| format!("{} ms", num(*m, 0)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, o: &Outage) -> Drawn
where
    DB::ErrorType: 'static,
{
    let root = root.titled(
        "Check latency through a Redis stall (SIGSTOP), failing open, timeout 100 ms",
        font(24.0),
    )?;
    let panels = root.split_evenly((o.runs.len(), 1));
    let end = o
        .runs
        .iter()
        .flat_map(|r| r.samples.iter().map(|s| s.at_ms))
        .fold(0.0, f64::max)
        * 1.01;
    let y_top = o
        .runs
        .iter()
        .flat_map(|r| r.samples.iter().map(|s| s.latency_ms))
        .fold(1.0, f64::max)
        * 2.0;
    for (panel, run) in panels.iter().zip(&o.runs) {
        draw_run(panel, o, run, end, y_top)?;
    }
    Ok(())
}

fn draw_run<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    o: &Outage,
    r: &Run,
    end: f64,
    y_top: f64,
) -> Drawn
where
    DB::ErrorType: 'static,
{
    let y_bottom = 0.001;
    let mut chart = ChartBuilder::on(area)
        .caption(&r.limiter, font(20.0))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..end, (y_bottom..y_top).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("time (ms)")
        .y_desc("check latency (ms, log scale)")
        .x_label_formatter(&|v| num_label(*v))
        .y_label_formatter(&|v| num_label(*v))
        .x_label_style(font(13.0))
        .y_label_style(font(13.0))
        .axis_desc_style(font(14.0))
        .draw()?;
    // The stall, shaded grey.
    let stall = RGBColor(160, 160, 160).mix(0.25);
    chart
        .draw_series(std::iter::once(Rectangle::new(
            [(o.stall_ms.0, y_bottom), (o.stall_ms.1, y_top)],
            stall.filled(),
        )))?
        .label("Redis frozen (SIGSTOP)")
        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], stall.filled()));
    // The breaker open, as a band along the top.
    let mut spans = Vec::new();
    let mut from = None;
    for s in &r.samples {
        match (from, s.breaker_open) {
            (None, true) => from = Some(s.at_ms),
            (Some(f), false) => {
                spans.push((f, s.at_ms));
                from = None;
            }
            _ => {}
        }
    }
    if let Some(f) = from {
        spans.push((f, end));
    }
    let band = LIMIT.mix(0.35);
    let band_low = y_top / 1.6;
    if !spans.is_empty() {
        chart
            .draw_series(
                spans
                    .iter()
                    .map(|&(a, b)| Rectangle::new([(a, band_low), (b, y_top)], band.filled())),
            )?
            .label("breaker open")
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], band.filled()));
    }
    chart
        .draw_series(DashedLineSeries::new(
            vec![(0.0, o.timeout_ms), (end, o.timeout_ms)],
            8,
            5,
            BLACK.mix(0.5).stroke_width(1),
        ))?
        .label(format!("timeout {} ms", num(o.timeout_ms, 0)))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], BLACK.mix(0.5)));
    let point = |by_redis: bool| {
        r.samples
            .iter()
            .filter(move |s| s.by_redis == by_redis)
            .map(|s| (s.at_ms, s.latency_ms.max(y_bottom)))
    };
    chart
        .draw_series(point(true).map(|p| Circle::new(p, 3, GOOD.filled())))?
        .label("answered by Redis")
        .legend(|(x, y)| Circle::new((x + 7, y), 4, GOOD.filled()));
    chart
        .draw_series(point(false).map(|p| Circle::new(p, 3, BAD.filled())))?
        .label("answered by the failure policy (fail open)")
        .legend(|(x, y)| Circle::new((x + 7, y), 4, BAD.filled()));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(font(13.0))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
