//! Instructions per check, counted by callgrind (the `instructions` bench):
//! the figure of record for the CPU-bound targets, each with the time
//! ratio of the same comparison beside it.

use std::fmt::Write as _;

use ratelab::AlgorithmKind;

use super::{INSTRUCTIONS, LE, Summary, Target, cell, clocks, get, one, push_judged, three};
use crate::algorithms::constant_time;
use crate::run::Row;

/// governor's rows: no key, its DashMap store, its `HashMapStateStore`.
const GOVERNOR: &str = "gcra";
const DASHMAP: &str = "gcra-foldhash";
const HASHMAP: &str = "gcra-hashmap-foldhash";
const LEAN: &str = "gcra-lean";

/// The keyed settings: instruction group, time group (its paired rounds
/// where the run has them), label.
const KEYED: [(&str, &str, &str); 4] = [
    (
        "instructions-keyed-100k",
        "memory-keyed-100k-manual-clock",
        "keyed 100k, steady state (frozen clock)",
    ),
    (
        "instructions-keyed-1m",
        "memory-keyed-1m-manual-clock",
        "keyed 1M, steady state (frozen clock)",
    ),
    (
        "instructions-returning-100k",
        "memory-keyed-100k-returning",
        "keyed 100k, the returning client (live clock)",
    ),
    (
        "instructions-returning-1m",
        "memory-keyed-1m-returning",
        "keyed 1M, the returning client (live clock)",
    ),
];

fn count(rows: &[Row], group: &str, algorithm: &str, backend: &str) -> Option<f64> {
    get(rows, group, algorithm, backend, "instructions_per_check")
}

/// Adds `ours / reference` in instructions, bound `limit`, with the time
/// ratio `time` beside it.
#[allow(clippy::too_many_arguments)]
fn push(
    out: &mut Vec<Target>,
    target: &str,
    group: &str,
    algorithm: &str,
    ours: Option<f64>,
    reference: Option<f64>,
    limit: f64,
    time: Option<f64>,
) {
    let before = out.len();
    push_judged(
        out,
        INSTRUCTIONS,
        target,
        group,
        algorithm,
        ours,
        reference,
        LE,
        limit,
    );
    if let Some(pushed) = out.get_mut(before) {
        pushed.time_beside = time;
    }
}

/// This part's targets.
pub(super) fn targets(rows: &[Row], out: &mut Vec<Target>) {
    let direct = "instructions-direct";
    let governor = count(rows, direct, GOVERNOR, "governor");
    for (ours, what) in [
        (
            "gcra",
            "one key, same clock (frozen), cost 1 literal: ours / governor",
        ),
        (
            LEAN,
            "one key, same clock (frozen), cost 1 literal: ours lean / governor",
        ),
    ] {
        push(
            out,
            what,
            direct,
            ours,
            count(rows, direct, ours, "memory"),
            governor,
            1.0,
            clocks::time_ratio(rows, "memory-direct-manual-clock", ours, GOVERNOR),
        );
    }
    for (group, time_group, _) in KEYED {
        let returning = group.starts_with("instructions-returning");
        for (store, store_name) in [
            (DASHMAP, "governor's DashMap store"),
            (HASHMAP, "governor's HashMap store"),
        ] {
            let terms = if returning {
                "the returning client (live clock), same hasher"
            } else {
                "keyed steady state, same clock (frozen) and hasher"
            };
            let reference = count(rows, group, store, "governor");
            // The frozen paired rounds time governor's DashMap store only.
            let time = |ours: &str| {
                (returning || store == DASHMAP)
                    .then(|| clocks::time_ratio(rows, time_group, ours, store))
                    .flatten()
            };
            push(
                out,
                &format!("{terms}: ours / {store_name}"),
                group,
                "gcra",
                count(rows, group, "gcra", "memory"),
                reference,
                1.0,
                time("gcra"),
            );
            push(
                out,
                &format!("{terms}: ours lean / {store_name}"),
                group,
                LEAN,
                count(rows, group, LEAN, "memory"),
                reference,
                1.0,
                time(LEAN),
            );
        }
    }
    // The other O(1) algorithms against our GCRA, one key and 100k keys.
    for (group, time_group) in [
        (direct, "memory-direct"),
        ("instructions-keyed-100k", "memory-keyed-100k"),
    ] {
        let gcra = count(rows, group, "gcra", "memory");
        let others = AlgorithmKind::ALL
            .into_iter()
            .filter(|&k| constant_time(k) && k != AlgorithmKind::Gcra);
        for algorithm in others.map(AlgorithmKind::name) {
            push(
                out,
                "O(1) algorithm / our GCRA",
                group,
                algorithm,
                count(rows, group, algorithm, "memory"),
                gcra,
                2.0,
                o1_time_ratio(rows, time_group, algorithm),
            );
        }
    }
}

/// `algorithm / gcra` in time, from the paired rounds where the run has
/// both (the token bucket's), else from criterion.
fn o1_time_ratio(rows: &[Row], group: &str, algorithm: &str) -> Option<f64> {
    let ns = |group: &str, algorithm: &str| get(rows, group, algorithm, "memory", "ns_per_check");
    let paired = format!("{group}-paired");
    let group = if ns(&paired, algorithm).is_some() && ns(&paired, "gcra").is_some() {
        paired.as_str()
    } else {
        group
    };
    Some(ns(group, algorithm)? / ns(group, "gcra")?)
}

/// This part's section of the README, empty when the run has no counts.
pub(super) fn section(summary: &Summary) -> String {
    let rows = &summary.rows;
    if !rows.iter().any(|r| r.metric == "instructions_per_check") {
        return String::new();
    }
    let mut out = String::from(
        "\n## Instructions per check\n\n\
         Counted by callgrind (`valgrind --tool=callgrind`), exact and unmoved by the \
         machine's load: the figure of record for the CPU-bound targets. Each case runs in \
         a process of its own; only the instructions inside the function that makes one \
         check are counted (the check, inlined there, and everything it calls; not \
         building or filling the limiter, stepping the clock or choosing the key), over N \
         checks and then 2N, and the figure is the difference over N, so that what a \
         phase pays once cancels. That function's call, return and its observation of the \
         result (a few instructions) are in every figure, on both sides alike. \
         **Terms:** the same clock, a counter moved by hand, each library's own \
         (ratelab's `ManualClock`, governor's `FakeRelativeClock`), both stepped together \
         outside the count; `u64` keys; foldhash on both; cost 1 as a literal on both \
         sides (`check(1)`, `check_key(&k, 1)` beside governor's `check()`, \
         `check_key(&k)`), and ratelab's cost as an argument beside governor's `check_n`. \
         governor's keyed stores: its DashMap store and its `HashMapStateStore` (one \
         `parking_lot` lock over a std `HashMap`), both on foldhash.\n\n",
    );
    out.push_str("| one key, frozen clock | instructions |\n|---|---:|\n");
    let direct = "instructions-direct";
    let line = |out: &mut String, label: &str, algorithm: &str, backend: &str| {
        let _ = writeln!(
            out,
            "| {label} | {} |",
            cell(count(rows, direct, algorithm, backend), one)
        );
    };
    line(&mut out, "governor `check()`", GOVERNOR, "governor");
    line(&mut out, "gcra `check(1)`", "gcra", "memory");
    line(&mut out, "gcra lean `check_lean(1)`", LEAN, "memory");
    line(
        &mut out,
        "governor `check_n(black_box(1))`",
        "gcra-check-n",
        "governor",
    );
    line(
        &mut out,
        "gcra `check(black_box(1))`",
        "gcra-cost-argument",
        "memory",
    );
    line(
        &mut out,
        "gcra lean `check_lean(black_box(1))`",
        "gcra-lean-cost-argument",
        "memory",
    );
    out.push_str(
        "\nWith its cost as an argument, `check` builds its whole `Decision` (`remaining`, \
         `reset_after`: a division by the emission interval, done as a multiplication) for a \
         cost the compiler cannot see; governor's `check_n` answers only whether the cells \
         fit (its `NotUntil` computes a wait only on a refusal). The lean check is the like \
         for like.\n\n",
    );
    out.push_str(
        "| keyed | governor DashMap | governor HashMap | gcra | gcra lean | gcra / DashMap | gcra / HashMap | lean / HashMap |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (group, _, label) in KEYED {
        let dashmap = count(rows, group, DASHMAP, "governor");
        let hashmap = count(rows, group, HASHMAP, "governor");
        let gcra = count(rows, group, "gcra", "memory");
        let lean = count(rows, group, LEAN, "memory");
        let per = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} | {} | {} | {} |",
            cell(dashmap, one),
            cell(hashmap, one),
            cell(gcra, one),
            cell(lean, one),
            cell(per(gcra, dashmap), three),
            cell(per(gcra, hashmap), three),
            cell(per(lean, hashmap), three),
        );
    }
    out.push_str(
        "\nSteady state: 1/s with a burst of 1,000,000, every key checked once before \
         counting, the clock frozen: every check finds its key. The returning client: \
         1,000/s (burst 1,000), the clock stepped 1 µs before each check, the keys visited \
         in a random order that visits each once per round, so that every key comes back \
         100 ms (1 s at a million keys) after its last check, long after the millisecond \
         that refills its unit: the common case of a per-client limit. ratelab keeps a key \
         back to full capacity for an idle grace (the quota's period by default) and \
         decides it on its own state, which decides as a key never seen: the returning \
         client pays a lookup, as governor's stores do (which keep every key until \
         `retain_recent` is called).\n\n",
    );
    out.push_str("| keyed 100k, frozen clock | instructions | / our GCRA |\n|---|---:|---:|\n");
    let keyed = "instructions-keyed-100k";
    let gcra = count(rows, keyed, "gcra", "memory");
    for kind in AlgorithmKind::ALL.into_iter().filter(|&k| constant_time(k)) {
        let n = count(rows, keyed, kind.name(), "memory");
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            kind.name(),
            cell(n, one),
            cell(n.zip(gcra).map(|(a, b)| a / b), three),
        );
    }
    let _ = writeln!(
        out,
        "\nThe returning client in time (paired rounds, ns per check; each side on its \
         default clock, ratelab's `SystemClock` and governor's `QuantaClock`; foldhash on \
         both; 1,000/s, the keys visited once per round):\n"
    );
    out.push_str("| keys | governor DashMap | governor HashMap | gcra | gcra lean |\n");
    out.push_str("|---|---:|---:|---:|---:|\n");
    for (group, label) in [
        ("memory-keyed-100k-returning-paired", "100,000"),
        ("memory-keyed-1m-returning-paired", "1,000,000"),
    ] {
        let ns = |algorithm, backend| get(rows, group, algorithm, backend, "ns_per_check");
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} |",
            cell(ns(DASHMAP, "governor"), one),
            cell(ns(HASHMAP, "governor"), one),
            cell(ns("gcra", "memory"), one),
            cell(ns(LEAN, "memory"), one),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Metric;

    fn counted(group: &str, algorithm: &str, backend: &str, value: f64) -> Row {
        Row::new(
            group,
            algorithm,
            backend,
            Metric::InstructionsPerCheck,
            value,
        )
    }

    #[test]
    fn counts_judge_and_the_time_ratio_stands_beside() {
        let rows = vec![
            counted("instructions-keyed-100k", "gcra", "memory", 128.0),
            counted("instructions-keyed-100k", DASHMAP, "governor", 160.0),
            counted("instructions-keyed-100k", HASHMAP, "governor", 120.0),
            Row::new(
                "memory-keyed-100k-manual-clock-paired",
                "gcra",
                "memory",
                Metric::NsPerCheck,
                30.0,
            ),
            Row::new(
                "memory-keyed-100k-manual-clock-paired",
                DASHMAP,
                "governor",
                Metric::NsPerCheck,
                20.0,
            ),
        ];
        let mut out = Vec::new();
        targets(&rows, &mut out);
        assert_eq!(out.len(), 2, "{out:#?}");
        let dashmap = &out[0];
        assert_eq!(dashmap.judged_by, INSTRUCTIONS);
        assert!((dashmap.value - 0.8).abs() < 1e-9 && dashmap.pass);
        // Slower in time here, and shown so; the count judges.
        assert_eq!(dashmap.time_beside, Some(1.5));
        let hashmap = &out[1];
        assert!(hashmap.target.contains("HashMap") && !hashmap.pass);
        assert_eq!(hashmap.time_beside, None);
        let section = section(&super::super::summary_of(rows));
        assert!(
            section.contains("| 160.0 | 120.0 | 128.0 | – | 0.800 | 1.067 | – |"),
            "{section}"
        );
    }
}
