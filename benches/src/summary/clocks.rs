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
    },
    Setting {
        label: "one key",
        clock: FROZEN,
        hasher: "",
        group: "memory-direct-manual-clock",
        governor: "gcra",
        metric: "ns_per_check",
        target: Some(("one key, same clock, frozen: ours / governor", LE, 1.0)),
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
    },
    Setting {
        label: "one key",
        clock: UPKEEP,
        hasher: "",
        group: "memory-direct-upkeep",
        governor: "gcra",
        metric: "ns_per_check",
        target: Some(("one key, same clock, upkept: ours / governor", LE, 1.0)),
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
    },
];

/// This part's targets: GCRA against governor's GCRA in every setting, and
/// the token bucket where ratelab's default is compared with governor's.
pub(super) fn targets(rows: &[Row], out: &mut Vec<Target>) {
    for setting in &SETTINGS {
        let Some((target, comparison, limit)) = setting.target else {
            continue;
        };
        let paired = paired_group(setting.group);
        let group = if rows.iter().any(|r| r.group == paired) {
            paired.as_str()
        } else {
            setting.group
        };
        let governor = get(rows, group, setting.governor, "governor", setting.metric);
        let algorithms: &[&str] = if setting.clock == DEFAULT_CLOCKS {
            &["gcra", "token-bucket"]
        } else {
            &["gcra"]
        };
        for algorithm in algorithms {
            push_ratio(
                out,
                target,
                group,
                algorithm,
                get(rows, group, algorithm, "memory", setting.metric),
                governor,
                comparison,
                limit,
            );
        }
    }
}

/// Where a group's paired rounds are recorded: the targets' figures when
/// the run has them (see the `memory` bench).
fn paired_group(group: &str) -> String {
    format!("{group}-paired")
}

/// This part's section of the README: every setting with its terms.
pub(super) fn section(summary: &Summary) -> String {
    let present = SETTINGS
        .iter()
        .any(|s| summary.get(s.group, "gcra", "memory", s.metric).is_some());
    if !present {
        return String::new();
    }
    let mut out = String::from(
        "\n## In memory, on equal terms with governor\n\n\
         Each line states its terms: the clock each side reads and, keyed, the \
         hasher each side uses. Time per check (ns, lower is better) or, with \
         two threads, checks per second (higher is better); `gcra / governor` \
         is the ratio of the two GCRAs (time, or throughput with two threads). \
         Lines marked (paired) come from paired rounds: the sides run in turn, \
         the order rotating, 21 rounds, each side's median; criterion's figures \
         for those groups are in the tables above. On this machine a figure \
         moves by a third over the half minute between two sides of a criterion \
         group with no change to the code, so only figures taken in turn are \
         compared.\n\n",
    );
    out.push_str("| setting | clocks | hashers | unit | gcra | token-bucket | governor | gcra / governor |\n");
    out.push_str("|---|---|---|---|---:|---:|---:|---:|\n");
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
        let format: fn(f64) -> String = if s.metric == "ns_per_check" { one } else { si };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
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
            cell(value("token-bucket", "memory"), format),
            cell(governor, format),
            cell(gcra.zip(governor).map(|(a, b)| a / b), three),
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
        let summary = Summary::new(
            String::new(),
            String::new(),
            super::super::Machine {
                cpu: String::new(),
                cores: 2,
                load_average: Default::default(),
            },
            String::new(),
            rows,
        );
        let section = section(&summary);
        assert!(section.contains(UPKEEP) && section.contains("foldhash, both"));
        assert!(section.contains("| 30.0 | – | 40.0 | 0.750 |"), "{section}");
    }
}
