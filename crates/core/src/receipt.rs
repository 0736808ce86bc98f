//! [`Receipt`]: what an admission took, and the ledgers and stamps that let
//! a settlement give back only what the limiter can prove it still holds.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(doc)]
use crate::Spent;

/// What a limiter wrote at an admission, for its refund or settlement: its
/// meaning is the algorithm's (see [`Receipt`]).
///
/// For the debts (GCRA, token bucket, leaky meter and queue), `at` is the
/// instant the key was full again right after the admission, µs, and `mark`
/// the ledger then. For the windows, `at` is the window's index (fixed
/// window, sliding counter) or the instant the units were logged at
/// (sliding log), and `mark` the units counted there up to the admission,
/// given back ones included (see [`Spent`]). No two admissions of one key
/// share a stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Stamp {
    /// An instant or a window index, as above.
    pub at: u64,
    /// The ledger at the admission (debts), or the units counted up to it
    /// (windows).
    pub mark: u64,
}

/// A settlement: an admission's stamp, the cost it was charged, and what it
/// finally counts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Settlement {
    /// What the admission's check wrote.
    pub stamp: Stamp,
    /// The cost the check charged.
    pub charged: u32,
    /// What the admission finally counts for: less than `charged` gives the
    /// difference back (0 refunds it), more charges the difference as debt.
    pub actual: u32,
}

impl Settlement {
    /// A settlement that only charges `units` more: no admission to give
    /// back from (a key decided by shared cells, or no longer tracked).
    pub const fn charge(units: u32) -> Self {
        Settlement {
            stamp: Stamp { at: 0, mark: 0 },
            charged: 0,
            actual: units,
        }
    }
}

/// What one admission took: hand it back to [`settle`] or [`refund`] on the
/// limiter that issued it, once, or drop it (the admission then counts as
/// charged). What a settlement gives back, and why that never lets more
/// than the quota count, follows.
///
/// # Why a receipt, and not a number
///
/// A refund that trusts a number the caller computes (how much to give, how
/// long the admission still weighs) can be wrong in ways no caller can see:
/// an admission's `reset_after` includes the debt of the admissions before
/// it, so once one of those is refunded, a later admission's figure
/// overstates what it still holds, and the refund hands out units that
/// belong to others. A receipt carries what the limiter itself wrote at the
/// check (a [`Stamp`]); the limiter decides from its own state and the
/// stamp, never from a duration.
///
/// A receipt is taken by value and cannot be cloned: an admission is given
/// back at most once. It names its limiter: a receipt handed to another one
/// is [`Error::ForeignReceipt`](crate::Error::ForeignReceipt).
///
/// # The rule, and why it holds
///
/// Let *kept* be every admission, each with the cost it finally counts for
/// (its cost, less what a refund or settlement gave back), plus every extra
/// charge a settlement made, at the instant it was made. The promise: **at
/// every admission, the kept history up to that instant, replayed through the
/// algorithm from a fresh state with every charge forced, left room for it.**
/// So the kept units obey each algorithm's own bound (a bucket's
/// `burst + floor(t / T)` in any interval `t`, a window's limit per window),
/// whatever the order and delay of checks, peeks, refunds and settlements,
/// clock rewinds included. `crates/tests/tests/redis/settle_bound.rs` checks it
/// against such a replay, in memory and on Redis (scripts and module).
///
/// **Windows** (fixed window, sliding counter): the stamp is the admission's
/// window. A settlement gives units back from that window's count while the
/// window still counts (the current one; for the sliding counter, the
/// previous one too), never from another: the count then stays at least what
/// the kept admissions of that window add up to. **Sliding log**: the stamp
/// is the instant the admission was logged at; units leave the log only
/// from that instant (units of one instant are interchangeable), while they
/// are in the log. A window's stamp also marks its admission (the units
/// counted there up to it, given back ones included), and its ledger
/// ([`Spent`]) lists the stamps settled, so that each gives back once.
///
/// **Debts** (GCRA, token bucket, leaky meter and queue): each state has an
/// instant `F` at which it is full again (`full_at`), and an admission of
/// `cost` at `now` moves it to `max(F, now) + cost × T`. Read the admissions
/// as a schedule: each occupies `cost × T` of time, back to back, starting
/// no earlier than its instant, and `F` is where the schedule ends. Giving
/// back part of an admission that ends at `E` is safe as long as `E > now`:
/// nothing admitted after it found the schedule idle (their instants were all
/// before `E`), so everything after it moves earlier by exactly what is given
/// back, and `F` with it; the kept schedule ends where the state now says.
/// The stamp holds `E` as the check left it, and a *ledger* kept with the
/// state records every shift a settlement made, at the settled admission's
/// position (the admissions after it are the ones it moved). So `E` is at
/// least the stamp's end less the shifts recorded since the stamp at or
/// before its position, and a settlement gives back
/// `min(unused × T − what its own earlier settlements gave, that end − now)`:
/// nothing once the admission's time has passed, and never the admission's
/// units twice. Giving back from the last admission moves nothing else, but
/// is recorded all the same: the key's `F` plus the ledger's total then
/// never comes back to a position an earlier admission had, so no two
/// admissions of one key are ever stamped alike. An extra charge is added at
/// the end of the schedule: it moves nothing.
///
/// **Keys forgotten and reset.** A key is forgotten (by the keyed store, or
/// by Redis expiring it) only when no receipt can still give anything back:
/// a debt whose ledger grew is kept until `F` plus the burst's time, past the
/// end of every admission it ever made; a reset (which must not let older
/// receipts take from what comes after) grows the ledger past every
/// outstanding end, or fences the windows, and is kept until then too.
///
/// # Across a process boundary
///
/// In Rust a receipt cannot be forged or used twice. A Redis script is sent
/// the stamp's numbers, and trusts them as it trusts every argument (a
/// caller that can send arbitrary arguments can as well write the key), but
/// bounds what they can do: a settlement never takes a key beyond full
/// capacity, never gives back more than `unused × T` (debts) or `unused`
/// units (windows), never gives back for a window that has ended, and
/// nothing for an end that is later than the state's own. **A stamp
/// settled again gives nothing more**, however its replays and the key's
/// other checks interleave: no two admissions share a stamp (a debt's
/// position, a window's mark), a debt's ledger counts what each position
/// gave, and a window's ledger ([`Spent`]) lists the stamps it settled. A
/// forged stamp can do at most what a reset of the key does.
///
/// [`settle`]: crate::RateLimiter::settle
/// [`refund`]: crate::RateLimiter::refund
pub struct Receipt {
    issuer: u64,
    key: Box<[u8]>,
    cost: u32,
    stamp: Stamp,
    shared: bool,
}

impl Receipt {
    /// The cost the admission was charged.
    pub fn cost(&self) -> u32 {
        self.cost
    }

    /// The key the admission was charged to (empty for a single bucket).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// What the limiter wrote at the admission.
    pub fn stamp(&self) -> Stamp {
        self.stamp
    }
}

impl fmt::Debug for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receipt")
            .field("cost", &self.cost)
            .field("stamp", &self.stamp)
            .field("shared", &self.shared)
            .finish_non_exhaustive()
    }
}

/// A limiter's identity as an issuer of receipts: each one made is unique,
/// and only it redeems what it issued. Not `Clone`: a limiter holds its own.
///
/// For limiters outside this crate (`ratelab-redis` issues receipts this
/// way): issue with [`Issuer::issue`] at an admission, and take a receipt
/// back with [`Issuer::redeem`], which refuses one issued elsewhere.
pub struct Issuer(u64);

static NEXT_ISSUER: AtomicU64 = AtomicU64::new(1);

impl Issuer {
    /// A new issuer, distinct from every other in this process.
    pub fn new() -> Self {
        Issuer(NEXT_ISSUER.fetch_add(1, Ordering::Relaxed))
    }

    /// A receipt for an admission of `cost` units under `key`, stamped
    /// `stamp`.
    pub fn issue(&self, key: &[u8], cost: u32, stamp: Stamp) -> Receipt {
        Receipt {
            issuer: self.0,
            key: key.into(),
            cost,
            stamp,
            shared: false,
        }
    }

    /// A receipt for an admission decided by state other keys share (the
    /// keyed store's flood cells): a settlement gives nothing back from it,
    /// and charges what it owes more.
    pub fn issue_shared(&self, key: &[u8], cost: u32) -> Receipt {
        Receipt {
            shared: true,
            ..self.issue(key, cost, Stamp::default())
        }
    }

    /// Whether this issuer made `receipt`.
    pub fn issued(&self, receipt: &Receipt) -> bool {
        receipt.issuer == self.0
    }

    /// What `receipt` holds, if this issuer made it; else the receipt,
    /// untouched (another limiter's, for the caller to pass on or refuse
    /// with [`Error::ForeignReceipt`](crate::Error::ForeignReceipt)).
    pub fn redeem(&self, receipt: Receipt) -> Result<Redeemed, Receipt> {
        if !self.issued(&receipt) {
            return Err(receipt);
        }
        Ok(Redeemed {
            key: receipt.key,
            cost: receipt.cost,
            stamp: receipt.stamp,
            shared: receipt.shared,
        })
    }
}

impl Default for Issuer {
    fn default() -> Self {
        Issuer::new()
    }
}

impl fmt::Debug for Issuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Issuer").field(&self.0).finish()
    }
}

/// A receipt taken back by its issuer.
#[derive(Debug)]
#[non_exhaustive]
pub struct Redeemed {
    /// The key the admission was charged to.
    pub key: Box<[u8]>,
    /// The cost it was charged.
    pub cost: u32,
    /// What the limiter wrote at it.
    pub stamp: Stamp,
    /// Decided by shared state: nothing can be given back from it.
    pub shared: bool,
}

impl Redeemed {
    /// The settlement of this admission to `actual` units.
    pub fn settlement(&self, actual: u32) -> Settlement {
        if self.shared {
            return Settlement::charge(actual.saturating_sub(self.cost));
        }
        Settlement {
            stamp: self.stamp,
            charged: self.cost,
            actual,
        }
    }
}

/// What a key keeps beside its state for its receipts: a debt's [`Shifts`],
/// or a window's fence (a `u64`: the first window index, or logged instant,
/// whose receipts may give back; 0 for none).
pub trait Ledger: Clone + Default + fmt::Debug + PartialEq + Send + Sync + 'static {
    /// Nothing recorded: what a key never seen holds.
    fn is_empty(&self) -> bool;
}

impl Ledger for u64 {
    #[inline]
    fn is_empty(&self) -> bool {
        *self == 0
    }
}

/// The most recent shifts a debt's ledger keeps one by one; older ones are
/// counted against every receipt issued before them (which only gives back
/// less). A refund's shift is forgotten anyway once every admission before
/// it has ended (a burst's time later).
pub const MAX_RECENT_SHIFTS: usize = 64;

/// The most a debt's ledger records in all. A key reset again and again
/// while in debt, never idle long enough to be forgotten, grows it by the
/// debt each reset forgives; at the ceiling no receipt gets anything back
/// until the key is forgotten (giving nothing is always safe), rather than
/// grow past what a Redis script's numbers hold exactly (below 2^53).
pub const LEDGER_CEILING: u64 = 1 << 52;

/// One shift a debt's ledger recorded: a settlement that gave back part of
/// the admission at `position` moved every admission after it earlier (a
/// reset's, at 0, moved all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shift {
    /// The ledger's total before it: it moved by the next shift's `before`
    /// (or the total) less this.
    pub before: u64,
    /// The position it was made at: the refunded admission's end plus the
    /// ledger's total when it was admitted (its stamp's `at + mark`), which
    /// grows with every admission; a reset's is 0 (before all of them).
    pub position: u64,
    /// The instant it was made at, µs.
    pub at: u64,
}

/// A debt's ledger (GCRA, token bucket, leaky meter and queue): how far
/// settlements and resets moved each outstanding admission.
///
/// A settlement that gives back part of an admission moves every admission
/// after it earlier by what it gave (the last one moves nothing, but is
/// recorded too). A stamp's `mark` is the total at its admission, so the
/// shifts made since are those recorded from the mark on; of those, the
/// ones made at a position before the admission's (`at + mark`) moved it,
/// and those made at its own position are its own settlements': they count
/// too, so that a stamp settled again finds its end moved by what it gave,
/// and gives back only what its own settlements have not. Two admissions of
/// one incarnation of a key never share a position: each admission takes
/// the key's `full_at + total` past every earlier one's, and a settlement
/// or a reset never brings it back. The most recent [`MAX_RECENT_SHIFTS`]
/// are kept one by one (exact); older ones count against every admission,
/// and as its own (see [`Receipt`]'s docs): giving back less, never more.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Shifts {
    total: u64,
    recent: Vec<Shift>,
}

impl Shifts {
    /// A ledger as stored: `total`, and the recent shifts, oldest first.
    /// `None` unless each shift's `before` is below the next one's (and the
    /// last one's below the total), there are at most [`MAX_RECENT_SHIFTS`],
    /// and the total is at most [`LEDGER_CEILING`].
    pub fn from_parts(total: u64, recent: Vec<Shift>) -> Option<Self> {
        let ordered = recent
            .iter()
            .map(|s| s.before)
            .chain([total])
            .try_fold(None::<u64>, |previous, before| match previous {
                Some(p) if p >= before => None,
                _ => Some(Some(before)),
            })
            .is_some();
        (ordered && recent.len() <= MAX_RECENT_SHIFTS && total <= LEDGER_CEILING)
            .then_some(Shifts { total, recent })
    }

    /// Every shift recorded, µs: what a stamp's `mark` holds.
    #[inline]
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The recent shifts, oldest first.
    pub fn recent(&self) -> &[Shift] {
        &self.recent
    }

    /// How far the shifts made since `mark` moved an admission at
    /// `position` (made at or before it), and how much of that its own
    /// settlements gave (the shifts made at exactly its position): exactly,
    /// for those still recorded one by one; the whole of any older one, in
    /// both (giving back less, never more). `None` for a mark ahead of the
    /// total (a stamp of another incarnation of the key).
    fn moved(&self, mark: u64, position: u64) -> Option<(u64, u64)> {
        if mark > self.total {
            return None;
        }
        let covered = self.recent.first().map_or(self.total, |s| s.before);
        let older = covered.saturating_sub(mark);
        let (mut moved, mut own) = (older, older);
        for (i, shift) in self.recent.iter().enumerate() {
            let after = self.recent.get(i + 1).map_or(self.total, |s| s.before);
            if shift.before >= mark && shift.position <= position {
                moved += after - shift.before;
                if shift.position == position {
                    own += after - shift.before;
                }
            }
        }
        Some((moved, own))
    }

    /// Records a shift of `amount` at `position`, at `at`; false (nothing
    /// recorded) when the total would reach the ceiling.
    fn record(&mut self, position: u64, at: u64, amount: u64) -> bool {
        if self.total.saturating_add(amount) >= LEDGER_CEILING {
            return false;
        }
        if self.recent.len() == MAX_RECENT_SHIFTS {
            self.recent.remove(0);
        }
        self.recent.push(Shift {
            before: self.total,
            position,
            at,
        });
        self.total += amount;
        true
    }

    /// Forgets the shifts that no outstanding admission can have been moved
    /// by: when the state is full again at `full_at <= now`, every
    /// admission has ended; otherwise those made a `tolerance` ago or more
    /// (every admission before them ended by then).
    fn expire(&mut self, full_at: u64, now: u64, tolerance: u64) {
        if full_at <= now {
            self.recent.clear();
            return;
        }
        let old = self
            .recent
            .iter()
            .take_while(|s| s.at.saturating_add(tolerance) <= now)
            .count();
        self.recent.drain(..old);
    }
}

impl Ledger for Shifts {
    #[inline]
    fn is_empty(&self) -> bool {
        self.total == 0 && self.recent.is_empty()
    }
}

/// What a debt's settlement gives back, in µs of debt, for an admission
/// stamped `stamp` that would give back `unused` µs, on a state full again at
/// `full_at` whose admissions end at most `tolerance` after their instant, at
/// `now` (never before the latest instant the key was written at); records
/// the shift in `ledger` at the admission's position (see the
/// [`Receipt`] docs). 0 for a stamp of another incarnation of the key, an
/// end that has passed, an end later than the state's (not an admission of
/// this state), an admission whose settlements already gave back `unused`
/// (a replay), or a shift the ledger cannot record.
pub(crate) fn debt_release(
    full_at: u64,
    ledger: &mut Shifts,
    now: u64,
    stamp: Stamp,
    unused: u64,
    tolerance: u64,
) -> u64 {
    ledger.expire(full_at, now, tolerance);
    if ledger.total >= LEDGER_CEILING {
        return 0;
    }
    let position = stamp.at.saturating_add(stamp.mark);
    let Some((moved, own)) = ledger.moved(stamp.mark, position) else {
        return 0;
    };
    // The admission's end now: moved earlier by every shift since that was
    // made before it, or less.
    let end = stamp.at.saturating_sub(moved);
    if end <= now || end > full_at {
        return 0;
    }
    // What its own settlements have not given yet: a replayed stamp gets
    // nothing more once the admission's units are back.
    let back = unused.saturating_sub(own).min(end - now);
    // Recorded even for the last admission: the key's `full_at + total`
    // then never comes back to an earlier admission's position, so no later
    // admission is stamped as this one was.
    if back == 0 || !ledger.record(position, now, back) {
        return 0;
    }
    back
}

/// A debt's ledger after a reset at `now` of a state full again at
/// `full_at`: every outstanding admission moved past now, so that no receipt
/// issued before gives anything back afterwards (see the
/// [`Receipt`] docs). Unchanged when nothing can be outstanding; at the
/// ceiling when the shift cannot be recorded (nothing is given back any
/// more, until the key is forgotten).
pub(crate) fn debt_reset(full_at: u64, ledger: &mut Shifts, now: u64, tolerance: u64) {
    ledger.expire(full_at, now, tolerance);
    if ledger.is_empty() && full_at <= now {
        return;
    }
    let amount = full_at.saturating_sub(now).saturating_add(1);
    if !ledger.record(0, now, amount) {
        *ledger = Shifts {
            total: LEDGER_CEILING,
            recent: Vec::new(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOLERANCE: u64 = 1_000;

    fn stamp(at: u64, mark: u64) -> Stamp {
        Stamp { at, mark }
    }

    #[test]
    fn a_receipt_goes_back_only_to_its_issuer() {
        let (a, b) = (Issuer::new(), Issuer::new());
        let receipt = a.issue(b"k", 2, stamp(5, 0));
        let receipt = b.redeem(receipt).expect_err("another issuer's");
        let redeemed = a.redeem(receipt).expect("its own");
        assert_eq!((&*redeemed.key, redeemed.cost), (&b"k"[..], 2));
    }

    #[test]
    fn every_give_back_is_a_shift_so_no_later_admission_shares_a_stamp() {
        let mut ledger = Shifts::default();
        // Ends at 30, the state's end: the last one. Its shift moves
        // nothing else, but the key's `full_at + total` stays at 30.
        let back = debt_release(30, &mut ledger, 10, stamp(30, 0), 10, TOLERANCE);
        assert_eq!((back, ledger.total()), (10, 10));
        // The next admission of the same cost ends at 30 again: its stamp
        // carries the new total, so it is not the refunded one's.
        let next = stamp(30, ledger.total());
        assert_ne!(next, stamp(30, 0));
        // The refunded stamp, replayed: its own shift moved it to 20, and it
        // gave its 10 already.
        assert_eq!(
            debt_release(30, &mut ledger, 10, stamp(30, 0), 10, TOLERANCE),
            0
        );
        // The new admission gives back its own, once.
        assert_eq!(debt_release(30, &mut ledger, 10, next, 10, TOLERANCE), 10);
        assert_eq!(debt_release(20, &mut ledger, 10, next, 10, TOLERANCE), 0);
    }

    #[test]
    fn a_settlement_in_parts_gives_back_the_cost_at_most() {
        // One admission of 10 ending at 30, seen at 10: given 4, then 6 by a
        // second settlement of the same stamp, then nothing.
        let mut ledger = Shifts::default();
        assert_eq!(
            debt_release(30, &mut ledger, 10, stamp(30, 0), 4, TOLERANCE),
            4
        );
        assert_eq!(
            debt_release(26, &mut ledger, 10, stamp(30, 0), 10, TOLERANCE),
            6
        );
        assert_eq!(
            debt_release(20, &mut ledger, 10, stamp(30, 0), 10, TOLERANCE),
            0
        );
    }

    #[test]
    fn a_shift_moves_only_the_admissions_after_it() {
        // Three admissions of 10 each, ending at 10, 20 and 30 (marks 0).
        let mut ledger = Shifts::default();
        // The middle one first: it moves the last, not the first.
        assert_eq!(
            debt_release(30, &mut ledger, 0, stamp(20, 0), 10, TOLERANCE),
            10
        );
        assert_eq!(
            debt_release(20, &mut ledger, 0, stamp(10, 0), 10, TOLERANCE),
            10
        );
        // The last, moved by both, ends at 10: the state's end.
        assert_eq!(
            debt_release(10, &mut ledger, 0, stamp(30, 0), 10, TOLERANCE),
            10
        );
    }

    #[test]
    fn a_replayed_stamp_gives_back_its_own_units_once() {
        // Ten admissions of 10 ending at 10, 20, ... 100 (marks 0): the
        // third's stamp, replayed fifty times, gives back its own 10 once,
        // never the time of the two before it.
        let mut ledger = Shifts::default();
        let mut full_at = 100;
        let mut given = 0;
        for _ in 0..50 {
            let back = debt_release(full_at, &mut ledger, 0, stamp(30, 0), 10, TOLERANCE);
            full_at -= back;
            given += back;
        }
        assert_eq!((given, full_at), (10, 90));
        // The last one's too (moved to 90 by the third's shift).
        for _ in 0..50 {
            let back = debt_release(full_at, &mut ledger, 0, stamp(100, 0), 10, TOLERANCE);
            full_at -= back;
            given += back;
        }
        assert_eq!((given, full_at), (20, 80));
    }

    #[test]
    fn nothing_for_a_passed_end_a_later_end_or_another_incarnation() {
        let mut ledger = Shifts::default();
        assert_eq!(
            debt_release(50, &mut ledger, 40, stamp(40, 0), 10, TOLERANCE),
            0
        );
        assert_eq!(
            debt_release(50, &mut ledger, 10, stamp(60, 0), 10, TOLERANCE),
            0
        );
        assert_eq!(
            debt_release(50, &mut ledger, 10, stamp(30, 9), 10, TOLERANCE),
            0
        );
        assert!(ledger.is_empty());
    }

    #[test]
    fn a_reset_moves_every_end_before_now() {
        let mut ledger = Shifts::default();
        debt_reset(100, &mut ledger, 40, TOLERANCE);
        // Any stamp ending by the old end, with an older mark, is dead.
        assert_eq!(
            debt_release(45, &mut ledger, 40, stamp(100, 0), 99, TOLERANCE),
            0
        );
        let mut idle = Shifts::default();
        debt_reset(10, &mut idle, 40, TOLERANCE);
        assert!(idle.is_empty());
    }

    #[test]
    fn old_shifts_count_whole_and_expire() {
        let mut ledger = Shifts::default();
        for i in 0..(MAX_RECENT_SHIFTS as u64 + 1) {
            assert!(ledger.record(1_000 + i, 0, 1));
        }
        // The first shift is no longer kept one by one: it counts whole for
        // a receipt from before it, even one positioned before it.
        assert_eq!(ledger.moved(0, 1), Some((1, 1)));
        assert_eq!(ledger.moved(1, 1), Some((0, 0)));
        // A tolerance later, every admission before them has ended.
        ledger.expire(u64::MAX, TOLERANCE, TOLERANCE);
        assert!(ledger.recent().is_empty());
        assert_eq!(ledger.total(), MAX_RECENT_SHIFTS as u64 + 1);
    }

    #[test]
    fn a_ledger_at_its_ceiling_gives_nothing_back() {
        let mut ledger = Shifts::from_parts(LEDGER_CEILING - 5, Vec::new()).unwrap();
        let mark = LEDGER_CEILING - 5;
        // A shift it cannot record: nothing given.
        assert_eq!(
            debt_release(100, &mut ledger, 10, stamp(50, mark), 10, TOLERANCE),
            0
        );
        // Nor for the last admission: its shift cannot be recorded either.
        assert_eq!(
            debt_release(100, &mut ledger, 10, stamp(100, mark), 10, TOLERANCE),
            0
        );
        // A reset past it stops at it, and then nothing is given at all.
        debt_reset(90, &mut ledger, 10, TOLERANCE);
        assert_eq!(ledger.total(), LEDGER_CEILING);
        let mark = LEDGER_CEILING;
        assert_eq!(
            debt_release(10, &mut ledger, 5, stamp(10, mark), 10, TOLERANCE),
            0
        );
    }

    #[test]
    fn a_ledger_as_stored_is_checked() {
        let shift = |before| Shift {
            before,
            position: 1,
            at: 1,
        };
        assert!(Shifts::from_parts(10, vec![shift(2), shift(5)]).is_some());
        assert!(Shifts::from_parts(10, vec![shift(5), shift(5)]).is_none());
        assert!(Shifts::from_parts(5, vec![shift(5)]).is_none());
        assert!(Shifts::from_parts(LEDGER_CEILING + 1, vec![]).is_none());
    }
}
