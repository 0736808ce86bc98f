//! The report's charts, drawn with plotters as SVG and PNG, with the font
//! bundled in this crate (DejaVu Sans), so that they render the same on a
//! machine without any system font.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::algorithms::NAMES;
use crate::{CompareError, Results};

/// DejaVu Sans (Bitstream Vera license: `assets/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const FAMILY: &str = "sans-serif";

/// Registers the bundled font with plotters, once.
pub fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is compiled in and valid: a failure is a broken build.
        assert!(
            plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok(),
            "the bundled DejaVu Sans font is not a valid font"
        );
    });
}

type Drawn = Result<(), Box<dyn Error>>;

/// The colour of each algorithm, the same in every chart (Okabe–Ito, safe
/// for colour-blind readers).
pub fn color(name: &str) -> RGBColor {
    match name {
        "fixed-window" => RGBColor(213, 94, 0),
        "sliding-log" => RGBColor(0, 114, 178),
        "sliding-counter" => RGBColor(86, 180, 233),
        "leaky-meter" => RGBColor(0, 158, 115),
        "leaky-queue" => RGBColor(204, 121, 167),
        "token-bucket" => RGBColor(230, 159, 0),
        "gcra" => RGBColor(90, 90, 90),
        _ => RGBColor(0, 0, 0),
    }
}

/// Series colours for the grouped bars: the correct variant, the flawed
/// one, and a third.
const GOOD: RGBColor = RGBColor(0, 114, 178);
const BAD: RGBColor = RGBColor(213, 94, 0);
const THIRD: RGBColor = RGBColor(0, 158, 115);
const LIMIT: RGBColor = RGBColor(200, 0, 0);
const OFFERED: RGBColor = RGBColor(160, 160, 160);

fn font(size: f64) -> TextStyle<'static> {
    (FAMILY, size).into_font().color(&BLACK)
}

/// One series of a grouped bar chart.
struct Bars<'a> {
    label: &'a str,
    color: RGBColor,
    /// One value per algorithm; `None` draws nothing.
    values: Vec<Option<f64>>,
    /// Optional (low, high) whisker per algorithm.
    whiskers: Vec<Option<(f64, f64)>>,
}

/// A grouped bar chart with one group per algorithm.
fn grouped_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    y_desc: &str,
    series: &[Bars<'_>],
    limit: Option<(f64, String)>,
    decimals: usize,
) -> Drawn
where
    DB::ErrorType: 'static,
{
    let top = series
        .iter()
        .flat_map(|s| {
            s.values
                .iter()
                .flatten()
                .copied()
                .chain(s.whiskers.iter().flatten().map(|w| w.1))
        })
        .chain(limit.iter().map(|l| l.0))
        .fold(0.0f64, f64::max);
    // Headroom for the legend, one line per series and the limit.
    let entries = series.len() + usize::from(limit.is_some());
    let y_max = if top > 0.0 {
        top * (1.1 + 0.08 * entries as f64)
    } else {
        1.0
    };
    let n = NAMES.len();
    let mut chart = ChartBuilder::on(area)
        .caption(title, font(22.0))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..y_max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_formatter(&|v| num_label(*v))
        .y_label_style(font(14.0))
        .y_desc(y_desc)
        .axis_desc_style(font(15.0))
        .draw()?;
    // The algorithms' names under their groups (plotters' own labels fall
    // on round numbers, not on the groups).
    let base = area.get_base_pixel();
    for (i, name) in NAMES.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(i as f64, 0.0));
        area.draw(&Text::new(
            (*name).to_owned(),
            (x - base.0, y - base.1 + 10),
            font(14.0).pos(Pos::new(HPos::Center, VPos::Top)),
        ))?;
    }
    let groups = series.len().max(1) as f64;
    let width = 0.8 / groups;
    for (k, s) in series.iter().enumerate() {
        let offset = -0.4 + width * k as f64;
        let color = s.color;
        let rects = s.values.iter().enumerate().filter_map(|(i, v)| {
            v.map(|v| {
                let x0 = i as f64 + offset + 0.02;
                Rectangle::new([(x0, 0.0), (x0 + width - 0.04, v)], color.filled())
            })
        });
        chart
            .draw_series(rects)?
            .label(s.label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        let labels = s.values.iter().enumerate().filter_map(|(i, v)| {
            v.map(|v| {
                let x = i as f64 + offset + width / 2.0;
                Text::new(
                    format!("{v:.decimals$}"),
                    (x, v),
                    font(13.0).pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            })
        });
        chart.draw_series(labels)?;
        for (i, w) in s.whiskers.iter().enumerate() {
            if let Some((low, high)) = *w {
                let x = i as f64 + offset + width / 2.0;
                let style = BLACK.stroke_width(2);
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(x, low), (x, high)],
                    style,
                )))?;
                for y in [low, high] {
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(x - width / 5.0, y), (x + width / 5.0, y)],
                        style,
                    )))?;
                }
            }
        }
    }
    if let Some((value, label)) = limit {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(-0.5, value), (n as f64 - 0.5, value)],
                10,
                6,
                LIMIT.stroke_width(2),
            ))?
            .label(label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], LIMIT.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(font(14.0))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// An axis label: no decimals on round values.
fn num_label(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').to_owned()
    }
}

/// A note in an empty panel.
fn note<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, title: &str, text: &str) -> Drawn
where
    DB::ErrorType: 'static,
{
    let (w, h) = area.dim_in_pixel();
    let w = i32::try_from(w).unwrap_or(i32::MAX);
    let h = i32::try_from(h).unwrap_or(i32::MAX);
    area.draw(&Text::new(
        title.to_owned(),
        (w / 2, 20),
        font(22.0).pos(Pos::new(HPos::Center, VPos::Top)),
    ))?;
    area.draw(&Text::new(
        text.to_owned(),
        (w / 2, h / 2),
        font(16.0).pos(Pos::new(HPos::Center, VPos::Center)),
    ))?;
    Ok(())
}

fn burst_timeline<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    t: &crate::scenario::traffic::Timeline,
    limit: f64,
) -> Drawn
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let root = root.titled(
        "One client's bursts: admitted vs offered, every algorithm (quota 10/s, burst 10)",
        font(24.0),
    )?;
    let panels = root.split_evenly((4, 2));
    let bin = t.bin_ms as f64 / 1_000.0;
    let end = t.offered.len() as f64 * bin;
    let y_max = t.offered.iter().copied().fold(limit, f64::max) * 1.1;
    for (panel, (name, admitted)) in panels.iter().zip(&t.admitted) {
        let mut chart = ChartBuilder::on(panel)
            .caption(name, font(18.0))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..end, 0f64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("requests / s")
            .x_label_formatter(&|v| num_label(*v))
            .y_label_formatter(&|v| num_label(*v))
            .x_label_style(font(12.0))
            .y_label_style(font(12.0))
            .axis_desc_style(font(13.0))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        let c = color(name);
        chart.draw_series(admitted.iter().enumerate().map(|(i, &v)| {
            let x0 = i as f64 * bin;
            Rectangle::new([(x0, 0.0), (x0 + bin, v)], c.mix(0.75).filled())
        }))?;
        let steps = t.offered.iter().enumerate().flat_map(|(i, &v)| {
            let x0 = i as f64 * bin;
            [(x0, v), (x0 + bin, v)]
        });
        chart.draw_series(LineSeries::new(steps, BLACK.mix(0.55).stroke_width(2)))?;
        chart.draw_series(DashedLineSeries::new(
            vec![(0.0, limit), (end, limit)],
            8,
            5,
            LIMIT.stroke_width(2),
        ))?;
    }
    // The last panel is the legend.
    if let Some(legend) = panels.get(NAMES.len()) {
        let (w, _) = legend.dim_in_pixel();
        let x = i32::try_from(w / 8).unwrap_or(0);
        let items: [(&str, ShapeStyle); 3] = [
            (
                "admitted per second (bars, one colour per algorithm)",
                color("gcra").mix(0.75).filled(),
            ),
            (
                "offered per second (grey line)",
                BLACK.mix(0.55).stroke_width(3),
            ),
            (
                "rate limit, 10 per second (dashed red)",
                LIMIT.stroke_width(3),
            ),
        ];
        for (k, (text, style)) in items.into_iter().enumerate() {
            let y = 60 + 40 * i32::try_from(k).unwrap_or(0);
            legend.draw(&Rectangle::new([(x, y - 8), (x + 24, y + 8)], style))?;
            legend.draw(&Text::new(
                text,
                (x + 36, y),
                font(16.0).pos(Pos::new(HPos::Left, VPos::Center)),
            ))?;
        }
        legend.draw(&Text::new(
            "(the leaky queue's admitted requests then wait for their slot: see Smoothness)",
            (x, 60 + 40 * 4),
            font(13.0).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
        legend.draw(&Text::new(
            format!("bins of {} ms", t.bin_ms),
            (x, 60 + 40 * 3),
            font(15.0).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(())
}

fn smoothness<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    s: &crate::scenario::smoothness::Smoothness,
) -> Drawn
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
    for (name, values) in &s.excerpt_output {
        let c = color(name);
        chart
            .draw_series(LineSeries::new(steps(values), c.stroke_width(3)))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], c.stroke_width(3)));
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
            whiskers: vec![None; NAMES.len()],
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
            whiskers: vec![None; NAMES.len()],
        }],
        None,
        1,
    )?;
    Ok(())
}

/// Draws every chart the results allow into `dir`, as `NAME.svg` and
/// `NAME.png`; returns the names drawn.
pub fn draw_all(results: &Results, dir: &Path) -> Result<Vec<String>, CompareError> {
    register_font();
    std::fs::create_dir_all(dir).map_err(|source| CompareError::Write {
        path: dir.to_owned(),
        source,
    })?;
    let mut drawn = Vec::new();
    macro_rules! render {
        ($name:expr, $size:expr, |$root:ident| $body:expr) => {{
            let name: &str = $name;
            let fail = |e: Box<dyn Error>| CompareError::Chart {
                name: name.to_owned(),
                message: e.to_string(),
            };
            let svg: PathBuf = dir.join(format!("{name}.svg"));
            {
                let $root = SVGBackend::new(&svg, $size).into_drawing_area();
                $root.fill(&WHITE).map_err(|e| fail(e.into()))?;
                $body.map_err(fail)?;
                $root.present().map_err(|e| fail(e.into()))?;
            }
            let png: PathBuf = dir.join(format!("{name}.png"));
            {
                let $root = BitMapBackend::new(&png, $size).into_drawing_area();
                $root.fill(&WHITE).map_err(|e| fail(e.into()))?;
                $body.map_err(fail)?;
                $root.present().map_err(|e| fail(e.into()))?;
            }
            drawn.push(name.to_owned());
        }};
    }

    if let Some(t) = &results.traffic {
        render!("burst-timeline", (1400, 1100), |root| burst_timeline(
            &root,
            &t.timeline,
            t.limit as f64
        ));
        let max: Vec<Option<f64>> = t
            .outcomes
            .iter()
            .map(|o| Some(o.max_in_window as f64))
            .collect();
        let fa: Vec<Option<f64>> = t
            .outcomes
            .iter()
            .map(|o| Some(o.false_admission_pct))
            .collect();
        let fr: Vec<Option<f64>> = t
            .outcomes
            .iter()
            .map(|o| Some(o.false_refusal_pct))
            .collect();
        let none = vec![None; NAMES.len()];
        render!("accuracy", (1300, 1000), |root| {
            let (upper, lower) = root.split_vertically(500);
            grouped_bars(
                &upper,
                &format!(
                    "Realistic traffic: most admitted for one client in any trailing {} ms",
                    t.window_ms
                ),
                "requests admitted",
                &[Bars {
                    label: "worst client",
                    color: GOOD,
                    values: max.clone(),
                    whiskers: none.clone(),
                }],
                Some((t.limit as f64, format!("limit {}", t.limit))),
                0,
            )
            .and_then(|()| {
                grouped_bars(
                    &lower,
                    "Decisions that differ from the exact sliding window (% of requests)",
                    "% of requests",
                    &[
                        Bars {
                            label: "false admissions",
                            color: BAD,
                            values: fa.clone(),
                            whiskers: none.clone(),
                        },
                        Bars {
                            label: "false refusals",
                            color: GOOD,
                            values: fr.clone(),
                            whiskers: none.clone(),
                        },
                    ],
                    None,
                    2,
                )
            })
        });
    }
    if let Some(w) = &results.window_edge {
        let pick = |backend: &str| -> Vec<Option<f64>> {
            NAMES
                .iter()
                .map(|n| {
                    w.rows
                        .iter()
                        .find(|r| r.algorithm == *n && r.backend == backend)
                        .map(|r| r.total as f64)
                })
                .collect()
        };
        let (memory, redis) = (pick("memory"), pick("redis"));
        let mut series = vec![Bars {
            label: "memory",
            color: GOOD,
            values: memory,
            whiskers: vec![None; NAMES.len()],
        }];
        if redis.iter().any(Option::is_some) {
            series.push(Bars {
                label: "redis",
                color: THIRD,
                values: redis,
                whiskers: vec![None; NAMES.len()],
            });
        }
        render!("window-edge", (1300, 560), |root| grouped_bars(
            &root,
            "Window edge: 10 requests at 0.95 s + 10 at 1.05 s; admitted within 0.11 s",
            "requests admitted",
            &series,
            Some((f64::from(w.limit), format!("limit {} per second", w.limit))),
            0,
        ));
    }
    if let Some(c) = &results.concurrency {
        let median = |s: Option<&crate::stats::Spread>| s.map(|s| s.median);
        let whisker = |s: Option<&crate::stats::Spread>| s.map(|s| (s.min, s.max));
        let mut series = Vec::new();
        if c.rows.iter().any(|r| r.atomic.is_some()) {
            series.push(Bars {
                label: "atomic script (median, min–max)",
                color: GOOD,
                values: c.rows.iter().map(|r| median(r.atomic.as_ref())).collect(),
                whiskers: c.rows.iter().map(|r| whisker(r.atomic.as_ref())).collect(),
            });
        }
        series.push(Bars {
            label: "read-then-write, flawed (median, min–max)",
            color: BAD,
            values: c
                .rows
                .iter()
                .map(|r| median(Some(&r.read_then_write)))
                .collect(),
            whiskers: c
                .rows
                .iter()
                .map(|r| whisker(Some(&r.read_then_write)))
                .collect(),
        });
        render!("concurrency", (1300, 560), |root| grouped_bars(
            &root,
            &format!(
                "Race on Redis: {} simultaneous requests, limit {}, {} repeats",
                c.requests, c.limit, c.repeats
            ),
            "requests admitted",
            &series,
            Some((f64::from(c.limit), format!("limit {}", c.limit))),
            0,
        ));
    }
    if let Some(b) = &results.load_balancer {
        let mut series = vec![Bars {
            label: "memory in each instance (flawed)",
            color: BAD,
            values: b
                .rows
                .iter()
                .map(|r| Some(r.per_instance_memory as f64))
                .collect(),
            whiskers: vec![None; NAMES.len()],
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
                whiskers: vec![None; NAMES.len()],
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
                whiskers: vec![None; NAMES.len()],
            });
        }
        render!("load-balancer", (1300, 600), |root| grouped_bars(
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
    }
    if let Some(s) = &results.smoothness {
        render!("smoothness", (1300, 1300), |root| smoothness(&root, s));
    }
    if let Some(c) = &results.cost {
        let value = |f: Option<crate::scenario::cost::Figure>| f.map(|f| f.value);
        let ns: Vec<Option<f64>> = c
            .rows
            .iter()
            .map(|r| value(r.memory_ns_per_check))
            .collect();
        let us: Vec<Option<f64>> = c.rows.iter().map(|r| value(r.redis_us_per_call)).collect();
        let mem: Vec<Option<f64>> = c
            .rows
            .iter()
            .map(|r| value(r.memory_bytes_per_key))
            .collect();
        let red: Vec<Option<f64>> = c
            .rows
            .iter()
            .map(|r| value(r.redis_bytes_per_key))
            .collect();
        let none = vec![None; NAMES.len()];
        let has_redis = us.iter().any(Option::is_some);
        render!("cost", (1300, 1300), |root| {
            let parts = root.split_evenly((3, 1));
            grouped_bars(
                &parts[0],
                "Time per check in memory (keyed, 1,000 keys)",
                "ns per check",
                &[Bars {
                    label: "memory",
                    color: GOOD,
                    values: ns.clone(),
                    whiskers: none.clone(),
                }],
                None,
                0,
            )
            .and_then(|()| {
                if has_redis {
                    grouped_bars(
                        &parts[1],
                        "Time per Redis call, one task (median, round trip included)",
                        "µs per call",
                        &[Bars {
                            label: "redis",
                            color: THIRD,
                            values: us.clone(),
                            whiskers: none.clone(),
                        }],
                        None,
                        0,
                    )
                } else {
                    note(
                        &parts[1],
                        "Time per Redis call",
                        "skipped: no Redis in this run",
                    )
                }
            })
            .and_then(|()| {
                let mut series = vec![Bars {
                    label: "memory",
                    color: GOOD,
                    values: mem.clone(),
                    whiskers: none.clone(),
                }];
                if red.iter().any(Option::is_some) {
                    series.push(Bars {
                        label: "redis",
                        color: THIRD,
                        values: red.clone(),
                        whiskers: none.clone(),
                    });
                }
                grouped_bars(
                    &parts[2],
                    "Memory per key, each key at its fullest (burst of 10 used)",
                    "bytes per key",
                    &series,
                    None,
                    0,
                )
            })
        });
    }
    Ok(drawn)
}
