//! Fixed window: a counter per clock-aligned window, reset when the next
//! window starts.
//!
//! The cheapest algorithm, and the one with a known flaw: a client can spend
//! the whole limit at the end of one window and again at the start of the
//! next, so up to **2 × limit** pass within a fraction of a period. This
//! crate's tests prove it (20 requests within 0.11 s at 10 per second); the
//! `ratelab-compare` report measures it against the other algorithms.
//!
//! **Quota mapping.** Windows hold the quota's burst and last
//! [`Quota::window`](ratelab_core::Quota::window): with the default burst,
//! exactly `limit` per `period`; with another burst `b`, `b` per
//! `period × b / limit` (the same capacity and long-run rate as the bucket
//! algorithms). Windows are aligned to multiples of the window length on the
//! limiter's clock (for Redis `TIME`, on the Unix epoch).
//!
//! ```
//! use ratelab_core::{Keyed, ManualClock, Quota};
//! use ratelab_fixed_window::FixedWindow;
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! let limiter = Keyed::with_clock(FixedWindow::new(Quota::per_second(10)?), clock.clone());
//!
//! clock.set(950_000); // 0.95 s: the end of the first window.
//! let first = (0..10).filter(|_| limiter.check(b"k", 1).unwrap().allowed).count();
//! clock.set(1_050_000); // 1.05 s: the start of the next.
//! let second = (0..10).filter(|_| limiter.check(b"k", 1).unwrap().allowed).count();
//! assert_eq!(first + second, 20); // twice the limit within 0.1 s
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod remote;

use ratelab_core::toolkit::{
    LockedCell, RemoteForm, Settlement, Spent, Stamp, ensure_fits, ensure_settles,
    forget_if_forgettable,
};
use ratelab_core::{Algorithm, Bound, Decision, Error, Quota};

/// Fixed window parameters derived from a [`Quota`]. See the crate docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    quota: Quota,
    /// Units per window.
    limit: u64,
    /// Window length, µs.
    window: u64,
}

/// The count of the current window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Counter {
    /// The window's index: it spans `[index × window, (index + 1) × window)`.
    /// Never moves backwards.
    index: u64,
    /// Units admitted in it.
    count: u64,
}

impl Counter {
    /// A counter of `count` units in window `index` (as a store that keeps
    /// the state elsewhere read it back).
    #[inline]
    pub const fn from_parts(index: u64, count: u64) -> Self {
        Counter { index, count }
    }

    /// The window's index: it spans `[index × window, (index + 1) × window)`.
    #[inline]
    pub const fn index(&self) -> u64 {
        self.index
    }

    /// Units admitted in the window.
    #[inline]
    pub const fn count(&self) -> u64 {
        self.count
    }
}

impl FixedWindow {
    /// A fixed window limiter for `quota`.
    #[inline]
    pub fn new(quota: Quota) -> Self {
        FixedWindow {
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

    #[inline]
    fn end_of(&self, counter: &Counter) -> u64 {
        (counter.index + 1) * self.window
    }
}

impl Algorithm for FixedWindow {
    type State = Counter;
    type Cell = LockedCell<Counter>;
    /// The fence (the first window whose receipts may give back) and the
    /// receipts settled in the current window.
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
        Bound::AlignedWindow {
            limit: self.limit,
            window: self.window,
        }
    }

    #[inline]
    fn initial_state(&self) -> Counter {
        Counter { index: 0, count: 0 }
    }

    #[inline]
    fn decide(&self, stored: &mut Counter, now: u64, cost: u32) -> Result<Decision, Error> {
        let cost = ensure_fits(cost, self.limit)?;
        let index = now / self.window;
        // A clock that went back stays in the window it had reached. Roll a
        // copy: only an admission with a cost is written back.
        let mut counter = *stored;
        if index > counter.index {
            counter = Counter { index, count: 0 };
        }
        let until_end = self.end_of(&counter) - now;
        // Cost 0 always passes, even over a count a settlement took past
        // the limit.
        if counter.count + cost <= self.limit || cost == 0 {
            counter.count += cost;
            if cost > 0 {
                *stored = counter;
            }
            let reset = if counter.count == 0 { 0 } else { until_end };
            return Ok(Decision::admitted(self.limit)
                .with_remaining(self.limit.saturating_sub(counter.count))
                .with_reset_after_micros(reset));
        }
        Ok(Decision::refused(self.limit)
            .with_remaining(self.limit.saturating_sub(counter.count))
            .with_retry_after_micros(until_end)
            .with_reset_after_micros(until_end))
    }

    /// The window, and the units counted in it up to this admission
    /// (given back ones included): no two admissions share a stamp.
    #[inline]
    fn stamp(&self, counter: &Counter, spent: &Spent, _now: u64) -> Stamp {
        Stamp {
            at: counter.index,
            mark: spent.mark(counter.index, counter.count),
        }
    }

    /// Gives back from the admission's own window only, while it is the
    /// current one and after the fence, once per stamp.
    #[inline]
    fn settle(
        &self,
        counter: &mut Counter,
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
        // A clock that went back stays in the window it had reached.
        let index = counter.index.max(now / self.window);
        // Receipts of earlier windows give nothing back any more.
        spent.expire(index);
        if actual < charged {
            // Only from the admission's own window, while it is the current
            // one: units counted in a window that has ended are not given
            // to this one (others would count for less).
            if stamp.at == index
                && counter.index == index
                && stamp.at >= spent.fence()
                && spent.take(stamp, counter.count)
            {
                let taken = u64::from(charged - actual).min(counter.count);
                counter.count -= taken;
                spent.gave(index, taken);
            }
        } else if actual > charged {
            if index > counter.index {
                *counter = Counter { index, count: 0 };
            }
            // Past the limit if need be: the window refuses until it ends.
            counter.count += u64::from(actual - charged);
        }
        forget_if_forgettable(self, counter, spent, now);
        self.decide(counter, now, 0)
    }

    #[inline]
    fn reset(&self, counter: &mut Counter, spent: &mut Spent, now: u64) {
        let index = counter.index.max(now / self.window);
        *counter = Counter { index, count: 0 };
        // This window's receipts, and every earlier one's, give nothing back.
        spent.set_fence(index + 1);
        spent.expire(index + 1);
        forget_if_forgettable(self, counter, spent, now);
    }

    #[inline]
    fn full_at(&self, counter: &Counter) -> u64 {
        if counter.count == 0 {
            0
        } else {
            self.end_of(counter)
        }
    }

    /// A fence, or a window's settlements, are kept until the window has
    /// ended: by then no receipt before it can name the current window.
    #[inline]
    fn forgettable_at(&self, counter: &Counter, spent: &Spent) -> u64 {
        let settled = spent
            .latest()
            .map_or(0, |at| (at + 1).saturating_mul(self.window));
        self.full_at(counter)
            .max(spent.fence().saturating_mul(self.window))
            .max(settled)
    }
}
