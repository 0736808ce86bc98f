//! The native module beside the Lua scripts and redis-cell: server time per call and throughput.

use std::fmt::Write as _;

use ratelab::AlgorithmKind;

use super::{GE, INSTRUCTIONS, LE, Summary, Target, cell, get, push_judged, push_ratio, si, two};
use crate::algorithms::{NAMES, constant_time};
use crate::run::Row;

/// The paired groups: prefix, keys' suffix, and label.
const PAIRED: [(&str, &str, &str); 4] = [
    ("module-paired-", "hot", "one hot key, admitted"),
    ("module-paired-", "100k", "100,000 keys, admitted"),
    ("module-paired-refused-", "hot", "one hot key, refused"),
    ("module-paired-refused-", "100k", "100,000 keys, refused"),
];

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
    instructions_targets(rows, out);
    for (suffix, _) in SETTINGS {
        let server = format!("module-server-{suffix}");
        let throughput = format!("module-throughput-{suffix}");
        let usec = |algorithm: &str, backend: &str| {
            get(rows, &server, algorithm, backend, "usec_per_call")
        };
        // Module GCRA against redis-cell: from the paired rounds when the
        // run has them (the two measured back to back, drift on both).
        let paired = format!("module-paired-{suffix}");
        let has_paired = rows.iter().any(|r| r.group == paired);
        let (server_group, throughput_group) = if has_paired {
            (paired.as_str(), paired.as_str())
        } else {
            (server.as_str(), throughput.as_str())
        };
        let gcra =
            |group: &str, backend: &str, metric: &str| get(rows, group, "gcra", backend, metric);
        // One hot key is CPU-bound inside Redis: judged by the instructions
        // it runs there (`instructions_targets`), its server time beside.
        if suffix != "hot" {
            push_ratio(
                out,
                "module GCRA server time / redis-cell CL.THROTTLE",
                server_group,
                "gcra",
                gcra(server_group, "redis-module", "usec_per_call"),
                gcra(server_group, "redis-cell", "usec_per_call"),
                LE,
                1.0,
            );
        }
        push_ratio(
            out,
            "module GCRA throughput / redis-cell CL.THROTTLE (64 in flight, one connection)",
            throughput_group,
            "gcra",
            gcra(throughput_group, "redis-module", "checks_per_sec"),
            gcra(throughput_group, "redis-cell", "checks_per_sec"),
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

/// The instruction counts inside `processCommand` (one hot key): module
/// GCRA against `CL.THROTTLE`, admitted and refused, each with the server
/// time of the paired rounds on the same path beside it.
const COUNTED: [(&str, &str, &str); 2] = [
    (
        "module-instructions-admitted",
        "module-paired-hot",
        "module GCRA / redis-cell CL.THROTTLE, one key, admitted: instructions inside processCommand",
    ),
    (
        "module-instructions-refused",
        "module-paired-refused-hot",
        "module GCRA / redis-cell CL.THROTTLE, one key, refused: instructions inside processCommand",
    ),
];

fn instructions_targets(rows: &[Row], out: &mut Vec<Target>) {
    for (group, time_group, what) in COUNTED {
        let count = |backend| get(rows, group, "gcra", backend, "instructions_per_check");
        let before = out.len();
        push_judged(
            out,
            INSTRUCTIONS,
            what,
            group,
            "gcra",
            count("redis-module"),
            count("redis-cell"),
            LE,
            1.0,
        );
        let usec = |backend| get(rows, time_group, "gcra", backend, "usec_per_call");
        if let Some(target) = out.get_mut(before) {
            target.time_beside = usec("redis-module")
                .zip(usec("redis-cell"))
                .map(|(module, cell)| module / cell);
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
         the module API's direct key access. The other algorithms do not read a key that \
         holds nothing, and a check on the server's clock after an admission of its key \
         looks it up once, to read and write; GCRA and the leaky queue read their key in \
         place when such a check is sure to admit (the key's expiry bounds the instant it \
         holds) and write the new state over those bytes; a check after a refusal, and \
         every other call, reads with `GET` (`RM_Call`) and writes the state straight \
         into the key, stored as `SET` stores it. Every write is replicated as `SET key \
         value PXAT at`.\n\n",
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
    let paired: Vec<_> = PAIRED
        .iter()
        .filter_map(|&(prefix, suffix, label)| {
            let group = format!("{prefix}{suffix}");
            let g = |backend: &str, metric: &str| summary.get(&group, "gcra", backend, metric);
            let figures = [
                g("redis-module", "usec_per_call")?,
                g("redis-cell", "usec_per_call")?,
                g("redis-module", "checks_per_sec")?,
                g("redis-cell", "checks_per_sec")?,
            ];
            Some((label, figures))
        })
        .collect();
    if !paired.is_empty() {
        out.push_str(
            "\nModule GCRA and redis-cell in paired rounds (the targets' figures): both \
             sides' keys on the server, each round one side then the other (the order \
             alternating), the same checks each; medians over the rounds. Runs minutes \
             apart differ by up to a fifth here; back to back, drift falls on both.\n\n",
        );
        out.push_str(
            "| keys | module µs | redis-cell µs | ratio | module checks/s | redis-cell checks/s | ratio |\n",
        );
        out.push_str("|---|---:|---:|---:|---:|---:|---:|\n");
        for (label, [mu, cu, mt, ct]) in paired {
            let _ = writeln!(
                out,
                "| {label} | {} | {} | {} | {} | {} | {} |",
                two(mu),
                two(cu),
                format_args!("{:.3}", mu / cu),
                si(mt),
                si(ct),
                format_args!("{:.3}", mt / ct),
            );
        }
    }
    out.push_str(&counted_table(summary));
    out.push_str(&memory_table(summary));
    if !has("redis-cell") {
        out.push_str(
            "\n**redis-cell: missing.** The module bench could not build or load it; the \
             reason is in the bench's output and in the `redis_cell` fact of its rows file \
             (`<criterion home>/ratelab-rows/module.json`).\n",
        );
    }
    out
}

/// Instructions inside `processCommand`, module GCRA and redis-cell.
fn counted_table(summary: &Summary) -> String {
    let count =
        |group: &str, backend: &str| summary.get(group, "gcra", backend, "instructions_per_check");
    if COUNTED
        .iter()
        .all(|(group, _, _)| count(group, "redis-module").is_none())
    {
        return String::new();
    }
    let mut out = String::from(
        "\nInstructions Redis runs inside `processCommand` for one call, one key (callgrind: \
         `redis-server` loading both modules under `valgrind --tool=callgrind \
         --toggle-collect=processCommand`, `callgrind_control` zeroing and dumping the counts \
         around N calls and 2N calls on one connection; the difference over N): the figure \
         of record, which the load does not move. Admitted on the one-key quota; refused on \
         one per hour, burst 1, the key spent.\n\n",
    );
    out.push_str("| path | module | redis-cell | ratio |\n|---|---:|---:|---:|\n");
    for (group, path) in [
        ("module-instructions-admitted", "admitted"),
        ("module-instructions-refused", "refused"),
    ] {
        let (module, cell_count) = (count(group, "redis-module"), count(group, "redis-cell"));
        let _ = writeln!(
            out,
            "| {path} | {} | {} | {} |",
            cell(module, |n| format!("{n:.0}")),
            cell(cell_count, |n| format!("{n:.0}")),
            cell(module.zip(cell_count).map(|(m, c)| m / c), |r| format!(
                "{r:.3}"
            )),
        );
    }
    out.push_str(
        "\nA check after an admission of its key opens it to read and write at once, reads \
         the string in place when its expiry proves the check admits, and writes the new \
         state over it. A check after a refusal of its key (one bit per key hash tells) reads \
         it with `GET` through `RM_Call`, as a script reads it (about 3,800 instructions: \
         the key's lookup about 800, the rest the call's client, arguments, command lookup \
         and reply), so that an embedded string stays embedded: the module API reads a \
         string in place (`RM_StringDMA`) only by making it raw. A refusal then looks its \
         key up once and writes nothing; redis-cell reads in place (about 3,400 with its \
         clock and its copy of the bytes) and replicates its command even when it refuses. \
         The module's reply is eight integers to redis-cell's five (about 1,860 \
         instructions to 1,360).\n",
    );
    out
}

/// Key name lengths the module bench compares `MEMORY USAGE` at.
const NAME_LENGTHS: [usize; 6] = [4, 8, 16, 32, 64, 128];

/// `MEMORY USAGE` of a GCRA key by its name's length, module and
/// redis-cell side by side (empty without those rows).
fn memory_table(summary: &Summary) -> String {
    let bytes = |length: usize, backend: &str| {
        let group = format!("module-memory-name-{length}");
        summary.get(&group, "gcra", backend, "bytes_per_key")
    };
    if NAME_LENGTHS
        .iter()
        .all(|&length| bytes(length, "redis-module").is_none())
    {
        return String::new();
    }
    let mut out = String::from(
        "\n`MEMORY USAGE` of one GCRA key, written by the module and by redis-cell under \
         names of the same length (each checked four times: stored, then updated in place; \
         the module's value is 24 bytes, redis-cell's 19, and the allocator's size classes \
         round both alike):\n\n",
    );
    out.push_str("| key name, bytes | module, bytes | redis-cell, bytes |\n|---:|---:|---:|\n");
    for length in NAME_LENGTHS {
        let _ = writeln!(
            out,
            "| {length} | {} | {} |",
            cell(bytes(length, "redis-module"), |b| format!("{b:.0}")),
            cell(bytes(length, "redis-cell"), |b| format!("{b:.0}")),
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
                "module-server-100k",
                "gcra",
                "redis-module",
                Metric::UsecPerCall,
                3.0,
            ),
            Row::new(
                "module-server-100k",
                "gcra",
                "redis-cell",
                Metric::UsecPerCall,
                4.0,
            ),
            Row::new(
                "module-server-100k",
                "token-bucket",
                "redis-module",
                Metric::UsecPerCall,
                6.0,
            ),
            Row::new(
                "module-server-100k",
                "sliding-log",
                "redis-module",
                Metric::UsecPerCall,
                6.0,
            ),
            Row::new(
                "module-throughput-100k",
                "gcra",
                "redis-module",
                Metric::ChecksPerSec,
                9.0,
            ),
            Row::new(
                "module-throughput-100k",
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

    #[test]
    fn paired_rounds_decide_the_redis_cell_targets_when_present() {
        let row = |group: &str, backend: &str, metric: Metric, value: f64| {
            Row::new(group, "gcra", backend, metric, value)
        };
        let rows = vec![
            row(
                "module-server-100k",
                "redis-module",
                Metric::UsecPerCall,
                5.0,
            ),
            row("module-server-100k", "redis-cell", Metric::UsecPerCall, 4.0),
            row(
                "module-paired-100k",
                "redis-module",
                Metric::UsecPerCall,
                3.0,
            ),
            row("module-paired-100k", "redis-cell", Metric::UsecPerCall, 4.0),
            row(
                "module-paired-100k",
                "redis-module",
                Metric::ChecksPerSec,
                12.0,
            ),
            row(
                "module-paired-100k",
                "redis-cell",
                Metric::ChecksPerSec,
                10.0,
            ),
        ];
        let mut out = Vec::new();
        targets(&rows, &mut out);
        let server = out
            .iter()
            .find(|t| t.target.starts_with("module GCRA server time"))
            .expect("the server-time target");
        assert_eq!(
            (server.group.as_str(), server.value),
            ("module-paired-100k", 0.75)
        );
        let throughput = out
            .iter()
            .find(|t| t.target.starts_with("module GCRA throughput"))
            .expect("the throughput target");
        assert_eq!(throughput.value, 1.2);
    }

    #[test]
    fn one_hot_key_is_judged_by_the_instructions_inside_redis() {
        let row = |group: &str, backend: &str, metric: Metric, value: f64| {
            Row::new(group, "gcra", backend, metric, value)
        };
        let rows = vec![
            row(
                "module-instructions-refused",
                "redis-module",
                Metric::InstructionsPerCheck,
                11_000.0,
            ),
            row(
                "module-instructions-refused",
                "redis-cell",
                Metric::InstructionsPerCheck,
                10_000.0,
            ),
            row(
                "module-paired-refused-hot",
                "redis-module",
                Metric::UsecPerCall,
                1.0,
            ),
            row(
                "module-paired-refused-hot",
                "redis-cell",
                Metric::UsecPerCall,
                2.0,
            ),
            // The hot key's server time alone judges nothing.
            row(
                "module-paired-hot",
                "redis-module",
                Metric::UsecPerCall,
                3.0,
            ),
            row("module-paired-hot", "redis-cell", Metric::UsecPerCall, 4.0),
        ];
        let mut out = Vec::new();
        targets(&rows, &mut out);
        assert_eq!(out.len(), 1, "{out:#?}");
        let refused = &out[0];
        assert_eq!(refused.judged_by, INSTRUCTIONS);
        assert!((refused.value - 1.1).abs() < 1e-9 && !refused.pass);
        assert_eq!(refused.time_beside, Some(0.5));
        let table = counted_table(&super::super::summary_of(rows));
        assert!(
            table.contains("| refused | 11000 | 10000 | 1.100 |"),
            "{table}"
        );
    }
}
