//! The failover in the report: its CSV, its section and its chart.

use std::fmt::Write as _;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use ratelab::AlgorithmKind;
use serde::Serialize;

use super::{Case, Failover, Row};
use crate::CompareError;
use crate::charts::{BAD, Bars, Canvas, Drawn, GOOD, THIRD, grouped_bars, no_whiskers, render};
use crate::markdown::{chart, num, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::scenario::ScenarioName;
use crate::stats::Spread;

/// One line of `failover.csv`: one algorithm through one failover.
#[derive(Serialize)]
struct CsvRow<'a> {
    algorithm: &'a str,
    case: &'static str,
    bound: &'a str,
    admitted: u64,
    admitted_by_the_master_after_the_cut: u64,
    of_those_in_the_step_of_the_kill: u64,
    beyond_bound: u64,
    errors: u64,
    unconfirmed: u64,
}

impl Failover {
    /// The row of `algorithm` in `case`.
    pub fn row(&self, algorithm: &str, case: Case) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.algorithm == algorithm && r.case == case)
    }

    /// The most any algorithm admitted beyond its bound in `case`.
    pub fn worst(&self, case: Case) -> u64 {
        self.rows
            .iter()
            .filter(|r| r.case == case)
            .map(|r| r.beyond_bound)
            .max()
            .unwrap_or(0)
    }

    /// `rate × lag`: what a debt refills during the lag.
    pub fn rate_times_lag(&self) -> u64 {
        u64::from(self.rate) * self.lag_ms / 1_000
    }
}

impl Part for Failover {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::Failover
    }

    fn draw(&self, canvas: &mut Canvas) -> Result<(), CompareError> {
        let f = self;
        render!(canvas, "failover", (1400, 700), |root| draw(&root, f));
        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        let rows = self.rows.iter().map(|r| CsvRow {
            algorithm: &r.algorithm,
            case: r.case.label(),
            bound: &r.bound,
            admitted: r.admitted,
            admitted_by_the_master_after_the_cut: r.after_cut,
            of_those_in_the_step_of_the_kill: r.in_kill_step,
            beyond_bound: r.beyond_bound,
            errors: r.errors,
            unconfirmed: r.unconfirmed,
        });
        write_csv(&dir.join("failover.csv"), rows)
    }

    fn section(&self, charts: &[String]) -> String {
        let f = self;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## {}\n\nReal `redis-server`s of this scenario's own: a master and a replica, {} clients hammering one key at {} a second (a one-second window of {}, a burst of {}) until refused, on a client clock moved by hand in 100 ms steps; the master killed (SIGKILL) once a check of its last step is answered, the replica promoted (`REPLICAOF NO ONE`), and the clients going on against it for five steps. Three ways: a **healthy** replica; a replica **{} ms behind** (its link cut through a relay {} steps before the kill, so it never gets what the master wrote after); and **strict mode** (`.replicas(1, {} ms)`: an admission counts only once a replica acknowledges it) with the same lag. Each cell is what the run admitted beyond the algorithm's own bound (in the worst interval; the fixed window's, summed over its windows).\n",
            ScenarioName::Failover.title(),
            f.clients,
            f.rate,
            f.rate,
            f.rate,
            f.lag_ms,
            super::LAG_STEPS,
            super::WAIT.as_millis(),
        );
        let rows: Vec<Vec<String>> = AlgorithmKind::ALL
            .iter()
            .filter_map(|kind| {
                let name = kind.name();
                let healthy = f.row(name, Case::Healthy)?;
                let lagging = f.row(name, Case::Lagging)?;
                let strict = f.row(name, Case::Strict)?;
                Some(vec![
                    name.to_owned(),
                    healthy.bound.clone(),
                    healthy.beyond_bound.to_string(),
                    format!(
                        "**{}** (the master admitted {} in the lag, {} of them in the step of the kill)",
                        lagging.beyond_bound, lagging.after_cut, lagging.in_kill_step
                    ),
                    format!(
                        "{} ({} checks failed, {} of them admissions no replica confirmed)",
                        strict.beyond_bound, strict.errors, strict.unconfirmed
                    ),
                ])
            })
            .collect();
        out += &table(
            &[
                "Algorithm",
                "Its own bound",
                "Healthy replica",
                &format!("Replica {} ms behind", f.lag_ms),
                &format!("Strict mode, {} ms behind", f.lag_ms),
            ],
            &rows,
        );
        chart(
            &mut out,
            charts,
            "failover",
            "Units admitted beyond each algorithm's bound after a failover: healthy replica, lagging replica, strict mode",
        );
        let debts = ["gcra", "token-bucket", "leaky-meter", "leaky-queue"];
        let debt_worst = debts
            .iter()
            .filter_map(|d| f.row(d, Case::Lagging))
            .map(|r| r.beyond_bound)
            .max()
            .unwrap_or(0);
        let window = |name: &str| f.row(name, Case::Lagging).map_or(0, |r| r.beyond_bound);
        let _ = writeln!(
            out,
            "\n**What a failover costs.** With a healthy replica, no algorithm admitted more than {} beyond its bound (what was in flight at the kill is all a healthy replica can miss). With a replica {} ms behind, the promoted replica admits again what the master admitted in the lag: the debts (gcra, token bucket, leaky meter and queue) up to {} (`rate × lag` = {}, never more than the burst); the fixed window {} and the sliding log {} (a window's limit: a window started within the lag), the sliding counter {} (within its own looser bound of twice the limit). Strict mode with the same lag: {} beyond the bound for every algorithm; nothing the master admitted after the cut was counted: the clients got an error instead (`FailurePolicy::Error` answers an outage), either because no replica confirmed their admission within the wait or because their check waited behind such a `WAIT` on the shared connection, or met the kill.\n",
            f.worst(Case::Healthy),
            f.lag_ms,
            debt_worst,
            f.rate_times_lag(),
            window("fixed-window"),
            window("sliding-log"),
            window("sliding-counter"),
            f.worst(Case::Strict),
        );
        out += "**What strict mode costs**: one replica's acknowledgement (`WAIT 1`) per admission. Sequential gcra checks on a master with one healthy replica, on this machine's loopback, Redis time; each round's median and 99th percentile, and their spread over the rounds:\n\n";
        let spread = |s: &Spread| {
            if s.runs > 1 {
                format!(
                    "{} µs ({}–{})",
                    num(s.median, 1),
                    num(s.min, 1),
                    num(s.max, 1)
                )
            } else {
                format!("{} µs", num(s.median, 1))
            }
        };
        let rows: Vec<Vec<String>> = f
            .latency
            .iter()
            .map(|l| {
                vec![
                    l.mode.clone(),
                    format!("{} × {}", l.p50.runs, l.checks),
                    spread(&l.p50),
                    spread(&l.p99),
                ]
            })
            .collect();
        out += &table(
            &[
                "Checks",
                "Rounds × checks",
                "Median (median of rounds, min–max)",
                "99th percentile (median of rounds, min–max)",
            ],
            &rows,
        );
        out += "\n";
        if let [without, strict] = &f.latency[..] {
            let _ = writeln!(
                out,
                "Strict mode moved the median from {} µs to {} µs and the 99th percentile from {} µs to {} µs (medians of the rounds). A replica that stops acknowledging costs each admission the full wait ({} ms) and turns it into an error.\n",
                num(without.p50.median, 1),
                num(strict.p50.median, 1),
                num(without.p99.median, 1),
                num(strict.p99.median, 1),
                super::WAIT.as_millis(),
            );
        }
        let _ = writeln!(
            out,
            "**When to turn strict mode on**: when admitting a key's `rate × lag` (or, for the windows, a window's limit) twice after a failover is worse than paying a replica's round trip on every admission and refusing (or failing open, as the failure policy says) while no replica acknowledges: payments, quotas that are billed, abuse limits an attacker may time a failover against. Without it, the bound above holds: with healthy replicas a failover costs at most the checks in flight.\n"
        );
        out += &format!(
            "**redis-cell beside gcra.** The same failover with a healthy replica, on Redis time: a burst of {} at one unit an hour (nothing refills during the run), the clients hammering until refused, the master killed once a check is answered, then the clients again on the promoted replica. The bound is the burst. redis-cell built: {}.\n\n",
            f.rate, f.cell_version
        );
        if f.cell.is_empty() {
            out += "redis-cell was not built in this run: no row (see Skipped above).\n\n";
        } else {
            let rows: Vec<Vec<String>> = f
                .cell
                .iter()
                .map(|c| {
                    vec![
                        c.limiter.clone(),
                        c.admitted.to_string(),
                        c.after_failover.to_string(),
                        c.bound.to_string(),
                        format!("**{}**", c.beyond_bound),
                    ]
                })
                .collect();
            out += &table(
                &[
                    "Limiter",
                    "Admitted",
                    "Of those, by the promoted replica",
                    "Bound",
                    "Beyond it",
                ],
                &rows,
            );
            out += "\n";
        }
        out += "redis-cell 0.5.0 replicates `CL.THROTTLE`, so its promoted replica knows the bucket. crates.io's redis-cell 0.2.2 (the newest release there) does not replicate `CL.THROTTLE` at all: its replica never has the key, and after a failover it starts every bucket full, admitting a whole burst again, however healthy the replica. `the_version_named_is_the_one_built` in `crates/testkit/tests/redis_cell.rs` proves both (a `CL.THROTTLE` on a master, then whether its replica has the key).\n\n";
        let _ = writeln!(
            out,
            "**Deterministic or not.** The clients decide on a clock moved by hand, so what the master admitted after the cut and before the step of the kill (in brackets above, less the step of the kill) is the same count every run. What the step of the kill let through, and what was in flight at the kill (at most one check per client, {}), are not: the healthy and lagging cells may move by up to a step's refill and the clients in flight between runs, as may the redis-cell rows. Strict mode's zero is what the test `crates/redis/tests/failover.rs` asserts. The latency is real time: its spread is over the rounds. This scenario took {} s.\n",
            f.clients,
            num(f.wall_s, 1)
        );
        out
    }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &Failover) -> Drawn
where
    DB::ErrorType: 'static,
{
    let values = |case: Case| {
        AlgorithmKind::ALL
            .iter()
            .map(|k| f.row(k.name(), case).map(|r| r.beyond_bound as f64))
            .collect::<Vec<_>>()
    };
    let labels: Vec<String> = Case::ALL.iter().map(|c| c.label().to_owned()).collect();
    let series = [
        Bars {
            label: &labels[0],
            color: GOOD,
            values: values(Case::Healthy),
            whiskers: no_whiskers(),
        },
        Bars {
            label: &labels[1],
            color: BAD,
            values: values(Case::Lagging),
            whiskers: no_whiskers(),
        },
        Bars {
            label: &labels[2],
            color: THIRD,
            values: values(Case::Strict),
            whiskers: no_whiskers(),
        },
    ];
    let (chart_area, note_area) = root.split_vertically(root.dim_in_pixel().1 - 70);
    for (i, line) in looser_bounds_note(f).into_iter().enumerate() {
        note_area.draw(&Text::new(
            line,
            (20, 18 + 26 * i32::try_from(i).unwrap_or(0)),
            crate::charts::font(16.0).pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    grouped_bars(
        &chart_area,
        &format!(
            "Admitted beyond each algorithm's own bound after a failover ({} a second, {} clients; a zero is a thin stub)",
            f.rate, f.clients
        ),
        "units beyond the bound",
        &series,
        Some((
            f.rate_times_lag() as f64,
            format!(
                "rate × lag = {} (the debts' bound at {} ms)",
                f.rate_times_lag(),
                f.lag_ms
            ),
        )),
        0,
    )
}

/// What the failover chart's bars are measured against, in lines under
/// it: each algorithm's own bound, which for some is looser than the
/// window's limit, so that a low bar there is a loose promise kept, not the
/// safest algorithm.
fn looser_bounds_note(f: &Failover) -> Vec<String> {
    let looser: Vec<String> = AlgorithmKind::ALL
        .iter()
        .filter_map(|k| f.row(k.name(), Case::Lagging))
        .filter(|r| {
            r.bound
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n > u64::from(f.rate))
        })
        .map(|r| {
            format!(
                "{}'s bound is {} (with the lagging replica, the master admitted {} in the lag)",
                r.algorithm, r.bound, r.after_cut
            )
        })
        .collect();
    if looser.is_empty() {
        vec!["Each bar counts what was admitted beyond that algorithm's own bound.".to_owned()]
    } else {
        vec![
            format!(
                "Each bar counts beyond that algorithm's own bound, not beyond the limit of {}: a low bar under a looser bound is a looser promise kept, not the safest choice.",
                f.rate
            ),
            looser.join("; "),
        ]
    }
}
