//! `reports/README.md` and the raw data beside it, generated from a run's
//! [`Results`]: every sentence is computed from the numbers of the same run
//! (the decision guide included), so regenerating the report reproduces it.

use std::fmt::Write as _;
use std::path::Path;

use crate::algorithms::NAMES;
use crate::scenario::{self, ScenarioName};
use crate::stats::Spread;
use crate::{CompareError, Results};

/// The report's file names, relative to the output folder.
pub const README: &str = "README.md";
/// The folder of the charts.
pub const CHARTS: &str = "charts";
/// The folder of the raw data.
pub const DATA: &str = "data";

fn write_file(path: &Path, contents: &str) -> Result<(), CompareError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| CompareError::Write {
            path: parent.to_owned(),
            source,
        })?;
    }
    std::fs::write(path, contents).map_err(|source| CompareError::Write {
        path: path.to_owned(),
        source,
    })
}

/// Writes the charts, the data files and `README.md` into `dir`.
pub fn write(results: &Results, dir: &Path) -> Result<(), CompareError> {
    let charts = crate::charts::draw_all(results, &dir.join(CHARTS))?;
    write_data(results, &dir.join(DATA))?;
    write_file(&dir.join(README), &readme(results, &charts))
}

/// A CSV line from fields (quoted when needed).
fn csv_line(fields: &[String]) -> String {
    let mut line = fields
        .iter()
        .map(|f| {
            if f.contains([',', '"', '\n']) {
                format!("\"{}\"", f.replace('"', "\"\""))
            } else {
                f.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(",");
    line.push('\n');
    line
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

fn write_data(results: &Results, dir: &Path) -> Result<(), CompareError> {
    let json = serde_json::to_string_pretty(results).expect("plain data serializes");
    write_file(&dir.join("results.json"), &json)?;
    let mut files: Vec<(&str, String)> = Vec::new();
    if let Some(r) = &results.reference {
        let mut csv = csv_line(
            &[
                "algorithm",
                "backend",
                "clock",
                "burst_of_20_admitted",
                "after_1s_10_calls_admitted",
                "burst_wait_secs",
                "later_wait_secs",
                "burst_retry_ms",
            ]
            .map(String::from),
        );
        for row in r.rows.iter().chain(&r.real_time_rows) {
            csv += &csv_line(&[
                row.algorithm.clone(),
                row.backend.clone(),
                row.clock.clone(),
                row.burst_admitted.to_string(),
                row.later_admitted.to_string(),
                opt(row.burst_wait_secs),
                opt(row.later_wait_secs),
                opt(row.burst_retry_ms),
            ]);
        }
        files.push(("reference.csv", csv));
    }
    if let Some(w) = &results.window_edge {
        let mut csv = csv_line(
            &[
                "algorithm",
                "backend",
                "at_0.95s",
                "at_1.05s",
                "within_0.11s",
                "own_bound_within_0.1s",
            ]
            .map(String::from),
        );
        for row in &w.rows {
            csv += &csv_line(&[
                row.algorithm.clone(),
                row.backend.clone(),
                row.first.to_string(),
                row.second.to_string(),
                row.total.to_string(),
                row.own_bound.to_string(),
            ]);
        }
        files.push(("window-edge.csv", csv));
    }
    if let Some(c) = &results.concurrency {
        let mut csv = csv_line(&["algorithm", "variant", "repeat", "admitted"].map(String::from));
        for row in &c.rows {
            for (i, n) in row.read_then_write_runs.iter().enumerate() {
                csv += &csv_line(&[
                    row.algorithm.clone(),
                    "read-then-write".into(),
                    i.to_string(),
                    n.to_string(),
                ]);
            }
            if let Some(a) = &row.atomic {
                csv += &csv_line(&[
                    row.algorithm.clone(),
                    "atomic (min)".into(),
                    String::new(),
                    a.min.to_string(),
                ]);
                csv += &csv_line(&[
                    row.algorithm.clone(),
                    "atomic (max)".into(),
                    String::new(),
                    a.max.to_string(),
                ]);
            }
        }
        files.push(("concurrency.csv", csv));
    }
    if let Some(b) = &results.load_balancer {
        let mut csv = csv_line(
            &[
                "algorithm",
                "per_instance_memory",
                "shared_redis_min",
                "shared_redis_median",
                "shared_redis_max",
                "http_per_instance_memory",
                "http_shared_redis",
            ]
            .map(String::from),
        );
        for row in &b.rows {
            csv += &csv_line(&[
                row.algorithm.clone(),
                row.per_instance_memory.to_string(),
                opt(row.shared_redis.map(|s| s.min)),
                opt(row.shared_redis.map(|s| s.median)),
                opt(row.shared_redis.map(|s| s.max)),
                opt(row.http_per_instance_memory),
                opt(row.http_shared_redis),
            ]);
        }
        files.push(("load-balancer.csv", csv));
    }
    if let Some(t) = &results.traffic {
        let mut csv = csv_line(
            &[
                "algorithm",
                "offered",
                "admitted",
                "false_admissions",
                "false_refusals",
                "false_admission_pct",
                "false_refusal_pct",
                "max_in_window",
                "clients_over_limit",
                "heavy_admitted_per_sec",
                "heavy_admitted_pct",
                "light_refused_pct",
            ]
            .map(String::from),
        );
        for o in &t.outcomes {
            csv += &csv_line(&[
                o.algorithm.clone(),
                o.offered.to_string(),
                o.admitted.to_string(),
                o.false_admissions.to_string(),
                o.false_refusals.to_string(),
                o.false_admission_pct.to_string(),
                o.false_refusal_pct.to_string(),
                o.max_in_window.to_string(),
                o.clients_over_limit.to_string(),
                o.heavy.admitted_per_sec.to_string(),
                o.heavy.admitted_pct.to_string(),
                o.light.refused_pct.to_string(),
            ]);
        }
        files.push(("traffic.csv", csv));
        let mut header = vec!["bin_start_s".to_owned(), "offered_per_s".to_owned()];
        header.extend(
            t.timeline
                .admitted
                .iter()
                .map(|(n, _)| format!("{n}_admitted_per_s")),
        );
        let mut csv = csv_line(&header);
        for (i, offered) in t.timeline.offered.iter().enumerate() {
            let mut line = vec![
                format!("{:.3}", i as f64 * t.timeline.bin_ms as f64 / 1e3),
                offered.to_string(),
            ];
            line.extend(t.timeline.admitted.iter().map(|(_, v)| v[i].to_string()));
            csv += &csv_line(&line);
        }
        files.push(("burst-timeline.csv", csv));
    }
    if let Some(s) = &results.smoothness {
        let mut csv = csv_line(
            &[
                "algorithm",
                "admitted",
                "peak_per_sec_100ms",
                "peak_in_1s",
                "gap_median_ms",
                "gap_p5_ms",
                "gap_cv",
                "delay_mean_ms",
                "delay_p99_ms",
                "delay_max_ms",
            ]
            .map(String::from),
        );
        for o in &s.outputs {
            csv += &csv_line(&[
                o.algorithm.clone(),
                o.admitted.to_string(),
                o.peak_per_sec_100ms.to_string(),
                o.peak_in_1s.to_string(),
                o.gap_ms.median.to_string(),
                o.gap_p5_ms.to_string(),
                o.short_gaps_pct.to_string(),
                o.gap_cv.to_string(),
                o.delay_mean_ms.to_string(),
                o.delay_p99_ms.to_string(),
                o.delay_max_ms.to_string(),
            ]);
        }
        files.push(("smoothness.csv", csv));
    }
    if let Some(c) = &results.cost {
        let mut csv = csv_line(
            &[
                "algorithm",
                "memory_ns_per_check",
                "memory_bytes_per_key",
                "redis_us_per_call",
                "redis_p99_us",
                "redis_checks_per_sec",
                "redis_bytes_per_key",
                "from_bench_summary",
            ]
            .map(String::from),
        );
        for r in &c.rows {
            let v = |f: Option<scenario::cost::Figure>| opt(f.map(|f| f.value));
            let bench = [
                r.memory_ns_per_check,
                r.memory_bytes_per_key,
                r.redis_us_per_call,
                r.redis_checks_per_sec,
                r.redis_bytes_per_key,
            ]
            .iter()
            .flatten()
            .any(|f| f.from_bench);
            csv += &csv_line(&[
                r.algorithm.clone(),
                v(r.memory_ns_per_check),
                v(r.memory_bytes_per_key),
                v(r.redis_us_per_call),
                opt(r.redis_p99_us),
                v(r.redis_checks_per_sec),
                v(r.redis_bytes_per_key),
                bench.to_string(),
            ]);
        }
        files.push(("cost.csv", csv));
    }
    for (name, csv) in files {
        write_file(&dir.join(name), &csv)?;
    }
    Ok(())
}

/// A Markdown table.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    out += &format!("|{}\n", header.iter().map(|_| "---|").collect::<String>());
    for row in rows {
        out += &format!("| {} |\n", row.join(" | "));
    }
    out
}

fn chart(out: &mut String, charts: &[String], name: &str, alt: &str) {
    if charts.iter().any(|c| c == name) {
        let _ = writeln!(
            out,
            "\n![{alt}]({CHARTS}/{name}.png)\n\n<sub>[SVG]({CHARTS}/{name}.svg)</sub>\n"
        );
    }
}

/// `x` with at most `d` decimals, trailing zeros dropped.
fn num(x: f64, d: usize) -> String {
    let s = format!("{x:.d$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// A percentage with three significant digits (26.5, 4.2, 0.0312): small
/// shares stay visible, large ones do not carry noise digits.
fn pct(x: f64) -> String {
    if x == 0.0 {
        return "0".to_owned();
    }
    let magnitude = x.abs().log10().floor();
    let decimals = [0, 1, 2, 3, 4, 5, 6]
        .into_iter()
        .find(|&d| f64::from(d) >= 2.0 - magnitude)
        .unwrap_or(6);
    num(x, decimals as usize)
}

fn spread_text(s: &Spread) -> String {
    s.counts_text()
}

/// The README.
pub fn readme(results: &Results, charts: &[String]) -> String {
    let m = &results.meta;
    let mut out = String::new();
    out += "# Which rate limiter? Every ratelab algorithm, measured side by side\n\n";
    out += "<!-- Generated by ratelab-compare (`just compare`). Do not edit: run it again. -->\n\n";
    out += "Generated by `just compare`: every algorithm runs the same scenarios on the same quota, \
in memory and on Redis, and every sentence below, the decision guide included, is computed from the \
numbers of this run. Regenerate it with `just compare`; the simulated-time scenarios give identical \
numbers for the same seed, the real-time and Redis ones are repeated and reported with their spread.\n\n";

    out += "## What was run\n\n";
    let durations = m
        .durations
        .iter()
        .map(|(n, s)| format!("{n} ({s} s)"))
        .collect::<Vec<_>>()
        .join(", ");
    out += &table(
        &["", ""],
        &[
            vec!["Command".into(), format!("`{}`", m.command)],
            vec!["Seed".into(), m.seed.to_string()],
            vec![
                "Size".into(),
                if m.quick {
                    format!("quick (small simulations), {} repeats", m.repeats)
                } else {
                    format!("full, {} repeats of each real-time measurement", m.repeats)
                },
            ],
            vec!["Commit".into(), format!("`{}`", m.commit)],
            vec!["Date".into(), m.date.clone()],
            vec!["Machine".into(), m.machine.clone()],
            vec!["Build".into(), m.build.clone()],
            vec![
                "Redis".into(),
                match &m.redis_version {
                    Some(v) => format!("Redis {v}: {}", m.redis),
                    None => format!("**{}**", m.redis),
                },
            ],
            vec!["Scenarios (time taken)".into(), durations],
        ],
    );
    out += "\n";

    if !results.skipped.is_empty() {
        out += "## ⚠ Skipped in this run\n\n";
        out += "These parts did not run, so their rows and charts are missing below:\n\n";
        for s in &results.skipped {
            let _ = writeln!(
                out,
                "- **{}**: {} ({}). To enable: {}.",
                s.scenario, s.what, s.reason, s.how_to_enable
            );
        }
        out += "\n";
    }

    out += "## Decision guide\n\n";
    out += "Each line follows from the numbers in the sections below (section in brackets).\n\n";
    for line in guide(results) {
        let _ = writeln!(out, "- {line}");
    }
    out += "\n## Contents\n\n";
    for name in ScenarioName::ALL {
        let present = match name {
            ScenarioName::Reference => results.reference.is_some(),
            ScenarioName::WindowEdge => results.window_edge.is_some(),
            ScenarioName::Concurrency => results.concurrency.is_some(),
            ScenarioName::LoadBalancer => results.load_balancer.is_some(),
            ScenarioName::Traffic => results.traffic.is_some(),
            ScenarioName::Smoothness => results.smoothness.is_some(),
            ScenarioName::Cost => results.cost.is_some(),
        };
        if present {
            let _ = writeln!(out, "- [{}](#{})", name.title(), anchor(name.title()));
        }
    }
    out += "- [Raw data](#raw-data)\n\n";

    if let Some(r) = &results.reference {
        section_reference(&mut out, r);
    }
    if let Some(w) = &results.window_edge {
        section_window_edge(&mut out, w, charts);
    }
    if let Some(c) = &results.concurrency {
        section_concurrency(&mut out, c, charts);
    }
    if let Some(b) = &results.load_balancer {
        section_balancer(&mut out, b, charts);
    }
    if let Some(t) = &results.traffic {
        section_traffic(&mut out, t, charts);
    }
    if let Some(s) = &results.smoothness {
        section_smoothness(&mut out, s, charts);
    }
    if let Some(c) = &results.cost {
        section_cost(&mut out, c, charts);
    }

    out += "## Raw data\n\n";
    out += &format!(
        "Everything above, as measured: [`{DATA}/results.json`]({DATA}/results.json) (all results), and one CSV per table in [`{DATA}/`]({DATA}/). Charts are in [`{CHARTS}/`]({CHARTS}/) as SVG and PNG.\n\n"
    );
    out += "Reproduce: `just compare` (release build; starts a throwaway `redis-server` when one is on PATH, or uses `REDIS_URL`). \
Options: `cargo run --release -p ratelab-compare -- --help`.\n";
    out
}

fn anchor(title: &str) -> String {
    title.to_lowercase().replace(' ', "-")
}

fn section_reference(out: &mut String, r: &scenario::reference::Reference) {
    let _ = writeln!(out, "## Reference table\n");
    let _ = writeln!(
        out,
        "The reference article's test ({}): a burst of {} simultaneous requests; one second later, {} more; the wait a refusal indicates (`Retry-After`, whole seconds, rounded up). The article's token bucket gives **10, 5, 1 s**. \
The window algorithms map the quota to {} per 2-second window (same capacity, same long-run rate), so one second into the window nothing has come back for them. \
These rows run on a clock moved by hand, starting at a window boundary (the Redis scripts get `now` from it): deterministic, and the same instants on both backends.\n",
        r.quota,
        scenario::reference::BURST,
        scenario::reference::LATER,
        10
    );
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| {
            vec![
                row.algorithm.clone(),
                row.backend.clone(),
                format!("{} admitted", row.burst_admitted),
                format!("{} admitted", row.later_admitted),
                row.wait_text(),
                row.burst_retry_ms
                    .map_or("–".into(), |ms| format!("{} ms", num(ms, 1))),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Backend",
            "Burst of 20",
            "After 1 s, 10 calls",
            "Wait indicated on refusal",
            "Exact wait, first refusals",
        ],
        &rows,
    );
    if !r.real_time_rows.is_empty() {
        let _ = writeln!(
            out,
            "\nAs the article ran it: the token bucket on a real clock (Redis `TIME` on Redis), with a real one-second sleep between the rounds:\n"
        );
        let rows: Vec<Vec<String>> = r
            .real_time_rows
            .iter()
            .map(|row| {
                vec![
                    row.algorithm.clone(),
                    format!("{} ({})", row.backend, row.clock),
                    format!("{} admitted", row.burst_admitted),
                    format!("{} admitted", row.later_admitted),
                    row.wait_text(),
                ]
            })
            .collect();
        *out += &table(
            &[
                "Algorithm",
                "Backend (clock)",
                "Burst of 20",
                "After 1 s, 10 calls",
                "Wait indicated on refusal",
            ],
            &rows,
        );
    }
    *out += "\n";
}

fn section_window_edge(out: &mut String, w: &scenario::window_edge::WindowEdge, charts: &[String]) {
    let _ = writeln!(
        out,
        "## Window edge\n\nLimit {} per second; {} requests at 0.95 s and {} at 1.05 s (the first test of the article). How many pass within 0.11 s, against the limit and against what each algorithm itself promises for an interval of 0.1 s.\n",
        w.limit,
        scenario::window_edge::PER_INSTANT,
        scenario::window_edge::PER_INSTANT
    );
    let rows: Vec<Vec<String>> = w
        .rows
        .iter()
        .map(|r| {
            let verdict = if r.total as u64 > u64::from(w.limit) {
                format!(
                    "**{}× the limit**",
                    num(r.total as f64 / f64::from(w.limit), 2)
                )
            } else {
                "within the limit".into()
            };
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
}

fn section_concurrency(
    out: &mut String,
    c: &scenario::concurrency::Concurrency,
    charts: &[String],
) {
    let _ = writeln!(
        out,
        "## Concurrency\n\n{} simultaneous requests, limit {}, on a real Redis, from {} app instances (one connection each), released together; repeated {} times. \
The atomic variant is each algorithm's Lua script (EVALSHA). The **deliberately flawed** variant reads the same state with `GET`, decides in the client and writes it back with `SET` (the article's second test). Time is frozen (the clients pass `now`), so only the interleaving varies.\n",
        c.requests, c.limit, c.requests, c.repeats
    );
    let rows: Vec<Vec<String>> = c
        .rows
        .iter()
        .map(|r| {
            let over = r
                .read_then_write_runs
                .iter()
                .filter(|&&n| n > c.limit as usize)
                .count();
            vec![
                r.algorithm.clone(),
                r.atomic.as_ref().map_or("skipped".into(), spread_text),
                spread_text(&r.read_then_write),
                format!("{over} of {}", r.read_then_write_runs.len()),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Atomic script: admitted",
            "Read-then-write (flawed): admitted",
            "Repeats over the limit",
        ],
        &rows,
    );
    chart(
        out,
        charts,
        "concurrency",
        "Race: atomic script against read-then-write",
    );
}

fn section_balancer(out: &mut String, b: &scenario::balancer::LoadBalancer, charts: &[String]) {
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
                    .map_or("skipped".into(), spread_text),
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

fn section_traffic(out: &mut String, t: &scenario::traffic::Traffic, charts: &[String]) {
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
        "**Accuracy** is measured against the exact sliding window: for each request, would one more, counting what this algorithm admitted for the client in the trailing {} ms, stay within {}? A *false admission* is admitted when the answer is no, a *false refusal* refused when it is yes. Cloudflare reported 0.003 % of requests wrongly allowed or refused for its sliding-window counter, on its own traffic. Clients held at the limit (every heavy hitter, and light clients during their faster bursts) make many decisions right at the edge, where the approximations differ most; the light and heavy columns separate the two. The bucket algorithms promise something else (burst + rate × t), so for them these figures measure how far that promise is from a trailing-window limit, not a bug.\n",
        t.window_ms, t.limit
    );
    let rows: Vec<Vec<String>> = t
        .outcomes
        .iter()
        .map(|o| {
            vec![
                o.algorithm.clone(),
                format!(
                    "{} %",
                    num(100.0 * o.admitted as f64 / o.offered.max(1) as f64, 2)
                ),
                format!("{}", o.max_in_window),
                o.clients_over_limit.to_string(),
                format!("{} ({} %)", o.false_admissions, pct(o.false_admission_pct)),
                format!("{} ({} %)", o.false_refusals, pct(o.false_refusal_pct)),
                format!(
                    "{} % ({} % / {} %)",
                    pct(o.wrong_pct),
                    pct(o.light.wrong_pct),
                    pct(o.heavy.wrong_pct)
                ),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Admitted",
            &format!("Worst client in any {} ms (limit {})", t.window_ms, t.limit),
            "Clients ever over the limit",
            "False admissions",
            "False refusals",
            "Differs from exact (light / heavy clients)",
        ],
        &rows,
    );
    chart(out, charts, "accuracy", "Accuracy on realistic traffic");
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

fn section_smoothness(out: &mut String, s: &scenario::smoothness::Smoothness, charts: &[String]) {
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

fn section_cost(out: &mut String, c: &scenario::cost::Cost, charts: &[String]) {
    let _ = writeln!(out, "## Cost\n\n{}\n", c.source);
    let fig = |f: Option<scenario::cost::Figure>, d: usize| {
        f.map_or("–".into(), |f| {
            format!(
                "{}{}",
                num(f.value, d),
                if f.from_bench { " (b)" } else { "" }
            )
        })
    };
    let rows: Vec<Vec<String>> = c
        .rows
        .iter()
        .map(|r| {
            vec![
                r.algorithm.clone(),
                fig(r.memory_ns_per_check, 1),
                fig(r.memory_bytes_per_key, 0),
                match (r.redis_us_per_call, r.redis_p99_us) {
                    (Some(f), Some(p99)) => format!("{} (p99 {})", fig(Some(f), 1), num(p99, 1)),
                    (f, _) => fig(f, 1),
                },
                fig(r.redis_checks_per_sec, 0),
                fig(r.redis_bytes_per_key, 0),
            ]
        })
        .collect();
    *out += &table(
        &[
            "Algorithm",
            "Memory: ns per check",
            "Memory: bytes per key",
            "Redis: µs per call",
            "Redis: checks per second",
            "Redis: bytes per key",
        ],
        &rows,
    );
    *out += "\nHow:\n\n";
    for m in &c.method {
        let _ = writeln!(out, "- {m}");
    }
    chart(out, charts, "cost", "Cost per check and per key");
}

/// The decision guide: one line per recommendation, each computed from the
/// results (and naming the section its numbers come from).
pub fn guide(results: &Results) -> Vec<String> {
    let mut lines = Vec::new();
    let traffic = results.traffic.as_ref();
    let outcome =
        |name: &str| traffic.and_then(|t| t.outcomes.iter().find(|o| o.algorithm == name));
    let cost_row = |name: &str| {
        results
            .cost
            .as_ref()
            .and_then(|c| c.rows.iter().find(|r| r.algorithm == name))
    };
    let bytes = |name: &str| {
        cost_row(name)
            .and_then(|r| r.memory_bytes_per_key)
            .map(|f| f.value)
    };
    let ns = |name: &str| {
        cost_row(name)
            .and_then(|r| r.memory_ns_per_check)
            .map(|f| f.value)
    };

    // Shared state behind a balancer.
    if let Some(b) = &results.load_balancer {
        let worst = b
            .rows
            .iter()
            .map(|r| r.per_instance_memory)
            .max()
            .unwrap_or(0);
        let shared = b
            .rows
            .iter()
            .filter_map(|r| r.shared_redis)
            .map(|s| s.max)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let limit = b.limit as usize;
        if worst > limit {
            let mut line = format!(
                "**Share the count when more than one instance serves a client.** Behind a round-robin balancer, a limiter in each instance's memory admitted {worst} of {} requests for a limit of {limit} with {} instances ({}× the limit)",
                b.requests,
                b.instances,
                num(worst as f64 / limit as f64, 2)
            );
            match shared {
                Some(s) if s <= limit as f64 => {
                    let _ = write!(
                        line,
                        "; one count on Redis admitted at most {} [Load balancer]. Use the Redis variants for several instances, memory for one.",
                        num(s, 0)
                    );
                }
                Some(s) => {
                    let _ = write!(
                        line,
                        "; one count on Redis admitted up to {} [Load balancer].",
                        num(s, 0)
                    );
                }
                None => line += " [Load balancer]; the shared-Redis rows were skipped in this run.",
            }
            lines.push(line);
        }
    }

    // Atomicity.
    if let Some(c) = &results.concurrency {
        let worst = c
            .rows
            .iter()
            .map(|r| r.read_then_write.max)
            .fold(0.0, f64::max);
        let over: usize = c
            .rows
            .iter()
            .map(|r| {
                r.read_then_write_runs
                    .iter()
                    .filter(|&&n| n > c.limit as usize)
                    .count()
            })
            .sum();
        let runs: usize = c.rows.iter().map(|r| r.read_then_write_runs.len()).sum();
        let atomic_max = c
            .rows
            .iter()
            .filter_map(|r| r.atomic.map(|a| a.max))
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        if worst > f64::from(c.limit) {
            let mut line = format!(
                "**Never read, decide and write in separate Redis commands.** With {} simultaneous requests for a limit of {}, GET-decide-SET admitted up to {} and went over the limit in {over} of {runs} runs",
                c.requests,
                c.limit,
                num(worst, 0)
            );
            match atomic_max {
                Some(a) => {
                    let _ = write!(
                        line,
                        "; the atomic scripts admitted at most {} in every run [Concurrency].",
                        num(a, 0)
                    );
                }
                None => line += " [Concurrency].",
            }
            lines.push(line);
        } else {
            lines.push(format!(
                "Read-then-write stayed within the limit in all {runs} runs of this machine [Concurrency]: the race needs more concurrency than this run produced, it is still a race."
            ));
        }
    }

    // Fixed window.
    if let Some(w) = &results.window_edge
        && let Some(fixed) = w
            .rows
            .iter()
            .find(|r| r.algorithm == "fixed-window" && r.backend == "memory")
    {
        let limit = f64::from(w.limit);
        if fixed.total as f64 > limit {
            let mut line = format!(
                "**Avoid fixed-window when a burst at a window edge matters**: it admitted {} within 0.11 s for a limit of {} per second ({}×) [Window edge]",
                fixed.total,
                w.limit,
                num(fixed.total as f64 / limit, 2)
            );
            if let Some(o) = outcome("fixed-window") {
                let _ = write!(
                    line,
                    ", and on realistic traffic its worst client got {} in a trailing second, with {} % false admissions [Realistic traffic]",
                    o.max_in_window,
                    pct(o.false_admission_pct)
                );
            }
            if let (Some(b), Some(n)) = (bytes("fixed-window"), ns("fixed-window")) {
                let _ = write!(
                    line,
                    ". Its one merit is cost: {} bytes per key, {} ns per check [Cost]",
                    num(b, 0),
                    num(n, 0)
                );
            }
            line += ".";
            lines.push(line);
        }
    }

    // Exact: sliding log.
    if let Some(o) = outcome("sliding-log") {
        let mut line = format!(
            "**Use sliding-log when the limit must hold in every trailing window**: {} false admissions, worst client {} for a limit of {} [Realistic traffic]",
            o.false_admissions,
            o.max_in_window,
            traffic.map_or(0, |t| t.limit)
        );
        if let (Some(b), Some(g)) = (bytes("sliding-log"), bytes("gcra")) {
            let _ = write!(
                line,
                "; **avoid it when keys are many**: {} bytes per key against {} for gcra ({}×), and it grows with the limit [Cost]",
                num(b, 0),
                num(g, 0),
                num(b / g.max(1.0), 1)
            );
        }
        line += ".";
        lines.push(line);
    }

    // Approximate: sliding counter.
    if let Some(o) = outcome("sliding-counter") {
        // "Nearly exact" only if the data says so.
        let verdict = if o.wrong_pct < 0.1 {
            "**Use sliding-counter for a nearly exact trailing window in O(1) memory**"
        } else {
            "**sliding-counter is an approximation: use it when O(1) memory matters more than exactness**"
        };
        let mut line = format!(
            "{verdict}: {} % of requests decided differently from the exact log ({} % of the light clients', {} % of the heavy hitters'; {} % false admissions, {} % false refusals in all; Cloudflare reported 0.003 % on its own traffic), worst client {} in a trailing second [Realistic traffic]",
            pct(o.wrong_pct),
            pct(o.light.wrong_pct),
            pct(o.heavy.wrong_pct),
            pct(o.false_admission_pct),
            pct(o.false_refusal_pct),
            o.max_in_window
        );
        if let Some(b) = bytes("sliding-counter") {
            let _ = write!(line, "; {} bytes per key [Cost]", num(b, 0));
        }
        line += ".";
        lines.push(line);
    }

    // Bursty clients: token bucket and GCRA.
    if let (Some(tb), Some(g)) = (outcome("token-bucket"), outcome("gcra")) {
        let reference = results.reference.as_ref().and_then(|r| {
            r.rows
                .iter()
                .find(|row| row.algorithm == "token-bucket" && row.backend == "memory")
        });
        let mut line = String::from(
            "**Use token-bucket or gcra when clients may burst up to a capacity and then continue at the rate**",
        );
        if let Some(row) = reference {
            let _ = write!(
                line,
                ": they give the article's table ({}, {}, {}) [Reference table]",
                row.burst_admitted,
                row.later_admitted,
                row.wait_text()
            );
        }
        let same = tb.admitted == g.admitted && tb.false_admissions == g.false_admissions;
        let _ = write!(
            line,
            "; {} on realistic traffic ({} and {} admitted) [Realistic traffic]",
            if same {
                "they decided identically"
            } else {
                "they decided almost alike"
            },
            tb.admitted,
            g.admitted
        );
        let _ = write!(
            line,
            ". Within any second they admit up to burst + rate (worst client {}), so **avoid them when the contract is a hard per-window count**",
            tb.max_in_window.max(g.max_in_window)
        );
        if let (Some(bt), Some(bg), Some(nt), Some(ng)) = (
            bytes("token-bucket"),
            bytes("gcra"),
            ns("token-bucket"),
            ns("gcra"),
        ) {
            let cheaper = if bg <= bt { "gcra" } else { "token-bucket" };
            let _ = write!(
                line,
                ". Between the two, {cheaper} keeps less per key: {} bytes (gcra) against {} (token-bucket); {} ns against {} ns per check [Cost]",
                num(bg, 0),
                num(bt, 0),
                num(ng, 0),
                num(nt, 0)
            );
        }
        line += ".";
        lines.push(line);
    }

    // Leaky meter is the same policy as the token bucket.
    if let (Some(m), Some(tb)) = (outcome("leaky-meter"), outcome("token-bucket"))
        && m.admitted == tb.admitted
        && m.false_admissions == tb.false_admissions
        && m.false_refusals == tb.false_refusals
    {
        lines.push(format!(
                "leaky-meter admitted exactly what token-bucket admitted on realistic traffic ({} requests, same false admissions and refusals) [Realistic traffic]: the same policy, so choose between them by cost.",
                m.admitted
            ));
    }

    // Smoothing: leaky queue.
    if let Some(s) = &results.smoothness {
        let find = |n: &str| s.outputs.iter().find(|o| o.algorithm == n);
        if let (Some(q), Some(tb)) = (find("leaky-queue"), find("token-bucket"))
            && q.peak_per_sec_100ms < tb.peak_per_sec_100ms
        {
            lines.push(format!(
                    "**Use leaky-queue when the service behind cannot absorb bursts**: its peak output was {} per second against {} for token-bucket (rate {} per second), and {} % of its gaps were shorter than 1/rate against {} % [Smoothness]. **Avoid it for requests that must answer at once**: admitted requests waited {} ms on average, {} ms at the 99th percentile.",
                    num(q.peak_per_sec_100ms, 0),
                    num(tb.peak_per_sec_100ms, 0),
                    num(s.rate_per_sec, 0),
                    num(q.short_gaps_pct, 1),
                    num(tb.short_gaps_pct, 1),
                    num(q.delay_mean_ms, 0),
                    num(q.delay_p99_ms, 0)
                ));
        }
    }

    // Fairness.
    if let Some(t) = traffic {
        let heavy: Vec<f64> = t
            .outcomes
            .iter()
            .map(|o| o.heavy.admitted_per_sec)
            .collect();
        let light = t
            .outcomes
            .iter()
            .map(|o| (o.light.refused_pct, o.algorithm.as_str()))
            .collect::<Vec<_>>();
        let (lo, hi) = (
            heavy.iter().copied().fold(f64::INFINITY, f64::min),
            heavy.iter().copied().fold(0.0, f64::max),
        );
        let least = light.iter().copied().min_by(|a, b| a.0.total_cmp(&b.0));
        let most = light.iter().copied().max_by(|a, b| a.0.total_cmp(&b.0));
        if let (Some(least), Some(most)) = (least, most) {
            lines.push(format!(
                "Every algorithm held the heavy hitters ({} per second offered) to between {} and {} per second, for a quota of {}; light clients lost {} % of their requests with {} and {} % with {} [Realistic traffic].",
                num(t.population.heavy_rate, 0),
                num(lo, 2),
                num(hi, 2),
                t.quota,
                num(least.0, 2),
                least.1,
                num(most.0, 2),
                most.1
            ));
        }
    }

    // Redis cost against memory.
    if let Some(c) = &results.cost {
        let pairs: Vec<(f64, f64, f64)> = c
            .rows
            .iter()
            .filter_map(|r| {
                Some((
                    r.memory_ns_per_check?.value,
                    r.redis_us_per_call?.value,
                    r.redis_checks_per_sec.map_or(0.0, |f| f.value),
                ))
            })
            .collect();
        if !pairs.is_empty() {
            let ns_max = pairs.iter().map(|p| p.0).fold(0.0, f64::max);
            let us_min = pairs.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
            let us_max = pairs.iter().map(|p| p.1).fold(0.0, f64::max);
            let cps_min = pairs.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
            lines.push(format!(
                "**Use memory for a single instance, Redis when instances share clients**: a Redis check took {}–{} µs per call (at least {} checks per second from one connection), an in-memory one at most {} ns, {}× less [Cost].",
                num(us_min, 0),
                num(us_max, 0),
                num(cps_min, 0),
                num(ns_max, 0),
                num(us_min * 1e3 / ns_max.max(1e-9), 0)
            ));
        }
    }
    if lines.is_empty() {
        lines.push(
            "Run more scenarios (`--scenario` was narrow): there is nothing to recommend from."
                .into(),
        );
    }
    let _ = NAMES;
    lines
}
