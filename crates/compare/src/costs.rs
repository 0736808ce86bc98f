//! The in-memory cost of each algorithm as this run's cost section holds
//! it, read for the guide: which is cheapest, by how much, and how the
//! figures were measured, so that no sentence names a cost the table
//! contradicts.

use crate::Results;
use crate::markdown::num;
use crate::scenario::cost::Row;
use crate::stats::Spread;

/// One algorithm's in-memory figures.
#[derive(Debug, Clone, Copy)]
pub struct MemoryCost<'a> {
    /// The algorithm.
    pub algorithm: &'a str,
    /// Heap bytes per key.
    pub bytes: f64,
    /// Nanoseconds per check.
    pub ns: f64,
    /// The spread of `ns` over this run's repeats, when measured here.
    pub ns_spread: Option<Spread>,
}

/// Every algorithm's in-memory cost, with how it was measured.
#[derive(Debug, Clone)]
pub struct MemoryCosts<'a> {
    /// One per algorithm with both figures, in the cost table's order.
    pub rows: Vec<MemoryCost<'a>>,
    /// Whether the bytes per key come from the benchmark summary.
    pub bytes_from_bench: bool,
    /// Whether the times come from the benchmark summary.
    pub ns_from_bench: bool,
}

/// The least of `value` over `rows`, and every algorithm at it.
fn least<'a>(
    rows: &[MemoryCost<'a>],
    value: impl Fn(&MemoryCost<'a>) -> f64,
) -> (f64, Vec<&'a str>) {
    let min = rows.iter().map(&value).fold(f64::INFINITY, f64::min);
    let names = rows
        .iter()
        .filter(|r| value(r) == min)
        .map(|r| r.algorithm)
        .collect();
    (min, names)
}

/// `a`, `a and b`, `a, b and c`.
pub fn and_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

impl<'a> MemoryCosts<'a> {
    /// The cost section's in-memory figures; `None` without one.
    pub fn of(results: &'a Results) -> Option<Self> {
        let cost = results.cost.as_ref()?;
        let both = |r: &'a Row| {
            let bytes = r.memory_bytes_per_key?;
            let ns = r.memory_ns_per_check?;
            Some((r, bytes, ns))
        };
        let full: Vec<_> = cost.rows.iter().filter_map(both).collect();
        if full.is_empty() {
            return None;
        }
        Some(MemoryCosts {
            bytes_from_bench: full.iter().all(|(_, b, _)| b.from_bench),
            ns_from_bench: full.iter().all(|(_, _, n)| n.from_bench),
            rows: full
                .iter()
                .map(|(r, b, n)| MemoryCost {
                    algorithm: &r.algorithm,
                    bytes: b.value,
                    ns: n.value,
                    ns_spread: r.memory_ns_spread.filter(|s| s.runs > 1),
                })
                .collect(),
        })
    }

    /// One algorithm's figures.
    pub fn get(&self, algorithm: &str) -> Option<MemoryCost<'a>> {
        self.rows.iter().copied().find(|r| r.algorithm == algorithm)
    }

    /// The fewest bytes per key and who keeps them.
    pub fn fewest_bytes(&self) -> (f64, Vec<&'a str>) {
        least(&self.rows, |r| r.bytes)
    }

    /// The most bytes per key and who keeps them.
    pub fn most_bytes(&self) -> (f64, Vec<&'a str>) {
        let (neg, names) = least(&self.rows, |r| -r.bytes);
        (-neg, names)
    }

    /// The fastest check and who makes it.
    pub fn fastest(&self) -> (f64, Vec<&'a str>) {
        least(&self.rows, |r| r.ns)
    }

    /// How the bytes per key were counted, in a clause.
    pub fn bytes_method(&self) -> &'static str {
        if self.bytes_from_bench {
            "heap bytes per key from the benchmark summary: one check of each of 100,000 integer keys, the state after one admission"
        } else {
            "heap bytes per key counted by this run's allocator after each string key used its whole burst (the sliding log's largest state), more than the benchmark's one check per integer key"
        }
    }

    /// Where the figures come from, for a sentence's bracket.
    pub fn source(&self) -> String {
        let bytes = if self.bytes_from_bench {
            "bytes from the benchmark summary"
        } else {
            "bytes counted by this run"
        };
        let runs = self
            .rows
            .iter()
            .filter_map(|r| r.ns_spread)
            .map(|s| s.runs)
            .max();
        let time = match (self.ns_from_bench, runs) {
            (true, _) => "time from the benchmark summary".to_owned(),
            (false, Some(runs)) => format!("time the median of {runs} repeats here"),
            (false, None) => "time measured once here".to_owned(),
        };
        format!("{bytes}, {time}")
    }

    /// How the times were measured, in a clause.
    pub fn ns_method(&self) -> String {
        let runs = self
            .rows
            .iter()
            .filter_map(|r| r.ns_spread)
            .map(|s| s.runs)
            .max();
        match (self.ns_from_bench, runs) {
            (true, _) => "time per check: the benchmark summary's medians".to_owned(),
            (false, Some(runs)) => format!(
                "time per check: the median of {runs} repeats on this machine, other work running beside it"
            ),
            (false, None) => "time per check: one measurement on this machine".to_owned(),
        }
    }

    /// Whether this run can tell `a`'s time from `b`'s: not when both were
    /// measured here and their ranges over the repeats overlap.
    pub fn times_differ(a: &MemoryCost<'_>, b: &MemoryCost<'_>) -> bool {
        match (a.ns_spread, b.ns_spread) {
            (Some(x), Some(y)) => x.max < y.min || y.max < x.min,
            _ => a.ns != b.ns,
        }
    }
}

/// `36 ns (28–46 over 5 repeats)`, or `36 ns` from the benchmarks.
pub fn ns_text(c: &MemoryCost<'_>) -> String {
    match c.ns_spread {
        Some(s) => format!(
            "{} ns ({}–{} over {} repeats)",
            num(c.ns, 0),
            num(s.min, 0),
            num(s.max, 0),
            s.runs
        ),
        None => format!("{} ns", num(c.ns, 0)),
    }
}
