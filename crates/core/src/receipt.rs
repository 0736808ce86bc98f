//! [`Receipt`]: what an admission took, handed back by the check that made
//! it, so that a refund or a settlement gives back only what the limiter can
//! prove that admission still holds.
//!
//! # Why a receipt, and not a number
//!
//! A refund that trusts a number the caller computes (how much to give, how
//! long the admission still weighs) can be wrong in ways no caller can see:
//! an admission's `reset_after` includes the debt of the admissions before
//! it, so once one of those is refunded, a later admission's figure
//! overstates what it still holds, and the refund hands out units that
//! belong to others. A receipt carries what the limiter itself wrote at the
//! check (a [`Stamp`]); the limiter decides from its own state and the
//! stamp, never from a duration.
//!
//! A receipt is taken by value and cannot be cloned: an admission is given
//! back at most once. It names its limiter: a receipt handed to another one
//! is [`Error::ForeignReceipt`](crate::Error::ForeignReceipt).
//!
//! # The rule, and why it holds
//!
//! Let *kept* be every admission, each with the cost it finally counts for
//! (its cost, less what a refund or settlement gave back), plus every extra
//! charge a settlement made, at the instant it was made. The promise: **at
//! every admission, the kept history up to that instant, replayed through the
//! algorithm from a fresh state with every charge forced, left room for it.**
//! So the kept units obey each algorithm's own bound (a bucket's
//! `burst + floor(t / T)` in any interval `t`, a window's limit per window),
//! whatever the order and delay of checks, peeks, refunds and settlements,
//! clock rewinds included. `crates/ratelab/tests/settle_bound.rs` checks it
//! against such a replay, in memory and on Redis (scripts and module).
//!
//! **Windows** (fixed window, sliding counter): the stamp is the admission's
//! window. A settlement gives units back from that window's count while the
//! window still counts (the current one; for the sliding counter, the
//! previous one too), never from another: the count then stays at least what
//! the kept admissions of that window add up to. **Sliding log**: the stamp
//! is the instant the admission was logged at; units leave the log only
//! from that instant (units of one instant are interchangeable), while they
//! are in the log.
//!
//! **Debts** (GCRA, token bucket, leaky meter and queue): each state has an
//! instant `F` at which it is full again (`full_at`), and an admission of
//! `cost` at `now` moves it to `max(F, now) + cost × T`. Read the admissions
//! as a schedule: each occupies `cost × T` of time, back to back, starting
//! no earlier than its instant, and `F` is where the schedule ends. Giving
//! back part of an admission that ends at `E` is safe as long as `E > now`:
//! nothing admitted after it found the schedule idle (their instants were all
//! before `E`), so everything after it moves earlier by exactly what is given
//! back, and `F` with it; the kept schedule ends where the state now says.
//! The stamp holds `E` as the check left it, and a *ledger* kept with the
//! state counts every shift a refund made to admissions other than the last
//! (the ones it moved). So `E` is at least the stamp's end less the ledger's
//! growth since the stamp, and a settlement gives back
//! `min(unused × T, that end − now)`: nothing once the admission's time has
//! passed. Giving back from the last admission (the state's `F` is its end)
//! moves nothing else and leaves the ledger alone. An extra charge is added
//! at the end of the schedule: it moves nothing either.
//!
//! **Keys forgotten and reset.** A key is forgotten (by the keyed store, or
//! by Redis expiring it) only when no receipt can still give anything back:
//! a debt whose ledger grew is kept until `F` plus the burst's time, past the
//! end of every admission it ever made; a reset (which must not let older
//! receipts take from what comes after) grows the ledger past every
//! outstanding end, or fences the windows, and is kept until then too.
//!
//! # Across a process boundary
//!
//! In Rust a receipt cannot be forged or used twice. A Redis script is sent
//! the stamp's numbers, and trusts them as it trusts every argument (a
//! caller that can send arbitrary arguments can as well write the key), but
//! bounds what they can do: a settlement never takes a key beyond full
//! capacity, never gives back more than `unused × T` (debts) or `unused`
//! units (windows), never gives back for a window that has ended, nothing
//! for an end that is later than the state's own (which is how a replayed
//! receipt of the last admission is recognised), and a replayed receipt of
//! an earlier admission gives back at most what remains of its end beyond
//! now, in all of its replays together: each one grows the ledger by what it
//! gave. A forged stamp can do at most what a reset of the key does.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a limiter wrote at an admission, for its refund or settlement: its
/// meaning is the algorithm's (see the [module docs](self)).
///
/// For the debts (GCRA, token bucket, leaky meter and queue), `at` is the
/// instant the key was full again right after the admission, µs, and `mark`
/// the ledger then. For the windows, `at` is the window's index (fixed
/// window, sliding counter) or the instant the units were logged at
/// (sliding log), and `mark` is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Stamp {
    /// An instant or a window index, as above.
    pub at: u64,
    /// The ledger at the admission (debts), or 0.
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
/// charged).
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

/// What a debt's settlement gives back, in µs of debt, for an admission
/// stamped `stamp` that would give back `unused` µs, on a state full again at
/// `full_at`, at `now` (never before the latest instant the key was written
/// at); grows `ledger` when the admission is not the last (see the
/// [module docs](self)). 0 for a stamp of another incarnation of the key (a
/// ledger behind it), an end that has passed, or an end later than the
/// state's (not an admission of this state: a replay).
#[inline]
pub fn debt_release(full_at: u64, ledger: &mut u64, now: u64, stamp: Stamp, unused: u64) -> u64 {
    if *ledger >= LEDGER_CEILING {
        return 0;
    }
    let Some(shifted) = ledger.checked_sub(stamp.mark) else {
        return 0;
    };
    // The admission's end now: moved earlier by every shift since, or less.
    let end = stamp.at.saturating_sub(shifted);
    if end <= now || end > full_at {
        return 0;
    }
    let back = unused.min(end - now);
    if end != full_at {
        // Not the last admission: those after it move back with it, which
        // the ledger must be able to record.
        if *ledger + back >= LEDGER_CEILING {
            return 0;
        }
        *ledger += back;
    }
    back
}

/// The most a debt's ledger grows to. A ledger that reaches it (a key reset
/// again and again while in debt, never idle long enough to be forgotten:
/// each reset grows the ledger by the debt it forgives) gives nothing back
/// to any receipt until the key is forgotten, rather than grow past what a
/// Redis script's numbers hold exactly (below 2^53). Giving nothing is
/// always safe.
pub const LEDGER_CEILING: u64 = 1 << 52;

/// The ledger of a debt after a reset at `now` of a state full again at
/// `full_at`: grown past the end of every admission still outstanding, so
/// that no receipt issued before gives anything back afterwards (see the
/// [module docs](self)). Unchanged when nothing can be outstanding.
#[inline]
pub fn debt_reset_ledger(full_at: u64, ledger: u64, now: u64) -> u64 {
    if ledger == 0 && full_at <= now {
        return 0;
    }
    ledger
        .saturating_add(full_at.saturating_sub(now))
        .saturating_add(1)
        .min(LEDGER_CEILING)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_goes_back_only_to_its_issuer() {
        let (a, b) = (Issuer::new(), Issuer::new());
        let receipt = a.issue(b"k", 2, Stamp { at: 5, mark: 0 });
        let receipt = b.redeem(receipt).expect_err("another issuer's");
        let redeemed = a.redeem(receipt).expect("its own");
        assert_eq!((&*redeemed.key, redeemed.cost), (&b"k"[..], 2));
    }

    #[test]
    fn the_last_admission_gives_back_without_a_shift() {
        let mut ledger = 0;
        // Ends at 30, the state's end: the last one.
        let back = debt_release(30, &mut ledger, 10, Stamp { at: 30, mark: 0 }, 10);
        assert_eq!((back, ledger), (10, 0));
        // Ends at 20 before a state ending at 30: those after it shift.
        let back = debt_release(30, &mut ledger, 10, Stamp { at: 20, mark: 0 }, 10);
        assert_eq!((back, ledger), (10, 10));
        // A stamp from before that shift ends 10 earlier now.
        let back = debt_release(20, &mut ledger, 10, Stamp { at: 25, mark: 0 }, 10);
        assert_eq!((back, ledger), (5, 15));
    }

    #[test]
    fn nothing_for_a_passed_end_a_later_end_or_another_incarnation() {
        let mut ledger = 7;
        assert_eq!(
            debt_release(50, &mut ledger, 40, Stamp { at: 40, mark: 7 }, 10),
            0
        );
        assert_eq!(
            debt_release(50, &mut ledger, 10, Stamp { at: 60, mark: 7 }, 10),
            0
        );
        assert_eq!(
            debt_release(50, &mut ledger, 10, Stamp { at: 30, mark: 9 }, 10),
            0
        );
        assert_eq!(ledger, 7);
    }

    #[test]
    fn a_ledger_at_its_ceiling_gives_nothing_back() {
        let mut ledger = LEDGER_CEILING - 5;
        // A shift it cannot record: nothing given.
        assert_eq!(
            debt_release(
                100,
                &mut ledger,
                10,
                Stamp {
                    at: 50,
                    mark: LEDGER_CEILING - 5
                },
                10
            ),
            0
        );
        assert_eq!(ledger, LEDGER_CEILING - 5);
        // The last admission moves nothing: still given.
        assert_eq!(
            debt_release(
                100,
                &mut ledger,
                10,
                Stamp {
                    at: 100,
                    mark: LEDGER_CEILING - 5
                },
                10
            ),
            10
        );
        // A reset past it stops at it, and then nothing is given at all.
        let mut ledger = debt_reset_ledger(90, ledger, 10);
        assert_eq!(ledger, LEDGER_CEILING);
        assert_eq!(
            debt_release(
                10,
                &mut ledger,
                5,
                Stamp {
                    at: 10,
                    mark: LEDGER_CEILING
                },
                10
            ),
            0
        );
    }

    #[test]
    fn a_reset_moves_every_end_before_now() {
        let ledger = debt_reset_ledger(100, 3, 40);
        let mut after = ledger;
        // Any stamp ending by the old end, with an older mark, is dead.
        assert_eq!(
            debt_release(45, &mut after, 40, Stamp { at: 100, mark: 3 }, 99),
            0
        );
        assert_eq!(debt_reset_ledger(10, 0, 40), 0);
    }
}
