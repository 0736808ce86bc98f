//! The key flood in the report: its CSV, its section and its chart.

use std::fmt::Write as _;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Flood, Point};
use crate::CompareError;
use crate::charts::{BAD, Canvas, Drawn, GOOD, font, num_label, render};
use crate::markdown::{chart, num, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;

impl Part for Flood {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::Flood
    }

    fn draw(&self, canvas: &mut Canvas) -> Result<(), CompareError> {
        let f = self;
        render!(canvas, "flood", (1400, 600), |root| draw(&root, f));
        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        write_csv(&dir.join("flood.csv"), self.points.iter())
    }

    fn section(&self, charts: &[String]) -> String {
        let f = self;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## {}\n\nA flood of distinct keys against the bounded in-memory store (`Keyed`, at most {} keys tracked one by one), quota {}. Every flood key sends one request and then owes for one second, so a flood of *n* tables' worth of new keys per second keeps *n* tables of keys owing at any moment; {} light, legitimate clients each ask once every 5 s (a fifth of their quota). Simulated time, {} s per point. The default policy decides keys beyond the table with a sketch of {} shared states (16 per key slot, rounded up to a power of two); `FloodPolicy::Refuse` refuses every new key until a slot frees. The store's hashing is seeded with the run's seed and its shards fixed at 8, so the same seed gives the same decisions in every run. Heap bytes are what the store held at the end of the run (counted by the process's allocator, which other threads also move: the median of three runs of each point), per key slot; they are measured, not simulated, and vary a little between runs.\n",
            ScenarioName::Flood.title(),
            f.max_keys,
            f.quota,
            f.clients,
            f.seconds,
            f.sketch_cells
        );
        let rows: Vec<Vec<String>> = f
            .points
            .iter()
            .map(|p| {
                vec![
                    p.policy.clone(),
                    format!("{}× ({} keys/s)", p.factor, p.keys_per_sec),
                    format!(
                        "{} of {} ({} %)",
                        p.admitted,
                        p.asked,
                        num(p.admitted_pct, 1)
                    ),
                    format!("{} %", num(p.flood_refused_pct, 1)),
                    format!("{} B", num(p.heap_bytes_per_slot, 0)),
                ]
            })
            .collect();
        out += &table(
            &[
                "Flood policy",
                "Flood (tables of new keys per second)",
                "Light clients admitted",
                "Flood requests refused",
                "Heap per key slot",
            ],
            &rows,
        );
        let find = |policy: &str, factor: u64| {
            f.points
                .iter()
                .find(|p| p.policy.starts_with(policy) && p.factor == factor)
        };
        let top = f.points.iter().map(|p| p.factor).max().unwrap_or(0);
        if let (Some(s), Some(r)) = (find("sketch", top), find("refuse", top)) {
            let _ = writeln!(
                out,
                "\nAt the largest flood ({}× the table per second), the light clients kept **{} %** of their requests under the default sketch and **{} %** under `Refuse`, for {} and {} heap bytes per key slot.",
                top,
                num(s.admitted_pct, 1),
                num(r.admitted_pct, 1),
                num(s.heap_bytes_per_slot, 0),
                num(r.heap_bytes_per_slot, 0)
            );
        }
        chart(
            &mut out,
            charts,
            "flood",
            "Light clients' admitted share and heap per key slot during a key flood",
        );
        out += "\n";
        out
    }
}

/// One panel: where, its title, its y axis, the value it plots.
type Panel<'a, DB> = (
    &'a DrawingArea<DB, Shift>,
    &'a str,
    &'a str,
    fn(&Point) -> f64,
);

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &Flood) -> Drawn
where
    DB::ErrorType: 'static,
{
    let (left, right) = root.split_horizontally(700);
    let x_max = f.points.iter().map(|p| p.factor).max().unwrap_or(1) as f64;
    let series =
        |policy: &str| -> Vec<&Point> { f.points.iter().filter(|p| p.policy == policy).collect() };
    let policies: Vec<String> = {
        let mut v: Vec<String> = f.points.iter().map(|p| p.policy.clone()).collect();
        v.dedup();
        v
    };
    let colors = [GOOD, BAD];
    let panels: [Panel<'_, DB>; 2] = [
        (
            &left,
            "Light clients' requests admitted during the flood",
            "% admitted",
            |p| p.admitted_pct,
        ),
        (
            &right,
            "Heap held by the store, per key slot (once flooded)",
            "bytes per key slot",
            |p| p.heap_bytes_per_slot,
        ),
    ];
    for (area, title, y_desc, value) in panels {
        let y_max = f.points.iter().map(value).fold(0.0, f64::max).max(1.0) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(title, font(20.0))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..x_max * 1.05, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc(format!(
                "flood: tables of {} new keys per second",
                f.max_keys
            ))
            .y_desc(y_desc)
            .x_label_formatter(&|v| num_label(*v))
            .y_label_formatter(&|v| num_label(*v))
            .x_label_style(font(13.0))
            .y_label_style(font(13.0))
            .axis_desc_style(font(14.0))
            .draw()?;
        for (policy, c) in policies.iter().zip(colors) {
            // Without a flood the table is nearly empty: its heap per slot
            // says nothing about the store, so the heap panel starts at 1.
            let heap = y_desc.starts_with("bytes");
            let points: Vec<(f64, f64)> = series(policy)
                .into_iter()
                .filter(|p| !(heap && p.factor == 0))
                .map(|p| (p.factor as f64, value(p)))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), c.stroke_width(3)))?
                .label(policy.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3))
                });
            chart.draw_series(points.into_iter().map(|p| Circle::new(p, 5, c.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .label_font(font(14.0))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}
