//! [`Bound`]: what an algorithm promises about the units it lets count,
//! stated once, by the algorithm ([`Algorithm::bound`](crate::Algorithm::bound)),
//! and read by everything that needs it: the `RateLimit` header's wait, the
//! comparison's tables, the tests' oracles.

use crate::Quota;

/// What an algorithm promises about the units that count (the admissions,
/// as settled), for its quota. Every algorithm states its own
/// ([`Algorithm::bound`](crate::Algorithm::bound)); the kinds of promise are
/// listed here once, so that a new kind is a change every reader of a bound
/// must handle (the enum is exhaustive on purpose).
///
/// ```
/// use ratelab_core::{Bound, Quota};
///
/// let quota = Quota::per_second(10)?;
/// let rate = Bound::rate(&quota);
/// // A debt: 10 at once, then one more every 100 ms.
/// assert_eq!(rate.most_within(100_000), 11);
/// let aligned = Bound::AlignedWindow { limit: 10, window: 1_000_000 };
/// // Across a window's edge, twice the limit within a tenth of a second.
/// assert_eq!(aligned.most_within(100_000), 20);
/// # Ok::<(), ratelab_core::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bound {
    /// A debt repaid one unit every `interval` µs, at most `burst` ahead:
    /// at most `burst + floor(t / interval)` units in any interval of length
    /// `t` (GCRA, the token bucket, the leaky meter and queue). A unit comes
    /// back every interval.
    Rate {
        /// The most at once.
        burst: u64,
        /// `T`, µs per unit.
        interval: u64,
    },
    /// At most `limit` units per window of `window` µs aligned on its
    /// multiples, so up to `2 × limit` within any interval across an edge
    /// (the fixed window). Everything comes back when the window ends.
    AlignedWindow {
        /// Units per window.
        limit: u64,
        /// Window length, µs.
        window: u64,
    },
    /// At most `limit` units in every trailing window of `window` µs (the
    /// sliding log). Each unit comes back a window after it was admitted.
    TrailingWindow {
        /// Units per window.
        limit: u64,
        /// Window length, µs.
        window: u64,
    },
    /// The current aligned window's units plus the previous window's,
    /// weighted by the steps of the current window still to come, at most
    /// `limit`: up to `2 × limit` in a trailing window (the sliding
    /// counter). Units come back step by step.
    WeightedWindows {
        /// Units per window.
        limit: u64,
        /// Window length, µs.
        window: u64,
        /// µs per step of the window's position.
        step: u64,
        /// Steps per window.
        steps: u64,
    },
}

impl Bound {
    /// The debts' bound for `quota`: its burst, one unit back every
    /// [`Quota::emission_interval_micros`].
    pub fn rate(quota: &Quota) -> Bound {
        Bound::Rate {
            burst: u64::from(quota.burst()),
            interval: quota.emission_interval_micros(),
        }
    }

    /// The most units that pass at once from full capacity.
    pub const fn capacity(&self) -> u64 {
        match *self {
            Bound::Rate { burst, .. } => burst,
            Bound::AlignedWindow { limit, .. }
            | Bound::TrailingWindow { limit, .. }
            | Bound::WeightedWindows { limit, .. } => limit,
        }
    }

    /// A debt: units come back one per interval, continuously.
    pub const fn is_debt(&self) -> bool {
        matches!(self, Bound::Rate { .. })
    }

    /// The window, µs, of a window algorithm; `None` for a debt.
    pub const fn window(&self) -> Option<u64> {
        match *self {
            Bound::Rate { .. } => None,
            Bound::AlignedWindow { window, .. }
            | Bound::TrailingWindow { window, .. }
            | Bound::WeightedWindows { window, .. } => Some(window),
        }
    }

    /// The most units that may count within any closed interval of length
    /// `t` µs: `burst + floor(t / interval)` for a debt; for the windows,
    /// `limit` for each window the interval can meet: up to
    /// `floor(t / window) + 2` aligned windows (so `2 × limit` across an
    /// edge, for `t` shorter than a window), the same for the weighted
    /// windows' aligned counts, and `floor(t / window) + 1` trailing
    /// windows for the log.
    pub const fn most_within(&self, t: u64) -> u64 {
        match *self {
            Bound::Rate { burst, interval } => burst.saturating_add(t / interval),
            Bound::AlignedWindow { limit, window }
            | Bound::WeightedWindows { limit, window, .. } => limit.saturating_mul(t / window + 2),
            Bound::TrailingWindow { limit, window } => limit.saturating_mul(t / window + 1),
        }
    }
}
