//! [`Shard`]: one lock's worth of keys, with an expiry-ordered index so that
//! finding a key to forget never scans the table.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

use super::sketch::Sketch;
use crate::algorithm::Algorithm;
use crate::{Ledger, Stamp};

/// One tracked key.
///
/// Its hash is not stored: a `u64` key and a GCRA state then make a 16-byte
/// entry (four to a cache line, none straddling two), where a stored hash
/// made 24. A lookup is one cache miss on the entry either way; the smaller
/// table misses less. A resize and the expiry index hash a key again
/// ([`Shard::hash_of`]): rare, and O(1) each.
pub(super) struct Entry<K, S> {
    pub(super) key: K,
    pub(super) state: S,
}

/// A record of the expiry index: a key with this hash was last known to be
/// back to full capacity at this instant.
type Due = Reverse<(u64, u64)>;

/// Stale records re-filed one by one, as a share of the table (1 / this),
/// before the index is rebuilt from the table at once instead.
const REBUILD_AFTER_SHARE: usize = 8;

pub(super) struct Shard<K, S, L> {
    pub(super) table: HashTable<Entry<K, S>>,
    /// A min-heap of `(due, hash)`, at least one record per entry, each
    /// entry's earliest record no later than the instant it may be
    /// forgotten ([`Algorithm::forgettable_at`], its `full_at` unless a
    /// settlement or a reset wrote it a ledger).
    ///
    /// A record may be stale: that instant grows as a key is charged, and the
    /// record is not updated on every charge (that would cost a heap update
    /// per check). A stale record found due is pushed again with the key's
    /// current instant, so each charge costs at most one later heap
    /// operation: amortised O(log n) per check, and never a scan. A
    /// settlement, the one change that lowers it, files one more record,
    /// and a forgotten key leaves its record behind with no key: extra
    /// records that [`Shard::compact`] drops once they outnumber the
    /// entries.
    ///
    /// Keys filed together come due together, most of them still owing (a
    /// busy key's `full_at` runs ahead of its record): re-filing each is a
    /// heap pop and push, cache misses all the way down a large heap (about
    /// a microsecond at a million keys). After `1 / REBUILD_AFTER_SHARE` of
    /// the table's worth of re-files the index is rebuilt from the table
    /// instead ([`Shard::rebuild`], O(n) in one sequential pass, and every
    /// record then exact): amortised O(1) per re-file, and a wave of stale
    /// records costs an eighth of the heap operations it did.
    expiry: BinaryHeap<Due>,
    /// Stale records re-filed since the index was last rebuilt.
    refiled: usize,
    /// The latest instant this shard has decided at: time never goes back
    /// here.
    pub(super) latest: u64,
    /// The most keys this shard tracks.
    pub(super) capacity: usize,
    /// Shared cells for keys the table has no room for; allocated the first
    /// time the table is full (under the sketch flood policy).
    pub(super) sketch: Option<Sketch<S>>,
    /// The keys a receipt was issued for, by hash, with their ledger
    /// ([`Algorithm::settle`]; empty until a settlement or a reset writes
    /// one): `(hash, ledger)`. Most keys never have a receipt, so this is
    /// kept here rather than in every entry. Two keys of one hash (a 64-bit
    /// collision within the shard) share one ledger: each then also counts
    /// the other's shifts and fences, which only gives back less. A record
    /// lives as long as an entry of its hash.
    ledgers: HashTable<(u64, L)>,
    /// The ledger of a key without a record.
    empty: L,
    /// The limiter's hasher (the same seed): a key's hash here is the hash
    /// its lookups use.
    hasher: foldhash::fast::SeedableRandomState,
}

impl<K: Hash, S, L: Ledger> Shard<K, S, L> {
    pub(super) fn new(capacity: usize, hasher: foldhash::fast::SeedableRandomState) -> Self {
        Shard {
            table: HashTable::new(),
            expiry: BinaryHeap::new(),
            refiled: 0,
            latest: 0,
            capacity,
            sketch: None,
            ledgers: HashTable::new(),
            empty: L::default(),
            hasher,
        }
    }

    /// The hash `key` is looked up by.
    #[inline]
    fn hash_of(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// `now` as this shard sees it: never before an instant it has already
    /// decided at. Records it.
    #[inline]
    pub(super) fn advance(&mut self, now: u64) -> u64 {
        // Written only when time moved: with two threads on one shard, an
        // unconditional store would move the shard's cache line between
        // their cores on every check.
        if now > self.latest {
            self.latest = now;
        }
        self.latest
    }

    /// Whether the table is at its bound.
    #[inline]
    pub(super) fn is_full(&self) -> bool {
        self.table.len() >= self.capacity
    }

    /// Stores a new key, with its record in the expiry index.
    pub(super) fn insert<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        hash: u64,
        key: K,
        state: S,
    ) {
        let due = algorithm.forgettable_at(&state, self.ledger_of(hash));
        self.expiry.push(Reverse((due, hash)));
        let hasher = &self.hasher;
        self.table
            .insert_unique(hash, Entry { key, state }, |e| hasher.hash_one(&e.key));
    }

    /// Files a record for the key with this hash, whose forgettable instant
    /// went down (a settlement): its old record would say it is due later
    /// than it is.
    pub(super) fn refile<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        full_at: u64,
        hash: u64,
    ) {
        self.expiry.push(Reverse((full_at, hash)));
        self.compact(algorithm);
    }

    /// Forgets the key `is_key` recognises, if it is tracked; its record is
    /// left behind, dropped when due or by [`Shard::compact`].
    pub(super) fn remove<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        hash: u64,
        is_key: impl Fn(&Entry<K, S>) -> bool,
    ) {
        if let Ok(entry) = self.table.find_entry(hash, is_key) {
            entry.remove();
            self.drop_ledger(hash);
            self.compact(algorithm);
        }
    }

    /// The ledger of the key with this hash: empty unless a receipt was
    /// issued for it.
    #[inline]
    pub(super) fn ledger_of(&self, hash: u64) -> &L {
        if self.ledgers.is_empty() {
            return &self.empty;
        }
        self.ledgers
            .find(hash, |(h, _)| *h == hash)
            .map_or(&self.empty, |(_, ledger)| ledger)
    }

    /// The key with this hash, if tracked, with its ledger (a record made
    /// for it if it had none).
    pub(super) fn entry_and_ledger(
        &mut self,
        hash: u64,
        is_key: impl Fn(&K) -> bool,
    ) -> Option<(&mut Entry<K, S>, &mut L)> {
        self.table.find(hash, |e| is_key(&e.key))?;
        self.mark_receipt(hash);
        let entry = self.table.find_mut(hash, |e| is_key(&e.key))?;
        let (_, ledger) = self.ledgers.find_mut(hash, |(h, _)| *h == hash)?;
        Some((entry, ledger))
    }

    /// What the tracked key `is_key` recognises leaves for a receipt of the
    /// admission just decided on its state ([`Algorithm::stamp`]); notes
    /// that it has receipts.
    pub(super) fn stamp<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        hash: u64,
        is_key: impl Fn(&K) -> bool,
        now: u64,
    ) -> Option<Stamp> {
        self.mark_receipt(hash);
        let ledger = self
            .ledgers
            .find(hash, |(h, _)| *h == hash)
            .map_or(&self.empty, |(_, ledger)| ledger);
        let entry = self.table.find(hash, |e| is_key(&e.key))?;
        Some(algorithm.stamp(&entry.state, ledger, now))
    }

    /// Notes that a receipt was issued for the key with this hash.
    #[inline]
    pub(super) fn mark_receipt(&mut self, hash: u64) {
        if self.ledgers.find(hash, |(h, _)| *h == hash).is_none() {
            self.ledgers
                .insert_unique(hash, (hash, L::default()), |(h, _)| *h);
        }
    }

    /// A receipt was issued for the key with this hash (or one of its hash)
    /// since it was last forgotten.
    #[inline]
    pub(super) fn has_receipts(&self, hash: u64) -> bool {
        !self.ledgers.is_empty() && self.ledgers.find(hash, |(h, _)| *h == hash).is_some()
    }

    /// Drops the ledger of a key forgotten with this hash, unless another
    /// key of the same hash is still tracked.
    fn drop_ledger(&mut self, hash: u64) {
        if self.ledgers.is_empty() || self.tracks_hash(hash) {
            return;
        }
        if let Ok(record) = self.ledgers.find_entry(hash, |(h, _)| *h == hash) {
            record.remove();
        }
    }

    /// Some entry with exactly this hash is tracked.
    fn tracks_hash(&self, hash: u64) -> bool {
        self.table
            .iter_hash(hash)
            .any(|e| self.hash_of(&e.key) == hash)
    }

    /// Rebuilds the index from the table, one exact record per entry, when
    /// extra records (from refunds and resets) make it more than twice the
    /// table: an O(n) rebuild paid for by the n extra records before it, and
    /// the index stays within the bound
    /// [`Keyed::memory_bound_bytes`](super::Keyed::memory_bound_bytes)
    /// counts.
    fn compact<A: Algorithm<State = S, Ledger = L>>(&mut self, algorithm: &A) {
        if self.expiry.len() <= 2 * self.table.len() + 4 {
            return;
        }
        self.rebuild(algorithm);
    }

    /// The index from the table: one exact record per entry, in the index's
    /// own allocation (never more than it already holds).
    fn rebuild<A: Algorithm<State = S, Ledger = L>>(&mut self, algorithm: &A) {
        let mut records = std::mem::take(&mut self.expiry).into_vec();
        records.clear();
        records.extend(self.table.iter().map(|e| {
            let hash = self.hash_of(&e.key);
            Reverse((
                algorithm.forgettable_at(&e.state, self.ledger_of(hash)),
                hash,
            ))
        }));
        self.expiry = BinaryHeap::from(records);
        self.refiled = 0;
    }

    /// Looks at the earliest record, if it is due at `now`: forgets its key
    /// if that key is back to full capacity (returns true), else files the
    /// record again under the key's current instant. `None` when no record
    /// is due.
    fn pop_due<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        now: u64,
    ) -> Option<bool> {
        let &Reverse((due, hash)) = self.expiry.peek()?;
        if due > now {
            return None;
        }
        self.expiry.pop();
        let hasher = &self.hasher;
        let ledger = self
            .ledgers
            .find(hash, |(h, _)| *h == hash)
            .map_or(&self.empty, |(_, ledger)| ledger);
        let forgettable = |e: &Entry<K, S>| {
            algorithm.forgettable_at(&e.state, ledger) <= now && hasher.hash_one(&e.key) == hash
        };
        if let Ok(entry) = self.table.find_entry(hash, forgettable) {
            entry.remove();
            self.drop_ledger(hash);
            return Some(true);
        }
        // Every key with this hash still owes: re-file under the earliest
        // of their current instants (more than one only on a 64-bit hash
        // collision within the shard), or rebuild the whole index once
        // re-files one at a time have cost enough to pay for it.
        self.refiled += 1;
        if self.refiled > self.table.len() / REBUILD_AFTER_SHARE + 16 {
            self.rebuild(algorithm);
        } else if let Some(full_at) = self.earliest_with_hash(algorithm, hash) {
            self.expiry.push(Reverse((full_at, hash)));
        }
        Some(false)
    }

    fn earliest_with_hash<A: Algorithm<State = S, Ledger = L>>(
        &self,
        algorithm: &A,
        hash: u64,
    ) -> Option<u64> {
        let ledger = self.ledger_of(hash);
        self.table
            .iter_hash(hash)
            .filter(|e| self.hash_of(&e.key) == hash)
            .map(|e| algorithm.forgettable_at(&e.state, ledger))
            .min()
    }

    /// Forgets keys no receipt can use any more at `now`, looking at no
    /// more than `budget` due records: the upkeep every check pays, a
    /// bounded cost. It stops at a record of `spare`'s hash (the key the
    /// check is about): that key is decided from its own state, which a peek
    /// at the same instant, forgetting nothing, sees too.
    pub(super) fn forget_due<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        now: u64,
        budget: usize,
        spare: Option<u64>,
    ) {
        for _ in 0..budget {
            if let (Some(spare), Some(Reverse((_, hash)))) = (spare, self.expiry.peek())
                && spare == *hash
            {
                return;
            }
            if self.pop_due(algorithm, now).is_none() {
                return;
            }
        }
    }

    /// Frees one slot if any key is back to full capacity at `now`. Each
    /// record looked at is either forgotten or re-filed later than `now`, so
    /// the work is paid for by earlier charges: amortised O(log n).
    pub(super) fn make_room<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        now: u64,
    ) -> bool {
        while let Some(forgot) = self.pop_due(algorithm, now) {
            if forgot {
                return true;
            }
        }
        false
    }

    /// The wait from `now` until a slot frees (the earliest instant a key
    /// tracked may be forgotten), exact: stale records at the top are re-filed first.
    /// `None` if the shard tracks no key (a shard with no room at all).
    pub(super) fn next_room<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        now: u64,
    ) -> Option<u64> {
        loop {
            let &Reverse((due, hash)) = self.expiry.peek()?;
            let Some(full_at) = self.earliest_with_hash(algorithm, hash) else {
                // A record with no key: cannot happen (one record per entry),
                // but a wrong record must not stall the loop.
                self.expiry.pop();
                continue;
            };
            if full_at == due {
                // Every other record is due no earlier, and no key is full
                // before its record says: this is the earliest.
                return Some(due.saturating_sub(now));
            }
            self.expiry.pop();
            self.expiry.push(Reverse((full_at, hash)));
        }
    }

    /// Heap bytes held by the table, the index and the sketch (not by what
    /// keys or states own).
    pub(super) fn bytes(&self) -> usize {
        self.table.allocation_size()
            + self.ledgers.allocation_size()
            + self.expiry.capacity() * size_of::<Due>()
            + self.sketch.as_ref().map_or(0, Sketch::bytes)
    }
}
