//! A sustained flood of new keys against a full keyed store, at the
//! settings a user gets by default (the `flood` bench).

use std::fmt::Write as _;

use super::{LE, Summary, Target, cell, get, one, push_ratio};
use crate::run::Row;

/// A new key's bound, ns: what the store promises a flood at its defaults.
const BOUND_NS: f64 = 2_000.0;

/// The figures, as (group, backend) of their rows, and how the README
/// names them.
const FIGURES: [(&str, &str, &str); 4] = [
    (
        "flood-first-keys",
        "memory",
        "the first 65,536 flood keys, mean (the sketch's cells first touched)",
    ),
    (
        "flood-first-keys-worst-batch",
        "memory",
        "the same, the worst batch of 1,024",
    ),
    (
        "flood",
        "new-key-sketch-defaults",
        "a new key once the flood goes on (criterion)",
    ),
    (
        "flood",
        "refused-key-defaults",
        "a new key refused under `FloodPolicy::Refuse`, its exact wait computed (criterion)",
    ),
];

fn ns(rows: &[Row], group: &str, backend: &str) -> Option<f64> {
    get(rows, group, "gcra", backend, "ns_per_check")
}

/// This part's targets: a new key within the bound, from the first one on
/// and once the flood goes on.
pub(super) fn targets(rows: &[Row], out: &mut Vec<Target>) {
    for (group, backend, target) in [
        (
            "flood-first-keys",
            "memory",
            "a new key in a full 1M-key store, defaults: mean of the first 65,536, ns",
        ),
        (
            "flood",
            "new-key-sketch-defaults",
            "a new key in a full 1M-key store, defaults: steady, ns",
        ),
    ] {
        push_ratio(
            out,
            target,
            group,
            "gcra",
            ns(rows, group, backend),
            Some(f64::NAN),
            LE,
            BOUND_NS,
        );
    }
}

/// The README's section, empty when the run has no flood figures.
pub(super) fn section(summary: &Summary) -> String {
    let rows = &summary.rows;
    if FIGURES
        .iter()
        .all(|(group, backend, _)| ns(rows, group, backend).is_none())
    {
        return String::new();
    }
    let mut out = String::new();
    out.push_str("\n## A flood of new keys\n\n");
    out.push_str(
        "A full store as `Keyed::builder(gcra)` makes it: 1,000,000 tracked keys of 16 bytes, \
         the default shard count, bound and flood policy, GCRA at one per second with a burst \
         of 1, on a clock that stands still so that no tracked key comes due. Then new keys \
         arrive without end. ns per new key; the bound is 2,000.\n\n",
    );
    out.push_str("| new key | ns |\n|---|---:|\n");
    for (group, backend, label) in FIGURES {
        let _ = writeln!(out, "| {label} | {} |", cell(ns(rows, group, backend), one));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Metric;

    fn row(group: &str, backend: &str, ns: f64) -> Row {
        Row::new(group, "gcra", backend, Metric::NsPerCheck, ns)
    }

    #[test]
    fn a_new_key_is_held_to_two_microseconds_from_the_first_on() {
        let rows = vec![
            row("flood-first-keys", "memory", 2_400.0),
            row("flood-first-keys-worst-batch", "memory", 9_000.0),
            row("flood", "new-key-sketch-defaults", 300.0),
            row("flood", "refused-key-defaults", 120.0),
        ];
        let mut targets = Vec::new();
        super::targets(&rows, &mut targets);
        let verdicts: Vec<(f64, bool)> = targets.iter().map(|t| (t.value, t.pass)).collect();
        assert_eq!(verdicts, [(2_400.0, false), (300.0, true)]);
        let summary = super::super::summary_of(rows);
        let text = section(&summary);
        assert!(
            text.contains("| the same, the worst batch of 1,024 | 9000.0 |"),
            "{text}"
        );
        assert!(
            text.contains("exact wait computed (criterion) | 120.0 |"),
            "{text}"
        );
    }

    #[test]
    fn no_flood_figures_no_section_and_no_target() {
        let mut targets = Vec::new();
        super::targets(&[], &mut targets);
        assert!(targets.is_empty());
        let summary = super::super::summary_of(Vec::new());
        assert_eq!(section(&summary), "");
    }
}
