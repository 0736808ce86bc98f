//! Light traffic in the report: its CSV and its section.

use std::fmt::Write as _;
use std::path::Path;

use ratelab::AlgorithmKind;
use serde::Serialize;

use super::{CLOUDFLARE_WRONG_PCT, LightTraffic};
use crate::CompareError;
use crate::charts::Canvas;
use crate::markdown::{num, pct, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;
use crate::scenario::traffic::report::{accuracy_header, accuracy_rows, governor_sentence};

/// One line of `light-traffic.csv`.
#[derive(Serialize)]
struct CsvRow<'a> {
    algorithm: &'a str,
    offered: u64,
    admitted: u64,
    false_admissions: u64,
    false_refusals: u64,
    wrong_pct: f64,
    differs_from_log: u64,
    differs_from_log_pct: f64,
    max_in_window: u64,
    light_refused_pct: f64,
}

impl Part for LightTraffic {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::LightTraffic
    }

    fn draw(&self, _: &mut Canvas) -> Result<(), CompareError> {
        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        let t = &self.traffic;
        let rows = t.outcomes.iter().chain(&t.peers).map(|o| CsvRow {
            algorithm: &o.algorithm,
            offered: o.offered,
            admitted: o.admitted,
            false_admissions: o.false_admissions,
            false_refusals: o.false_refusals,
            wrong_pct: o.wrong_pct,
            differs_from_log: o.differs_from_log,
            differs_from_log_pct: o.differs_from_log_pct,
            max_in_window: o.max_in_window,
            light_refused_pct: o.light.refused_pct,
        });
        write_csv(&dir.join("light-traffic.csv"), rows)
    }

    fn section(&self, _: &[String]) -> String {
        let t = &self.traffic;
        let p = &t.population;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## {}\n\nThe other end from the realistic traffic above: as on a typical API, most clients stay well under their limit. Simulated time, {} s, quota {} per client; {} clients off for {} s on average, then on for {} s at a Poisson rate drawn between {} and {} per second, and {} near the limit (Poisson, {} per second): {} requests in all, the same for every algorithm and for governor.\n",
            ScenarioName::LightTraffic.title(),
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
        if let Some(c) = t
            .outcomes
            .iter()
            .find(|o| o.algorithm == AlgorithmKind::SlidingCounter.name())
        {
            let _ = writeln!(
                out,
                "**The sliding counter against the exact sliding log**: {} of {} decisions differ ({} %); by the exact rule {} % of requests were wrongly allowed or refused ({} false admissions, {} false refusals). Cloudflare published **{} %** of requests wrongly allowed or rate limited for its sliding-window counter on its own traffic (\"How we built rate limiting capable of scaling to millions of domains\", Cloudflare blog, 2017): a figure from elsewhere, on traffic we do not have, set here beside ours ({}× theirs).\n",
                c.differs_from_log,
                c.offered,
                pct(c.differs_from_log_pct),
                pct(c.wrong_pct),
                c.false_admissions,
                c.false_refusals,
                num(CLOUDFLARE_WRONG_PCT, 3),
                num(c.differs_from_log_pct / CLOUDFLARE_WRONG_PCT, 1)
            );
        }
        let header = accuracy_header(t);
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        out += &table(&header, &accuracy_rows(t));
        out += "\n";
        out += &governor_sentence(t);
        out += "\n";
        out
    }
}
