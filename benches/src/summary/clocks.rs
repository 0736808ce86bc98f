//! In memory on equal terms with governor: the default clocks, the same clock, contention.
//!
//! Every target here names its terms: which clock each side reads, and for
//! keyed limiters which hasher each side uses.

use std::fmt::Write as _;

use super::{GE, LE, Summary, Target, cell, get, one, push_ratio, si, three};
use crate::run::Row;

/// The terms of each comparison, as the README states them.
const DEFAULT_CLOCKS: &str =
    "ratelab `SystemClock` (its default) / governor `QuantaClock` (its default)";
const FROZEN: &str = "ratelab `ManualClock` / governor `FakeRelativeClock`, both never moving";
const UPKEEP: &str = "one governor `QuantaUpkeepClock` (1 ms) read by both";

/// One line of the equal-terms table: a setting, its terms, and where its
/// figures are.
///
/// Only GCRA is held to governor's figures (governor implements GCRA
/// alone); the token bucket's figures stand beside our GCRA's.
struct Setting {
    label: &'static str,
    clock: &'static str,
    hasher: &'static str,
    group: &'static str,
    /// governor's row: `gcra` (its default hasher, or no key), or
    /// `gcra-foldhash`.
    governor: &'static str,
    metric: &'static str,
    /// The target on GCRA / governor, with its comparison and bound.
    target: Option<(&'static str, &'static str, f64)>,
    /// The target on GCRA's lean check (`gcra-lean`: `check_lean`, read
    /// only for `allowed`) / governor, with the same comparison, bound 1:
    /// where both sides run on equal terms (the same clock, or the same
    /// kind of clock read, and the same hasher).
    lean: Option<&'static str>,
    /// CPU-bound: judged by the instruction counts of the same code
    /// (`instructions::targets`, on a frozen clock), this line's time
    /// ratio shown beside them, not judged.
    cpu_bound: bool,
}

const SETTINGS: [Setting; 12] = [
    Setting {
        label: "one key",
        clock: DEFAULT_CLOCKS,
        hasher: "",
        group: "memory-direct",
        governor: "gcra",
        metric: "ns_per_check",
        target: Some(("one key, default clocks: ours / governor", LE, 0.8)),
        lean: Some("one key, default clocks: ours lean / governor"),
        cpu_bound: false,
    },
    Setting {
        label: "keyed 100k",
        clock: DEFAULT_CLOCKS,
        hasher: "ratelab foldhash / governor SipHash (defaults)",
        group: "memory-keyed-100k",
        governor: "gcra",
        metric: "ns_per_check",
        target: Some((
            "keyed, default clocks and hashers: ours / governor",
            LE,
            0.8,
        )),
        lean: None,
        cpu_bound: false,
    },
    Setting {
        label: "keyed 1M",
        clock: DEFAULT_CLOCKS,
        hasher: "ratelab foldhash / governor SipHash (defaults)",
        group: "memory-keyed-1m",
        governor: "gcra",
        metric: "ns_per_check",
        target: Some((
            "keyed, default clocks and hashers: ours / governor",
            LE,
            0.8,
        )),
        lean: None,
        cpu_bound: false,
    },
    Setting {
        label: "one key",
        clock: FROZEN,
        hasher: "",
        group: "memory-direct-manual-clock",
        governor: "gcra",
        metric: "ns_per_check",
        target: Some(("one key, same clock, frozen: ours / governor", LE, 1.0)),
        lean: Some("one key, same clock, frozen: ours lean / governor"),
        cpu_bound: true,
    },
    Setting {
        label: "keyed 100k",
        clock: FROZEN,
        hasher: "foldhash, both",
        group: "memory-keyed-100k-manual-clock",
        governor: "gcra-foldhash",
        metric: "ns_per_check",
        target: Some((
            "keyed, same clock (frozen) and hasher: ours / governor",
            LE,
            1.0,
        )),
        lean: Some("keyed, same clock (frozen) and hasher: ours lean / governor"),
        cpu_bound: true,
    },
    Setting {
        label: "keyed 1M",
        clock: FROZEN,
        hasher: "foldhash, both",
        group: "memory-keyed-1m-manual-clock",
        governor: "gcra-foldhash",
        metric: "ns_per_check",
        target: Some((
            "keyed, same clock (frozen) and hasher: ours / governor",
            LE,
            1.0,
        )),
        lean: Some("keyed, same clock (frozen) and hasher: ours lean / governor"),
        cpu_bound: false,
    },
    Setting {
        label: "one key",
        clock: UPKEEP,
        hasher: "",
        group: "memory-direct-upkeep",
        governor: "gcra",
        metric: "ns_per_check",
        target: Some(("one key, same clock, upkept: ours / governor", LE, 1.0)),
        lean: Some("one key, same clock, upkept: ours lean / governor"),
        cpu_bound: true,
    },
    Setting {
        label: "keyed 100k",
        clock: UPKEEP,
        hasher: "foldhash, both",
        group: "memory-keyed-100k-upkeep",
        governor: "gcra-foldhash",
        metric: "ns_per_check",
        target: Some((
            "keyed, same clock (upkept) and hasher: ours / governor",
            LE,
            1.0,
        )),
        lean: Some("keyed, same clock (upkept) and hasher: ours lean / governor"),
        cpu_bound: true,
    },
    Setting {
        label: "keyed 1M",
        clock: UPKEEP,
        hasher: "foldhash, both",
        group: "memory-keyed-1m-upkeep",
        governor: "gcra-foldhash",
        metric: "ns_per_check",
        target: Some((
            "keyed, same clock (upkept) and hasher: ours / governor",
            LE,
            1.0,
        )),
        lean: Some("keyed, same clock (upkept) and hasher: ours lean / governor"),
        cpu_bound: false,
    },
    Setting {
        label: "two threads, one key",
        clock: DEFAULT_CLOCKS,
        hasher: "",
        group: "memory-two-threads",
        governor: "gcra",
        metric: "checks_per_sec",
        target: Some((
            "two threads, one key, default clocks: ours / governor throughput",
            GE,
            1.0,
        )),
        lean: Some("two threads, one key, default clocks: ours lean / governor throughput"),
        cpu_bound: false,
    },
    Setting {
        label: "two threads, one key",
        clock: UPKEEP,
        hasher: "",
        group: "memory-two-threads-upkeep",
        governor: "gcra",
        metric: "checks_per_sec",
        target: Some((
            "two threads, one key, same clock (upkept): ours / governor throughput",
            GE,
            1.0,
        )),
        lean: Some("two threads, one key, same clock (upkept): ours lean / governor throughput"),
        cpu_bound: false,
    },
    Setting {
        label: "two threads, each on its half of 100k keys",
        clock: UPKEEP,
        hasher: "foldhash, both",
        group: "memory-two-threads-keyed-upkeep",
        governor: "gcra-foldhash",
        metric: "checks_per_sec",
        target: Some((
            "two threads over distinct keys, same clock (upkept) and hasher: ours / governor throughput",
            GE,
            1.0,
        )),
        lean: Some(
            "two threads over distinct keys, same clock (upkept) and hasher: ours lean / governor throughput",
        ),
        cpu_bound: false,
    },
];

/// This part's targets: GCRA against governor's GCRA in every setting, its
/// `check` and, on equal terms, its lean check. Only GCRA: governor
/// implements no other algorithm (the token bucket is held to our GCRA, in
/// the `O(1) algorithm / our GCRA` targets).
pub(super) fn targets(rows: &[Row], out: &mut Vec<Target>) {
    for setting in &SETTINGS {
        let Some((target, comparison, limit)) = setting.target else {
            continue;
        };
        if setting.cpu_bound {
            continue;
        }
        let paired = paired_group(setting.group);
        let group = if rows.iter().any(|r| r.group == paired) {
            paired.as_str()
        } else {
            setting.group
        };
        let governor = get(rows, group, setting.governor, "governor", setting.metric);
        push_ratio(
            out,
            target,
            group,
            "gcra",
            get(rows, group, "gcra", "memory", setting.metric),
            governor,
            comparison,
            limit,
        );
        if let Some(lean) = setting.lean {
            push_ratio(
                out,
                lean,
                group,
                LEAN,
                get(rows, group, LEAN, "memory", setting.metric),
                governor,
                comparison,
                1.0,
            );
        }
    }
}

/// GCRA's lean check: `check_lean`, read only for `allowed`.
const LEAN: &str = "gcra-lean";

/// The time ratio `ours / governor` (ns per check) in `group`, from its
/// paired rounds where the run has them: shown beside the instruction
/// targets.
pub(super) fn time_ratio(rows: &[Row], group: &str, ours: &str, governor: &str) -> Option<f64> {
    let paired = paired_group(group);
    let group = if rows.iter().any(|r| r.group == paired) {
        paired.as_str()
    } else {
        group
    };
    let ns = |algorithm, backend| get(rows, group, algorithm, backend, "ns_per_check");
    Some(ns(ours, "memory")? / ns(governor, "governor")?)
}

/// Where a group's paired rounds are recorded: the targets' figures when
/// the run has them (see the `memory` bench).
fn paired_group(group: &str) -> String {
    format!("{group}-paired")
}

/// This part's section of the README: every setting with its terms.
pub(super) fn section(summary: &Summary) -> String {
    let present = SETTINGS.iter().any(|s| {
        [s.group, &paired_group(s.group)]
            .iter()
            .any(|group| summary.get(group, "gcra", "memory", s.metric).is_some())
    });
    if !present {
        return String::new();
    }
    let mut out = String::from(
        "\n## In memory, on equal terms with governor\n\n\
         Each line states its terms: the clock each side reads and, keyed, the \
         hasher each side uses. Time per check (ns, lower is better) or, with \
         two threads, checks per second (higher is better); `gcra / governor` \
         is the ratio of the two GCRAs (time, or throughput with two threads). \
         `gcra lean` is GCRA's lean check (`check_lean`, read only for \
         `allowed`; the whole decision computed only when asked, as \
         governor's `NotUntil` computes its wait). governor implements GCRA \
         alone: the token bucket is shown against our GCRA, not held to \
         governor's figures. \
         Lines marked (paired) come from paired rounds: the sides run in turn, \
         the order rotating, 21 rounds, each side's median; criterion's figures \
         for those groups are in the tables above. On this machine a figure \
         moves by a third over the half minute between two sides of a criterion \
         group with no change to the code, so only figures taken in turn are \
         compared.\n\n",
    );
    out.push_str("| setting | clocks | hashers | unit | gcra | gcra lean | governor | gcra / governor | gcra lean / governor | token-bucket | token-bucket / gcra |\n");
    out.push_str("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for s in &SETTINGS {
        // The paired rounds where the run has them, as the targets read.
        let paired = paired_group(s.group);
        let (group, label) = if summary.rows.iter().any(|r| r.group == paired) {
            (paired.as_str(), format!("{} (paired)", s.label))
        } else {
            (s.group, s.label.to_owned())
        };
        let value = |algorithm, backend| summary.get(group, algorithm, backend, s.metric);
        let (gcra, governor) = (value("gcra", "memory"), value(s.governor, "governor"));
        let (lean, bucket) = (value(LEAN, "memory"), value("token-bucket", "memory"));
        let format: fn(f64) -> String = if s.metric == "ns_per_check" { one } else { si };
        // Each ratio of the same figure: time, or throughput.
        let per =
            |ours: Option<f64>, reference: Option<f64>| ours.zip(reference).map(|(a, b)| a / b);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            label,
            s.clock,
            if s.hasher.is_empty() {
                "(no key)"
            } else {
                s.hasher
            },
            if s.metric == "ns_per_check" {
                "ns/check"
            } else {
                "checks/s"
            },
            cell(gcra, format),
            cell(lean, format),
            cell(governor, format),
            cell(per(gcra, governor), three),
            cell(per(lean, governor), three),
            cell(bucket, format),
            cell(per(bucket, gcra), three),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Metric;

    #[test]
    fn paired_rounds_decide_the_targets_when_present() {
        let rows = vec![
            Row::new("memory-direct", "gcra", "memory", Metric::NsPerCheck, 30.0),
            Row::new(
                "memory-direct",
                "gcra",
                "governor",
                Metric::NsPerCheck,
                15.0,
            ),
            Row::new(
                "memory-direct-paired",
                "gcra",
                "memory",
                Metric::NsPerCheck,
                12.0,
            ),
            Row::new(
                "memory-direct-paired",
                "gcra",
                "governor",
                Metric::NsPerCheck,
                15.0,
            ),
        ];
        let mut targets = Vec::new();
        super::targets(&rows, &mut targets);
        let gcra = targets
            .iter()
            .find(|t| t.algorithm == "gcra")
            .expect("the one-key target");
        assert_eq!(gcra.group, "memory-direct-paired");
        assert!((gcra.value - 0.8).abs() < 1e-9 && gcra.pass, "{gcra:?}");
    }

    #[test]
    fn the_lean_check_is_judged_and_the_token_bucket_stands_beside_our_gcra() {
        let paired = |algorithm, backend, value| {
            Row::new(
                "memory-keyed-1m-upkeep-paired",
                algorithm,
                backend,
                Metric::NsPerCheck,
                value,
            )
        };
        let rows = vec![
            paired("gcra", "memory", 8.0),
            paired("gcra-lean", "memory", 5.5),
            paired("token-bucket", "memory", 10.0),
            paired("gcra-foldhash", "governor", 6.0),
        ];
        let mut targets = Vec::new();
        super::targets(&rows, &mut targets);
        let judged: Vec<(&str, bool)> = targets
            .iter()
            .map(|t| (t.algorithm.as_str(), t.pass))
            .collect();
        assert_eq!(
            judged,
            [("gcra", false), ("gcra-lean", true)],
            "{targets:#?}"
        );
        assert!((targets[1].value - 5.5 / 6.0).abs() < 1e-9);
        let summary = super::super::summary_of(rows);
        let section = section(&summary);
        assert!(
            section.contains("| 8.0 | 5.5 | 6.0 | 1.333 | 0.917 | 10.0 | 1.250 |"),
            "{section}"
        );
    }

    #[test]
    fn every_setting_is_judged_on_its_own_terms() {
        let rows = vec![
            Row::new(
                "memory-keyed-1m-upkeep",
                "gcra",
                "memory",
                Metric::NsPerCheck,
                30.0,
            ),
            Row::new(
                "memory-keyed-1m-upkeep",
                "gcra-foldhash",
                "governor",
                Metric::NsPerCheck,
                40.0,
            ),
            // governor on its default hasher: not this setting's reference.
            Row::new(
                "memory-keyed-1m-upkeep",
                "gcra",
                "governor",
                Metric::NsPerCheck,
                20.0,
            ),
            Row::new(
                "memory-two-threads-keyed-upkeep",
                "gcra",
                "memory",
                Metric::ChecksPerSec,
                90e6,
            ),
            Row::new(
                "memory-two-threads-keyed-upkeep",
                "gcra-foldhash",
                "governor",
                Metric::ChecksPerSec,
                100e6,
            ),
        ];
        let mut targets = Vec::new();
        super::targets(&rows, &mut targets);
        assert_eq!(targets.len(), 2, "{targets:#?}");
        assert!((targets[0].value - 0.75).abs() < 1e-9 && targets[0].pass);
        assert!((targets[1].value - 0.9).abs() < 1e-9 && !targets[1].pass);
        let summary = super::super::summary_of(rows);
        let section = section(&summary);
        assert!(section.contains(UPKEEP) && section.contains("foldhash, both"));
        assert!(
            section.contains("| 30.0 | – | 40.0 | 0.750 | – | – | – |"),
            "{section}"
        );
    }
}
