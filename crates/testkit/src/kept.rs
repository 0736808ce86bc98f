//! The oracle for settlements: a replay of what was kept.
//!
//! Every admission is recorded with the cost it was charged; a settlement
//! lowers what it counts for (0 for a refund) or records the extra it was
//! charged, at the settlement's instant; a reset starts the key's history
//! again. At every admission, [`History::admits`] replays the kept history
//! through a fresh model of the algorithm with every charge forced, and
//! says whether that left room: the promise of
//! [`Receipt`](ratelab_core::Receipt), checked from the outside.

use ratelab_core::Bound;

/// One charge: an admission (what it still counts for) or the extra a
/// settlement charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Charge {
    at: u64,
    units: u64,
}

/// Which admission a receipt stands for: its place in the history of one
/// key, and the reset it belongs after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    generation: u64,
    index: usize,
    cost: u64,
}

/// The kept history of one key.
#[derive(Debug, Clone)]
pub struct History {
    bound: Bound,
    generation: u64,
    charges: Vec<Charge>,
}

impl History {
    /// An empty history of an algorithm that promises `bound`: the kept
    /// charges are replayed through that promise, as this module models
    /// it, not through the algorithm.
    pub fn new(bound: Bound) -> Self {
        History {
            bound,
            generation: 0,
            charges: Vec::new(),
        }
    }

    /// Whether the kept history left room for `cost` units at `at` (the
    /// instant the limiter decided at).
    pub fn admits(&self, at: u64, cost: u64) -> bool {
        match self.bound {
            // A debt repaid at one unit per `interval`, admitting while it
            // stays within the burst's time of now.
            Bound::Rate { burst, interval } => {
                let tolerance = burst.saturating_mul(interval);
                let mut full_at = 0u64;
                for c in &self.charges {
                    full_at = full_at.max(c.at) + c.units * interval;
                }
                full_at.max(at) + cost * interval <= at + tolerance
            }
            Bound::AlignedWindow { limit, window } => {
                self.sum(|c| c.at / window == at / window) + cost <= limit
            }
            Bound::TrailingWindow { limit, window } => {
                self.sum(|c| c.at <= at && c.at + window > at) + cost <= limit
            }
            // The current window plus the previous one weighted by the steps
            // of the current window still to come.
            Bound::WeightedWindows {
                limit,
                window,
                step,
                steps,
            } => {
                let index = at / window;
                let current = self.sum(|c| c.at / window == index);
                let previous = if index == 0 {
                    0
                } else {
                    self.sum(|c| c.at / window == index - 1)
                };
                let k = (at - index * window) / step;
                let room = (limit * steps).saturating_sub(previous * (steps - k)) / steps;
                current + cost <= room
            }
        }
    }

    fn sum(&self, within: impl Fn(&Charge) -> bool) -> u64 {
        self.charges
            .iter()
            .filter(|c| within(c))
            .map(|c| c.units)
            .sum()
    }

    /// Records an admission of `cost` at `at`; what its receipt stands for.
    pub fn admit(&mut self, at: u64, cost: u64) -> Entry {
        self.charges.push(Charge { at, units: cost });
        Entry {
            generation: self.generation,
            index: self.charges.len() - 1,
            cost,
        }
    }

    /// Records the settlement of `entry` to `actual` units at `at`: it
    /// counts for no more than `actual`, and what it used beyond its cost is
    /// charged at `at`. An admission from before a reset no longer counts
    /// here; its extra does.
    pub fn settle(&mut self, entry: Entry, actual: u64, at: u64) {
        if entry.generation == self.generation {
            let kept = &mut self.charges[entry.index].units;
            *kept = (*kept).min(actual);
        }
        if actual > entry.cost {
            self.charges.push(Charge {
                at,
                units: actual - entry.cost,
            });
        }
    }

    /// A reset: the key starts again, as if never seen.
    pub fn reset(&mut self) {
        self.generation += 1;
        self.charges.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debt_refunded_in_the_middle_frees_only_what_it_held() {
        // 1 per second, burst 3: the reviewer's case.
        let mut h = History::new(Bound::Rate {
            burst: 3,
            interval: 1_000_000,
        });
        let a = h.admit(0, 1);
        h.admit(0, 1);
        let c = h.admit(0, 1);
        h.settle(a, 0, 0);
        for _ in 0..3 {
            assert!(h.admits(2_000_000, 1));
            h.admit(2_000_000, 1);
        }
        // c's second was repaid by 2 s: refunding it frees nothing.
        h.settle(c, 0, 2_000_000);
        assert!(!h.admits(2_000_000, 1));
    }

    #[test]
    fn windows_count_what_was_kept_and_extras() {
        let mut h = History::new(Bound::AlignedWindow {
            limit: 3,
            window: 10,
        });
        let a = h.admit(1, 2);
        assert!(h.admits(2, 1) && !h.admits(2, 2));
        h.settle(a, 3, 4);
        assert!(!h.admits(5, 1));
        assert!(h.admits(10, 3));
    }
}
