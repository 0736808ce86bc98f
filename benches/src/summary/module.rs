//! The native module beside the Lua scripts and redis-cell: server time per call and throughput.

use std::fmt::Write as _;

use ratelab::AlgorithmKind;

use super::{GE, LE, Summary, Target, cell, get, push_ratio, si, two};
use crate::algorithms::{NAMES, constant_time};
use crate::run::Row;

/// The keys the groups run on: suffix of the group names, and label.
const SETTINGS: [(&str, &str); 2] = [("hot", "one hot key"), ("100k", "100,000 keys")];

/// The backends of the `module` bench, and how the table names them.
const BACKENDS: [(&str, &str); 3] = [
    ("redis-module", "module"),
    ("redis-lua", "Lua (EVALSHA)"),
    ("redis-cell", "redis-cell (CL.THROTTLE)"),
];

/// This part's targets.
pub(super) fn targets(rows: &[Row], out: &mut Vec<Target>) {
    for (suffix, _) in SETTINGS {
        let server = format!("module-server-{suffix}");
        let throughput = format!("module-throughput-{suffix}");
        let usec = |algorithm: &str, backend: &str| {
            get(rows, &server, algorithm, backend, "usec_per_call")
        };
        let per_sec = |backend: &str| get(rows, &throughput, "gcra", backend, "checks_per_sec");
        push_ratio(
            out,
            "module GCRA server time / redis-cell CL.THROTTLE",
            &server,
            "gcra",
            usec("gcra", "redis-module"),
            usec("gcra", "redis-cell"),
            LE,
            1.0,
        );
        push_ratio(
            out,
            "module GCRA throughput / redis-cell CL.THROTTLE (64 in flight, one connection)",
            &throughput,
            "gcra",
            per_sec("redis-module"),
            per_sec("redis-cell"),
            GE,
            1.0,
        );
        for kind in AlgorithmKind::ALL {
            if kind == AlgorithmKind::Gcra {
                continue;
            }
            let (target, limit) = if constant_time(kind) {
                (
                    "O(1) algorithm on the module / module GCRA, server time",
                    1.5,
                )
            } else {
                ("sliding log on the module / module GCRA, server time", 3.0)
            };
            push_ratio(
                out,
                target,
                &server,
                kind.name(),
                usec(kind.name(), "redis-module"),
                usec("gcra", "redis-module"),
                LE,
                limit,
            );
        }
    }
}

/// This part's section of the README (empty until it has rows).
pub(super) fn section(summary: &Summary) -> String {
    let has = |backend: &str| {
        summary
            .rows
            .iter()
            .any(|r| r.group.starts_with("module-") && r.backend == backend)
    };
    if !has("redis-module") {
        return String::new();
    }
    let mut out = String::new();
    out.push_str("\n### The native module, the Lua scripts and redis-cell\n\n");
    out.push_str(
        "One `redis-server` loading ratelab's module and redis-cell; raw commands through \
         the same client (one multiplexed connection, 64 tasks, one command in flight \
         each), Redis `TIME`, cost 1, every check admitted. Server µs per call: `INFO \
         commandstats` over the run. The server is emptied (`FLUSHALL`) before each \
         side, so that no side runs beside keys an earlier one left. redis-cell runs GCRA \
         only, on the same quota. The sliding log reads and writes its sorted set through \
         the module API's direct key access; the other algorithms read with `GET` \
         (`RM_Call`) and write a binary state straight into the key, a decimal one (GCRA, \
         the leaky queue) with `SET`, which stores it as an integer.\n\n",
    );
    out.push_str(
        "| algorithm | backend | server µs, hot key | server µs, 100k keys | checks/s, hot key | checks/s, 100k keys |\n",
    );
    out.push_str("|---|---|---:|---:|---:|---:|\n");
    for algorithm in NAMES {
        for (backend, label) in BACKENDS {
            let g = |group: &str, metric: &str| summary.get(group, algorithm, backend, metric);
            let figures = [
                g("module-server-hot", "usec_per_call"),
                g("module-server-100k", "usec_per_call"),
                g("module-throughput-hot", "checks_per_sec"),
                g("module-throughput-100k", "checks_per_sec"),
            ];
            if figures.iter().all(Option::is_none) {
                continue;
            }
            let _ = writeln!(
                out,
                "| {algorithm} | {label} | {} | {} | {} | {} |",
                cell(figures[0], two),
                cell(figures[1], two),
                cell(figures[2], si),
                cell(figures[3], si),
            );
        }
    }
    if !has("redis-cell") {
        out.push_str(
            "\n**redis-cell: missing.** The module bench could not build or load it; the \
             reason is in the bench's output and in the `redis_cell` fact of its rows file \
             (`<criterion home>/ratelab-rows/module.json`).\n",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Metric;

    #[test]
    fn targets_compare_the_module_with_redis_cell_and_its_own_gcra() {
        let rows = vec![
            Row::new(
                "module-server-hot",
                "gcra",
                "redis-module",
                Metric::UsecPerCall,
                3.0,
            ),
            Row::new(
                "module-server-hot",
                "gcra",
                "redis-cell",
                Metric::UsecPerCall,
                4.0,
            ),
            Row::new(
                "module-server-hot",
                "token-bucket",
                "redis-module",
                Metric::UsecPerCall,
                6.0,
            ),
            Row::new(
                "module-server-hot",
                "sliding-log",
                "redis-module",
                Metric::UsecPerCall,
                6.0,
            ),
            Row::new(
                "module-throughput-hot",
                "gcra",
                "redis-module",
                Metric::ChecksPerSec,
                9.0,
            ),
            Row::new(
                "module-throughput-hot",
                "gcra",
                "redis-cell",
                Metric::ChecksPerSec,
                10.0,
            ),
        ];
        let mut out = Vec::new();
        targets(&rows, &mut out);
        let found = |target: &str, algorithm: &str| {
            out.iter()
                .find(|t| t.target.starts_with(target) && t.algorithm == algorithm)
                .map(|t| (t.value, t.pass))
        };
        assert_eq!(found("module GCRA server time", "gcra"), Some((0.75, true)));
        assert_eq!(found("module GCRA throughput", "gcra"), Some((0.9, false)));
        assert_eq!(found("O(1) algorithm", "token-bucket"), Some((2.0, false)));
        assert_eq!(found("sliding log", "sliding-log"), Some((2.0, true)));
        // No figures, no target.
        assert_eq!(out.len(), 4);
    }
}
