//! [`Stats`]: what a limiter did, counted for a program to observe.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts of what a limiter did, for a program to observe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Checks answered by Redis.
    pub answered: u64,
    /// Checks that failed because Redis did not answer within the timeout.
    pub timeouts: u64,
    /// Checks that failed because Redis returned an error or the connection
    /// failed.
    pub errors: u64,
    /// Scripts reloaded after `NOSCRIPT` (a flush, a restart, a failover).
    pub reloads: u64,
    /// Refusals answered from the local cache, without a round trip.
    pub cached_refusals: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) answered: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) reloads: AtomicU64,
    pub(crate) cached_refusals: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            answered: self.answered.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            reloads: self.reloads.load(Ordering::Relaxed),
            cached_refusals: self.cached_refusals.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
