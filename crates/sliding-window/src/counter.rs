//! The approximate sliding window: two counters, the previous one weighted.

use ratelab_core::toolkit::{
    LockedCell, RemoteForm, Settlement, Spent, Stamp, ensure_fits, ensure_settles,
    forget_if_forgettable,
};
use ratelab_core::{Algorithm, Bound, Decision, Error, Quota};

/// The window position is measured in at most this many steps, so that
/// `limit × steps` stays below 2^48 and the arithmetic is exact in a Redis Lua
/// script as in Rust.
const MAX_STEPS: u64 = 1 << 16;

/// Sliding counter parameters derived from a [`Quota`]: approximate, O(1)
/// memory. See the crate docs.
///
/// The estimate of the trailing window at offset `e` into the current window
/// is `previous × (steps − k) / steps + current`, with `k = floor(e / step)`:
/// the offset is measured in whole steps of `ceil(window / 65536)` µs,
/// rounded down, so the previous window's weight is rounded up (against the
/// client). A request passes if the estimate plus its cost is within the
/// limit. Integer arithmetic only: the comparison is cross-multiplied by
/// `steps`, never divided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingCounter {
    quota: Quota,
    pub(crate) limit: u64,
    pub(crate) window: u64,
    /// µs per step of the window position.
    step: u64,
    /// Steps per window: `ceil(window / step)`.
    steps: u64,
}

/// The counts of the current aligned window and the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Windows {
    /// The current window's index: it spans `[index × window, (index + 1) ×
    /// window)`. Never moves backwards.
    pub(crate) index: u64,
    /// Units admitted in the previous window, `index − 1`.
    pub(crate) previous: u64,
    /// Units admitted in the current window.
    pub(crate) current: u64,
}

impl Windows {
    /// The counts `previous` and `current` of windows `index − 1` and
    /// `index` (as a store that keeps the state elsewhere read it back).
    #[inline]
    pub const fn from_parts(index: u64, previous: u64, current: u64) -> Self {
        Windows {
            index,
            previous,
            current,
        }
    }

    /// The current window's index.
    #[inline]
    pub const fn index(&self) -> u64 {
        self.index
    }

    /// Units admitted in the previous window.
    #[inline]
    pub const fn previous(&self) -> u64 {
        self.previous
    }

    /// Units admitted in the current window.
    #[inline]
    pub const fn current(&self) -> u64 {
        self.current
    }
}

impl SlidingCounter {
    /// A sliding counter limiter for `quota`.
    #[inline]
    pub fn new(quota: Quota) -> Self {
        let window = quota.window_micros();
        let step = window.div_ceil(MAX_STEPS);
        SlidingCounter {
            quota,
            limit: u64::from(quota.burst()),
            window,
            step,
            steps: window.div_ceil(step),
        }
    }

    /// The window length, µs.
    #[inline]
    pub fn window_micros(&self) -> u64 {
        self.window
    }

    /// µs per step of the window position.
    #[inline]
    pub fn step_micros(&self) -> u64 {
        self.step
    }

    /// Steps per window.
    #[inline]
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Moves the windows forward to `now`'s, if it is later.
    #[inline]
    fn roll(&self, windows: &mut Windows, now: u64) {
        let index = now / self.window;
        if index == windows.index + 1 {
            *windows = Windows {
                index,
                previous: windows.current,
                current: 0,
            };
        } else if index > windows.index + 1 {
            *windows = Windows {
                index,
                previous: 0,
                current: 0,
            };
        }
    }

    /// The largest `x` with `previous × (steps − k) + x × steps <=
    /// limit × steps`: the units that fit on top of the weighted previous
    /// window at step `k`.
    #[inline]
    fn room_at(&self, previous: u64, k: u64) -> u64 {
        // A previous window a settlement took past the limit leaves no room.
        (self.limit * self.steps).saturating_sub(previous * (self.steps - k)) / self.steps
    }

    /// The first step in a window at which `units` fit on top of `previous`
    /// weighted, or `None` if they never do within the window.
    #[inline]
    fn first_step_fitting(&self, previous: u64, units: u64) -> Option<u64> {
        if previous == 0 {
            return Some(0);
        }
        // previous × (steps − k) <= units × steps  <=>  k >= steps − floor(units × steps / previous)
        let k = self.steps.saturating_sub(units * self.steps / previous);
        (k * self.step < self.window).then_some(k)
    }

    /// The instant a request of `cost` first fits, given `windows` at `now`
    /// (refused now).
    #[inline]
    fn retry_at(&self, windows: &Windows, cost: u64) -> u64 {
        let start = windows.index * self.window;
        // Within the current window, as the previous one's weight decays.
        if let Some(units) = self.limit.checked_sub(windows.current + cost)
            && let Some(k) = self.first_step_fitting(windows.previous, units)
        {
            return start + k * self.step;
        }
        // In the next window, the current one becomes the previous.
        let next = start + self.window;
        match self.first_step_fitting(windows.current, self.limit - cost) {
            Some(k) => next + k * self.step,
            None => next + self.window,
        }
    }

    /// The instant both windows' counts no longer weigh: back to full.
    #[inline]
    fn full_at_of(&self, windows: &Windows) -> u64 {
        let start = windows.index * self.window;
        if windows.current > 0 {
            start + 2 * self.window
        } else if windows.previous > 0 {
            start + self.window
        } else {
            0
        }
    }
}

impl Algorithm for SlidingCounter {
    type State = Windows;
    type Cell = LockedCell<Windows>;
    /// The fence (the first window whose receipts may give back) and the
    /// receipts settled in the windows that still weigh.
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
        Bound::WeightedWindows {
            limit: self.limit,
            window: self.window,
            step: self.step,
            steps: self.steps,
        }
    }

    #[inline]
    fn initial_state(&self) -> Windows {
        Windows {
            index: 0,
            previous: 0,
            current: 0,
        }
    }

    #[inline]
    fn decide(&self, stored: &mut Windows, now: u64, cost: u32) -> Result<Decision, Error> {
        let cost = ensure_fits(cost, self.limit)?;
        // Roll a copy: only an admission with a cost is written back.
        let mut copy = *stored;
        let windows = &mut copy;
        self.roll(windows, now);
        // After a clock went back, take the window's start: the previous
        // window then weighs in full, the most it can.
        let offset = now.saturating_sub(windows.index * self.window);
        let k = offset / self.step;
        let room = self.room_at(windows.previous, k);
        // Cost 0 always passes, even over counts a settlement took past the
        // limit.
        if windows.current + cost <= room || cost == 0 {
            windows.current += cost;
            if cost > 0 {
                *stored = *windows;
            }
            return Ok(Decision::admitted(self.limit)
                .with_remaining(room.saturating_sub(windows.current))
                .with_reset_after_micros(self.full_at_of(windows).saturating_sub(now)));
        }
        Ok(Decision::refused(self.limit)
            .with_remaining(room.saturating_sub(windows.current))
            .with_retry_after_micros(self.retry_at(windows, cost) - now)
            .with_reset_after_micros(self.full_at_of(windows) - now))
    }

    /// The window, and the units counted in it up to this admission
    /// (given back ones included): no two admissions share a stamp.
    #[inline]
    fn stamp(&self, windows: &Windows, spent: &Spent, _now: u64) -> Stamp {
        Stamp {
            at: windows.index,
            mark: spent.mark(windows.index, windows.current),
        }
    }

    /// Gives back from the admission's own window only, while it still
    /// weighs and after the fence, once per stamp.
    #[inline]
    fn settle(
        &self,
        windows: &mut Windows,
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
        self.roll(windows, now);
        // Receipts of windows that no longer weigh give nothing back.
        spent.expire(windows.index.saturating_sub(1));
        if actual < charged {
            // Only from the admission's own window, while it still weighs:
            // the current one, or the previous one. After, it no longer
            // counts, and other units must not be given back instead.
            let count = if stamp.at < spent.fence() {
                None
            } else if stamp.at == windows.index {
                Some(&mut windows.current)
            } else if stamp.at + 1 == windows.index {
                Some(&mut windows.previous)
            } else {
                None
            };
            if let Some(count) = count
                && spent.take(stamp, *count)
            {
                let taken = u64::from(charged - actual).min(*count);
                *count -= taken;
                spent.gave(stamp.at, taken);
            }
        } else {
            // Past the limit if need be: the window refuses until it weighs
            // less.
            windows.current += u64::from(actual - charged);
        }
        forget_if_forgettable(self, windows, spent, now);
        self.decide(windows, now, 0)
    }

    #[inline]
    fn reset(&self, windows: &mut Windows, spent: &mut Spent, now: u64) {
        self.roll(windows, now);
        *windows = Windows {
            index: windows.index,
            previous: 0,
            current: 0,
        };
        // This window's receipts, and every earlier one's, give nothing back.
        spent.set_fence(windows.index + 1);
        spent.expire(windows.index + 1);
        forget_if_forgettable(self, windows, spent, now);
    }

    #[inline]
    fn full_at(&self, windows: &Windows) -> u64 {
        self.full_at_of(windows)
    }

    /// A fence, or a window's settlements, are kept until the window after
    /// it has ended: by then no receipt before it can name the current or
    /// the previous window.
    #[inline]
    fn forgettable_at(&self, windows: &Windows, spent: &Spent) -> u64 {
        let after_next = |index: u64| index.saturating_add(2).saturating_mul(self.window);
        let fence = spent.fence();
        let fenced = if fence == 0 { 0 } else { after_next(fence - 1) };
        let settled = spent.latest().map_or(0, after_next);
        self.full_at_of(windows).max(fenced).max(settled)
    }
}
