//! The leaky bucket as a queue (shaper).

use ratelab_core::toolkit::Debt;
use ratelab_core::toolkit::{AtomicCell, RemoteForm, Shifts, ensure_fits};
use ratelab_core::{Algorithm, Bound, Decision, Error, Quota};

/// Leaky bucket (queue) parameters derived from a [`Quota`]: admits into a
/// bounded queue and gives each request its slot. See the crate docs.
///
/// An admitted request's [`Decision::delay`] is the wait until its slot; the
/// caller must wait it out before proceeding (the waiting helpers
/// [`wait_and_consume`](ratelab_core::wait_and_consume) do). The queue holds
/// `burst` units; `remaining` is the room left in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyQueue {
    pub(crate) quota: Quota,
    pub(crate) capacity: u64,
    /// µs one unit occupies the output.
    interval: u64,
    /// µs of work the queue holds when full: `capacity × interval`.
    pub(crate) depth: u64,
}

impl LeakyQueue {
    /// A leaky bucket queue for `quota`.
    #[inline]
    pub fn new(quota: Quota) -> Self {
        LeakyQueue {
            quota,
            capacity: u64::from(quota.burst()),
            interval: quota.emission_interval_micros(),
            depth: quota.burst_tolerance_micros(),
        }
    }
}

impl Algorithm for LeakyQueue {
    /// The next free slot, in µs; 0 for a key never seen.
    type State = u64;
    type Cell = AtomicCell;
    type Ledger = Shifts;
    const REFUNDS: bool = true;
    /// One instant, moved forward by each admission: see the trait.
    const ORDER_FREE: bool = true;

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
    fn initial_state(&self) -> u64 {
        0
    }

    #[inline]
    fn decide(&self, next_free: &mut u64, now: u64, cost: u32) -> Result<Decision, Error> {
        let cost = ensure_fits(cost, self.capacity)?;
        let slot = (*next_free).max(now);
        let after = slot + cost * self.interval;
        // Cost 0 always passes, even over a debt a settlement charged
        // beyond the depth.
        if after - now <= self.depth || cost == 0 {
            if cost > 0 {
                *next_free = after;
            }
            let room = self.depth.saturating_sub(after - now) / self.interval;
            let decision = Decision::admitted(self.capacity)
                .with_remaining(room)
                .with_reset_after_micros(after - now);
            // A peek reserves no slot, so it has nothing to wait for.
            return Ok(if cost > 0 {
                decision.with_delay_micros(slot - now)
            } else {
                decision
            });
        }
        Ok(Decision::refused(self.capacity)
            .with_remaining(self.depth.saturating_sub(slot - now) / self.interval)
            .with_retry_after_micros(after - self.depth - now)
            .with_reset_after_micros(slot - now))
    }

    #[inline]
    fn full_at(&self, next_free: &u64) -> u64 {
        *next_free
    }

    // stamp, settle, reset and forgettable_at: a debt's (`ratelab_core::toolkit::debt`).
    ratelab_core::debt_receipts!();
}

/// The next free slot is the instant the queue is empty again: a settlement
/// moves it (every later slot with it), a reset puts it at now.
impl Debt for LeakyQueue {
    #[inline]
    fn interval_micros(&self) -> u64 {
        self.interval
    }

    #[inline]
    fn tolerance_micros(&self) -> u64 {
        self.depth
    }

    #[inline]
    fn set_full_at(&self, next_free: &mut u64, full_at: u64, _now: u64) {
        *next_free = full_at;
    }
}
