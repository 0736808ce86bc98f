//! The exact sliding window: a log of admitted units.

use std::collections::VecDeque;

use ratelab_core::{Algorithm, Decision, Error, LockedCell, Quota, ensure_fits, forget_if_full};

/// Sliding log parameters derived from a [`Quota`]: exact, O(limit) memory.
/// See the crate docs.
///
/// A unit admitted at `t` counts against every instant in `[t, t + window)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    quota: Quota,
    limit: u64,
    window: u64,
}

/// The units admitted within the last window, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Log {
    /// `(admitted at, units)`, in non-decreasing time order; units admitted
    /// at the same microsecond share an entry.
    entries: VecDeque<(u64, u64)>,
    /// The sum of the entries' units.
    total: u64,
}

impl Log {
    /// A log of `(admitted at, units)` entries, or `None` if they are not in
    /// non-decreasing time order, hold an empty entry, or sum past
    /// `u64::MAX`: the invariants `decide` relies on.
    pub fn from_entries(entries: impl IntoIterator<Item = (u64, u64)>) -> Option<Self> {
        let entries: VecDeque<(u64, u64)> = entries.into_iter().collect();
        let mut total = 0u64;
        let mut previous = None;
        for &(at, units) in &entries {
            if units == 0 || previous.is_some_and(|p| p > at) {
                return None;
            }
            previous = Some(at);
            total = total.checked_add(units)?;
        }
        Some(Log { entries, total })
    }

    /// The `(admitted at, units)` entries, oldest first.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.entries.iter().copied()
    }

    /// The units admitted within the window.
    #[inline]
    pub fn total(&self) -> u64 {
        self.total
    }
}

impl SlidingLog {
    /// A sliding log limiter for `quota`.
    #[inline]
    pub fn new(quota: Quota) -> Self {
        SlidingLog {
            quota,
            limit: u64::from(quota.burst()),
            window: quota.window_micros(),
        }
    }

    /// The window length, µs.
    #[inline]
    pub fn window_micros(&self) -> u64 {
        self.window
    }

    /// Drops the entries that have left the window at `now`.
    #[inline]
    fn prune(&self, log: &mut Log, now: u64) {
        while let Some(&(at, units)) = log.entries.front() {
            if at + self.window > now {
                break;
            }
            log.entries.pop_front();
            log.total -= units;
        }
    }

    /// The instant the log is empty again.
    #[inline]
    fn empty_at(&self, log: &Log) -> u64 {
        log.entries.back().map_or(0, |&(at, _)| at + self.window)
    }

    /// The instant at least `needed` units have left the window.
    #[inline]
    fn freed_at(&self, log: &Log, needed: u64) -> u64 {
        let mut freed = 0;
        for &(at, units) in &log.entries {
            freed += units;
            if freed >= needed {
                return at + self.window;
            }
        }
        // Unreachable for a cost within the limit: the whole log frees `total`.
        self.empty_at(log)
    }
}

impl Algorithm for SlidingLog {
    type State = Log;
    type Cell = LockedCell<Log>;
    const REFUNDS: bool = true;

    #[inline]
    fn name(&self) -> &'static str {
        "sliding-log"
    }

    #[inline]
    fn quota(&self) -> &Quota {
        &self.quota
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn initial_state(&self) -> Log {
        Log::default()
    }

    #[inline]
    fn decide(&self, log: &mut Log, now: u64, cost: u32) -> Result<Decision, Error> {
        let cost = ensure_fits(cost, self.limit)?;
        self.prune(log, now);
        if log.total + cost <= self.limit {
            if cost > 0 {
                // After a clock went back, log at the latest time seen: the
                // entry then stays longer, never shorter.
                let at = log.entries.back().map_or(now, |&(last, _)| last.max(now));
                match log.entries.back_mut() {
                    Some((last, units)) if *last == at => *units += cost,
                    _ => log.entries.push_back((at, cost)),
                }
                log.total += cost;
            }
            return Ok(Decision::admitted(self.limit)
                .with_remaining(self.limit - log.total)
                .with_reset_after_micros(self.empty_at(log).saturating_sub(now)));
        }
        let needed = log.total + cost - self.limit;
        Ok(Decision::refused(self.limit)
            .with_remaining(self.limit - log.total)
            .with_retry_after_micros(self.freed_at(log, needed) - now)
            .with_reset_after_micros(self.empty_at(log) - now))
    }

    #[inline]
    fn refund(&self, log: &mut Log, now: u64, cost: u32, owed: u64) -> Result<Decision, Error> {
        let cost = ensure_fits(cost, self.limit)?;
        self.prune(log, now);
        // Nothing owed: the admission's units have left the log already.
        let mut left = if owed > 0 { cost } else { 0 };
        // The oldest units leave first. The refunded admission's units are
        // still in the log (`owed > 0`), so each unit removed is
        // no newer than one of them: the log then counts at least what it
        // would without them, at every later instant. Removing the newest
        // instead would keep an older unit that leaves the window sooner.
        while left > 0 {
            let Some((_, units)) = log.entries.front_mut() else {
                break;
            };
            let taken = left.min(*units);
            *units -= taken;
            log.total -= taken;
            left -= taken;
            if *units == 0 {
                log.entries.pop_front();
            }
        }
        forget_if_full(self, log, now);
        self.decide(log, now, 0)
    }

    #[inline]
    fn full_at(&self, log: &Log) -> u64 {
        self.empty_at(log)
    }
}
