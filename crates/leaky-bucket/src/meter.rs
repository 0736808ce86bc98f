//! The leaky bucket as a meter.

use ratelab_core::toolkit::Debt;
use ratelab_core::toolkit::{LockedCell, RemoteForm, Shifts, ensure_fits};
use ratelab_core::{Algorithm, Bound, Decision, Error, Quota};

/// Leaky bucket (meter) parameters derived from a [`Quota`]: refuses what
/// would overflow. See the crate docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyMeter {
    pub(crate) quota: Quota,
    pub(crate) capacity: u64,
    /// µs one unit of water takes to drain.
    interval: u64,
    /// µs a full bucket takes to drain: `capacity × interval`.
    pub(crate) depth: u64,
}

/// The water in a bucket, measured in the time it takes to drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Level {
    /// µs of draining left at `at`.
    pub(crate) water: u64,
    /// When `water` was measured, µs. Never moves backwards.
    pub(crate) at: u64,
}

impl Level {
    /// `water` µs of draining left at instant `at` (as a store that keeps
    /// the state elsewhere read it back).
    #[inline]
    pub const fn from_parts(water: u64, at: u64) -> Self {
        Level { water, at }
    }

    /// µs of draining left at [`Level::at`].
    #[inline]
    pub const fn water(&self) -> u64 {
        self.water
    }

    /// When the water was measured, µs.
    #[inline]
    pub const fn at(&self) -> u64 {
        self.at
    }
}

impl LeakyMeter {
    /// A leaky bucket meter for `quota`.
    #[inline]
    pub fn new(quota: Quota) -> Self {
        LeakyMeter {
            quota,
            capacity: u64::from(quota.burst()),
            interval: quota.emission_interval_micros(),
            depth: quota.burst_tolerance_micros(),
        }
    }
}

impl Algorithm for LeakyMeter {
    type State = Level;
    type Cell = LockedCell<Level>;
    type Ledger = Shifts;
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
        self.capacity
    }

    #[inline]
    fn bound(&self) -> Bound {
        Bound::rate(&self.quota)
    }

    #[inline]
    fn initial_state(&self) -> Level {
        Level { water: 0, at: 0 }
    }

    #[inline]
    fn decide(&self, level: &mut Level, now: u64, cost: u32) -> Result<Decision, Error> {
        let cost = ensure_fits(cost, self.capacity)?;
        // A clock that went back drains nothing: measure from the later time.
        let at = level.at.max(now);
        let water = level.water.saturating_sub(at - level.at);
        // `at - now` is the time the clock still owes us after going back.
        let ahead = at - now;
        let poured = water + cost * self.interval;
        // Cost 0 always passes, even over water a settlement poured beyond
        // the depth.
        if poured <= self.depth || cost == 0 {
            if cost > 0 {
                *level = Level { water: poured, at };
            }
            return Ok(Decision::admitted(self.capacity)
                .with_remaining(self.depth.saturating_sub(poured) / self.interval)
                .with_reset_after_micros(ahead + poured));
        }
        Ok(Decision::refused(self.capacity)
            .with_remaining(self.depth.saturating_sub(water) / self.interval)
            .with_retry_after_micros(ahead + poured - self.depth)
            .with_reset_after_micros(ahead + water))
    }

    #[inline]
    fn full_at(&self, level: &Level) -> u64 {
        level.at + level.water
    }

    // stamp, settle, reset and forgettable_at: a debt's (`ratelab_core::toolkit::debt`).
    ratelab_core::debt_receipts!();
}

/// The level is full again (empty of water) at `at + water`.
impl Debt for LeakyMeter {
    #[inline]
    fn interval_micros(&self) -> u64 {
        self.interval
    }

    #[inline]
    fn tolerance_micros(&self) -> u64 {
        self.depth
    }

    /// The water that drains by `full_at`, measured from the later of the
    /// level's instant and now (a clock that went back drains nothing).
    #[inline]
    fn set_full_at(&self, level: &mut Level, full_at: u64, now: u64) {
        let at = level.at.max(now);
        *level = Level {
            water: full_at.saturating_sub(at),
            at,
        };
    }

    /// A settlement drains the water to now first, whatever it settles: the
    /// level's instant is the latest the key was written at.
    #[inline]
    fn catch_up(&self, level: &mut Level, now: u64) {
        let at = level.at.max(now);
        *level = Level {
            water: level.water.saturating_sub(at - level.at),
            at,
        };
    }
}
