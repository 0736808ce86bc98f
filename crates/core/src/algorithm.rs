//! [`Algorithm`]: the decision logic of one algorithm, written once, run by
//! the in-memory limiters here and mirrored by a Redis script.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::{Decision, Error, Quota};

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

    /// A short, stable name: `"gcra"`, `"token-bucket"`, ...
    fn name(&self) -> &'static str;

    /// The quota this algorithm was built from.
    fn quota(&self) -> &Quota;

    /// The most units that pass at once from full capacity: a cost above
    /// this can never fit.
    fn capacity(&self) -> u64;

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

    /// [`Algorithm::refund`] gives units back (every ratelab algorithm);
    /// false by default, as the default refund answers
    /// [`Error::Unsupported`]. An HTTP policy on a limiter that refunds
    /// consumes first and gives back after, where it would otherwise peek
    /// first and count after (which lets requests in flight together pass
    /// beyond the quota).
    const REFUNDS: bool = false;

    /// Decides a request of `cost` at `now`, updating `state`.
    fn decide(&self, state: &mut Self::State, now: u64, cost: u32) -> Result<Decision, Error>;

    /// Gives back up to `cost` units the key consumed, at `now`, for one
    /// admission that should not count (a "count only failures" policy, a
    /// cancelled job) and still weighs on the key for `owed` µs: its
    /// decision's `reset_after`, less the time since it was decided.
    ///
    /// **Only what the admission still holds comes back.** An admission's
    /// units do not weigh forever: the debt it added to a bucket is repaid
    /// as time passes, and a window's count ends with its window. After
    /// that, other admissions may have taken the room; giving the units back
    /// then would let those others count for less than they cost, and more
    /// than the quota would pass. So:
    ///
    /// - GCRA, leaky queue: the TAT (next slot) moves `min(cost × T, owed)`
    ///   earlier, never before `now`;
    /// - leaky meter: the level drains to `now`, then loses
    ///   `min(cost × T, owed)` (down to empty);
    /// - token bucket: the bucket refills to `now`, then is full
    ///   `min(cost × T, owed)` sooner: whole tokens, and the rest as an
    ///   earlier next token (up to its capacity);
    /// - fixed window: while `owed > 0` (the admission's window is the
    ///   current one), the count loses up to `cost`; after, nothing;
    /// - sliding counter: while `owed > W` (the admission's window is the
    ///   current one) the current count loses up to `cost`; while `owed > 0`
    ///   (it is the previous one, still weighing) the previous count does;
    ///   after, nothing;
    /// - sliding log: while `owed > 0` (the admission's units are still in
    ///   the log), its `cost` oldest units leave it, never one newer than
    ///   the admission's; after, nothing.
    ///
    /// `owed` may be underestimated, never overestimated: measure the time
    /// since from before the check was asked. An underestimate only gives
    /// back less. For a debt, what an admission still holds is at least
    /// `min(cost × T, owed)` whatever came after it (the debt it added is
    /// repaid no faster than time passes), which is what comes back.
    ///
    /// Never takes the key above its capacity: a full key stays full. A key
    /// back to full capacity is put back to its initial state
    /// ([`forget_if_full`]). Answers what a peek of cost 0 would after the
    /// refund (`remaining`, `reset_after`). A cost above
    /// [`Algorithm::capacity`] is [`Error::CostTooHigh`], as for a check.
    /// `now` going backwards is time standing still, as for
    /// [`Algorithm::decide`].
    ///
    /// [`Algorithm::full_at`] may decrease after a refund (it is the one
    /// change that lowers it). The default answers [`Error::Unsupported`];
    /// every ratelab algorithm implements it.
    fn refund(
        &self,
        state: &mut Self::State,
        now: u64,
        cost: u32,
        owed: u64,
    ) -> Result<Decision, Error> {
        let _ = (state, now, cost, owed);
        Err(Error::Unsupported("a refund"))
    }

    /// The instant from which `state` decides exactly as
    /// [`Algorithm::initial_state`] would, if nothing else is consumed: the
    /// key is back to full capacity and may be forgotten. Never decreases as
    /// requests are decided; only [`Algorithm::refund`] lowers it.
    fn full_at(&self, state: &Self::State) -> u64;
}

/// Puts `state` back to [`Algorithm::initial_state`] if it is full at `now`:
/// the last step of every [`Algorithm::refund`].
///
/// A full key then holds what a key never seen holds, which is what a store
/// that forgets full keys holds (the keyed store, Redis deleting the key), so
/// every store decides the same afterwards, even when the clock goes back.
#[inline]
pub fn forget_if_full<A: Algorithm + ?Sized>(algorithm: &A, state: &mut A::State, now: u64) {
    if algorithm.full_at(state) <= now {
        *state = algorithm.initial_state();
    }
}

/// What a refund of `cost` units takes off a debt repaid at one unit per
/// `interval` µs (GCRA, the token bucket, the leaky bucket), for an
/// admission that still weighs `owed` µs: `min(cost × interval, owed)`.
#[inline]
pub fn owed_debt(cost: u64, interval: u64, owed: u64) -> u64 {
    cost.saturating_mul(interval).min(owed)
}

/// `owed` as the µs [`Algorithm::refund`] takes.
#[inline]
pub fn owed_micros(owed: std::time::Duration) -> u64 {
    u64::try_from(owed.as_micros()).unwrap_or(u64::MAX)
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
