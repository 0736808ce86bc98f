//! The one-screen answer at the top of the report: for each use case, the
//! algorithm and setup to choose and the one figure of this run that
//! decides it. Every choice that depends on a measurement is computed from
//! it; a figure the run did not measure says so.

use ratelab::AlgorithmKind;

use crate::Results;
use crate::costs::{MemoryCosts, and_list};
use crate::markdown::{num, table};

/// One use case's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The use case.
    pub use_case: &'static str,
    /// The algorithm and setup to choose.
    pub choose: String,
    /// The measured figure that decides it, with its section.
    pub figure: String,
}

/// The type of an algorithm named as the report names it (`gcra` ->
/// `Gcra`).
fn type_name(algorithm: &str) -> String {
    algorithm
        .parse::<AlgorithmKind>()
        .map_or_else(|_| algorithm.to_owned(), |k| format!("{k:?}"))
}

/// Types as a list: `` `Gcra` and `LeakyQueue` ``.
fn types(algorithms: &[&str]) -> String {
    let names: Vec<String> = algorithms
        .iter()
        .map(|a| format!("`{}`", type_name(a)))
        .collect();
    and_list(&names.iter().map(String::as_str).collect::<Vec<_>>())
}

pub(crate) const NOT_RUN: &str = "not measured: the scenario did not run";

fn api_quota(results: &Results) -> Answer {
    let figure = results.load_balancer.as_ref().map_or(NOT_RUN.into(), |b| {
        let worst = b.rows.iter().map(|r| r.per_instance_memory).max().unwrap_or(0);
        let shared = b
            .rows
            .iter()
            .filter_map(|r| r.shared_redis.map(|s| s.max))
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        match shared {
            Some(s) => format!(
                "{} instances, limit {}: a count in each one's memory admitted {worst}, one count on Redis at most {} [Load balancer]",
                b.instances,
                b.limit,
                num(s, 0)
            ),
            None => format!(
                "{} instances, limit {}: a count in each one's memory admitted {worst} (the Redis rows were skipped) [Load balancer]",
                b.instances, b.limit
            ),
        }
    });
    Answer {
        use_case: "API quota across servers",
        choose: "`Gcra` on Redis (`RedisStore`), one `Policy` per window (per minute, per day)"
            .into(),
        figure,
    }
}

fn login(results: &Results) -> Answer {
    let figure = results.flood.as_ref().and_then(|f| {
        let top = f.points.iter().map(|p| p.factor).max()?;
        let find = |policy: &str| {
            f.points
                .iter()
                .find(|p| p.policy.starts_with(policy) && p.factor == top)
        };
        let (s, r) = (find("sketch")?, find("refuse")?);
        Some(format!(
            "under a flood of {} new keys per second, legitimate clients kept {} % of their requests with the default sketch, {} % with `FloodPolicy::Refuse` [Key flood]",
            s.keys_per_sec,
            num(s.admitted_pct, 1),
            num(r.admitted_pct, 1)
        ))
    });
    Answer {
        use_case: "Login endpoint",
        choose: "`LoginGuard` (failures only, per account and network, fails closed), the default `FloodPolicy` in memory".into(),
        figure: figure.unwrap_or_else(|| NOT_RUN.into()),
    }
}

/// The client-side throttle: among the algorithms with no false admission
/// on realistic traffic (never over the limit in a trailing window, so
/// under any server's window), the one that admitted most.
pub(crate) fn client_throttle(results: &Results) -> Answer {
    let pick = results.traffic.as_ref().and_then(|t| {
        let exact = t
            .outcomes
            .iter()
            .filter(|o| o.false_admissions == 0 && o.max_in_window <= t.limit)
            .filter(|o| o.algorithm.parse::<AlgorithmKind>().is_ok())
            .max_by_key(|o| o.admitted)?;
        let loosest = t.outcomes.iter().max_by_key(|o| o.max_in_window)?;
        Some((exact, loosest, t.limit))
    });
    match pick {
        Some((exact, loosest, limit)) => Answer {
            use_case: "Client-side throttle (stay under someone else's limit)",
            choose: format!(
                "`{}` (one key: its memory does not matter) in a `BlockingThrottle` or `Throttle`, at the server's limit",
                type_name(&exact.algorithm)
            ),
            figure: format!(
                "its worst client held {} in a trailing second for a limit of {} ({} false admissions); `{}` let {} through [Realistic traffic]",
                exact.max_in_window,
                limit,
                exact.false_admissions,
                type_name(&loosest.algorithm),
                loosest.max_in_window
            ),
        },
        None => Answer {
            use_case: "Client-side throttle (stay under someone else's limit)",
            choose: "a `BlockingThrottle` or `Throttle` at the server's limit".into(),
            figure: NOT_RUN.into(),
        },
    }
}

/// Settling: the algorithm whose worst minute held fewest tokens.
pub(crate) fn settled(results: &Results) -> Answer {
    match results.settle.as_ref().and_then(|s| s.best()) {
        Some((row, quota)) => Answer {
            use_case: "LLM tokens settled after the response",
            choose: format!(
                "`{}` with `check_with_receipt`, then `settle` to the actual (over HTTP, `Policy::settle_from_header`)",
                type_name(&row.algorithm)
            ),
            figure: format!(
                "its worst trailing minute held {} tokens for a quota of {quota} per minute (the fewest of the algorithms), {} per minute on average [Settling]",
                row.worst_minute_tokens,
                num(row.tokens_per_minute, 0)
            ),
        },
        None => Answer {
            use_case: "LLM tokens settled after the response",
            choose: "an estimate reserved with `check_with_receipt`, then `settle` (over HTTP, `Policy::settle_from_header`)".into(),
            figure: NOT_RUN.into(),
        },
    }
}

/// Smoothing: the algorithm whose output peaked lowest.
fn smoothing(results: &Results) -> Answer {
    let pick = results.smoothness.as_ref().and_then(|s| {
        let smooth = s
            .outputs
            .iter()
            .min_by(|a, b| a.peak_per_sec_100ms.total_cmp(&b.peak_per_sec_100ms))?;
        let peaky = s
            .outputs
            .iter()
            .max_by(|a, b| a.peak_per_sec_100ms.total_cmp(&b.peak_per_sec_100ms))?;
        Some((smooth, peaky, s.rate_per_sec))
    });
    match pick {
        Some((smooth, peaky, rate)) => Answer {
            use_case: "Smoothing for a fragile backend",
            choose: format!(
                "`{}`, each admitted request run at its slot (`Decision::delay`)",
                type_name(&smooth.algorithm)
            ),
            figure: format!(
                "peak output {} per second for a rate of {} (`{}`: {}), at {} ms of added delay at the 99th percentile [Smoothness]",
                num(smooth.peak_per_sec_100ms, 0),
                num(rate, 0),
                type_name(&peaky.algorithm),
                num(peaky.peak_per_sec_100ms, 0),
                num(smooth.delay_p99_ms, 1)
            ),
        },
        None => Answer {
            use_case: "Smoothing for a fragile backend",
            choose: "a leaky bucket queue".into(),
            figure: NOT_RUN.into(),
        },
    }
}

fn many_keys(results: &Results) -> Answer {
    match MemoryCosts::of(results) {
        Some(costs) => {
            let (fewest, names) = costs.fewest_bytes();
            let (most, most_names) = costs.most_bytes();
            Answer {
                use_case: "Many keys in memory",
                choose: format!("{} in `Keyed`, with a `max_keys` bound", types(&names)),
                figure: format!(
                    "{} bytes per key against {} for {} [Cost: {}]",
                    num(fewest, 0),
                    num(most, 0),
                    types(&most_names),
                    costs.source()
                ),
            }
        }
        None => Answer {
            use_case: "Many keys in memory",
            choose: "the algorithm with the fewest bytes per key".into(),
            figure: NOT_RUN.into(),
        },
    }
}

/// A hot shared key on many instances: leases.
fn hot_key(results: &Results) -> Answer {
    let use_case = "A hot shared key checked on many instances";
    let choose =
        "the shared (Redis) limiter behind `ratelab::lease::Leased` in each instance".to_owned();
    match results.leases.as_ref().and_then(|l| l.headline()) {
        Some(h) => Answer {
            use_case,
            choose,
            figure: format!(
                "{} instances offered {} checks per second: {} shared calls per check ({}× fewer than the plain limiter), worst second {} against the leased bound {} [Leases]",
                h.instances,
                h.offered_per_second,
                num(h.calls_per_check, 4),
                num(h.fewer_calls(), 1),
                h.worst_second,
                h.leased_bound
            ),
        },
        None => Answer {
            use_case,
            choose,
            figure: NOT_RUN.into(),
        },
    }
}

/// Every use case, answered from `results`.
pub fn answers(results: &Results) -> Vec<Answer> {
    vec![
        api_quota(results),
        login(results),
        client_throttle(results),
        settled(results),
        hot_key(results),
        smoothing(results),
        many_keys(results),
    ]
}

/// The summary table, in Markdown.
pub fn summary_table(results: &Results) -> String {
    let rows: Vec<Vec<String>> = answers(results)
        .into_iter()
        .map(|a| vec![a.use_case.to_owned(), a.choose, a.figure])
        .collect();
    table(&["Use case", "Choose", "The figure that decides it"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, ScenarioName};

    fn answer<'a>(answers: &'a [Answer], use_case: &str) -> &'a Answer {
        answers
            .iter()
            .find(|a| a.use_case.starts_with(use_case))
            .unwrap()
    }

    #[test]
    fn each_choice_follows_the_figures() {
        let config = Config {
            scenarios: vec![
                ScenarioName::Traffic,
                ScenarioName::Smoothness,
                ScenarioName::Settle,
                ScenarioName::Cost,
            ],
            ..Config::quick(9)
        };
        let mut results = crate::run_blocking(&config, None).unwrap();
        let found = answers(&results);
        // As measured: the queue smooths, the sliding log never exceeds.
        assert!(answer(&found, "Smoothing").choose.contains("`LeakyQueue`"));
        assert!(
            answer(&found, "Client-side")
                .choose
                .contains("`SlidingLog`")
        );
        assert_eq!(answer(&found, "API quota").figure, NOT_RUN);

        // Perturbed: another algorithm smooths best, another is lightest,
        // the sliding log over its limit.
        let s = results.smoothness.as_mut().unwrap();
        for o in &mut s.outputs {
            o.peak_per_sec_100ms = if o.algorithm == "fixed-window" {
                3.0
            } else {
                50.0
            };
        }
        for row in &mut results.cost.as_mut().unwrap().rows {
            let bytes = row.memory_bytes_per_key.as_mut().unwrap();
            bytes.value = if row.algorithm == "sliding-counter" {
                7.0
            } else {
                70.0
            };
        }
        let t = results.traffic.as_mut().unwrap();
        for o in &mut t.outcomes {
            if o.algorithm == "sliding-log" {
                o.false_admissions = 3;
            }
        }
        let found = answers(&results);
        let smoothing = answer(&found, "Smoothing");
        assert!(smoothing.choose.contains("`FixedWindow`"), "{smoothing:?}");
        assert!(
            smoothing.figure.starts_with("peak output 3 per second"),
            "{smoothing:?}"
        );
        let keys = answer(&found, "Many keys");
        assert!(keys.choose.starts_with("`SlidingCounter`"), "{keys:?}");
        assert!(
            keys.figure.starts_with("7 bytes per key against 70"),
            "{keys:?}"
        );
        let throttle = answer(&found, "Client-side");
        assert!(!throttle.choose.contains("`SlidingLog`"), "{throttle:?}");
        // Settling: whichever held its worst minute lowest.
        let settle = results.settle.as_mut().unwrap();
        for o in &mut settle.outcomes {
            o.worst_minute_tokens = if o.algorithm == "gcra" { 100 } else { 900 };
        }
        let found = answers(&results);
        let llm = answer(&found, "LLM");
        assert!(llm.choose.starts_with("`Gcra`"), "{llm:?}");
        assert!(
            llm.figure
                .starts_with("its worst trailing minute held 100 tokens"),
            "{llm:?}"
        );
        let table = summary_table(&results);
        assert_eq!(table.lines().count(), 2 + found.len(), "{table}");
    }
}
