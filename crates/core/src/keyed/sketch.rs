//! [`Sketch`]: a fixed number of shared algorithm states that decide, with
//! no memory of their own, for the keys a full table has no room for.
//!
//! Each key maps to `depth` cells (one per row) by its hash. A request passes
//! only if every one of its cells would admit it, and then it is charged to
//! all of them; a refusal changes no cell. So each cell has run the
//! algorithm, unmodified, on a sequence of admissions that contains every
//! admission of every key mapped to it: a cell's state is always at least as
//! indebted as any of its keys would be on its own, and since the algorithm
//! never lets a state exceed its bound, no key can either. Sharing can only
//! over-count: it may refuse an innocent key whose cell a heavy one also
//! uses, never admit one past its bound.
//!
//! Why "every cell" and not count-min's "least indebted cell": charging a
//! cell that would refuse would mean forcing a request through the
//! algorithm, which [`Algorithm`] cannot express for every algorithm; each
//! extra row is therefore one more cell that may refuse, and the default
//! depth is 1.

use crate::algorithm::Algorithm;
use crate::{Decision, Error, Settlement};

/// The most rows a sketch may have.
pub(super) const MAX_DEPTH: usize = 8;

pub(super) struct Sketch<S> {
    cells: Box<[S]>,
    width: usize,
    depth: usize,
}

impl<S: Clone> Sketch<S> {
    /// `depth` rows of `width` cells, each in the algorithm's initial state.
    pub(super) fn new<A: Algorithm<State = S>>(algorithm: &A, width: usize, depth: usize) -> Self {
        let (width, depth) = (width.max(1), depth.clamp(1, MAX_DEPTH));
        Sketch {
            cells: vec![algorithm.initial_state(); width * depth].into_boxed_slice(),
            width,
            depth,
        }
    }

    /// The cell of row `row` for a key hashed to `hash`.
    #[inline]
    fn cell(&self, hash: u64, row: usize) -> usize {
        // The shard was chosen from some of the hash's bits, which every key
        // here shares: mix them all before picking cells. Double hashing
        // (Kirsch and Mitzenmacher) gives each row its own independent-enough
        // index from one 64-bit mix.
        let mixed = mix(hash);
        let (a, b) = (mixed & 0xffff_ffff, (mixed >> 32) | 1);
        let index = a.wrapping_add((row as u64).wrapping_mul(b)) % self.width as u64;
        // Fits: index < width, a usize.
        row * self.width + usize::try_from(index).unwrap_or_default()
    }

    /// The state a key should start from if it now gets a slot of its own:
    /// its least indebted cell (every cell has seen all its admissions, so
    /// any one is a safe start), or `None` if that cell is full already.
    pub(super) fn seed<A: Algorithm<State = S>>(
        &self,
        algorithm: &A,
        hash: u64,
        now: u64,
    ) -> Option<S> {
        let cell = (0..self.depth)
            .map(|row| &self.cells[self.cell(hash, row)])
            .min_by_key(|state| algorithm.full_at(state))?;
        (algorithm.full_at(cell) > now).then(|| cell.clone())
    }

    /// What [`Sketch::decide`] would answer, on copies: nothing is charged.
    pub(super) fn peek<A: Algorithm<State = S>>(
        &self,
        algorithm: &A,
        hash: u64,
        now: u64,
        cost: u32,
    ) -> Result<Decision, Error> {
        // A copy of exactly this key's cells, one per row: with a width of
        // one, its own cell choice maps row r to cell r.
        let mut copy = Sketch {
            cells: (0..self.depth)
                .map(|row| self.cells[self.cell(hash, row)].clone())
                .collect(),
            width: 1,
            depth: self.depth,
        };
        copy.decide(algorithm, hash, now, cost)
    }

    /// Decides a request of `cost` at `now` for the key hashed to `hash`.
    pub(super) fn decide<A: Algorithm<State = S>>(
        &mut self,
        algorithm: &A,
        hash: u64,
        now: u64,
        cost: u32,
    ) -> Result<Decision, Error> {
        if self.depth == 1 {
            let cell = self.cell(hash, 0);
            // A refusal leaves the state as it was (the algorithm contract).
            return algorithm.decide(&mut self.cells[cell], now, cost);
        }
        // First on copies: a refusal by any cell must change none.
        let mut combined: Option<Decision> = None;
        for row in 0..self.depth {
            let mut state = self.cells[self.cell(hash, row)].clone();
            let decision = algorithm.decide(&mut state, now, cost)?;
            combined = Some(match combined {
                None => decision,
                Some(so_far) => strictest(so_far, decision),
            });
        }
        let mut combined = combined.expect("at least one row");
        if combined.allowed {
            for row in 0..self.depth {
                let cell = self.cell(hash, row);
                // Deterministic: admits again, as it did on the copy.
                algorithm.decide(&mut self.cells[cell], now, cost)?;
            }
        } else {
            // Nothing was charged: what remains, and when the key is full,
            // is what the cells say now, not what the admitting ones would
            // have said after admitting.
            combined.remaining = u64::MAX;
            combined.reset_after_micros = 0;
            for row in 0..self.depth {
                let mut state = self.cells[self.cell(hash, row)].clone();
                let peek = algorithm.decide(&mut state, now, 0)?;
                combined.remaining = combined.remaining.min(peek.remaining);
                combined.reset_after_micros =
                    combined.reset_after_micros.max(peek.reset_after_micros);
            }
        }
        Ok(combined)
    }
}

impl<S: Clone> Sketch<S> {
    /// Charges `settlement` (a charge beyond an admission's cost: see
    /// [`Settlement::charge`]) to every cell of the key hashed to `hash`,
    /// whatever their room: each cell then still holds every unit charged
    /// to each of its keys.
    pub(super) fn charge<A: Algorithm<State = S>>(
        &mut self,
        algorithm: &A,
        hash: u64,
        now: u64,
        settlement: Settlement,
    ) -> Result<(), Error> {
        for row in 0..self.depth {
            let cell = self.cell(hash, row);
            // Cells have no ledger: they are never given anything back.
            algorithm.settle(
                &mut self.cells[cell],
                &mut A::Ledger::default(),
                now,
                settlement,
            )?;
        }
        Ok(())
    }
}

impl<S> Sketch<S> {
    /// Heap bytes held by the cells themselves (not by what a state may own).
    pub(super) fn bytes(&self) -> usize {
        size_of_val(&*self.cells)
    }
}

/// What a key whose cells answered `a` and `b` is told: admitted only if both
/// admit, and every figure the least favourable of the two.
fn strictest(a: Decision, b: Decision) -> Decision {
    let mut d = a;
    d.allowed = a.allowed && b.allowed;
    d.remaining = a.remaining.min(b.remaining);
    d.reset_after_micros = a.reset_after_micros.max(b.reset_after_micros);
    // The retry passes once every cell lets it through (an admitting cell
    // says zero).
    d.retry_after_micros = a.retry_after_micros.max(b.retry_after_micros);
    // A queue slot no earlier than any cell's: the spacing every cell keeps
    // between its slots is kept between this key's. A refusal has no slot.
    d.delay_micros = if d.allowed {
        a.delay_micros.max(b.delay_micros)
    } else {
        0
    };
    d
}

/// The splitmix64 finaliser: every output bit depends on every input bit.
#[inline]
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
