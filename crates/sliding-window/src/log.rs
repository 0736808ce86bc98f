//! The exact sliding window: a log of admitted units.

use std::collections::VecDeque;

use ratelab_core::toolkit::{
    LockedCell, RemoteForm, Settlement, Spent, Stamp, ensure_fits, ensure_settles,
    forget_if_forgettable,
};
use ratelab_core::{Algorithm, Bound, Decision, Error, Quota};

/// Sliding log parameters derived from a [`Quota`]: exact, O(limit) memory.
/// See the crate docs.
///
/// A unit admitted at `t` counts against every instant in `[t, t + window)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    quota: Quota,
    pub(crate) limit: u64,
    pub(crate) window: u64,
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

    /// The first instant whose units are still in the log at `now`.
    #[inline]
    fn first_live(&self, now: u64) -> u64 {
        (now + 1).saturating_sub(self.window)
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
    /// The fence (the first logged instant whose receipts may give back)
    /// and the receipts settled at instants still in the log.
    type Ledger = Spent;
    const REFUNDS: bool = true;

    #[inline]
    fn name(&self) -> &'static str {
        <Self as RemoteForm>::NAME
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
    fn bound(&self) -> Bound {
        Bound::TrailingWindow {
            limit: self.limit,
            window: self.window,
        }
    }

    #[inline]
    fn initial_state(&self) -> Log {
        Log::default()
    }

    #[inline]
    fn decide(&self, log: &mut Log, now: u64, cost: u32) -> Result<Decision, Error> {
        let cost = ensure_fits(cost, self.limit)?;
        self.prune(log, now);
        // Cost 0 always passes, even over units a settlement logged past
        // the limit.
        if log.total + cost <= self.limit || cost == 0 {
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
                .with_remaining(self.limit.saturating_sub(log.total))
                .with_reset_after_micros(self.empty_at(log).saturating_sub(now)));
        }
        let needed = log.total + cost - self.limit;
        Ok(Decision::refused(self.limit)
            .with_remaining(self.limit.saturating_sub(log.total))
            .with_retry_after_micros(self.freed_at(log, needed) - now)
            .with_reset_after_micros(self.empty_at(log) - now))
    }

    /// The instant the units were logged at, and the units logged there up
    /// to this admission (given back ones included): no two admissions
    /// share a stamp.
    #[inline]
    fn stamp(&self, log: &Log, spent: &Spent, now: u64) -> Stamp {
        let (at, units) = log.entries.back().copied().unwrap_or((now, 0));
        Stamp {
            at,
            mark: spent.mark(at, units),
        }
    }

    /// Gives back only units logged at the admission's instant, while they
    /// are in the log and after the fence, once per stamp.
    #[inline]
    fn settle(
        &self,
        log: &mut Log,
        spent: &mut Spent,
        now: u64,
        settlement: Settlement,
    ) -> Result<Decision, Error> {
        ensure_settles(&settlement, self.limit)?;
        let Settlement {
            stamp,
            charged,
            actual,
        } = settlement;
        self.prune(log, now);
        // Receipts of instants that have left the log give nothing back.
        spent.expire(self.first_live(now));
        if actual < charged {
            // Units leave only from the instant the admission was logged at
            // (units of one instant are interchangeable), while they are in
            // the log: the log then counts at least the kept admissions, at
            // every later instant.
            let unused = u64::from(charged - actual);
            if stamp.at >= spent.fence()
                && let Ok(i) = log.entries.binary_search_by_key(&stamp.at, |&(at, _)| at)
                && spent.take(stamp, log.entries[i].1)
            {
                let units = &mut log.entries[i].1;
                let taken = unused.min(*units);
                *units -= taken;
                log.total -= taken;
                if *units == 0 {
                    log.entries.remove(i);
                }
                spent.gave(stamp.at, taken);
            }
        } else if actual > charged {
            // Past the limit if need be, logged as an admission now.
            let extra = u64::from(actual - charged);
            let at = log.entries.back().map_or(now, |&(last, _)| last.max(now));
            match log.entries.back_mut() {
                Some((last, units)) if *last == at => *units += extra,
                _ => log.entries.push_back((at, extra)),
            }
            log.total += extra;
        }
        forget_if_forgettable(self, log, spent, now);
        self.decide(log, now, 0)
    }

    #[inline]
    fn reset(&self, log: &mut Log, spent: &mut Spent, now: u64) {
        let latest = log.entries.back().map_or(now, |&(at, _)| at.max(now));
        *log = Log::default();
        // Every receipt so far names an instant up to this one.
        spent.set_fence(latest + 1);
        spent.expire(latest + 1);
        forget_if_forgettable(self, log, spent, now);
    }

    #[inline]
    fn full_at(&self, log: &Log) -> u64 {
        self.empty_at(log)
    }

    /// A fence, or the settlements at an instant, are kept until a window
    /// after that instant: by then the units of every receipt before it
    /// have left any log.
    #[inline]
    fn forgettable_at(&self, log: &Log, spent: &Spent) -> u64 {
        let fence = spent.fence();
        let fenced = if fence == 0 {
            0
        } else {
            fence - 1 + self.window
        };
        let settled = spent.latest().map_or(0, |at| at + self.window);
        self.empty_at(log).max(fenced).max(settled)
    }
}
