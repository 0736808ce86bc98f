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

/// The most an algorithm may admit for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Token bucket, GCRA, leaky bucket: in every closed interval `[a, b]`,
    /// at most `burst + floor((b − a) / interval)` units.
    Bucket {
        /// Units at once from full.
        burst: u64,
        /// µs per unit refilled.
        interval: u64,
    },
    /// Windows: in every closed interval shorter than `window` µs, at most
    /// `limit × factor` units (1 for the sliding log, 2 for the fixed window
    /// and the sliding counter).
    Window {
        /// Units per window.
        limit: u64,
        /// Window length, µs.
        window: u64,
        /// How many limits fit in one window's length.
        factor: u64,
    },
}

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

impl Bound {
    /// Units allowed within a closed interval `span` µs long, or `None` if
    /// the bound says nothing about intervals that long.
    pub fn allowed_within(&self, span: u64) -> Option<u64> {
        match *self {
            Bound::Bucket { burst, interval } => Some(burst + span / interval),
            Bound::Window {
                limit,
                window,
                factor,
            } => (span < window).then_some(limit * factor),
        }
    }

    /// The first interval (by start, then end) that breaks the bound, if any.
    /// `admitted` must be in non-decreasing time order. O(n²).
    pub fn violation(&self, admitted: &[Admitted]) -> Option<Violation> {
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
        let bound = Bound::Bucket {
            burst: 2,
            interval: 10,
        };
        assert_eq!(bound.violation(&at(&[(0, 2), (10, 1), (20, 1)])), None);
        let v = bound.violation(&at(&[(0, 2), (9, 1)])).unwrap();
        assert_eq!((v.from, v.to, v.admitted, v.allowed), (0, 9, 3, 2));
    }

    #[test]
    fn window_bound_and_max() {
        let bound = Bound::Window {
            limit: 2,
            window: 10,
            factor: 1,
        };
        let admitted = at(&[(0, 1), (5, 1), (10, 1), (15, 1)]);
        assert_eq!(bound.violation(&admitted), None);
        assert_eq!(max_within(&admitted, 10), 2);
        let admitted = at(&[(0, 1), (5, 1), (9, 1)]);
        assert_eq!(bound.violation(&admitted).unwrap().admitted, 3);
        assert_eq!(max_within(&admitted, 10), 3);
    }
}
