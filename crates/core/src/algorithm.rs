//! [`Algorithm`]: the decision logic of one algorithm, written once, run by
//! the in-memory limiters here and mirrored by a Redis script.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::{Bound, Decision, Error, Ledger, Quota, Settlement, Stamp};

/// The decision logic of one rate-limiting algorithm.
///
/// `decide` is a pure function of `(state, now, cost)` and the parameters the
/// algorithm derived from its [`Quota`]: no clock, no I/O, integer
/// microseconds only, so that a Redis Lua script can mirror it bit for bit.
/// The in-memory limiters ([`Direct`](crate::Direct),
/// [`Keyed`](crate::Keyed)) hold the state and read the clock.
///
/// Contract for implementations:
///
/// - a cost above [`Algorithm::capacity`] is [`Error::CostTooHigh`], and
///   leaves the state untouched;
/// - all or nothing: a refused request consumes nothing;
/// - cost 0 is a peek: it reports without consuming (always allowed);
/// - only an admission with a positive cost changes the state (the sliding
///   log may also forget units that have left its window), so a refusal or a
///   peek costs a Redis script no write, and the script mirrors the state
///   changes exactly;
/// - `now` may go backwards: the state must never let that admit more than
///   the quota (treat it as time standing still);
/// - `now` is at most [`MAX_INSTANT_MICROS`](crate::MAX_INSTANT_MICROS)
///   (the runners clamp it), which keeps every value under 2^53.
pub trait Algorithm: Send + Sync + 'static {
    /// The state kept per key.
    type State: Clone + Send + 'static;
    /// How a single-bucket limiter stores the state: a lock, or one atomic
    /// word for one-word states.
    type Cell: StateCell<State = Self::State>;
    /// What the runner keeps beside a key's state for its receipts:
    /// [`Shifts`](crate::Shifts) for a debt, a fence (`u64`) for a window,
    /// `u64` (left at 0) for an algorithm without settlements.
    type Ledger: Ledger;

    /// A short, stable name: `"gcra"`, `"token-bucket"`, ...
    fn name(&self) -> &'static str;

    /// The quota this algorithm was built from.
    fn quota(&self) -> &Quota;

    /// The most units that pass at once from full capacity: a cost above
    /// this can never fit.
    fn capacity(&self) -> u64;

    /// What the algorithm promises about the units that count, for its
    /// quota: the `RateLimit` header's wait, the comparison's tables and the
    /// tests' oracles read it here, and nowhere else.
    fn bound(&self) -> Bound;

    /// The state of a key never seen, or seen so long ago it is back to full
    /// capacity.
    fn initial_state(&self) -> Self::State;

    /// Checks decided at instants taken out of order (two threads that read
    /// the clock in one order and reach the state in the other) never admit
    /// more than the quota allows over the span of those instants, and the
    /// state needs no "latest instant" kept beside it.
    ///
    /// True where the state is one instant that each admission moves forward
    /// by its cost (GCRA's TAT, the leaky queue's next slot): an admission
    /// needs the instant, before it, within the tolerance of the decision's
    /// `now`, so `n` units admitted at instants in `[a, b]`, in any order,
    /// moved it at least `n × T` past `a` while it stayed within
    /// `b + tolerance`: `n <= burst + (b - a) / T`, the in-order bound.
    /// [`Direct`](crate::Direct) then publishes the latest instant with a
    /// plain store rather than an atomic maximum (one locked instruction
    /// less per check). False by default.
    const ORDER_FREE: bool = false;

    /// The algorithm settles admissions ([`Algorithm::settle`], every
    /// ratelab algorithm); false by default, as the default settlement
    /// answers [`Error::Unsupported`]. An HTTP policy on a limiter that
    /// settles consumes first and gives back after, where it would otherwise
    /// peek first and count after (which lets requests in flight together
    /// pass beyond the quota).
    const REFUNDS: bool = false;

    /// Decides a request of `cost` at `now`, updating `state`.
    fn decide(&self, state: &mut Self::State, now: u64, cost: u32) -> Result<Decision, Error>;

    /// What an admission of a positive cost, just decided at `now`, leaves
    /// for its settlement: read from `state` as the admission left it, and
    /// the key's `ledger` (see [`Receipt`](crate::Receipt)). The default
    /// stamps nothing.
    fn stamp(&self, state: &Self::State, ledger: &Self::Ledger, now: u64) -> Stamp {
        let _ = (state, ledger, now);
        Stamp::default()
    }

    /// Settles one admission at `now`: gives back what it did not use, if
    /// the state provably still holds it, or charges what it used beyond
    /// its cost, whatever the room (debt that later requests wait out).
    ///
    /// `ledger` is kept with the key's state by the runner (empty for a key
    /// never seen) and only this method and [`Algorithm::reset`] change it.
    /// `now` is never before the latest instant the key was written at (the
    /// runners see to it). The rule, and why it never lets the kept
    /// admissions pass the algorithm's bound, is in the
    /// [`Receipt`](crate::Receipt) docs. A state that can then be forgotten
    /// ([`Algorithm::forgettable_at`]) is put back to the initial state with
    /// a ledger of 0, so that every store decides the same afterwards.
    ///
    /// Answers what a peek of cost 0 would after it. A charged or actual
    /// cost above the capacity is [`Error::CostTooHigh`], and changes
    /// nothing. The default answers [`Error::Unsupported`]; every ratelab
    /// algorithm implements it.
    fn settle(
        &self,
        state: &mut Self::State,
        ledger: &mut Self::Ledger,
        now: u64,
        settlement: Settlement,
    ) -> Result<Decision, Error> {
        let _ = (state, ledger, now, settlement);
        Err(Error::Unsupported("a settlement"))
    }

    /// Puts the key back to full capacity at `now`, as if never seen: the
    /// state decides as [`Algorithm::initial_state`] does, and no receipt
    /// issued before gives anything back afterwards (the ledger says so,
    /// until [`Algorithm::forgettable_at`]). The default puts the initial
    /// state back.
    fn reset(&self, state: &mut Self::State, ledger: &mut Self::Ledger, now: u64) {
        let _ = (ledger, now);
        *state = self.initial_state();
    }

    /// The instant from which `state` decides exactly as
    /// [`Algorithm::initial_state`] would, if nothing else is consumed: the
    /// key is back to full capacity. Never decreases as requests are
    /// decided; only a settlement or a reset lowers it.
    fn full_at(&self, state: &Self::State) -> u64;

    /// The instant from which the key may be forgotten (its state and its
    /// ledger dropped, as a key never seen): it is full, and no receipt
    /// issued for it can give anything back any more. The default is
    /// [`Algorithm::full_at`], right for an algorithm without settlements.
    fn forgettable_at(&self, state: &Self::State, ledger: &Self::Ledger) -> u64 {
        let _ = ledger;
        self.full_at(state)
    }
}

/// Puts `state` and `ledger` back to a key never seen if the key can be
/// forgotten at `now`: the last step of every [`Algorithm::settle`] and
/// [`Algorithm::reset`].
///
/// A forgettable key then holds what a key never seen holds, which is what
/// a store that forgets keys holds (the keyed store, Redis deleting the key),
/// so every store decides the same afterwards, even when the clock goes
/// back.
#[inline]
pub fn forget_if_forgettable<A: Algorithm + ?Sized>(
    algorithm: &A,
    state: &mut A::State,
    ledger: &mut A::Ledger,
    now: u64,
) {
    if algorithm.forgettable_at(state, ledger) <= now {
        *state = algorithm.initial_state();
        *ledger = A::Ledger::default();
    }
}

/// The checks every [`Algorithm::settle`] starts with: the charged and the
/// actual cost within the capacity.
#[inline]
pub fn ensure_settles(settlement: &Settlement, capacity: u64) -> Result<(), Error> {
    crate::ensure_fits(settlement.charged, capacity)?;
    crate::ensure_fits(settlement.actual, capacity)?;
    Ok(())
}

/// Where a single-bucket limiter keeps an algorithm's state.
pub trait StateCell: Send + Sync + fmt::Debug {
    /// The state held.
    type State;

    /// The state is one machine word, as cheap to copy as a pointer: a
    /// runner may keep a copy of it out of [`StateCell::update`] and decide
    /// again from that copy outside (see [`Direct`](crate::Direct)'s
    /// `check`). False by default: a lock's state may be large (a log).
    const ONE_WORD: bool = false;

    /// [`StateCell::update`] runs `f` once, excluding every other update (a
    /// lock): a runner may keep values beside the state that only its `f`
    /// reads and writes, with plain loads and stores
    /// ([`Direct`](crate::Direct) keeps its latest instant so). False by
    /// default.
    const EXCLUSIVE: bool = false;

    /// A cell holding `state`.
    fn new(state: Self::State) -> Self;

    /// Runs `f` on the state, atomically with respect to other updates.
    ///
    /// `f` may run more than once (a lost compare-and-swap race reruns it on
    /// the new state); only the last run's changes are kept.
    fn update<R>(&self, f: impl FnMut(&mut Self::State) -> R) -> R;
}

/// A state behind a lock held only while the decision is computed.
pub struct LockedCell<S>(Mutex<S>);

impl<S: Send> StateCell for LockedCell<S> {
    type State = S;
    const EXCLUSIVE: bool = true;

    #[inline]
    fn new(state: S) -> Self {
        LockedCell(Mutex::new(state))
    }

    #[inline]
    fn update<R>(&self, mut f: impl FnMut(&mut S) -> R) -> R {
        f(&mut self.0.lock())
    }
}

impl<S> fmt::Debug for LockedCell<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LockedCell")
    }
}

/// A one-word state updated by a compare-and-swap loop: no lock, and a
/// refusal that changes nothing writes nothing.
#[derive(Debug)]
pub struct AtomicCell(AtomicU64);

impl StateCell for AtomicCell {
    type State = u64;
    const ONE_WORD: bool = true;

    #[inline]
    fn new(state: u64) -> Self {
        AtomicCell(AtomicU64::new(state))
    }

    #[inline]
    fn update<R>(&self, mut f: impl FnMut(&mut u64) -> R) -> R {
        let mut current = self.0.load(Ordering::Acquire);
        loop {
            let mut next = current;
            let result = f(&mut next);
            if next == current {
                return result;
            }
            match self
                .0
                .compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return result,
                Err(actual) => current = actual,
            }
        }
    }
}
