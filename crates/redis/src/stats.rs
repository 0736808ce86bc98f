//! [`Stats`]: what a limiter did, counted for a program to observe.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::breaker::Snapshot;

/// Counts of what a limiter did, for a program to observe.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Checks answered by Redis.
    pub answered: u64,
    /// Checks that failed because Redis did not answer within the timeout.
    pub timeouts: u64,
    /// Checks that failed because the connection failed or a cluster slot
    /// was moving or down (outages).
    pub errors: u64,
    /// Checks that failed on a data error: a key of the wrong type, corrupt
    /// state, a reply out of bounds, Redis out of memory.
    pub data_errors: u64,
    /// Calls sent to the native ratelab module (`RATELAB.<ALGORITHM>`),
    /// answered or not.
    pub module_calls: u64,
    /// Calls sent as a Lua script (`EVALSHA`), answered or not; a call the
    /// module did not know (`ERR unknown command`) and resent as a script
    /// counts in both.
    pub script_calls: u64,
    /// Scripts reloaded after `NOSCRIPT` (a flush, a restart, a failover).
    pub reloads: u64,
    /// Refusals answered from the local cache, without a round trip.
    pub cached_refusals: u64,
    /// Checks answered by the failure policy without calling Redis, because
    /// the circuit breaker was open.
    pub short_circuited: u64,
    /// Times the circuit breaker opened.
    pub breaker_opened: u64,
    /// The circuit breaker is open now: Redis is not called until a probe
    /// succeeds.
    pub breaker_open: bool,
    /// The time left before an open breaker lets a probe through (zero when
    /// closed, or when a probe may go now).
    pub cool_down_left: Duration,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) answered: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) data_errors: AtomicU64,
    pub(crate) reloads: AtomicU64,
    pub(crate) module_calls: AtomicU64,
    pub(crate) script_calls: AtomicU64,
    pub(crate) cached_refusals: AtomicU64,
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
            reloads: self.reloads.load(Ordering::Relaxed),
            module_calls: self.module_calls.load(Ordering::Relaxed),
            script_calls: self.script_calls.load(Ordering::Relaxed),
            cached_refusals: self.cached_refusals.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
