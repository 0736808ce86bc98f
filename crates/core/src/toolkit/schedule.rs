//! [`Schedule`]: one instant, moved `cost × T` later by each admission, with
//! room for a tolerance of debt ahead of now. GCRA's theoretical arrival
//! time and the leaky queue's next free slot are the same instant; the queue
//! also tells each admission how long to wait for its slot.

use crate::divisor::Divisor;
use crate::error::ensure_fits;
use crate::{Decision, Error, Quota};

/// The one-instant schedule GCRA and the leaky queue decide by: the state is
/// the instant `F` the key is full again (0 for a key never seen); a request
/// of `cost` at `now` ends at `max(F, now) + cost × T` and is admitted when
/// that is at most `now + burst × T`.
///
/// ```
/// use ratelab_core::Quota;
/// use ratelab_core::toolkit::Schedule;
///
/// let schedule = Schedule::new(&Quota::per_second(10)?.with_burst(2)?);
/// let mut full_at = 0;
/// let now = 1_000_000;
/// assert!(schedule.decide(&mut full_at, now, 2, false)?.allowed);
/// assert_eq!(full_at, now + 200_000);
/// // As a queue, the next admission waits for its slot.
/// let queued = Schedule::new(&Quota::per_second(10)?.with_burst(3)?);
/// let mut slot = 0;
/// queued.decide(&mut slot, now, 1, true)?;
/// assert_eq!(queued.decide(&mut slot, now, 1, true)?.delay_micros, 100_000);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    capacity: u64,
    /// µs one unit occupies the schedule: `T`.
    interval: u64,
    /// µs of debt allowed ahead of now: `burst × T`.
    tolerance: u64,
    per_interval: Divisor,
}

impl Schedule {
    /// The schedule of `quota`: `T` its emission interval, room for its burst.
    #[inline]
    pub fn new(quota: &Quota) -> Self {
        Schedule {
            capacity: u64::from(quota.burst()),
            interval: quota.emission_interval_micros(),
            tolerance: quota.burst_tolerance_micros(),
            per_interval: Divisor::new(quota.emission_interval_micros()),
        }
    }

    /// The most one request may cost: the burst.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// `T`, µs per unit.
    #[inline]
    pub fn interval_micros(&self) -> u64 {
        self.interval
    }

    /// `burst × T`, µs: the debt allowed ahead of now.
    #[inline]
    pub fn tolerance_micros(&self) -> u64 {
        self.tolerance
    }

    /// Units that fit between `full_at` and `now` plus the tolerance.
    #[inline]
    fn room(&self, now: u64, full_at: u64) -> u64 {
        self.per_interval
            .divide((now + self.tolerance).saturating_sub(full_at))
    }

    /// Decides a request of `cost` at `now`, moving `full_at` on an
    /// admission of a positive cost. Cost 0 always passes (a peek), even
    /// over a debt a settlement charged beyond the tolerance. With `queue`,
    /// an admission's [`Decision::delay_micros`] is the wait until its slot.
    #[inline]
    pub fn decide(
        &self,
        full_at: &mut u64,
        now: u64,
        cost: u32,
        queue: bool,
    ) -> Result<Decision, Error> {
        let cost = ensure_fits(cost, self.capacity)?;
        // An instant in the past means full capacity; one in the future
        // (even far, after the clock went back) is debt still owed.
        let start = (*full_at).max(now);
        let end = start + cost * self.interval;
        if end <= now + self.tolerance || cost == 0 {
            // A peek writes nothing: a refusal or peek never costs a store.
            if cost > 0 {
                *full_at = end;
            }
            let decision = Decision::admitted(self.capacity)
                .with_remaining(self.room(now, end))
                .with_reset_after_micros(end - now);
            // A peek reserves no slot, so it has nothing to wait for.
            return Ok(if queue && cost > 0 {
                decision.with_delay_micros(start - now)
            } else {
                decision
            });
        }
        Ok(Decision::refused(self.capacity)
            .with_remaining(self.room(now, start))
            .with_retry_after_micros(end - self.tolerance - now)
            .with_reset_after_micros(start - now))
    }
}
