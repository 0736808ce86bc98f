//! Leases (the `lease` bench): shared calls per check for 1, 4 and 16
//! instances leasing one hot key, and a check from a lease against memory
//! and Redis.

use std::fmt::Write as _;

use super::{COMMANDS, INSTRUCTIONS, LE, Summary, Target, cell, get, push_judged, two};
use crate::run::Row;

/// The instance counts and per-instance rates `lease-calls` measures.
const INSTANCES: [u32; 3] = [1, 4, 16];
const PER_INSTANCE: [u64; 3] = [10_000, 100_000, 1_000_000];

/// The group of one `lease-calls` row.
pub fn calls_group(instances: u32, per_instance: u64) -> String {
    format!("lease-calls-{instances}x{per_instance}")
}

fn calls(rows: &[Row], instances: u32, per_instance: u64) -> Option<f64> {
    get(
        rows,
        &calls_group(instances, per_instance),
        "gcra",
        "leased",
        "round_trips_per_check",
    )
}

fn ns(rows: &[Row], group: &str, backend: &str) -> Option<f64> {
    get(rows, group, "gcra", backend, "ns_per_check")
}

/// This part's targets: at least 100× fewer shared calls than checks at
/// 10k checks a second per instance (the plain limiter makes one a
/// check), and a check from a lease within 2× of the in-memory one.
pub(super) fn targets(rows: &[Row], out: &mut Vec<Target>) {
    for instances in INSTANCES {
        push_judged(
            out,
            COMMANDS,
            &format!(
                "leases, {instances} instance(s) at 10k checks/s each: shared calls per check (plain: 1)"
            ),
            &calls_group(instances, 10_000),
            "gcra",
            calls(rows, instances, 10_000),
            Some(f64::NAN),
            LE,
            0.01,
        );
    }
    // CPU-bound: judged by instructions, the time ratio beside.
    let before = out.len();
    push_judged(
        out,
        INSTRUCTIONS,
        "a check from a lease / the in-memory keyed check, same clock (frozen), cost 1",
        INSTRUCTIONS_GROUP,
        "gcra",
        instructions(rows, "leased"),
        instructions(rows, "memory"),
        LE,
        2.0,
    );
    if let Some(pushed) = out.get_mut(before) {
        pushed.time_beside = ns(rows, "lease-local", "leased")
            .zip(ns(rows, "lease-local", "memory"))
            .map(|(leased, memory)| leased / memory);
    }
}

/// The instructions bench's group for a check from a lease.
const INSTRUCTIONS_GROUP: &str = "instructions-lease";

fn instructions(rows: &[Row], backend: &str) -> Option<f64> {
    get(
        rows,
        INSTRUCTIONS_GROUP,
        "gcra",
        backend,
        "instructions_per_check",
    )
}

/// The README's section, empty when the run has no lease figures.
pub(super) fn section(summary: &Summary) -> String {
    let rows = &summary.rows;
    let any_calls = INSTANCES
        .iter()
        .any(|&i| PER_INSTANCE.iter().any(|&p| calls(rows, i, p).is_some()));
    let times = [
        ("lease-local", "memory", "in memory (`Keyed`)"),
        (
            "lease-local",
            "leased",
            "from a lease of the in-memory limiter",
        ),
        (
            "lease-redis",
            "redis-plain",
            "on Redis, plain (a round trip a check)",
        ),
        (
            "lease-redis",
            "redis-leased",
            "from a lease of the Redis limiter",
        ),
    ];
    if !any_calls && times.iter().all(|(g, b, _)| ns(rows, g, b).is_none()) {
        return String::new();
    }
    let mut out = String::new();
    out.push_str("\n## Leases\n\n");
    out.push_str(
        "Shared calls per check: 1, 4 and 16 instances of `Leased` on one hot GCRA key, each \
         offered 10k, 100k and 1M checks a second on a simulated clock, a counting wrapper \
         between the leases and the shared limiter (the plain limiter makes one call a \
         check). Target: at most 0.01 (100× fewer) at 10k checks a second per instance.\n\n",
    );
    out.push_str("| instances | 10k/s each | 100k/s each | 1M/s each |\n|---:|---:|---:|---:|\n");
    for instances in INSTANCES {
        let _ = write!(out, "| {instances} |");
        for per_instance in PER_INSTANCE {
            let _ = write!(
                out,
                " {} |",
                cell(calls(rows, instances, per_instance), |v| format!("{v:.5}"))
            );
        }
        out.push('\n');
    }
    out.push_str("\nA check on one hot key, ns (criterion's median). Target: from a lease within 2× of memory, judged by instructions (the instructions bench's `instructions-lease` rows, in the targets table).\n\n");
    out.push_str("| check | ns |\n|---|---:|\n");
    for (group, backend, label) in times {
        let _ = writeln!(out, "| {label} | {} |", cell(ns(rows, group, backend), two));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Metric;

    #[test]
    fn the_lease_targets_follow_the_figures() {
        let mut rows = vec![
            Row::new("lease-local", "gcra", "memory", Metric::NsPerCheck, 40.0),
            Row::new("lease-local", "gcra", "leased", Metric::NsPerCheck, 100.0),
            Row::new(
                INSTRUCTIONS_GROUP,
                "gcra",
                "memory",
                Metric::InstructionsPerCheck,
                100.0,
            ),
            Row::new(
                INSTRUCTIONS_GROUP,
                "gcra",
                "leased",
                Metric::InstructionsPerCheck,
                260.0,
            ),
        ];
        for (instances, value) in [(1, 0.002), (4, 0.008), (16, 0.03)] {
            rows.push(Row::new(
                &calls_group(instances, 10_000),
                "gcra",
                "leased",
                Metric::RoundTripsPerCheck,
                value,
            ));
        }
        let mut targets = Vec::new();
        super::targets(&rows, &mut targets);
        let verdicts: Vec<(String, bool)> =
            targets.iter().map(|t| (t.group.clone(), t.pass)).collect();
        assert_eq!(
            verdicts,
            [
                ("lease-calls-1x10000".to_owned(), true),
                ("lease-calls-4x10000".to_owned(), true),
                ("lease-calls-16x10000".to_owned(), false),
                (INSTRUCTIONS_GROUP.to_owned(), false),
            ]
        );
        assert_eq!(targets[0].judged_by, COMMANDS);
        // CPU-bound: instructions judge, the time ratio stands beside.
        assert_eq!(targets[3].judged_by, INSTRUCTIONS);
        assert_eq!(targets[3].value, 2.6);
        assert_eq!(targets[3].time_beside, Some(2.5));
        let text = section(&super::super::summary_of(rows));
        assert!(text.contains("| 16 | 0.03000 |"), "{text}");
        assert!(
            text.contains("| from a lease of the in-memory limiter | 100.00 |"),
            "{text}"
        );
    }

    #[test]
    fn no_lease_figures_no_section_and_no_target() {
        let mut targets = Vec::new();
        super::targets(&[], &mut targets);
        assert!(targets.is_empty());
        assert_eq!(section(&super::super::summary_of(Vec::new())), "");
    }
}
