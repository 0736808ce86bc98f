//! Leases in the report: their CSV and their section.

use std::fmt::Write as _;
use std::path::Path;

use super::{Leases, Row};
use crate::CompareError;
use crate::charts::Canvas;
use crate::markdown::{num, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;

/// `a–b`, or `a` when equal.
fn range(values: impl Iterator<Item = f64>, digits: usize) -> String {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() {
        return "–".into();
    }
    if num(lo, digits) == num(hi, digits) {
        num(lo, digits)
    } else {
        format!("{}–{}", num(lo, digits), num(hi, digits))
    }
}

impl Leases {
    /// The row the headline quotes: gcra, the most instances, offered the
    /// quota.
    pub fn headline(&self) -> Option<&Row> {
        let most = self.setup.instances.iter().max()?;
        self.hot().find(|r| {
            r.algorithm == "gcra"
                && r.instances == *most
                && r.offered_per_second == u64::from(self.setup.per_second)
        })
    }

    /// Rows within the leased bound, and all rows.
    pub fn within_leased(&self) -> (usize, usize) {
        (
            self.rows
                .iter()
                .filter(|r| r.worst_second <= r.leased_bound)
                .count(),
            self.rows.len(),
        )
    }

    /// Under-admitted refusals and all refusals, on the hot quota.
    pub fn under_admitted(&self) -> (u64, u64) {
        self.hot().fold((0, 0), |(u, r), row| {
            (u + row.under_admitted, r + row.refused)
        })
    }

    /// Per algorithm, the rows of `rows`.
    fn by_algorithm<'a>(rows: impl Iterator<Item = &'a Row>) -> Vec<(String, Vec<&'a Row>)> {
        let mut out: Vec<(String, Vec<&Row>)> = Vec::new();
        for row in rows {
            match out.iter_mut().find(|(a, _)| *a == row.algorithm) {
                Some((_, v)) => v.push(row),
                None => out.push((row.algorithm.clone(), vec![row])),
            }
        }
        out
    }
}

impl Part for Leases {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::Leases
    }

    fn draw(&self, _: &mut Canvas) -> Result<(), CompareError> {
        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        write_csv(&dir.join("leases.csv"), &self.rows)
    }

    fn section(&self, _: &[String]) -> String {
        let s = &self.setup;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## {}\n\nOne hot key of a shared limiter, {} per second (the burst too), leased by {} instances of `ratelab::lease::Leased` (leases of at most {} units living at most {} ms, the other settings at their defaults), on simulated time, {} s a row: Poisson checks at {} the quota, each sent to an instance drawn at random. The shared limiter is the algorithm in memory on the run's clock (it decides as the Redis scripts do), behind a wrapper that counts the calls reaching it (leases, settlements); a plain shared limiter takes one call per check, and runs beside on the same checks. **Over-admission**: the most checks admitted in any second, against the algorithm's own bound and against `Bound::leased` (the own bound with the lease lifetime added). **Under-admission**: a refusal that the shared limiter alone would have admitted, asked of a shadow limiter charged with every check the leases admitted.\n",
            ScenarioName::Leases.title(),
            s.per_second,
            s.instances
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            s.max_units,
            num(s.lifetime_micros as f64 / 1_000.0, 0),
            s.seconds,
            s.offered
                .iter()
                .map(|m| format!("{}×", num(*m, 2)))
                .collect::<Vec<_>>()
                .join(", "),
        );
        out += "gcra, every instance count and offered rate:\n\n";
        let rows: Vec<Vec<String>> = self
            .hot()
            .filter(|r| r.algorithm == "gcra")
            .map(|r| {
                vec![
                    r.instances.to_string(),
                    r.offered_per_second.to_string(),
                    r.checks.to_string(),
                    format!(
                        "{} ({}× fewer)",
                        num(r.calls_per_check, 4),
                        num(r.fewer_calls(), 1)
                    ),
                    format!("{} ({})", r.admitted, r.plain_admitted),
                    format!("{} ({} / {})", r.worst_second, r.own_bound, r.leased_bound),
                    format!("{} of {}", r.under_admitted, r.refused),
                ]
            })
            .collect();
        out += &table(
            &[
                "Instances",
                "Offered per second",
                "Checks",
                "Shared calls per check (plain: 1)",
                "Admitted (plain limiter)",
                "Worst second (own bound / leased bound)",
                "Under-admitted of refused",
            ],
            &rows,
        );
        out +=
            "\nEvery algorithm, over its rows above (every instance count and offered rate):\n\n";
        let rows: Vec<Vec<String>> = Leases::by_algorithm(self.hot())
            .into_iter()
            .map(|(algorithm, rows)| {
                let worst = rows.iter().map(|r| r.worst_second).max().unwrap_or(0);
                vec![
                    algorithm,
                    range(rows.iter().map(|r| r.calls_per_check), 4),
                    range(rows.iter().map(|r| r.fewer_calls()), 1),
                    format!("{worst} ({} / {})", rows[0].own_bound, rows[0].leased_bound),
                    rows.iter()
                        .map(|r| r.beyond_own())
                        .max()
                        .unwrap_or(0)
                        .to_string(),
                    format!(
                        "{} of {}",
                        rows.iter()
                            .filter(|r| r.worst_second <= r.leased_bound)
                            .count(),
                        rows.len()
                    ),
                    format!(
                        "{} / {}",
                        rows.iter().map(|r| r.admitted).sum::<u64>(),
                        rows.iter().map(|r| r.plain_admitted).sum::<u64>()
                    ),
                    format!(
                        "{} of {}",
                        rows.iter().map(|r| r.under_admitted).sum::<u64>(),
                        rows.iter().map(|r| r.refused).sum::<u64>()
                    ),
                ]
            })
            .collect();
        out += &table(
            &[
                "Algorithm",
                "Shared calls per check",
                "× fewer than plain",
                "Worst second (own bound / leased bound)",
                "Most beyond its own bound in a second",
                "Rows within the leased bound",
                "Admitted, leases / plain",
                "Under-admitted of refused",
            ],
            &rows,
        );
        let _ = writeln!(
            out,
            "\nA low-rate limit, {} per second, offered its quota, every instance count:\n",
            s.low_per_second
        );
        let rows: Vec<Vec<String>> = Leases::by_algorithm(self.low())
            .into_iter()
            .map(|(algorithm, rows)| {
                vec![
                    algorithm,
                    rows.iter()
                        .map(|r| num(r.fewer_calls(), 1))
                        .collect::<Vec<_>>()
                        .join(" / "),
                    format!(
                        "{} ({} / {})",
                        rows.iter().map(|r| r.worst_second).max().unwrap_or(0),
                        rows[0].own_bound,
                        rows[0].leased_bound
                    ),
                    format!(
                        "{} of {}",
                        rows.iter().map(|r| r.under_admitted).sum::<u64>(),
                        rows.iter().map(|r| r.refused).sum::<u64>()
                    ),
                ]
            })
            .collect();
        out += &table(
            &[
                "Algorithm",
                &format!(
                    "× fewer calls than plain ({} instances)",
                    s.instances
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(" / ")
                ),
                "Worst second (own bound / leased bound)",
                "Under-admitted of refused",
            ],
            &rows,
        );
        let (within, all) = self.within_leased();
        let (under, refused) = self.under_admitted();
        let leased_total: u64 = self.hot().map(|r| r.admitted).sum();
        let plain_total: u64 = self.hot().map(|r| r.plain_admitted).sum();
        let _ = writeln!(
            out,
            "\n**What it shows:** {within} of {all} rows kept their worst second within the leased bound. On the hot key the leases sent {} shared calls per check ({}× fewer than the plain limiter); {under} of {refused} refusals were ones the shared limiter alone would have admitted (units other instances' leases held; a sliding log's lease enters its whole block into the log when taken, so it counts most of these), while over the same checks the leases admitted {leased_total} in all against the plain limiter's {plain_total}. The debts' leased bound is their own plus the rate times the lease lifetime; the aligned windows keep their own bound; the sliding log's doubles for a lifetime under its window.\n",
            range(self.hot().map(|r| r.calls_per_check), 4),
            range(self.hot().map(Row::fewer_calls), 1),
        );
        out
    }
}
