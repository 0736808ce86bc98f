//! Oracles: what an algorithm may admit, checked on what it did admit.

use std::fmt;

/// Units admitted at one instant (for one key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// When, µs.
    pub at: u64,
    /// How many units.
    pub units: u64,
}

pub use ratelab_core::Bound;

/// An interval in which more was admitted than the bound allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The interval's first instant, µs.
    pub from: u64,
    /// The interval's last instant, µs.
    pub to: u64,
    /// Units admitted within it.
    pub admitted: u64,
    /// Units allowed within it.
    pub allowed: u64,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} units admitted in [{} µs, {} µs], at most {} allowed",
            self.admitted, self.from, self.to, self.allowed
        )
    }
}

/// An algorithm's [`Bound`], checked on what was admitted for one key.
pub trait Oracle {
    /// Units allowed within a closed interval `span` µs long, or `None` if
    /// the check says nothing about intervals that long: a debt allows
    /// `burst + floor(span / interval)`; a window, in an interval shorter
    /// than itself, `limit` (the log) or `2 × limit` (across an aligned
    /// edge: the fixed window, the sliding counter's counts).
    fn allowed_within(&self, span: u64) -> Option<u64>;

    /// The first interval (by start, then end) that breaks the bound, if
    /// any. `admitted` must be in non-decreasing time order. O(n²).
    fn violation(&self, admitted: &[Admitted]) -> Option<Violation>;
}

impl Oracle for Bound {
    fn allowed_within(&self, span: u64) -> Option<u64> {
        match self.window() {
            Some(window) if span >= window => None,
            _ => Some(self.most_within(span)),
        }
    }

    fn violation(&self, admitted: &[Admitted]) -> Option<Violation> {
        for (i, first) in admitted.iter().enumerate() {
            let mut total = 0;
            for last in &admitted[i..] {
                total += last.units;
                let Some(allowed) = self.allowed_within(last.at - first.at) else {
                    break;
                };
                if total > allowed {
                    return Some(Violation {
                        from: first.at,
                        to: last.at,
                        admitted: total,
                        allowed,
                    });
                }
            }
        }
        None
    }
}

/// The most units admitted within any closed interval shorter than `window`
/// µs: the figure a window bound is about. `admitted` in time order.
pub fn max_within(admitted: &[Admitted], window: u64) -> u64 {
    let mut best = 0;
    let mut total = 0;
    let mut start = 0;
    for last in admitted {
        total += last.units;
        while last.at - admitted[start].at >= window {
            total -= admitted[start].units;
            start += 1;
        }
        best = best.max(total);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(list: &[(u64, u64)]) -> Vec<Admitted> {
        list.iter()
            .map(|&(at, units)| Admitted { at, units })
            .collect()
    }

    #[test]
    fn bucket_bound() {
        let bound = Bound::Rate {
            burst: 2,
            interval: 10,
        };
        assert_eq!(bound.violation(&at(&[(0, 2), (10, 1), (20, 1)])), None);
        let v = bound.violation(&at(&[(0, 2), (9, 1)])).unwrap();
        assert_eq!((v.from, v.to, v.admitted, v.allowed), (0, 9, 3, 2));
    }

    #[test]
    fn window_bound_and_max() {
        let bound = Bound::TrailingWindow {
            limit: 2,
            window: 10,
        };
        let admitted = at(&[(0, 1), (5, 1), (10, 1), (15, 1)]);
        assert_eq!(bound.violation(&admitted), None);
        assert_eq!(max_within(&admitted, 10), 2);
        let admitted = at(&[(0, 1), (5, 1), (9, 1)]);
        assert_eq!(bound.violation(&admitted).unwrap().admitted, 3);
        assert_eq!(max_within(&admitted, 10), 3);
    }
}
