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
use ratelab_core::toolkit::{AtomicCell, Divisor, RemoteForm, Shifts, ensure_fits};
use ratelab_core::{Algorithm, Bound, Decision, Error, Quota};

/// GCRA parameters derived from a [`Quota`]. See the crate docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    quota: Quota,
    /// Emission interval `T`, µs per unit.
    interval: u64,
    /// Tolerance `τ = burst × T`, µs.
    tolerance: u64,
    /// Division by `T` without a `div` instruction: `remaining` on every
    /// decision.
    per_interval: Divisor,
}

impl Gcra {
    /// GCRA for `quota`.
    #[inline]
    pub fn new(quota: Quota) -> Self {
        Gcra {
            quota,
            interval: quota.emission_interval_micros(),
            tolerance: quota.burst_tolerance_micros(),
            per_interval: Divisor::new(quota.emission_interval_micros()),
        }
    }

    /// The emission interval `T`, in microseconds.
    #[inline]
    pub fn interval_micros(&self) -> u64 {
        self.interval
    }

    /// The tolerance `τ = burst × T`, in microseconds.
    #[inline]
    pub fn tolerance_micros(&self) -> u64 {
        self.tolerance
    }

    /// Unit requests that fit with the TAT at `tat`.
    #[inline]
    fn room(&self, now: u64, tat: u64) -> u64 {
        self.per_interval
            .divide((now + self.tolerance).saturating_sub(tat))
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
        u64::from(self.quota.burst())
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
        let limit = self.capacity();
        let cost = ensure_fits(cost, limit)?;
        // A TAT in the past means full capacity; one in the future (even far,
        // after the clock went back) is debt still owed.
        let current = (*tat).max(now);
        let next = current + cost * self.interval;
        // Cost 0 always passes, even over a debt a settlement charged
        // beyond the tolerance.
        if next <= now + self.tolerance || cost == 0 {
            // A peek writes nothing: a refusal or peek never costs a store.
            if cost > 0 {
                *tat = next;
            }
            return Ok(Decision::admitted(limit)
                .with_remaining(self.room(now, next))
                .with_reset_after_micros(next - now));
        }
        Ok(Decision::refused(limit)
            .with_remaining(self.room(now, current))
            .with_retry_after_micros(next - self.tolerance - now)
            .with_reset_after_micros(current - now))
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
        self.interval
    }

    #[inline]
    fn tolerance_micros(&self) -> u64 {
        self.tolerance
    }

    #[inline]
    fn set_full_at(&self, tat: &mut u64, full_at: u64, _now: u64) {
        *tat = full_at;
    }
}
