//! The leaky bucket as a queue (shaper).

use ratelab_core::toolkit::Debt;
use ratelab_core::toolkit::{AtomicCell, RemoteForm, Schedule, Shifts};
use ratelab_core::{Algorithm, Bound, Decision, Error, Quota};

/// Leaky bucket (queue) parameters derived from a [`Quota`]: admits into a
/// bounded queue and gives each request its slot. See the crate docs.
///
/// An admitted request's [`Decision::delay`] is the wait until its slot; the
/// caller must wait it out before proceeding (the waiting helpers
/// [`wait_and_consume`](ratelab_core::wait_and_consume) do). The queue holds
/// `burst` units; `remaining` is the room left in it.
///
/// The next free slot is a [`Schedule`]'s instant, GCRA's theoretical
/// arrival time (`ratelab-gcra`): the queue decides exactly as GCRA does,
/// and adds the wait for each admission's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyQueue {
    pub(crate) quota: Quota,
    schedule: Schedule,
}

impl LeakyQueue {
    /// A leaky bucket queue for `quota`.
    #[inline]
    pub fn new(quota: Quota) -> Self {
        LeakyQueue {
            quota,
            schedule: Schedule::new(&quota),
        }
    }

    /// µs of work the queue holds when full: `burst × T`.
    #[inline]
    pub(crate) fn depth(&self) -> u64 {
        self.schedule.tolerance_micros()
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
        self.schedule.capacity()
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
        self.schedule.decide(next_free, now, cost, true)
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
        self.schedule.interval_micros()
    }

    #[inline]
    fn tolerance_micros(&self) -> u64 {
        self.schedule.tolerance_micros()
    }

    #[inline]
    fn set_full_at(&self, next_free: &mut u64, full_at: u64, _now: u64) {
        *next_free = full_at;
    }
}
