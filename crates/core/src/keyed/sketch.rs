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

//!
//! **Growing into its memory.** The cells are reserved at once, but used
//! from a small prefix that grows by linear hashing: every decision splits
//! [`SPLITS_PER_DECISION`] cells, each into itself and a new cell that
//! starts as its copy (both have then seen every admission of every key
//! that was mapped to the old one, so each still over-counts its keys).
//! A flood therefore writes the reserved memory in address order, a page
//! at a time, at most one new page every few hundred decisions, instead of
//! faulting in pages at random on its first checks; and a small flood uses
//! few cells. While it grows, the sketch has at least
//! [`SPLITS_PER_DECISION`] cells per decision it has made. A row's width is
//! a power of two ([`row_width`]): linear hashing spreads keys evenly only
//! there; at any other width the cells it never split would each keep two
//! cells' share of keys for good, and saturate first.

use crate::algorithm::Algorithm;
use crate::{Decision, Error, Settlement};

/// The most rows a sketch may have.
pub(super) const MAX_DEPTH: usize = 8;

/// Cells per row in use when the sketch is made (fewer if the row has
/// fewer): a few pages.
const INITIAL_CELLS: usize = 4096;

/// Cells split per decision while the rows grow to their width.
const SPLITS_PER_DECISION: usize = 4;

pub(super) struct Sketch<S> {
    /// `depth` rows, each reserved for `width` cells, the first `active`
    /// of them in use.
    rows: Box<[Vec<S>]>,
    width: usize,
    depth: usize,
    /// Cells in use per row: `base <= active < 2 * base`, or `active ==
    /// width` once grown.
    active: usize,
    /// The power of two linear hashing splits from: a hash picks among
    /// `2 * base` cells, and one not in use yet falls back to its image
    /// among the first `base`.
    base: usize,
}

impl<S: Clone> Sketch<S> {
    /// `depth` rows of [`row_width`]`(width)` cells, each in the
    /// algorithm's initial state.
    pub(super) fn new<A: Algorithm<State = S>>(algorithm: &A, width: usize, depth: usize) -> Self {
        Self::of(&algorithm.initial_state(), width, depth)
    }

    /// [`Sketch::new`], every cell starting as `initial`.
    fn of(initial: &S, width: usize, depth: usize) -> Self {
        let (width, depth) = (row_width(width), depth.clamp(1, MAX_DEPTH));
        let active = width.min(INITIAL_CELLS);
        let rows = (0..depth)
            .map(|_| {
                let mut row = Vec::with_capacity(width);
                row.resize(active, initial.clone());
                row
            })
            .collect();
        Sketch {
            rows,
            width,
            depth,
            active,
            base: prev_power_of_two(active),
        }
    }

    /// Splits up to [`SPLITS_PER_DECISION`] cells of every row.
    #[inline]
    fn grow(&mut self) {
        for _ in 0..SPLITS_PER_DECISION {
            if self.active == self.width {
                return;
            }
            let from = self.active - self.base;
            for row in &mut *self.rows {
                let copy = row[from].clone();
                row.push(copy);
            }
            self.active += 1;
            if self.active == 2 * self.base {
                self.base *= 2;
            }
        }
    }

    /// The cell of row `row` for a key hashed to `hash`: `(row, index)`.
    #[inline]
    fn cell(&self, hash: u64, row: usize) -> (usize, usize) {
        // The shard was chosen from some of the hash's bits, which every key
        // here shares: mix them all before picking cells. Double hashing
        // (Kirsch and Mitzenmacher) gives each row its own independent-enough
        // index from one 64-bit mix.
        let mixed = mix(hash);
        let (a, b) = (mixed & 0xffff_ffff, (mixed >> 32) | 1);
        let h = mix(a.wrapping_add((row as u64).wrapping_mul(b)));
        // Fits: masked below 2 * base, a usize.
        let index = usize::try_from(h & (2 * self.base as u64 - 1)).unwrap_or_default();
        let index = if index < self.active {
            index
        } else {
            index & (self.base - 1)
        };
        (row, index)
    }

    #[inline]
    fn at(&self, (row, index): (usize, usize)) -> &S {
        &self.rows[row][index]
    }

    #[inline]
    fn at_mut(&mut self, (row, index): (usize, usize)) -> &mut S {
        &mut self.rows[row][index]
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
            .map(|row| self.at(self.cell(hash, row)))
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
        // A copy of exactly this key's cells, one per row: with one cell
        // per row, its own cell choice maps row r to cell 0 of row r.
        let mut copy = Sketch {
            rows: (0..self.depth)
                .map(|row| vec![self.at(self.cell(hash, row)).clone()])
                .collect(),
            width: 1,
            depth: self.depth,
            active: 1,
            base: 1,
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
        // Splitting first: a key moved to a new cell finds there a copy of
        // its old one, so it is decided as a peek now would decide it.
        self.grow();
        if self.depth == 1 {
            let cell = self.cell(hash, 0);
            // A refusal leaves the state as it was (the algorithm contract).
            return algorithm.decide(self.at_mut(cell), now, cost);
        }
        // First on copies: a refusal by any cell must change none.
        let mut combined: Option<Decision> = None;
        for row in 0..self.depth {
            let mut state = self.at(self.cell(hash, row)).clone();
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
                algorithm.decide(self.at_mut(cell), now, cost)?;
            }
        } else {
            // Nothing was charged: what remains, and when the key is full,
            // is what the cells say now, not what the admitting ones would
            // have said after admitting.
            combined.remaining = u64::MAX;
            combined.reset_after_micros = 0;
            for row in 0..self.depth {
                let mut state = self.at(self.cell(hash, row)).clone();
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
                self.at_mut(cell),
                &mut A::Ledger::default(),
                now,
                settlement,
            )?;
        }
        Ok(())
    }
}

impl<S> Sketch<S> {
    /// Heap bytes reserved for the cells (not what a state may own): every
    /// row at its width, though only the cells in use are written.
    pub(super) fn bytes(&self) -> usize {
        self.rows
            .iter()
            .map(|row| row.capacity() * size_of::<S>())
            .sum()
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

/// The cells a row of at most `cells` has: the largest power of two no
/// greater (1 for 0), the widths at which every cell takes an equal share of
/// keys.
pub(super) fn row_width(cells: usize) -> usize {
    prev_power_of_two(cells)
}

/// The largest power of two no greater than `n` (1 for 0).
fn prev_power_of_two(n: usize) -> usize {
    if n <= 1 {
        1
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Widths asked for at and off powers of two, below and above
    /// [`INITIAL_CELLS`] (grown by splits).
    const WIDTHS: [usize; 7] = [1, 100, 1024, 1600, 2200, 5000, 9000];

    #[test]
    fn a_grown_sketch_spreads_keys_evenly_over_every_cell() {
        const KEYS_PER_CELL: usize = 400;
        for asked in WIDTHS {
            for depth in [1, 2] {
                let mut sketch = Sketch::of(&0u32, asked, depth);
                while sketch.active < sketch.width {
                    sketch.grow();
                }
                let width = sketch.width;
                assert!(
                    width <= asked.max(1) && 2 * width > asked,
                    "{asked}: {width}"
                );
                assert_eq!(sketch.bytes(), width * depth * size_of::<u32>());
                let mut hash = asked as u64;
                for _ in 0..width * KEYS_PER_CELL {
                    hash = mix(hash.wrapping_add(0x9e37_79b9_7f4a_7c15));
                    for row in 0..depth {
                        let cell = sketch.cell(hash, row);
                        *sketch.at_mut(cell) += 1;
                    }
                }
                // Binomial around 400: 20 per standard deviation, so 160
                // either way is 8 of them; a cell left unsplit takes 800.
                for (row, cells) in sketch.rows.iter().enumerate() {
                    assert_eq!(cells.len(), width);
                    for (index, &keys) in cells.iter().enumerate() {
                        assert!(
                            (240..=560).contains(&(keys as usize)),
                            "width {asked} (rows of {width}), depth {depth}: cell {index} of row {row} has {keys} keys"
                        );
                    }
                }
            }
        }
    }
}
