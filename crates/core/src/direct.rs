//! [`Direct`]: one bucket, shared by every caller.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::algorithm::{Algorithm, StateCell};
use crate::limiter::{Limiter, RateLimiter};
use crate::time::{Clock, SystemClock, clamp_instant};
use crate::{Bound, Decision, Error, Issuer, Quota, Receipt, Verdict};
use parking_lot::Mutex;

/// A single-bucket limiter: one state for every caller, no key.
///
/// Thread-safe: the state sits in the algorithm's [`StateCell`] (one atomic
/// word updated by compare-and-swap where the state fits, else a lock held
/// only while deciding).
///
/// **Time.** A clock that jumps back is treated as standing still, as
/// [`Keyed`](crate::Keyed) does: the limiter keeps the latest instant it has
/// decided at, and decides no earlier.
///
/// ```
/// use ratelab_core::{Algorithm, Direct, ManualClock, Quota};
/// # use ratelab_core::{Bound, Decision, Error};
/// # use ratelab_core::toolkit::AtomicCell;
/// # #[derive(Debug)]
/// # struct Nothing(Quota);
/// # impl Algorithm for Nothing {
/// #     type State = u64;
/// #     type Cell = AtomicCell;
/// #     type Ledger = u64;
/// #     fn name(&self) -> &'static str { "nothing" }
/// #     fn quota(&self) -> &Quota { &self.0 }
/// #     fn capacity(&self) -> u64 { 1 }
/// #     fn bound(&self) -> Bound { Bound::Rate { burst: self.capacity(), interval: u64::MAX } }
/// #     fn initial_state(&self) -> u64 { 0 }
/// #     fn decide(&self, _: &mut u64, _: u64, _: u32) -> Result<Decision, Error> {
/// #         Ok(Decision::admitted(1).with_remaining(1).with_reset_after_micros(0))
/// #     }
/// #     fn full_at(&self, _: &u64) -> u64 { 0 }
/// # }
/// let clock = ManualClock::new();
/// let limiter = Direct::with_clock(Nothing(Quota::per_second(1)?), clock);
/// assert!(limiter.check(1)?.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Direct<A: Algorithm, C = SystemClock> {
    hot: Hot<A::Cell>,
    algorithm: A,
    clock: C,
    /// The bucket's ledger ([`Algorithm::settle`]), behind a lock that
    /// checks with a receipt, settlements and resets take: each of them
    /// reads the ledger and the state as one. Plain checks never touch it.
    ledger: Mutex<A::Ledger>,
    issuer: Issuer,
}

/// What checks write, on a cache line of its own: threads checking at once
/// pass this line between their cores, and the algorithm's parameters and
/// the clock, only read, stay out of it (sharing it, they were fetched again
/// after every other thread's write).
#[repr(align(64))]
struct Hot<Cell> {
    cell: Cell,
    /// The latest instant a decision has been made at.
    latest: AtomicU64,
}

impl<A: Algorithm> Direct<A, SystemClock> {
    /// A limiter on the default clock, the precise [`SystemClock`]
    /// ([`Direct::with_clock`] with [`CoarseClock`](crate::CoarseClock)
    /// trades exactness for a cheaper read: see its docs).
    pub fn new(algorithm: A) -> Self {
        Self::with_clock(algorithm, SystemClock)
    }
}

impl<A: Algorithm, C: Clock> Direct<A, C> {
    /// A limiter on `clock`.
    pub fn with_clock(algorithm: A, clock: C) -> Self {
        let cell = A::Cell::new(algorithm.initial_state());
        Direct {
            hot: Hot {
                cell,
                latest: AtomicU64::new(0),
            },
            algorithm,
            clock,
            ledger: Mutex::new(A::Ledger::default()),
            issuer: Issuer::new(),
        }
    }

    /// Decides a request of weight `cost`: all or nothing. Cost 0 is a peek.
    #[inline(always)]
    pub fn check(&self, cost: u32) -> Result<Decision, Error> {
        let reading = clamp_instant(self.clock.now_micros());
        if <A::Cell as StateCell>::ONE_WORD {
            // Instants out of order cannot admit more for an order-free
            // algorithm: the latest instant is kept only so that a clock
            // that jumps back is time standing still, and a plain store
            // keeps it (see `advance_plain`). Any other publishes it and
            // reads it again inside the loop (see `publish`).
            let mut at = if A::ORDER_FREE && self.clock.is_monotonic() {
                self.advance_plain(reading)
            } else {
                self.publish(reading);
                reading
            };
            // The compare-and-swap loop carries only the state: the decision
            // is made again after it, from the state the last run started
            // from and the same instant, which gives the same decision
            // (`decide` is a pure function of them) and writes it straight
            // where the caller wants it. Built inside the loop, the decision
            // (72 bytes then) was copied out after it, through a
            // store-forwarding stall that cost more than the whole GCRA
            // arithmetic. At 48 bytes the stall is gone, but the loop stays
            // short: building the decision between the load and the
            // compare-and-swap saved 4 of 69 instructions a check and cost
            // two threads on one key 1 to 2 ns a check (33 to 35 ns became
            // 34 to 37, `hot_path two-threads gcra`), more lost races.
            let mut before = self.hot.cell.update(|state| {
                if !A::ORDER_FREE || !self.clock.is_monotonic() {
                    at = reading.max(self.hot.latest.load(Ordering::Acquire));
                }
                let before = state.clone();
                // Only the state change is used here (the decision is
                // dropped, so the compiler drops what builds it).
                let _ = self.algorithm.decide(state, at, cost);
                before
            });
            return self.algorithm.decide(&mut before, at, cost);
        }
        if <A::Cell as StateCell>::EXCLUSIVE {
            return self.hot.cell.update(|state| {
                // The lock orders every writer of the latest instant.
                let now = self.advance_plain(reading);
                self.algorithm.decide(state, now, cost)
            });
        }
        self.publish(reading);
        self.hot.cell.update(|state| {
            let now = reading.max(self.hot.latest.load(Ordering::Acquire));
            self.algorithm.decide(state, now, cost)
        })
    }

    /// Decides a request of weight `cost` as [`Direct::check`] does, and
    /// answers only whether it passed: the whole [`Decision`] is computed
    /// when [`Verdict::decision`] asks for it. For a caller that reads only
    /// `allowed` (a gate in front of work), the lean check costs no more
    /// than the state change: for a one-word state (GCRA, the leaky queue)
    /// no `remaining`, `retry_after` or `reset_after` is computed, and the
    /// verdict is the state the check found, its instant and the cost. For
    /// any other state the check builds its decision as [`Direct::check`]
    /// does (see [`Verdict`]).
    ///
    /// ```
    /// use ratelab_core::{Direct, ManualClock, Quota};
    /// # use ratelab_core::{Algorithm, Bound, Decision, Error};
    /// # use ratelab_core::toolkit::AtomicCell;
    /// # #[derive(Debug)]
    /// # struct Allowance(Quota);
    /// # impl Algorithm for Allowance {
    /// #     type State = u64;
    /// #     type Cell = AtomicCell;
    /// #     type Ledger = u64;
    /// #     fn name(&self) -> &'static str { "allowance" }
    /// #     fn quota(&self) -> &Quota { &self.0 }
    /// #     fn capacity(&self) -> u64 { self.0.burst().into() }
    /// #     fn bound(&self) -> Bound { Bound::Rate { burst: self.capacity(), interval: u64::MAX } }
    /// #     fn initial_state(&self) -> u64 { 0 }
    /// #     fn decide(&self, used: &mut u64, _: u64, cost: u32) -> Result<Decision, Error> {
    /// #         let (cost, cap) = (u64::from(cost), self.capacity());
    /// #         if *used + cost > cap { return Ok(Decision::refused(cap).with_remaining(cap - *used)); }
    /// #         *used += cost;
    /// #         Ok(Decision::admitted(cap).with_remaining(cap - *used))
    /// #     }
    /// #     fn full_at(&self, used: &u64) -> u64 { if *used > 0 { u64::MAX } else { 0 } }
    /// # }
    /// let limiter = Direct::with_clock(Allowance(Quota::per_hour(2)?), ManualClock::new());
    /// assert!(limiter.check_lean(2)?.allowed());
    /// let refused = limiter.check_lean(1)?;
    /// assert!(!refused.allowed());
    /// assert_eq!(refused.decision(), limiter.check(1)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline(always)]
    pub fn check_lean(&self, cost: u32) -> Result<Verdict<'_, A>, Error> {
        if !<A::Cell as StateCell>::ONE_WORD {
            return self.check(cost).map(Verdict::made);
        }
        // `check`'s one-word path, up to the state change: see there.
        let reading = clamp_instant(self.clock.now_micros());
        let mut at = if A::ORDER_FREE && self.clock.is_monotonic() {
            self.advance_plain(reading)
        } else {
            self.publish(reading);
            reading
        };
        let (before, allowed) = self.hot.cell.update(|state| {
            if !A::ORDER_FREE || !self.clock.is_monotonic() {
                at = reading.max(self.hot.latest.load(Ordering::Acquire));
            }
            let before = state.clone();
            // Only `allowed` is read: the compiler drops the rest.
            let allowed = self.algorithm.decide(state, at, cost).map(|d| d.allowed);
            (before, allowed)
        });
        Ok(Verdict::replay(&self.algorithm, before, at, cost, allowed?))
    }

    /// The instant to decide at, `reading` or later, recorded as the latest
    /// with a plain load and store: no atomic maximum, which is a locked
    /// instruction. Exact inside an update of an
    /// [`EXCLUSIVE`](StateCell::EXCLUSIVE) cell, whose lock orders every
    /// writer. Outside one (order-free algorithms on a monotonic clock
    /// only), two threads storing at once may leave the smaller of their
    /// two readings: an instant that has passed, never one ahead of the
    /// clock, and never one after a later reading of the clock (which is
    /// what a settlement decides at: see [`Direct::now_inside`]).
    #[inline(always)]
    fn advance_plain(&self, reading: u64) -> u64 {
        let latest = self.hot.latest.load(Ordering::Relaxed);
        if reading > latest {
            self.hot.latest.store(reading, Ordering::Relaxed);
            reading
        } else {
            latest
        }
    }

    /// Publishes `reading` as the latest instant, before the state is
    /// touched, for cells whose updates may run at once: it is read again
    /// inside the update, so that a state written at instant t is only ever
    /// decided again at t or later. A thread that read the state before
    /// another's write loses its compare-and-swap and reruns the closure,
    /// whose load then sees the other's instant.
    #[inline(always)]
    fn publish(&self, reading: u64) {
        if reading > self.hot.latest.load(Ordering::Relaxed) {
            self.hot.latest.fetch_max(reading, Ordering::AcqRel);
        }
    }

    /// The decision a request of weight `cost` would get now, consuming
    /// nothing and writing nothing (see
    /// [`RateLimiter::peek`](crate::RateLimiter::peek)).
    pub fn peek(&self, cost: u32) -> Result<Decision, Error> {
        let reading = clamp_instant(self.clock.now_micros());
        // The latest instant is read with the state: a lock's cell records
        // it inside its updates.
        let (mut state, latest) = self
            .hot
            .cell
            .update(|state| (state.clone(), self.hot.latest.load(Ordering::Acquire)));
        self.algorithm.decide(&mut state, reading.max(latest), cost)
    }

    /// Decides a request of weight `cost` as [`Direct::check`] does, with a
    /// [`Receipt`] for an admission of a positive cost (see
    /// [`RateLimiter::check_with_receipt`]).
    pub fn check_with_receipt(&self, cost: u32) -> Result<(Decision, Option<Receipt>), Error> {
        let ledger = self.ledger.lock();
        let (decision, stamp) = self.hot.cell.update(|state| {
            let now = self.now_inside();
            let decision = self.algorithm.decide(state, now, cost);
            let stamp = match &decision {
                Ok(d) if d.allowed && cost > 0 => Some(self.algorithm.stamp(state, &ledger, now)),
                _ => None,
            };
            (decision, stamp)
        });
        drop(ledger);
        let decision = decision?;
        Ok((decision, stamp.map(|s| self.issuer.issue(&[], cost, s))))
    }

    /// Settles the admission `receipt` stands for to `actual` units (see
    /// [`RateLimiter::settle`]): what it did not use comes back, as far as
    /// the bucket still holds it; what it used beyond its cost is charged as
    /// debt. Answers what a peek of cost 0 would after it.
    pub fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        let redeemed = self
            .issuer
            .redeem(receipt)
            .map_err(|_| Error::ForeignReceipt)?;
        let settlement = redeemed.settlement(actual);
        let mut ledger = self.ledger.lock();
        let mut after = ledger.clone();
        let decision = self.hot.cell.update(|state| {
            after.clone_from(&ledger);
            let now = self.now_inside();
            self.algorithm.settle(state, &mut after, now, settlement)
        });
        *ledger = after;
        decision
    }

    /// Gives back what the admission `receipt` stands for still holds:
    /// [`Direct::settle`] to 0.
    pub fn refund(&self, receipt: Receipt) -> Result<Decision, Error> {
        self.settle(receipt, 0)
    }

    /// Puts the bucket back to full capacity: it decides as a new one, and
    /// no receipt issued before gives anything back.
    pub fn reset(&self) {
        let mut ledger = self.ledger.lock();
        let mut after = ledger.clone();
        self.hot.cell.update(|state| {
            after.clone_from(&ledger);
            let now = self.now_inside();
            self.algorithm.reset(state, &mut after, now);
        });
        *ledger = after;
    }

    /// The instant a receipt's check, a settlement or a reset decides at,
    /// read inside the state's update (again on each of its runs): on a
    /// monotonic clock, no earlier than any admission the state it is given
    /// has seen (that admission's reading came before this one), and on any
    /// clock, no earlier than the latest instant published.
    #[inline]
    fn now_inside(&self) -> u64 {
        let reading = clamp_instant(self.clock.now_micros());
        if <A::Cell as StateCell>::EXCLUSIVE {
            return self.advance_plain(reading);
        }
        self.publish(reading);
        reading.max(self.hot.latest.load(Ordering::Acquire))
    }

    /// Blocks until a request of weight `cost` is admitted, or `timeout`
    /// passes (see [`wait_for`](crate::wait_for)).
    pub fn wait(
        &self,
        cost: u32,
        timeout: std::time::Duration,
    ) -> Result<Decision, crate::WaitError> {
        crate::wait_for(|| self.check(cost), timeout)
    }

    /// The algorithm and its parameters.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The quota enforced.
    pub fn quota(&self) -> &Quota {
        self.algorithm.quota()
    }

    /// The clock read on every check.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// One bucket behind the keyed traits: every key shares it (the key is
/// ignored), so a [`Direct`] limiter works wherever a limiter is taken: the
/// wait helpers, the throttles, an HTTP policy.
impl<A: Algorithm, C: Clock> Limiter for Direct<A, C> {
    fn quota(&self) -> Quota {
        *self.algorithm.quota()
    }

    fn algorithm_name(&self) -> &'static str {
        self.algorithm.name()
    }

    fn backend(&self) -> &'static str {
        "memory"
    }

    fn bound(&self) -> Bound {
        self.algorithm.bound()
    }

    fn refunds(&self) -> bool {
        A::REFUNDS
    }
}

impl<A: Algorithm, C: Clock> RateLimiter for Direct<A, C> {
    /// Decides for the one bucket; `key` is ignored.
    fn check(&self, _key: &[u8], cost: u32) -> Result<Decision, Error> {
        Direct::check(self, cost)
    }

    /// Peeks at the one bucket; `key` is ignored.
    fn peek(&self, _key: &[u8], cost: u32) -> Result<Decision, Error> {
        Direct::peek(self, cost)
    }

    /// Decides for the one bucket with a receipt; `key` is ignored.
    fn check_with_receipt(
        &self,
        _key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        Direct::check_with_receipt(self, cost)
    }

    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        Direct::settle(self, receipt, actual)
    }

    /// Resets the one bucket; `key` is ignored.
    fn reset(&self, _key: &[u8]) -> Result<(), Error> {
        Direct::reset(self);
        Ok(())
    }
}

impl<A: Algorithm + fmt::Debug, C: fmt::Debug> fmt::Debug for Direct<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Direct")
            .field("algorithm", &self.algorithm)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}
