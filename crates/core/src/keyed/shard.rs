//! [`Shard`]: one lock's worth of keys, with an expiry index that lives on
//! the table's own buckets, so that finding a key to forget never scans the
//! table; and [`Budget`], the key count the shards share.

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hashbrown::HashTable;

use super::Padded;
use super::sketch::Sketch;
use crate::algorithm::Algorithm;
use crate::{Ledger, Stamp};

/// One tracked key.
///
/// Its hash is not stored: a `u64` key and a GCRA state then make a 16-byte
/// entry (four to a cache line, none straddling two), where a stored hash
/// made 24. A lookup is one cache miss on the entry either way; the smaller
/// table misses less. A resize and the expiry index hash a key again
/// ([`Shard::hash_of`]) only when a settlement or a reset wrote some key a
/// ledger: rare, and O(1) each.
pub(super) struct Entry<K, S> {
    pub(super) key: K,
    pub(super) state: S,
}

/// Table buckets per leaf of the expiry index: a leaf costs about 10 bytes
/// of index (the leaf, its share of the inner nodes and where its minimum
/// is), about a byte and a quarter per bucket; looking through one reads 8
/// consecutive entries (two to four cache lines, in address order).
pub(super) const GROUP: usize = 8;

/// "Nothing here is ever due": an empty leaf.
pub(super) const NEVER: u64 = u64::MAX;

/// The number of keys tracked in all shards, against the bound they share:
/// a key gets a slot wherever it lands, as long as the table as a whole has
/// room.
pub(super) struct Budget {
    tracked: AtomicUsize,
    max_keys: usize,
    /// Per shard, the earliest instant any of its keys may be forgotten, or
    /// earlier (its index's root): a full table asks the other shards for a
    /// key to forget only where this says one may be due, without locking
    /// the rest.
    hints: Box<[Padded<AtomicU64>]>,
}

impl Budget {
    pub(super) fn new(max_keys: usize, shards: usize) -> Self {
        Budget {
            tracked: AtomicUsize::new(0),
            max_keys,
            hints: (0..shards).map(|_| Padded(AtomicU64::new(NEVER))).collect(),
        }
    }

    /// Takes one slot, if the table as a whole has one.
    #[inline]
    fn claim(&self) -> bool {
        self.tracked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_keys).then_some(n + 1)
            })
            .is_ok()
    }

    #[inline]
    fn release(&self, slots: usize) {
        if slots > 0 {
            self.tracked.fetch_sub(slots, Ordering::AcqRel);
        }
    }

    /// Every slot is taken.
    #[inline]
    pub(super) fn is_full(&self) -> bool {
        self.tracked.load(Ordering::Acquire) >= self.max_keys
    }

    /// Shard `shard` may hold a key forgettable at `now`.
    #[inline]
    pub(super) fn may_be_due(&self, shard: usize, now: u64) -> bool {
        self.hint(shard) <= now
    }

    /// The earliest instant a key of `shard` may be forgotten, or earlier;
    /// [`NEVER`] when it holds none.
    #[inline]
    pub(super) fn hint(&self, shard: usize) -> u64 {
        self.hints[shard].0.load(Ordering::Relaxed)
    }
}

/// Eight instants on one cache line: a node's children in [`MinTree`].
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Line([u64; 8]);

impl Line {
    const EMPTY: Line = Line([NEVER; 8]);

    #[inline]
    fn min(&self) -> u64 {
        self.0.iter().copied().fold(NEVER, u64::min)
    }

    /// The slot holding the smallest instant (the first of equals).
    #[inline]
    fn argmin(&self) -> usize {
        let mut best = 0;
        for slot in 1..8 {
            if self.0[slot] < self.0[best] {
                best = slot;
            }
        }
        best
    }
}

/// A tree of minima with eight children to a node, each node's children on
/// one cache line: a path from a leaf to the root is a few lines (6 for
/// 262,144 leaves), about 9 bytes per leaf in all.
///
/// Level 0 holds the leaves; node `i` of level `k + 1` is the minimum of
/// line `i` of level `k`. Slots past a level's end hold [`NEVER`].
struct MinTree {
    lines: Box<[Line]>,
    /// Where each level's lines start, level 0 first; the last level has one
    /// node, the root.
    starts: Box<[usize]>,
}

impl MinTree {
    /// No leaves: a table with no buckets.
    fn empty() -> Self {
        MinTree {
            lines: Box::new([]),
            starts: Box::new([]),
        }
    }

    /// `leaves` leaves, all [`NEVER`].
    fn new(leaves: usize) -> Self {
        if leaves == 0 {
            return MinTree::empty();
        }
        let (mut starts, mut total, mut nodes) = (Vec::new(), 0, leaves);
        loop {
            starts.push(total);
            total += nodes.div_ceil(8);
            if nodes == 1 {
                break;
            }
            nodes = nodes.div_ceil(8);
        }
        MinTree {
            lines: vec![Line::EMPTY; total].into_boxed_slice(),
            starts: starts.into_boxed_slice(),
        }
    }

    #[inline]
    fn node(&self, level: usize, i: usize) -> u64 {
        self.lines[self.starts[level] + i / 8].0[i % 8]
    }

    #[inline]
    fn node_mut(&mut self, level: usize, i: usize) -> &mut u64 {
        &mut self.lines[self.starts[level] + i / 8].0[i % 8]
    }

    #[inline]
    fn root(&self) -> u64 {
        match self.starts.last() {
            Some(&top) => self.lines[top].0[0],
            None => NEVER,
        }
    }

    #[inline]
    fn leaf(&self, i: usize) -> u64 {
        self.node(0, i)
    }

    /// Lowers leaf `i` and its ancestors to `at` where they are later.
    #[inline]
    fn lower(&mut self, mut i: usize, at: u64) {
        for level in 0..self.starts.len() {
            let node = self.node_mut(level, i);
            if *node <= at {
                return;
            }
            *node = at;
            i /= 8;
        }
    }

    /// Sets leaf `i` to `at`, and its ancestors to their children's minima.
    fn set(&mut self, mut i: usize, at: u64) {
        *self.node_mut(0, i) = at;
        for level in 1..self.starts.len() {
            let min = self.lines[self.starts[level - 1] + i / 8].min();
            i /= 8;
            let node = self.node_mut(level, i);
            if *node == min {
                return;
            }
            *node = min;
        }
    }

    /// The leaf holding the root's value.
    fn min_leaf(&self) -> usize {
        let mut i = 0;
        for level in (0..self.starts.len().saturating_sub(1)).rev() {
            i = i * 8 + self.lines[self.starts[level] + i].argmin();
        }
        i
    }

    /// Every inner node from the leaves.
    fn fill_up(&mut self) {
        for level in 1..self.starts.len() {
            let (below, above) = (self.starts[level - 1], self.starts[level]);
            for i in 0..above - below {
                let min = self.lines[below + i].min();
                *self.node_mut(level, i) = min;
            }
        }
    }

    fn bytes(&self) -> usize {
        size_of_val(&*self.lines) + size_of_val(&*self.starts)
    }

    /// Heap bytes of a tree of `leaves` leaves.
    fn bytes_for(leaves: usize) -> usize {
        let (mut lines, mut levels, mut nodes) = (0, 0, leaves);
        while nodes > 0 {
            lines += nodes.div_ceil(8);
            levels += 1;
            if nodes == 1 {
                break;
            }
            nodes = nodes.div_ceil(8);
        }
        lines * size_of::<Line>() + levels * size_of::<usize>()
    }
}

pub(super) struct Shard<K, S, L> {
    pub(super) table: HashTable<Entry<K, S>>,
    /// The expiry index: a tree of minima over the table's buckets
    /// ([`MinTree`]), [`GROUP`] buckets to a leaf (leaf `i` for buckets
    /// `GROUP * i ..`, each inner node the smallest of its eight children).
    /// A leaf is never later than the instant any key in its buckets may be
    /// forgotten ([`Algorithm::forgettable_at`]), and exact when last
    /// computed.
    ///
    /// A leaf may be early: a key's instant grows as it is charged, and a
    /// check does not touch the index (that would cost an index update per
    /// check). Only a settlement or a reset lowers a key's instant, and
    /// lowers its leaf with it. A leaf found due is looked through: its due
    /// keys are forgotten and it is set to the exact minimum of the rest, so
    /// each look at a leaf that forgets nothing was paid for by a charge
    /// since the last: amortised O(1) per check, [`GROUP`] entries read in
    /// order and a path of the tree written, never a scan of the table.
    ///
    /// Cost: about 10 bytes per [`GROUP`] buckets, 1.5 to 3 bytes per key,
    /// and no record per key at all: a key's place in the index is its bucket. A
    /// resize or an in-place rehash of the table moves keys between buckets:
    /// the index is rebuilt then, in one pass, paid for by the rehash's own
    /// O(n).
    due: MinTree,
    /// Per leaf, the bucket (within its group) of the key that gave the
    /// leaf its value when it was last set: if that key's instant is still
    /// the leaf's, the leaf is exact, found with one look at one entry.
    arg: Box<[u8]>,
    /// Leaves of `due`: the table's buckets over [`GROUP`], at least one once
    /// the table has buckets; 0 before.
    leaves: usize,
    /// This shard's place among the shards (for its hint in the budget).
    index: usize,
    /// The key count every shard shares.
    budget: Arc<Budget>,
    /// The latest instant this shard has decided at: time never goes back
    /// here.
    pub(super) latest: u64,
    /// The most keys this shard tracks, whatever room the others leave: its
    /// share of the bound and a margin that keys spread by a random seed do
    /// not reach (it bounds the shard's table in bytes).
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
    /// How long a key back to full capacity stays tracked while there is
    /// room, µs (see [`KeyedBuilder::idle_grace`]).
    ///
    /// [`KeyedBuilder::idle_grace`]: super::KeyedBuilder::idle_grace
    grace: u64,
}

/// What looking through one leaf found.
struct Look {
    /// Keys forgotten.
    forgot: usize,
    /// The leaf is due only because of the key a check is about (kept).
    blocked: bool,
}

impl<K: Hash, S, L: Ledger> Shard<K, S, L> {
    pub(super) fn new(
        capacity: usize,
        index: usize,
        budget: Arc<Budget>,
        hasher: foldhash::fast::SeedableRandomState,
        grace: u64,
    ) -> Self {
        Shard {
            table: HashTable::new(),
            due: MinTree::empty(),
            arg: Box::new([]),
            leaves: 0,
            index,
            budget,
            latest: 0,
            capacity,
            sketch: None,
            ledgers: HashTable::new(),
            empty: L::default(),
            hasher,
            grace,
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

    /// Whether a new key could get a slot now: this shard is below its own
    /// bound and the table as a whole has room.
    #[inline]
    pub(super) fn has_room(&self) -> bool {
        self.table.len() < self.capacity && !self.budget.is_full()
    }

    /// Whether only the shared bound keeps a new key out: a key forgotten
    /// in another shard would make room for it.
    #[inline]
    pub(super) fn below_own_bound(&self) -> bool {
        self.table.len() < self.capacity
    }

    /// Takes a slot for a new key, if there is room (see
    /// [`Shard::has_room`]): the caller then inserts it.
    #[inline]
    pub(super) fn claim(&self) -> bool {
        self.table.len() < self.capacity && self.budget.claim()
    }

    /// Gives back a slot claimed and not used.
    pub(super) fn unclaim(&self) {
        self.budget.release(1);
    }

    /// The earliest instant recorded for any key here (early if stale).
    #[inline]
    fn root(&self) -> u64 {
        self.due.root()
    }

    /// Tells the other shards this shard's root, when it changed.
    #[inline]
    fn publish(&self, before: u64) {
        let root = self.root();
        if root != before {
            self.budget.hints[self.index]
                .0
                .store(root, Ordering::Relaxed);
        }
    }

    /// Lowers the leaf of bucket `bucket` to `at` if it is later.
    #[inline]
    fn lower(&mut self, bucket: usize, at: u64) {
        let before = self.root();
        let leaf = bucket / GROUP;
        if self.due.leaf(leaf) > at {
            self.arg[leaf] = offset(bucket);
            self.due.lower(leaf, at);
        }
        self.publish(before);
    }

    /// Sets leaf `leaf` to `at`, the instant of the key in its bucket
    /// `arg`, and the inner nodes above it.
    fn set_leaf(&mut self, leaf: usize, at: u64, arg: u8) {
        let before = self.root();
        self.due.set(leaf, at);
        self.arg[leaf] = arg;
        self.publish(before);
    }

    /// The leaf holding the root's value.
    fn min_leaf(&self) -> usize {
        self.due.min_leaf()
    }

    /// Leaf `leaf` is exactly the earliest instant of its keys: the key it
    /// was set from is still there, at that instant (the others were no
    /// earlier then, and a key's instant goes down only through
    /// [`Shard::refile`] or [`Shard::insert`], which lower the leaf).
    fn is_exact<A: Algorithm<State = S, Ledger = L>>(&self, algorithm: &A, leaf: usize) -> bool {
        let bucket = leaf * GROUP + usize::from(self.arg[leaf]);
        self.table
            .get_bucket(bucket)
            .is_some_and(|entry| self.forgettable(algorithm, entry) == self.due.leaf(leaf))
    }

    /// The instant the entry may be forgotten.
    #[inline]
    fn forgettable<A: Algorithm<State = S, Ledger = L>>(
        &self,
        algorithm: &A,
        entry: &Entry<K, S>,
    ) -> u64 {
        if self.ledgers.is_empty() {
            return algorithm.forgettable_at(&entry.state, &self.empty);
        }
        let hash = self.hash_of(&entry.key);
        algorithm.forgettable_at(&entry.state, self.ledger_of(hash))
    }

    /// The index from the table: every leaf exact. O(buckets), after a
    /// rehash moved the keys.
    fn rebuild<A: Algorithm<State = S, Ledger = L>>(&mut self, algorithm: &A) {
        let before = self.root();
        let buckets = self.table.num_buckets();
        self.leaves = if buckets == 0 {
            0
        } else {
            (buckets / GROUP).max(1)
        };
        let mut due = MinTree::new(self.leaves);
        let mut arg = vec![0; self.leaves].into_boxed_slice();
        for leaf in 0..self.leaves {
            let first = leaf * GROUP;
            if let Some((at, bucket)) = (first..(first + GROUP).min(buckets))
                .filter_map(|bucket| {
                    let entry = self.table.get_bucket(bucket)?;
                    Some((self.forgettable(algorithm, entry), bucket))
                })
                .min()
            {
                *due.node_mut(0, leaf) = at;
                arg[leaf] = offset(bucket);
            }
        }
        due.fill_up();
        self.due = due;
        self.arg = arg;
        self.publish(before);
    }

    /// Stores a new key, in a slot [`Shard::claim`] took, and files it in
    /// the expiry index.
    ///
    /// A table with no spare slot first forgets every key idle for longer
    /// than the grace: it grows only for keys that still hold something or
    /// may soon come back. Checks of the keys it tracks do no upkeep (a
    /// client that comes back finds its key in place), so this is where
    /// idle keys are swept up when their room is wanted. Amortised O(1):
    /// each leaf looked through forgets a key, paid for by its insertion,
    /// or was made early by a charge since it was last set.
    pub(super) fn insert<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        hash: u64,
        key: K,
        state: S,
    ) {
        if self.table.len() == self.table.capacity() {
            self.forget_idle(algorithm, self.latest, usize::MAX, None);
        }
        let due = algorithm.forgettable_at(&state, self.ledger_of(hash));
        let hasher = &self.hasher;
        // A table with no spare slot rehashes on insertion, moving keys
        // between buckets: do it here, where the index can follow.
        let rehash = self.table.len() == self.table.capacity();
        if rehash {
            self.table.reserve(1, |e| hasher.hash_one(&e.key));
        }
        let bucket = self
            .table
            .insert_unique(hash, Entry { key, state }, |e| hasher.hash_one(&e.key))
            .bucket_index();
        if rehash || self.leaves == 0 {
            self.rebuild(algorithm);
        } else {
            self.lower(bucket, due);
        }
    }

    /// Files the key `is_key` recognises again, whose forgettable instant
    /// went down to `at` (a settlement or a reset): its leaf would say it
    /// is due later than it is.
    pub(super) fn refile(&mut self, at: u64, hash: u64, is_key: impl Fn(&K) -> bool) {
        if let Some(bucket) = self.table.find_bucket_index(hash, |e| is_key(&e.key)) {
            self.lower(bucket, at);
        }
    }

    /// Forgets the key `is_key` recognises, if it is tracked. Its leaf stays
    /// as it was: still no later than any key left in it.
    pub(super) fn remove(&mut self, hash: u64, is_key: impl Fn(&Entry<K, S>) -> bool) {
        if let Ok(entry) = self.table.find_entry(hash, is_key) {
            entry.remove();
            self.budget.release(1);
            self.drop_ledger(hash);
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

    /// Looks through leaf `leaf` at `now`: forgets (if `forget`) every key
    /// there no receipt can use any more, except those of hash `spare`,
    /// and sets the leaf to the exact earliest instant of the keys left.
    fn look<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        leaf: usize,
        now: u64,
        forget: bool,
        spare: Option<u64>,
    ) -> Look {
        let buckets = self.table.num_buckets();
        let (mut earliest, mut arg, mut forgot, mut blocked) = (NEVER, 0, 0, false);
        let first = leaf * GROUP;
        for bucket in first..(first + GROUP).min(buckets) {
            let Some(entry) = self.table.get_bucket(bucket) else {
                continue;
            };
            let at = self.forgettable(algorithm, entry);
            if forget && at <= now {
                // Only a due key is hashed (the one a look usually finds).
                if spare.is_some_and(|spare| self.hash_of(&entry.key) == spare) {
                    blocked = true;
                } else {
                    let hash = (!self.ledgers.is_empty()).then(|| self.hash_of(&entry.key));
                    if let Ok(entry) = self.table.get_bucket_entry(bucket) {
                        entry.remove();
                    }
                    forgot += 1;
                    if let Some(hash) = hash {
                        self.drop_ledger(hash);
                    }
                    continue;
                }
            }
            if at < earliest {
                earliest = at;
                arg = offset(bucket);
            }
        }
        self.budget.release(forgot);
        self.set_leaf(leaf, earliest, arg);
        Look { forgot, blocked }
    }

    /// Looks through the earliest leaf, if it is due at `now`: `Some(true)`
    /// if it forgot a key, `Some(false)` if it only set the leaf right,
    /// `None` when nothing is due (or only keys of hash `spare`).
    fn pop_due<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        now: u64,
        spare: Option<u64>,
    ) -> Option<bool> {
        if self.root() > now {
            return None;
        }
        let leaf = self.min_leaf();
        let look = self.look(algorithm, leaf, now, true, spare);
        if look.forgot == 0 && look.blocked {
            return None;
        }
        Some(look.forgot > 0)
    }

    /// Forgets keys no receipt can use any more at `now`, looking through no
    /// more than `budget` due leaves: the upkeep a check of an untracked key
    /// pays, a bounded cost. It keeps the key of `spare`'s hash (the key the
    /// check is about), and stops at it: that key is decided from its own
    /// state, which a peek at the same instant, forgetting nothing, sees
    /// too.
    #[inline]
    pub(super) fn forget_due<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        now: u64,
        budget: usize,
        spare: Option<u64>,
    ) {
        // Nothing due is every check's case: no call for it.
        if self.root() > now {
            return;
        }
        self.forget_some_due(algorithm, now, budget, spare);
    }

    /// [`Shard::forget_due`] at `now` less the grace: forgets only keys
    /// idle (back to full capacity) for longer than it.
    #[inline]
    pub(super) fn forget_idle<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        now: u64,
        budget: usize,
        spare: Option<u64>,
    ) {
        self.forget_due(algorithm, now.saturating_sub(self.grace), budget, spare);
    }

    #[inline(never)]
    fn forget_some_due<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        now: u64,
        budget: usize,
        spare: Option<u64>,
    ) {
        for _ in 0..budget {
            if self.pop_due(algorithm, now, spare).is_none() {
                return;
            }
        }
    }

    /// Frees one slot if any key is back to full capacity at `now`. Each
    /// leaf looked through either forgets a key or is set exact and later
    /// than `now`, so the work is paid for by earlier charges.
    pub(super) fn make_room<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        now: u64,
    ) -> bool {
        while let Some(forgot) = self.pop_due(algorithm, now, None) {
            if forgot {
                return true;
            }
        }
        false
    }

    /// The wait from `now` until a slot frees (the earliest instant a key
    /// tracked may be forgotten), exact: early leaves at the top are set
    /// right first. `None` if the shard tracks no key.
    pub(super) fn next_room<A: Algorithm<State = S, Ledger = L>>(
        &mut self,
        algorithm: &A,
        now: u64,
    ) -> Option<u64> {
        if self.table.is_empty() {
            return None;
        }
        loop {
            let due = self.root();
            if due == NEVER {
                return None;
            }
            let leaf = self.min_leaf();
            if self.is_exact(algorithm, leaf) {
                return Some(due.saturating_sub(now));
            }
            self.look(algorithm, leaf, now, false, None);
            if self.due.leaf(leaf) == due {
                // Every other leaf is due no earlier, and no key is full
                // before its leaf says: this is the earliest.
                return Some(due.saturating_sub(now));
            }
        }
    }

    /// Heap bytes held by the table, the index and the sketch (not by what
    /// keys or states own).
    pub(super) fn bytes(&self) -> usize {
        self.table.allocation_size()
            + self.ledgers.allocation_size()
            + self.due.bytes()
            + size_of_val(&*self.arg)
            + self.sketch.as_ref().map_or(0, Sketch::bytes)
    }
}

/// Where `bucket` lies within its leaf's group.
#[inline]
fn offset(bucket: usize) -> u8 {
    // Fits: below GROUP.
    u8::try_from(bucket % GROUP).unwrap_or_default()
}

/// Heap bytes of the expiry index of a table of `buckets` buckets.
pub(super) fn index_bytes(buckets: usize) -> usize {
    if buckets == 0 {
        return 0;
    }
    let leaves = (buckets / GROUP).max(1);
    MinTree::bytes_for(leaves) + leaves
}

#[cfg(test)]
mod tests {
    use super::{MinTree, NEVER};

    /// Random sets and lowerings against a plain array: the root is the
    /// smallest leaf, and the descent finds a leaf holding it.
    #[test]
    fn the_tree_keeps_the_minimum_of_its_leaves() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for leaves in [1, 2, 7, 8, 9, 63, 64, 65, 513, 4_096] {
            let mut tree = MinTree::new(leaves);
            let mut plain = vec![NEVER; leaves];
            assert_eq!(tree.root(), NEVER);
            for _ in 0..5_000 {
                let leaf = usize::try_from(next(leaves as u64)).expect("below leaves");
                let at = next(1_000);
                if next(3) == 0 {
                    tree.lower(leaf, at);
                    plain[leaf] = plain[leaf].min(at);
                } else {
                    let at = if next(10) == 0 { NEVER } else { at };
                    tree.set(leaf, at);
                    plain[leaf] = at;
                }
                let min = plain.iter().copied().min().unwrap();
                assert_eq!(tree.root(), min, "{leaves} leaves");
                assert_eq!(plain[tree.min_leaf()], min, "{leaves} leaves");
                assert_eq!(tree.leaf(leaf), plain[leaf]);
            }
            let mut rebuilt = MinTree::new(leaves);
            for (leaf, &at) in plain.iter().enumerate() {
                *rebuilt.node_mut(0, leaf) = at;
            }
            rebuilt.fill_up();
            assert_eq!(rebuilt.root(), tree.root());
            assert_eq!(tree.bytes(), MinTree::bytes_for(leaves));
        }
    }
}
