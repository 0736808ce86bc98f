//! GCRA, the generic cell rate algorithm: a token bucket's bound with one
//! timestamp of state per key.
//!
//! The state is the *theoretical arrival time* (TAT): when the key would be
//! back to full capacity if nothing more were consumed. A request of `cost`
//! moves it `cost × T` later, and passes if that stays within `τ` of now.
//!
//! **Quota mapping.** `T` is the quota's emission interval,
//! `ceil(period / limit)`; the tolerance `τ = burst × T`, so `burst` units
//! pass at once from full and one more every `T`. In any closed interval of
//! length `t`, at most `burst + floor(t / T)` units pass.
//!
//! ```
//! use ratelab_core::{Direct, Keyed, ManualClock, Quota};
//! use ratelab_gcra::Gcra;
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! // 5 per second, bursts of 10.
//! let quota = Quota::per_second(5)?.with_burst(10)?;
//! let limiter = Keyed::with_clock(Gcra::new(quota), clock.clone());
//!
//! let admitted = (0..20).filter(|_| limiter.check(b"client", 1).unwrap().allowed).count();
//! assert_eq!(admitted, 10);
//! let refused = limiter.check(b"client", 1)?;
//! assert_eq!(refused.retry_after(), Duration::from_millis(200));
//!
//! clock.advance(Duration::from_secs(1));
//! let admitted = (0..10).filter(|_| limiter.check(b"client", 1).unwrap().allowed).count();
//! assert_eq!(admitted, 5);
//!
//! // One bucket for everyone: a lock-free compare-and-swap on one word.
//! let direct = Direct::with_clock(Gcra::new(quota), clock);
//! assert!(direct.check(1)?.allowed);
//! // A gate that reads only `allowed`: the lean check computes no more, and
//! // gives the whole decision when asked.
//! let verdict = direct.check_lean(1)?;
//! assert!(verdict.allowed());
//! assert_eq!(verdict.decision().remaining, 8);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod remote;

use ratelab_core::toolkit::Debt;
use ratelab_core::toolkit::{AtomicCell, RemoteForm, Schedule, Shifts};
use ratelab_core::{Algorithm, Bound, Decision, Error, Quota};

/// GCRA parameters derived from a [`Quota`]. See the crate docs.
///
/// The TAT is a [`Schedule`]'s instant: the leaky queue
/// (`ratelab-leaky-bucket`) decides by the same one, and adds the wait for
/// each admission's slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    quota: Quota,
    schedule: Schedule,
}

impl Gcra {
    /// GCRA for `quota`.
    #[inline]
    pub fn new(quota: Quota) -> Self {
        Gcra {
            quota,
            schedule: Schedule::new(&quota),
        }
    }

    /// The emission interval `T`, in microseconds.
    #[inline]
    pub fn interval_micros(&self) -> u64 {
        self.schedule.interval_micros()
    }

    /// The tolerance `τ = burst × T`, in microseconds.
    #[inline]
    pub fn tolerance_micros(&self) -> u64 {
        self.schedule.tolerance_micros()
    }
}

impl Algorithm for Gcra {
    /// The theoretical arrival time, in µs; 0 for a key never seen.
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
    fn decide(&self, tat: &mut u64, now: u64, cost: u32) -> Result<Decision, Error> {
        self.schedule.decide(tat, now, cost, false)
    }

    #[inline]
    fn full_at(&self, tat: &u64) -> u64 {
        *tat
    }

    // stamp, settle, reset and forgettable_at: a debt's (`ratelab_core::toolkit::debt`).
    ratelab_core::debt_receipts!();
}

/// The TAT is the instant the key is full again: a settlement sets it, a
/// reset puts it at now (full capacity, as a key never seen).
impl Debt for Gcra {
    #[inline]
    fn interval_micros(&self) -> u64 {
        self.schedule.interval_micros()
    }

    #[inline]
    fn tolerance_micros(&self) -> u64 {
        self.schedule.tolerance_micros()
    }

    #[inline]
    fn set_full_at(&self, tat: &mut u64, full_at: u64, _now: u64) {
        *tat = full_at;
    }
}
