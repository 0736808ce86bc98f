//! [`Stats`]: what a limiter did, counted for a program to observe.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::breaker::Snapshot;

/// Counts of what a limiter did, for a program to observe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Calls the store answered.
    pub answered: u64,
    /// Calls that failed because the store did not answer within the
    /// timeout.
    pub timeouts: u64,
    /// Calls that failed because the store was unreachable (the connection
    /// failed, a cluster slot was moving or down: outages).
    pub errors: u64,
    /// Calls that failed on a data error: a key of the wrong type, corrupt
    /// state, a reply out of bounds, a store out of memory.
    pub data_errors: u64,
    /// Refusals answered from the local cache, without a round trip.
    pub cached_refusals: u64,
    /// Calls answered by the failure policy without calling the store,
    /// because the circuit breaker was open.
    pub short_circuited: u64,
    /// Times the circuit breaker opened.
    pub breaker_opened: u64,
    /// The circuit breaker is open now: the store is not called until a
    /// probe succeeds.
    pub breaker_open: bool,
    /// The time left before an open breaker lets a probe through (zero when
    /// closed, or when a probe may go now).
    pub cool_down_left: Duration,
    /// Checks that timed out, were admitted after all (their answer came
    /// late), and were given back.
    pub late_refunds: u64,
    /// Checks that timed out, were admitted after all, and could not be
    /// given back (the refund failed): they stay charged.
    pub late_refunds_failed: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) answered: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) data_errors: AtomicU64,
    pub(crate) cached_refusals: AtomicU64,
    pub(crate) late_refunds: AtomicU64,
    pub(crate) late_refunds_failed: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self, breaker: Snapshot) -> Stats {
        Stats {
            data_errors: self.data_errors.load(Ordering::Relaxed),
            short_circuited: breaker.short_circuited,
            breaker_opened: breaker.opened,
            breaker_open: breaker.open,
            cool_down_left: breaker.cool_down_left,
            answered: self.answered.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            cached_refusals: self.cached_refusals.load(Ordering::Relaxed),
            late_refunds: self.late_refunds.load(Ordering::Relaxed),
            late_refunds_failed: self.late_refunds_failed.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
