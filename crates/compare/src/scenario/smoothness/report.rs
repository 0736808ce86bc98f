//! Smoothness in the report: its CSV, its section and its charts.

use std::fmt::Write as _;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Serialize;

use super::*;
use crate::CompareError;
use crate::charts::{
    Bars, Canvas, Drawn, GOOD, LIMIT, OFFERED, THIRD, color, font, grouped_bars, no_whiskers,
    num_label, render,
};
use crate::markdown::{chart, num, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;

/// One line of `smoothness.csv`.
#[derive(Serialize)]
struct CsvRow<'a> {
    algorithm: &'a str,
    admitted: usize,
    peak_per_sec_100ms: f64,
    peak_in_1s: u64,
    gap_median_ms: f64,
    gap_p5_ms: f64,
    short_gaps_pct: f64,
    gap_cv: f64,
    delay_mean_ms: f64,
    delay_p99_ms: f64,
    delay_max_ms: f64,
}

impl Part for Smoothness {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::Smoothness
    }

    fn draw(&self, canvas: &mut Canvas) -> Result<(), CompareError> {
        let s = self;
        render!(canvas, "smoothness", (1300, 1300), |root| smoothness(
            &root, s
        ));

        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        let rows = self.outputs.iter().map(|o| CsvRow {
            algorithm: &o.algorithm,
            admitted: o.admitted,
            peak_per_sec_100ms: o.peak_per_sec_100ms,
            peak_in_1s: o.peak_in_1s,
            gap_median_ms: o.gap_ms.median,
            gap_p5_ms: o.gap_p5_ms,
            short_gaps_pct: o.short_gaps_pct,
            gap_cv: o.gap_cv,
            delay_mean_ms: o.delay_mean_ms,
            delay_p99_ms: o.delay_p99_ms,
            delay_max_ms: o.delay_max_ms,
        });
        write_csv(&dir.join("smoothness.csv"), rows)
    }

    fn section(&self, charts: &[String]) -> String {
        let mut out = String::new();
        write_section(&mut out, self, charts);
        out
    }
}

fn write_section(out: &mut String, s: &Smoothness, charts: &[String]) {
    let _ = writeln!(
        out,
        "## Smoothness\n\nSimulated time, {} s: one bursty client (on about 2 s at 20–50 per second, off about 3 s), {} requests, quota {}. What reaches the service: an admitted request proceeds at once, except in the leaky bucket queue, which gives it a slot and makes it wait (`Decision::delay`).\n",
        s.seconds, s.offered, s.quota
    );
    let rows: Vec<Vec<String>> = s
        .outputs
        .iter()
        .map(|o| {
            vec![
                o.algorithm.clone(),
                o.admitted.to_string(),
                format!("{} / s", num(o.peak_per_sec_100ms, 0)),
                o.peak_in_1s.to_string(),
                format!("{} ms", num(o.gap_ms.median, 1)),
                format!("{} ms", num(o.gap_p5_ms, 1)),
                format!("{} %", num(o.short_gaps_pct, 1)),
                num(o.gap_cv, 2),
                format!(
                    "{} / {} / {} ms",
                    num(o.delay_mean_ms, 1),
                    num(o.delay_p99_ms, 1),
                    num(o.delay_max_ms, 1)
                ),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Admitted",
            "Peak output (most in 100 ms)",
            "Most in any 1 s",
            "Median gap",
            "5th percentile gap",
            "Gaps shorter than 1/rate",
            "Gap spread (CV)",
            "Added delay mean / p99 / max",
        ],
        &rows,
    );
    chart(
        out,
        charts,
        "smoothness",
        "Output downstream: token bucket against leaky bucket queue",
    );
}

fn smoothness<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, s: &Smoothness) -> Drawn
where
    DB::ErrorType: 'static,
{
    use crate::scenario::smoothness::{BIN_MS, EXCERPT_SECS};
    root.fill(&WHITE)?;
    let (upper, lower) = root.split_vertically(480);
    let bin = BIN_MS as f64 / 1_000.0;
    let y_max = s
        .excerpt_offered
        .iter()
        .chain(s.excerpt_output.iter().flat_map(|(_, v)| v))
        .copied()
        .fold(s.rate_per_sec, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&upper)
        .caption(
            format!(
                "What the service sees: token bucket vs leaky bucket queue (first {} s, {} ms bins)",
                EXCERPT_SECS.1 - EXCERPT_SECS.0,
                BIN_MS
            ),
            font(20.0),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(EXCERPT_SECS.0..EXCERPT_SECS.1, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("requests / s reaching the service")
        .x_label_formatter(&|v| num_label(*v))
        .y_label_formatter(&|v| num_label(*v))
        .label_style(font(13.0))
        .axis_desc_style(font(14.0))
        .draw()?;
    let steps = |values: &[f64]| -> Vec<(f64, f64)> {
        values
            .iter()
            .enumerate()
            .flat_map(|(i, &v)| {
                let x0 = EXCERPT_SECS.0 + i as f64 * bin;
                [(x0, v), (x0 + bin, v)]
            })
            .collect()
    };
    chart
        .draw_series(AreaSeries::new(
            steps(&s.excerpt_offered),
            0.0,
            OFFERED.mix(0.35),
        ))?
        .label("offered")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], OFFERED.mix(0.5).filled()));
    // Where the lines coincide (both at the rate, both at 0) the one drawn
    // last hides the other: the leaky queue goes first as a wide pale band,
    // every other line thin on top of it, so both stay visible.
    let mut lines: Vec<&(String, Vec<f64>)> = s.excerpt_output.iter().collect();
    lines.sort_by_key(|(name, _)| name != "leaky-queue");
    for (name, values) in lines {
        let (c, width) = if name == "leaky-queue" {
            (color(name).mix(0.6), 9)
        } else {
            (color(name).mix(1.0), 2)
        };
        chart
            .draw_series(LineSeries::new(steps(values), c.stroke_width(width)))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 14, y)], c.stroke_width(width))
            });
    }
    chart
        .draw_series(DashedLineSeries::new(
            vec![
                (EXCERPT_SECS.0, s.rate_per_sec),
                (EXCERPT_SECS.1, s.rate_per_sec),
            ],
            10,
            6,
            LIMIT.stroke_width(2),
        ))?
        .label(format!("rate {} / s", s.rate_per_sec))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], LIMIT.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(font(14.0))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    let (left, right) = lower.split_vertically(lower.dim_in_pixel().1 / 2);
    let peaks: Vec<Option<f64>> = s
        .outputs
        .iter()
        .map(|o| Some(o.peak_per_sec_100ms))
        .collect();
    grouped_bars(
        &left,
        "Peak output rate (most within any 100 ms)",
        "requests / s",
        &[Bars {
            label: "peak downstream",
            color: GOOD,
            values: peaks,
            whiskers: no_whiskers(),
        }],
        Some((s.rate_per_sec, format!("rate {} / s", s.rate_per_sec))),
        0,
    )?;
    let short: Vec<Option<f64>> = s.outputs.iter().map(|o| Some(o.short_gaps_pct)).collect();
    grouped_bars(
        &right,
        &format!(
            "Gaps shorter than 1/rate ({} ms), % of gaps",
            num_label(1e3 / s.rate_per_sec)
        ),
        "% of gaps",
        &[Bars {
            label: "0 = never faster than the rate",
            color: THIRD,
            values: short,
            whiskers: no_whiskers(),
        }],
        None,
        1,
    )?;
    Ok(())
}
