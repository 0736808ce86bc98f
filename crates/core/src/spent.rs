//! [`Spent`]: a window's ledger (fixed window, sliding log, sliding
//! counter), so that each admission's units are given back once at most,
//! however often its stamp is settled.
//!
//! A window's stamp names its window (or, for the sliding log, its instant)
//! in `at`, and the admission in `mark`: the units counted at `at` right
//! after it plus the units given back there before it. Units counted at one
//! `at` only grow by admissions and extra charges, and a give-back counts in
//! the tally as much as it takes from the count, so the mark grows with
//! every admission: no two admissions at one `at` share a stamp. The ledger
//! lists the stamps it settled; a stamp listed, or at or below its floor
//! (where those it could no longer list went), gives nothing back again.
//!
//! ```
//! use ratelab_core::toolkit::{Spent, Stamp};
//!
//! let mut spent = Spent::default();
//! // Two admissions of 2 in window 7: marks 2 and 4.
//! let (first, second) = (Stamp { at: 7, mark: 2 }, Stamp { at: 7, mark: 4 });
//! assert!(spent.take(first, 4));
//! spent.gave(7, 2);
//! // Settled again: nothing.
//! assert!(!spent.take(first, 2));
//! // The next admission in window 7, counted at 2 + 2: mark 2 + 2 + 2.
//! assert_eq!(spent.mark(7, 4), 6);
//! assert!(spent.take(second, 2));
//! ```

use crate::{Ledger, Stamp};

/// The most stamps a window's ledger lists one by one: the oldest one goes
/// under the floor when another is settled (stamps at or below the floor
/// give nothing back: less, never more).
pub const MAX_SETTLED: usize = 64;

/// The most windows or instants a window's ledger tallies the units given
/// back at: past it, the oldest tally goes, and every stamp at or before
/// its window or instant goes under the floor.
pub const MAX_GIVEN: usize = 64;

/// The largest mark a stamp holds (2^53 − 1, exact in a script's doubles):
/// a floor at `(at, MAX_MARK)` covers every stamp at `at`.
pub const MAX_MARK: u64 = (1 << 53) - 1;

/// A window's ledger: the fence a reset set, the units given back at each
/// window or instant admissions are still stamped at, and the stamps it
/// settled.
///
/// A window's stamp names its window (or, for the sliding log, its instant)
/// in `at`, and the admission in `mark`: the units counted at `at` right
/// after it plus the units given back there before it. Units counted at one
/// `at` only grow by admissions and extra charges, and a give-back counts in
/// the tally as much as it takes from the count, so the mark grows with
/// every admission: no two admissions at one `at` share a stamp. The ledger
/// lists the stamps it settled; a stamp listed, or at or below its floor
/// (where those it could no longer list went), gives nothing back again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Spent {
    fence: u64,
    floor: Stamp,
    given: Vec<(u64, u64)>,
    settled: Vec<Stamp>,
}

impl Spent {
    /// A ledger of `fence` only, as a key with no settlement holds it.
    #[inline]
    pub const fn fenced(fence: u64) -> Self {
        Spent {
            fence,
            floor: Stamp { at: 0, mark: 0 },
            given: Vec::new(),
            settled: Vec::new(),
        }
    }

    /// A ledger as stored: `None` unless `given` is in increasing order of
    /// `at`, each with units, at most [`MAX_GIVEN`] of them, and `settled`
    /// in increasing order, above `floor`, at most [`MAX_SETTLED`], every
    /// number at most [`MAX_MARK`].
    pub fn from_parts(
        fence: u64,
        floor: Stamp,
        given: Vec<(u64, u64)>,
        settled: Vec<Stamp>,
    ) -> Option<Self> {
        let exact = |n: u64| n <= MAX_MARK;
        let given_ok = given.len() <= MAX_GIVEN
            && given
                .iter()
                .all(|&(at, units)| units > 0 && exact(at) && exact(units))
            && given.windows(2).all(|w| w[0].0 < w[1].0);
        let settled_ok = settled.len() <= MAX_SETTLED
            && settled
                .iter()
                .all(|s| exact(s.at) && exact(s.mark) && key(*s) > key(floor))
            && settled.windows(2).all(|w| key(w[0]) < key(w[1]));
        (given_ok && settled_ok && exact(floor.at) && exact(floor.mark) && exact(fence)).then_some(
            Spent {
                fence,
                floor,
                given,
                settled,
            },
        )
    }

    /// The first window index (or logged instant) whose receipts may give
    /// back: a reset's fence; 0 for none.
    #[inline]
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Sets the fence (a reset).
    #[inline]
    pub fn set_fence(&mut self, fence: u64) {
        self.fence = fence;
    }

    /// Stamps at or below it give nothing back.
    #[inline]
    pub fn floor(&self) -> Stamp {
        self.floor
    }

    /// `(at, units)`: the units given back at each window or instant, in
    /// increasing order of `at`.
    #[inline]
    pub fn given(&self) -> &[(u64, u64)] {
        &self.given
    }

    /// The stamps settled, in increasing order.
    #[inline]
    pub fn settled(&self) -> &[Stamp] {
        &self.settled
    }

    /// Nothing but (perhaps) a fence: what a key with no settlement holds,
    /// stored without a tail.
    #[inline]
    pub fn has_tail(&self) -> bool {
        self.floor != Stamp::default() || !self.given.is_empty() || !self.settled.is_empty()
    }

    /// The units given back at `at`.
    #[inline]
    pub fn given_at(&self, at: u64) -> u64 {
        self.given
            .binary_search_by_key(&at, |&(a, _)| a)
            .map_or(0, |i| self.given[i].1)
    }

    /// The mark of an admission that leaves `counted` units at `at`.
    #[inline]
    pub fn mark(&self, at: u64, counted: u64) -> u64 {
        counted + self.given_at(at)
    }

    /// Takes `stamp` for a settlement that gives back, where `counted`
    /// units are counted at its `at`: true, and listed as settled, if it
    /// may give back (a mark an admission there has had, above the floor,
    /// never settled); false, and nothing changes, otherwise. The caller
    /// checks the fence and the window.
    pub fn take(&mut self, stamp: Stamp, counted: u64) -> bool {
        if stamp.mark == 0
            || stamp.mark > self.mark(stamp.at, counted)
            || key(stamp) <= key(self.floor)
        {
            return false;
        }
        let Err(i) = self.settled.binary_search_by_key(&key(stamp), |&s| key(s)) else {
            return false;
        };
        self.settled.insert(i, stamp);
        if self.settled.len() > MAX_SETTLED {
            let oldest = self.settled.remove(0);
            self.raise_floor(oldest);
        }
        true
    }

    /// Tallies `units` given back at `at`.
    pub fn gave(&mut self, at: u64, units: u64) {
        if units == 0 {
            return;
        }
        match self.given.binary_search_by_key(&at, |&(a, _)| a) {
            Ok(i) => self.given[i].1 += units,
            Err(i) => {
                self.given.insert(i, (at, units));
                if self.given.len() > MAX_GIVEN {
                    let (oldest, _) = self.given.remove(0);
                    // Its admissions' marks are no longer known: none of
                    // its stamps (nor any before it) gives back again.
                    self.raise_floor(Stamp {
                        at: oldest,
                        mark: MAX_MARK,
                    });
                }
            }
        }
    }

    /// Forgets what concerns windows or instants before `live`: their
    /// receipts give nothing back any more, nor are admissions stamped
    /// there.
    pub fn expire(&mut self, live: u64) {
        self.settled.retain(|s| s.at >= live);
        self.given.retain(|&(at, _)| at >= live);
        if self.floor.at < live {
            self.floor = Stamp::default();
        }
    }

    /// The latest window index or instant it holds anything for (tallies,
    /// settled stamps, its floor), if any: the key is kept until that one's
    /// receipts can give nothing back.
    pub fn latest(&self) -> Option<u64> {
        let given = self.given.last().map(|&(at, _)| at);
        let settled = self.settled.last().map(|s| s.at);
        let floor = (self.floor != Stamp::default()).then_some(self.floor.at);
        given.max(settled).max(floor)
    }

    fn raise_floor(&mut self, to: Stamp) {
        if key(to) > key(self.floor) {
            self.floor = to;
            let floor = key(to);
            self.settled.retain(|s| key(*s) > floor);
        }
    }
}

/// A stamp's order: by `at`, then `mark`.
#[inline]
fn key(stamp: Stamp) -> (u64, u64) {
    (stamp.at, stamp.mark)
}

impl Ledger for Spent {
    #[inline]
    fn is_empty(&self) -> bool {
        self.fence == 0 && !self.has_tail()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(at: u64, mark: u64) -> Stamp {
        Stamp { at, mark }
    }

    #[test]
    fn a_stamp_is_taken_once() {
        let mut spent = Spent::default();
        assert!(spent.take(stamp(3, 1), 1));
        assert!(!spent.take(stamp(3, 1), 1));
        assert!(spent.take(stamp(3, 2), 2));
    }

    #[test]
    fn marks_never_issued_are_refused() {
        let mut spent = Spent::default();
        // Nothing counted at 3 and nothing given there: no mark issued.
        assert!(!spent.take(stamp(3, 1), 0));
        assert!(!spent.take(stamp(3, 0), 5));
        // Two counted, one given back: marks up to 3.
        spent.gave(3, 1);
        assert!(spent.take(stamp(3, 3), 2));
        assert!(!spent.take(stamp(3, 4), 2));
    }

    #[test]
    fn the_oldest_settled_go_under_the_floor() {
        let mut spent = Spent::default();
        for mark in 1..=(MAX_SETTLED as u64 + 1) {
            assert!(spent.take(stamp(1, mark), MAX_MARK));
        }
        assert_eq!(spent.settled().len(), MAX_SETTLED);
        assert_eq!(spent.floor(), stamp(1, 1));
        assert!(!spent.take(stamp(0, 9), MAX_MARK), "below the floor");
        assert!(spent.take(stamp(1, 100), MAX_MARK));
    }

    #[test]
    fn a_tally_that_goes_takes_its_stamps_under_the_floor() {
        let mut spent = Spent::default();
        for at in 0..=(MAX_GIVEN as u64) {
            spent.gave(at, 1);
        }
        assert_eq!(spent.given().len(), MAX_GIVEN);
        assert_eq!(spent.floor(), stamp(0, MAX_MARK));
        assert!(!spent.take(stamp(0, 1), 5));
        assert!(spent.take(stamp(1, 1), 5));
    }

    #[test]
    fn expiry_forgets_what_cannot_give_back() {
        let mut spent = Spent::fenced(2);
        spent.gave(4, 2);
        assert!(spent.take(stamp(4, 1), 3));
        assert!(spent.take(stamp(5, 1), 1));
        assert_eq!(spent.latest(), Some(5));
        spent.expire(5);
        assert_eq!(
            (spent.given(), spent.settled()),
            (&[][..], &[stamp(5, 1)][..])
        );
        spent.expire(6);
        assert!(!spent.has_tail());
        assert!(!spent.is_empty(), "the fence stays");
        assert_eq!(spent.latest(), None);
    }

    #[test]
    fn a_ledger_as_stored_is_checked() {
        let ok = Spent::from_parts(0, stamp(1, 1), vec![(1, 2), (3, 1)], vec![stamp(1, 2)]);
        assert!(ok.is_some());
        assert!(Spent::from_parts(0, stamp(1, 2), vec![], vec![stamp(1, 2)]).is_none());
        assert!(Spent::from_parts(0, stamp(0, 0), vec![(3, 1), (1, 1)], vec![]).is_none());
        assert!(Spent::from_parts(0, stamp(0, 0), vec![(3, 0)], vec![]).is_none());
        assert!(
            Spent::from_parts(0, stamp(0, 0), vec![], vec![stamp(2, 1), stamp(1, 1)]).is_none()
        );
        assert!(Spent::from_parts(0, stamp(0, 0), vec![], vec![stamp(1, MAX_MARK + 1)]).is_none());
    }
}
