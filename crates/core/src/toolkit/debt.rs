//! [`Debt`]: the receipts of the four algorithms whose state is a debt
//! (GCRA, the token bucket, the leaky meter and the leaky queue), written
//! once.
//!
//! Each of them is full again at one instant that every admission moves
//! `cost × T` later (GCRA's theoretical arrival time, the queue's next free
//! slot, the instant the meter has drained, the instant the bucket is full),
//! and keeps a ledger of [`Shifts`] for its receipts. What a settlement gives
//! back, what a reset records, what a stamp holds and when the key may be
//! forgotten depend on nothing else: [`settle`], [`reset`], [`stamp`] and
//! [`forgettable_at`] here are each algorithm's
//! [`Algorithm::settle`], [`Algorithm::reset`], [`Algorithm::stamp`] and
//! [`Algorithm::forgettable_at`], which [`debt_receipts!`](crate::debt_receipts)
//! writes into its `impl Algorithm` block. An algorithm says only how it
//! sets its full-again instant ([`Debt::set_full_at`]). The rule, and why it
//! holds: [`Receipt`](crate::Receipt).
//!
//! ```
//! use ratelab_core::{Algorithm, Bound, Quota};
//! use ratelab_core::toolkit::{Debt, Settlement, Shifts};
//! # use ratelab_core::{Decision, Error};
//! # use ratelab_core::toolkit::{AtomicCell, ensure_fits};
//!
//! /// The debt at its barest: the instant the key is full again.
//! #[derive(Debug)]
//! struct Tat(Quota);
//!
//! impl Debt for Tat {
//!     fn interval_micros(&self) -> u64 { self.0.emission_interval_micros() }
//!     fn tolerance_micros(&self) -> u64 { self.0.burst_tolerance_micros() }
//!     fn set_full_at(&self, tat: &mut u64, full_at: u64, _now: u64) { *tat = full_at }
//! }
//!
//! impl Algorithm for Tat {
//!     type State = u64;
//!     type Cell = AtomicCell;
//!     type Ledger = Shifts;
//!     const REFUNDS: bool = true;
//!     fn name(&self) -> &'static str { "tat" }
//!     fn quota(&self) -> &Quota { &self.0 }
//!     fn capacity(&self) -> u64 { self.0.burst().into() }
//!     fn bound(&self) -> Bound { Bound::rate(&self.0) }
//!     fn initial_state(&self) -> u64 { 0 }
//!     fn decide(&self, tat: &mut u64, now: u64, cost: u32) -> Result<Decision, Error> {
//!         let cost = ensure_fits(cost, self.capacity())?;
//!         let next = (*tat).max(now) + cost * self.interval_micros();
//!         if next > now + self.tolerance_micros() && cost > 0 {
//!             return Ok(Decision::refused(self.capacity()));
//!         }
//!         if cost > 0 { *tat = next; }
//!         Ok(Decision::admitted(self.capacity()))
//!     }
//!     fn full_at(&self, tat: &u64) -> u64 { *tat }
//!     // stamp, settle, reset and forgettable_at: a debt's.
//!     ratelab_core::debt_receipts!();
//! }
//!
//! let tat = Tat(Quota::per_second(10)?);
//! let (mut state, mut ledger) = (0, Shifts::default());
//! tat.decide(&mut state, 0, 3)?;
//! let stamp = tat.stamp(&state, &ledger, 0);
//! // All three units come back.
//! let refund = Settlement { stamp, charged: 3, actual: 0 };
//! tat.settle(&mut state, &mut ledger, 0, refund)?;
//! assert_eq!(state, 0);
//! // Admitted again: the first stamp, settled again, gives nothing back.
//! tat.decide(&mut state, 0, 3)?;
//! tat.settle(&mut state, &mut ledger, 0, refund)?;
//! assert_eq!(state, 3 * tat.interval_micros());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::receipt::{debt_release, debt_reset};
use crate::{
    Algorithm, Decision, Error, Ledger, Settlement, Shifts, Stamp, ensure_settles,
    forget_if_forgettable,
};

/// An algorithm whose state is a debt: full again at one instant
/// ([`Algorithm::full_at`]) that an admission of `cost` moves `cost × T`
/// later, with a ledger of [`Shifts`]. What differs between the four is
/// how each sets that instant.
pub trait Debt: Algorithm<Ledger = Shifts> {
    /// `T`, µs per unit.
    fn interval_micros(&self) -> u64;

    /// `burst × T`, µs: no admission ends later than its instant plus this.
    fn tolerance_micros(&self) -> u64;

    /// Makes `state`, as seen at `now`, full again at `full_at` (a
    /// settlement moved its end earlier or later; a reset moves it to now).
    /// `full_at` may be before `now` (full already) or past the tolerance
    /// (a settlement's debt).
    fn set_full_at(&self, state: &mut Self::State, full_at: u64, now: u64);

    /// Brings `state` to `now` before a settlement, whatever it settles: the
    /// leaky meter drains its water (its instant, the latest written, moves
    /// to now). Nothing by default.
    fn catch_up(&self, state: &mut Self::State, now: u64) {
        let _ = (state, now);
    }
}

/// [`Algorithm::stamp`] of a debt: the instant the key is full again right
/// after the admission, and the ledger's total then.
#[inline]
pub fn stamp<A: Debt>(algorithm: &A, state: &A::State, ledger: &Shifts, now: u64) -> Stamp {
    let _ = now;
    Stamp {
        at: algorithm.full_at(state),
        mark: ledger.total(),
    }
}

/// [`Algorithm::settle`] of a debt: less than charged gives back what the
/// admission still holds of its debt (never more than the key's end is
/// ahead of now; see [`Receipt`](crate::Receipt)), and every admission after
/// it moves earlier with it; more charges the difference as debt after the
/// key's end, whatever the room (later requests wait it out).
#[inline]
pub fn settle<A: Debt>(
    algorithm: &A,
    state: &mut A::State,
    ledger: &mut Shifts,
    now: u64,
    settlement: Settlement,
) -> Result<Decision, Error> {
    ensure_settles(&settlement, algorithm.capacity())?;
    let Settlement {
        stamp,
        charged,
        actual,
    } = settlement;
    algorithm.catch_up(state, now);
    let full_at = algorithm.full_at(state);
    let interval = algorithm.interval_micros();
    if actual < charged {
        let unused = u64::from(charged - actual) * interval;
        let tolerance = algorithm.tolerance_micros();
        let back = debt_release(full_at, ledger, now, stamp, unused, tolerance);
        algorithm.set_full_at(state, full_at - back, now);
    } else if actual > charged {
        let extra = u64::from(actual - charged) * interval;
        algorithm.set_full_at(state, full_at.max(now) + extra, now);
    }
    forget_if_forgettable(algorithm, state, ledger, now);
    algorithm.decide(state, now, 0)
}

/// [`Algorithm::reset`] of a debt: full again now, and every outstanding
/// admission moved past now in the ledger, so that no receipt issued before
/// gives anything back afterwards.
#[inline]
pub fn reset<A: Debt>(algorithm: &A, state: &mut A::State, ledger: &mut Shifts, now: u64) {
    debt_reset(
        algorithm.full_at(state),
        ledger,
        now,
        algorithm.tolerance_micros(),
    );
    algorithm.set_full_at(state, now, now);
    forget_if_forgettable(algorithm, state, ledger, now);
}

/// [`Algorithm::forgettable_at`] of a debt: once a settlement or a reset
/// moved other admissions (a ledger), the key is kept a tolerance past its
/// end: no admission ends later than its instant plus the tolerance, so no
/// receipt of it can claim anything after that.
#[inline]
pub fn forgettable_at<A: Debt>(algorithm: &A, state: &A::State, ledger: &Shifts) -> u64 {
    let full_at = algorithm.full_at(state);
    if ledger.is_empty() {
        full_at
    } else {
        full_at.saturating_add(algorithm.tolerance_micros())
    }
}

/// Writes a [`Debt`]'s [`Algorithm::stamp`], [`Algorithm::settle`],
/// [`Algorithm::reset`] and [`Algorithm::forgettable_at`] into its
/// `impl Algorithm` block: each one the function of the [`debt`](self)
/// module of the same name.
///
/// ```text
/// impl Algorithm for Gcra {
///     // ... decide, full_at ...
///     ratelab_core::debt_receipts!();
/// }
/// ```
#[macro_export]
macro_rules! debt_receipts {
    () => {
        #[inline]
        fn stamp(
            &self,
            state: &Self::State,
            ledger: &$crate::toolkit::Shifts,
            now: u64,
        ) -> $crate::toolkit::Stamp {
            $crate::toolkit::debt::stamp(self, state, ledger, now)
        }

        #[inline]
        fn settle(
            &self,
            state: &mut Self::State,
            ledger: &mut $crate::toolkit::Shifts,
            now: u64,
            settlement: $crate::toolkit::Settlement,
        ) -> ::core::result::Result<$crate::Decision, $crate::Error> {
            $crate::toolkit::debt::settle(self, state, ledger, now, settlement)
        }

        #[inline]
        fn reset(&self, state: &mut Self::State, ledger: &mut $crate::toolkit::Shifts, now: u64) {
            $crate::toolkit::debt::reset(self, state, ledger, now);
        }

        #[inline]
        fn forgettable_at(&self, state: &Self::State, ledger: &$crate::toolkit::Shifts) -> u64 {
            $crate::toolkit::debt::forgettable_at(self, state, ledger)
        }
    };
}
