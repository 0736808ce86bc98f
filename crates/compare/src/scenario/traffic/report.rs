//! Realistic traffic in the report: its CSV, its section and its charts.

use std::fmt::Write as _;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use ratelab::AlgorithmKind;
use serde::Serialize;

use super::*;
use crate::CompareError;
use crate::charts::{
    Bars, Canvas, Drawn, GOOD, LIMIT, color, font, grouped_bars, no_whiskers, num_label, render,
};
use crate::markdown::{chart, num, pct, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;

/// One line of `traffic.csv`.
#[derive(Serialize)]
struct CsvRow<'a> {
    algorithm: &'a str,
    offered: u64,
    admitted: u64,
    false_admissions: u64,
    false_refusals: u64,
    false_admission_pct: f64,
    false_refusal_pct: f64,
    differs_from_log: u64,
    differs_from_log_pct: f64,
    max_in_window: u64,
    clients_over_limit: usize,
    heavy_admitted_per_sec: f64,
    heavy_admitted_pct: f64,
    light_refused_pct: f64,
}

/// One line of `burst-timeline.csv`: one algorithm in one bin.
#[derive(Serialize)]
struct TimelineRow<'a> {
    bin_start_s: f64,
    algorithm: &'a str,
    offered_per_s: f64,
    admitted_per_s: f64,
}

impl Part for Traffic {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::Traffic
    }

    fn draw(&self, canvas: &mut Canvas) -> Result<(), CompareError> {
        let t = self;
        render!(canvas, "burst-timeline", (1400, 1100), |root| {
            burst_timeline(&root, &t.timeline, t.limit as f64, &t.quota)
        });
        let max: Vec<Option<f64>> = t
            .outcomes
            .iter()
            .map(|o| Some(o.max_in_window as f64))
            .collect();
        let promised: Vec<Option<f64>> = t
            .outcomes
            .iter()
            .map(|o| Some(o.promised_in_window as f64))
            .collect();
        let none = no_whiskers();
        render!(canvas, "accuracy", (1300, 600), |root| {
            grouped_bars(
                &root,
                &format!(
                    "Realistic traffic: the most one client got in any {} ms, against each algorithm's own promise",
                    t.window_ms
                ),
                "requests admitted",
                &[
                    Bars {
                        label: "its own promise (README: what each algorithm promises)",
                        color: RGBColor(190, 190, 190),
                        values: promised.clone(),
                        whiskers: none.clone(),
                    },
                    Bars {
                        label: "worst client, observed",
                        color: GOOD,
                        values: max.clone(),
                        whiskers: none.clone(),
                    },
                ],
                Some((
                    t.limit as f64,
                    format!("quota: {} per {} ms", t.limit, t.window_ms),
                )),
                0,
            )
        });

        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        let rows = self.outcomes.iter().chain(&self.peers).map(|o| CsvRow {
            algorithm: &o.algorithm,
            offered: o.offered,
            admitted: o.admitted,
            false_admissions: o.false_admissions,
            false_refusals: o.false_refusals,
            false_admission_pct: o.false_admission_pct,
            false_refusal_pct: o.false_refusal_pct,
            differs_from_log: o.differs_from_log,
            differs_from_log_pct: o.differs_from_log_pct,
            max_in_window: o.max_in_window,
            clients_over_limit: o.clients_over_limit,
            heavy_admitted_per_sec: o.heavy.admitted_per_sec,
            heavy_admitted_pct: o.heavy.admitted_pct,
            light_refused_pct: o.light.refused_pct,
        });
        write_csv(&dir.join("traffic.csv"), rows)?;
        let t = &self.timeline;
        let rows = t.offered.iter().enumerate().flat_map(|(i, &offered)| {
            t.admitted
                .iter()
                .map(move |(algorithm, admitted)| TimelineRow {
                    bin_start_s: i as f64 * t.bin_ms as f64 / 1e3,
                    algorithm,
                    offered_per_s: offered,
                    admitted_per_s: admitted[i],
                })
        });
        write_csv(&dir.join("burst-timeline.csv"), rows)
    }

    fn section(&self, charts: &[String]) -> String {
        let mut out = String::new();
        write_section(&mut out, self, charts);
        out
    }
}

/// The accuracy table's rows: every algorithm, then the peers.
pub(crate) fn accuracy_rows(t: &Traffic) -> Vec<Vec<String>> {
    t.outcomes
        .iter()
        .chain(&t.peers)
        .map(|o| {
            vec![
                if t.peers.contains(o) {
                    format!("{} (peer)", o.algorithm)
                } else {
                    o.algorithm.clone()
                },
                format!(
                    "{} %",
                    num(100.0 * o.admitted as f64 / o.offered.max(1) as f64, 2)
                ),
                format!("{}", o.max_in_window),
                format!(
                    "at most {}: {} beyond",
                    o.promised_in_window, o.beyond_promise
                ),
                o.clients_over_limit.to_string(),
                format!("{} ({} %)", o.false_admissions, pct(o.false_admission_pct)),
                format!("{} ({} %)", o.false_refusals, pct(o.false_refusal_pct)),
                format!(
                    "{} % ({} % / {} %)",
                    pct(o.wrong_pct),
                    pct(o.light.wrong_pct),
                    pct(o.heavy.wrong_pct)
                ),
                format!("{} ({} %)", o.differs_from_log, pct(o.differs_from_log_pct)),
            ]
        })
        .collect()
}

/// The accuracy table's header.
pub(crate) fn accuracy_header(t: &Traffic) -> Vec<String> {
    vec![
        "Algorithm".into(),
        "Admitted".into(),
        format!("Worst client in any {} ms (limit {})", t.window_ms, t.limit),
        format!(
            "Its own promise for any {} ms: admissions beyond it",
            t.window_ms
        ),
        "Clients ever over the limit".into(),
        "False admissions".into(),
        "False refusals".into(),
        "Wrong by the exact rule (light / heavy clients)".into(),
        "Decisions unlike the sliding log's".into(),
    ]
}

/// The sentence on governor's decisions against ratelab gcra's.
pub(crate) fn governor_sentence(t: &Traffic) -> String {
    let Some(g) = t.peers.iter().find(|p| p.algorithm == GOVERNOR) else {
        return String::new();
    };
    format!(
        "**governor** (GCRA, one direct limiter per client on its `FakeRelativeClock`, moved to each request's instant) decided the same {} requests: **{} of its decisions differ from ratelab gcra's**{}.\n",
        g.offered,
        t.governor_differs_from_gcra,
        if t.governor_differs_from_gcra == 0 {
            " (equal quotas, equal decisions: the same algorithm)"
        } else {
            " (they should be equal at equal quota: a discrepancy to investigate)"
        }
    )
}

/// Each algorithm judged against its own promise, in one sentence.
pub(crate) fn promise_sentence(t: &Traffic) -> String {
    let broken: Vec<String> = t
        .outcomes
        .iter()
        .filter(|o| o.beyond_promise > 0)
        .map(|o| format!("{} ({} beyond)", o.algorithm, o.beyond_promise))
        .collect();
    if broken.is_empty() {
        format!(
            "\n**Each against its own promise**, every client over every span: none of the {} algorithms admitted anything beyond what it promises (README, \"What each algorithm promises\"); the false admissions above count what a trailing-window limit would have refused, which only the sliding log promises.\n",
            t.outcomes.len()
        )
    } else {
        format!(
            "\n**⚠ Beyond their own promise**: {}. A limiter that admits more than it promises is a bug.\n",
            broken.join(", ")
        )
    }
}

fn write_section(out: &mut String, t: &Traffic, charts: &[String]) {
    let p = &t.population;
    let _ = writeln!(
        out,
        "## Realistic traffic\n\nSimulated time, {} s, quota {} per client. {} light clients (off for {} s on average, then on for {} s at a Poisson rate drawn between {} and {} per second) and {} heavy hitters (Poisson, {} per second, always on): {} requests in all, the same for every algorithm.\n",
        p.seconds,
        t.quota,
        p.light,
        p.mean_off_secs,
        p.mean_on_secs,
        p.light_rate.0,
        p.light_rate.1,
        p.heavy,
        p.heavy_rate,
        t.requests
    );
    let _ = writeln!(
        out,
        "**Accuracy** is measured against the exact sliding window: for each request, would one more, counting what this algorithm admitted for the client in the trailing {} ms, stay within {}? A *false admission* is admitted when the answer is no, a *false refusal* refused when it is yes. Cloudflare reported 0.003 % of requests wrongly allowed or refused for its sliding-window counter, on its own traffic. Clients held at the limit (every heavy hitter, and light clients during their faster bursts) make many decisions right at the edge, where the approximations differ most; the light and heavy columns separate the two. The last column compares decisions directly, request by request, with the sliding log's on the same arrivals. The bucket algorithms promise something else (burst + rate × t), so for them these figures measure how far that promise is from a trailing-window limit, not a bug.\n",
        t.window_ms, t.limit
    );
    let header = accuracy_header(t);
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    *out += &table(&header, &accuracy_rows(t));
    *out += "\n";
    *out += &governor_sentence(t);
    *out += &promise_sentence(t);
    chart(
        out,
        charts,
        "accuracy",
        "The worst client against each algorithm's own promise",
    );
    let _ = writeln!(
        out,
        "**Fairness**: what the heavy hitters got (quota {} per client) and what the light clients lost.\n",
        t.quota
    );
    let rows: Vec<Vec<String>> = t
        .outcomes
        .iter()
        .map(|o| {
            vec![
                o.algorithm.clone(),
                format!("{} / s", num(o.heavy.admitted_per_sec, 2)),
                format!("{} %", num(o.heavy.admitted_pct, 1)),
                format!("{} %", num(o.light.refused_pct, 2)),
                format!("{} / s", num(o.light.admitted_per_sec, 3)),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Heavy hitter: admitted per client",
            "Heavy hitter: % admitted",
            "Light clients: % refused",
            "Light client: admitted per client",
        ],
        &rows,
    );
    let _ = writeln!(
        out,
        "\n**One client's bursts**, admitted against offered over time (every algorithm on the same arrivals, evenly spaced: {}):",
        t.timeline
            .pattern
            .iter()
            .map(|(a, b, r)| format!("{} per second from {a} s to {b} s", num(*r, 0)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    chart(
        out,
        charts,
        "burst-timeline",
        "Admitted against offered over time, per algorithm",
    );
}

fn burst_timeline<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    t: &Timeline,
    limit: f64,
    quota: &str,
) -> Drawn
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let per_sec = 1_000.0 / t.bin_ms as f64;
    let root = root.titled(
        &format!(
            "One client's bursts: admitted vs offered, every algorithm (quota {quota}; {} ms bins)",
            t.bin_ms
        ),
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
            .y_desc(format!(
                "requests / s (per {} ms bin × {})",
                t.bin_ms,
                num_label(per_sec)
            ))
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
    if let Some(legend) = panels.get(AlgorithmKind::ALL.len()) {
        let (w, _) = legend.dim_in_pixel();
        let x = i32::try_from(w / 8).unwrap_or(0);
        let items: [(String, ShapeStyle); 3] = [
            (
                format!(
                    "admitted per second (bars, one colour per algorithm): a bin's count × {}",
                    num_label(per_sec)
                ),
                color("gcra").mix(0.75).filled(),
            ),
            (
                format!(
                    "offered per second (grey line): a bin's count × {}",
                    num_label(per_sec)
                ),
                BLACK.mix(0.55).stroke_width(3),
            ),
            (
                format!("rate limit, {} per second (dashed red)", num_label(limit)),
                LIMIT.stroke_width(3),
            ),
        ];
        for (k, (text, style)) in items.into_iter().enumerate() {
            let y = 60 + 40 * i32::try_from(k).unwrap_or(0);
            legend.draw(&Rectangle::new([(x, y - 8), (x + 24, y + 8)], style))?;
            legend.draw(&Text::new(
                text.as_str(),
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
