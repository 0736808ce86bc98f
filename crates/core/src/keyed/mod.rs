//! [`Keyed`]: one bucket per key, in a sharded map that forgets keys by
//! itself, holds a bounded number of bytes whatever its keys, and keeps
//! serving new clients under a flood.
//!
//! # The promises, and what they cost
//!
//! - **Never more than the quota, for any key.** A key is forgotten only when
//!   its state is back to full capacity, where it decides exactly like a key
//!   never seen. A key with no room in the table is decided by shared states
//!   that can only over-count (below). Nothing a flood does erases a debt.
//! - **Bounded in bytes.** At most `max_keys` keys are tracked exactly, in
//!   all shards together: the shards take their slots from one shared count,
//!   so no key goes untracked while the table as a whole has room (each
//!   shard also stops at its share plus a quarter plus 64, a margin that
//!   keys spread by the random seed do not reach, so that its table is
//!   bounded in bytes too). A byte-string key is kept as its bytes up to
//!   [`MAX_EXACT_KEY_LEN`] bytes,
//!   as a 128-bit keyed digest above ([`ByteKey`] documents the collision
//!   probability). [`Keyed::memory_bound_bytes`] gives the bound, whatever
//!   the keys' lengths.
//! - **O(1) per check, also under a flood.** Each shard keeps an expiry
//!   index on its hash table's own buckets: a tree of minima (eight
//!   children to a node, on one cache line), one leaf per 8 buckets, never
//!   later than the instant any key there may be
//!   forgotten. Finding a key to forget, or the wait until one can be,
//!   looks at the root and through one leaf's 8 buckets, never scans the
//!   table; a shard whose table has no room asks the others only where
//!   their root says a key may be due. A check of a key the table holds
//!   is decided on that key's state alone, whether or not it is back to
//!   full capacity (such a state decides exactly as a key never seen): a
//!   key back to full capacity stays tracked for an idle grace (the
//!   quota's period by default, [`KeyedBuilder::idle_grace`]), so that a
//!   client that comes back after its bucket refilled finds its key in
//!   place and pays a lookup, as for any tracked key, and no upkeep. A
//!   check of a key the table does not hold (a new key, a peek at one)
//!   forgets the keys idle past the grace in up to two leaves, and a table
//!   with no spare slot forgets every such key before it grows: idle keys
//!   go without a chore for the caller, as fast as new keys come, and a
//!   table grows only for keys that still hold something or may soon come
//!   back. At the bound, any key back to full capacity makes room for a
//!   new one, grace or not. The cost is amortised O(1) work per check (a
//!   leaf looked through that forgets nothing was made early by a charge
//!   since), and about 10 bytes per 8 buckets, 1.5 to 3 bytes per key: no
//!   record per key (the table stores no hash either).
//! - **New clients keep being served.** When a shard's table is full and no
//!   key in it is back to full capacity, a new key is decided, by default,
//!   by a fixed array of shared algorithm states ([`FloodPolicy::Sketch`]):
//!   the key is hashed to one cell (or `depth` cells, all of which must
//!   admit), and every admission is charged to its cells. A cell's state has
//!   seen every admission of every key hashed to it, so it is at least as
//!   indebted as each of them alone: it may refuse an innocent client whose
//!   cell a heavy one shares, never admit a key past its bound. The cells
//!   cost `size_of::<State>()` each, reserved per shard the first time a
//!   key of that shard finds no room, and written as the flood goes on: the
//!   sketch starts with a few pages of cells and splits four per decision
//!   (each new cell a copy of the one it splits from), so a flood's first
//!   checks pay no page faults at random. **The trade-off:** the cells
//!   serve new keys as long as each carries less than its quota, i.e. while
//!   the keys owing at once beyond the table number fewer than about the
//!   cells (by default 16 × `max_keys` rounded up to a power of two); a
//!   flood beyond that saturates them and new keys are refused (as ordinary
//!   refusals, with a `retry_after`). [`FloodPolicy::Refuse`]
//!   is the old, stricter choice: every new key gets
//!   [`Error::TooManyKeys`] until a slot frees, with the exact wait.
//!   A key later given a slot starts from its least indebted cell, so moving
//!   between the two structures never wipes a debt.
//! - **Settlements, refunds and resets** ([`Keyed::settle`],
//!   [`Keyed::refund`], [`Keyed::reset`]) give back only to the keys the
//!   table tracks, by [`Receipt`]: never from the shared cells, which hold
//!   other keys' admissions too and may only over-count (a charge beyond a
//!   receipt's cost goes to them when the key has no slot). A key is
//!   forgotten once it is full and none of its receipts can give anything
//!   back ([`Algorithm::forgettable_at`]); the few keys whose ledger is not
//!   0 keep it in a side table of the shard, counted in
//!   [`Keyed::memory_bound_bytes`]. A settlement can lower the instant a
//!   key may be forgotten, so it lowers the key's leaf of the index with it
//!   (a few writes on a path of the tree, no new record).
//! - **Time never goes backwards** for a shard's keys and cells: a clock
//!   that jumps back is time standing still, and so is [`Keyed::sweep`].
//!
//! Typed keys (`u64`, `IpAddr`, ...; [`KeyedBuilder::keys`]) are stored as
//! they are: their size is the caller's to bound.

mod builder;
mod key;
mod shard;
mod sketch;

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

pub use builder::{FloodPolicy, KeyedBuilder, MAX_SHARDS};
use key::Digester;
pub use key::{ByteKey, MAX_EXACT_KEY_LEN};
use shard::{Budget, Entry, Shard};
use sketch::Sketch;

use crate::algorithm::Algorithm;
use crate::algorithm::StateCell;
use crate::limiter::{Limiter, RateLimiter};
use crate::time::{Clock, SystemClock, clamp_instant};
use crate::{Bound, Decision, Error, Issuer, Quota, Receipt, Settlement, Stamp, Verdict};

/// The default bound on the number of keys a [`Keyed`] limiter tracks.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// Leaves of the expiry index a check of an untracked key looks through,
/// at most: enough to forget idle keys as fast as new keys arrive, small
/// enough to bound one check's work.
const UPKEEP_PER_CHECK: usize = 2;

/// A limiter with one state per key, for many clients in one process.
///
/// ```
/// use ratelab_core::{Algorithm, Bound, Decision, Error, FloodPolicy, Keyed, ManualClock, Quota};
/// use ratelab_core::toolkit::AtomicCell;
/// # #[derive(Debug)]
/// # struct Once(Quota);
/// # impl Algorithm for Once {
/// #     type State = u64;
/// #     type Cell = AtomicCell;
/// #     type Ledger = u64;
/// #     fn name(&self) -> &'static str { "once" }
/// #     fn quota(&self) -> &Quota { &self.0 }
/// #     fn capacity(&self) -> u64 { 1 }
/// #     fn bound(&self) -> Bound { Bound::Rate { burst: self.capacity(), interval: u64::MAX } }
/// #     fn initial_state(&self) -> u64 { 0 }
/// #     fn decide(&self, used: &mut u64, _: u64, cost: u32) -> Result<Decision, Error> {
/// #         if *used + u64::from(cost) > 1 { return Ok(Decision::refused(1)); }
/// #         *used += u64::from(cost);
/// #         Ok(Decision::admitted(1))
/// #     }
/// #     fn full_at(&self, used: &u64) -> u64 { if *used == 0 { 0 } else { u64::MAX } }
/// # }
/// let limiter = Keyed::builder(Once(Quota::per_minute(1)?))
///     .clock(ManualClock::new())
///     .max_keys(10_000)
///     .flood_policy(FloodPolicy::Refuse)
///     .build();
/// assert_eq!(limiter.max_keys(), 10_000);
/// assert!(limiter.check(b"alice", 1)?.allowed);
/// assert!(!limiter.check(b"alice", 1)?.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// **Concurrency.** Keys are spread over shards by a randomly seeded hash
/// (foldhash), each shard a [`hashbrown::HashTable`] and its expiry index
/// behind one lock; a check holds one shard's lock for one lookup and one
/// decision (and, for a key the shard does not track, a bounded upkeep). Two threads contend only when their keys
/// share a shard, or, for new and forgotten keys, on the one atomic count
/// of tracked keys. A new key that finds the table as a whole full may
/// look into other shards for a key to forget, one lock at a time.
///
/// See the [module docs](self) for what is promised under a flood and what
/// it costs.
pub struct Keyed<A: Algorithm, C = SystemClock, K = ByteKey> {
    algorithm: A,
    clock: C,
    hasher: foldhash::fast::SeedableRandomState,
    digester: Digester,
    shards: Box<[ShardOf<A, K>]>,
    shard_mask: u64,
    /// The key count the shards share, against `max_keys`.
    budget: Arc<Budget>,
    max_keys: usize,
    flood: FloodPolicy,
    issuer: Issuer,
}

/// What a check leaves for a receipt: nothing (a refusal, a peek, cost 0,
/// or not asked), a stamp of the key's own state, or a decision by the
/// shared flood cells.
enum Mark {
    None,
    Own(Stamp),
    Shared,
}

/// One shard's lock and what it guards.
type LockedShard<K, S, L> = Padded<Mutex<Shard<K, S, L>>>;

/// The shard of `A`'s states and ledgers under keys `K`.
type ShardOf<A, K> = LockedShard<K, <A as Algorithm>::State, <A as Algorithm>::Ledger>;

/// Keeps each shard on its own cache line, so two threads working on
/// different shards do not invalidate each other's.
#[repr(align(64))]
struct Padded<T>(T);

impl<A: Algorithm> Keyed<A, SystemClock, ByteKey> {
    /// A keyed limiter on the default clock (the precise [`SystemClock`]),
    /// with byte-string keys and the defaults of [`Keyed::builder`].
    pub fn new(algorithm: A) -> Self {
        Self::builder(algorithm).build()
    }

    /// Sets up a keyed limiter: clock, key type, bound, shards, flood policy.
    pub fn builder(algorithm: A) -> KeyedBuilder<A> {
        KeyedBuilder::new(algorithm)
    }
}

impl<A: Algorithm, C: Clock> Keyed<A, C, ByteKey> {
    /// A keyed limiter on `clock`, with byte-string keys and the defaults of
    /// [`Keyed::builder`].
    pub fn with_clock(algorithm: A, clock: C) -> Self {
        Keyed::builder(algorithm).clock(clock).build()
    }

    /// Decides a request of weight `cost` for `key`: all or nothing. Cost 0 is
    /// a peek.
    #[inline]
    pub fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        let probe = self.digester.probe(key);
        let hash = self.hasher.hash_one(probe);
        self.decide::<false>(hash, |k| probe.matches(k), || probe.to_key(), cost)
    }

    /// Decides as [`Keyed::check`] does, and answers only whether the
    /// request passed: the whole [`Decision`] is computed when
    /// [`Verdict::decision`] asks for it (see [`Direct::check_lean`]).
    ///
    /// ```
    /// use ratelab_core::{Keyed, ManualClock, Quota};
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
    /// let limiter = Keyed::with_clock(Allowance(Quota::per_hour(2)?), ManualClock::new());
    /// assert!(limiter.check_lean(b"ada", 1)?.allowed());
    /// let verdict = limiter.check_lean(b"ada", 1)?;
    /// assert_eq!(verdict.decision().remaining, 0);
    /// assert!(!limiter.check_lean(b"ada", 1)?.allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// [`Direct::check_lean`]: crate::Direct::check_lean
    #[inline]
    pub fn check_lean(&self, key: &[u8], cost: u32) -> Result<Verdict<'_, A>, Error> {
        let probe = self.digester.probe(key);
        let hash = self.hasher.hash_one(probe);
        self.decide_marked::<false, false, Verdict<'_, A>>(
            hash,
            |k| probe.matches(k),
            || probe.to_key(),
            cost,
            &mut Mark::None,
        )
    }

    /// Decides as [`Keyed::check`] does, with a [`Receipt`] for an admission
    /// of a positive cost (see [`RateLimiter::check_with_receipt`]).
    pub fn check_with_receipt(
        &self,
        key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        let probe = self.digester.probe(key);
        let hash = self.hasher.hash_one(probe);
        let mut mark = Mark::None;
        let decision = self.decide_marked::<false, true, Decision>(
            hash,
            |k| probe.matches(k),
            || probe.to_key(),
            cost,
            &mut mark,
        )?;
        let receipt = match mark {
            Mark::None => None,
            Mark::Own(stamp) => Some(self.issuer.issue(key, cost, stamp)),
            Mark::Shared => Some(self.issuer.issue_shared(key, cost)),
        };
        Ok((decision, receipt))
    }

    /// The decision a request of weight `cost` for `key` would get now,
    /// consuming nothing and storing nothing (see
    /// [`RateLimiter::peek`]): a check at the same instant decides the same.
    pub fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        let probe = self.digester.probe(key);
        let hash = self.hasher.hash_one(probe);
        self.decide::<true>(hash, |k| probe.matches(k), || probe.to_key(), cost)
    }

    /// Settles the admission `receipt` stands for to `actual` units (see
    /// [`RateLimiter::settle`]): what it did not use comes back, as far as
    /// the key still holds it; what it used beyond its cost is charged as
    /// debt. Answers what a peek of cost 0 would after it.
    ///
    /// A key decided by the shared flood cells (a table full under
    /// [`FloodPolicy::Sketch`]) gets nothing back: the cells also hold other
    /// keys' admissions, and may only over-count. A charge beyond the cost
    /// goes to the key, or to its cells when the table has no room for it.
    pub fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        let redeemed = self
            .issuer
            .redeem(receipt)
            .map_err(|_| Error::ForeignReceipt)?;
        let settlement = redeemed.settlement(actual);
        crate::ensure_settles(&settlement, self.algorithm.capacity())?;
        let probe = self.digester.probe(&redeemed.key);
        let hash = self.hasher.hash_one(probe);
        self.settle_hashed(hash, |k| probe.matches(k), || probe.to_key(), settlement)
    }

    /// Gives back what the admission `receipt` stands for still holds:
    /// [`Keyed::settle`] to 0.
    pub fn refund(&self, receipt: Receipt) -> Result<Decision, Error> {
        self.settle(receipt, 0)
    }

    /// Puts `key` back to full capacity (see [`RateLimiter::reset`]): it
    /// decides as a key never seen, and no receipt issued for it before
    /// gives anything back. A key no receipt was issued for is forgotten at
    /// once; one with receipts stays tracked, deciding as a key never seen,
    /// until none of them could claim anything ([`Algorithm::reset`]). Like
    /// [`Keyed::settle`], this leaves the shared flood cells alone.
    pub fn reset(&self, key: &[u8]) {
        let probe = self.digester.probe(key);
        let hash = self.hasher.hash_one(probe);
        self.forget(hash, |k| probe.matches(k));
    }

    /// An upper bound on the heap bytes this limiter can ever hold, whatever
    /// keys it is given: every shard's table at its bound (with the slack a
    /// hash table keeps when keys come and go), its expiry index, each key's
    /// bytes (at most [`MAX_EXACT_KEY_LEN`], plus allocator overhead) and the
    /// flood policy's cells. Memory owned by the states themselves (the
    /// sliding log's timestamps) comes on top.
    pub fn memory_bound_bytes(&self) -> usize {
        // glibc and most allocators round a small block up to 16 bytes and
        // add a 16-byte header at most.
        const KEY_ALLOCATION: usize = MAX_EXACT_KEY_LEN.next_multiple_of(16) + 16;
        self.shards
            .iter()
            .map(|shard| {
                let shard = shard.0.lock();
                let keys = shard.capacity;
                table_bound_bytes::<Entry<ByteKey, A::State>>(keys)
                    + table_bound_bytes::<(u64, u64)>(keys)
                    // The index: a few bytes per group of the table's buckets.
                    + shard::index_bytes(table_bound_buckets(keys))
                    + self.sketch_cells_per_shard() * size_of::<A::State>()
            })
            .sum::<usize>()
            // The keys' bytes: at most `max_keys` keys in all.
            + self.max_keys * KEY_ALLOCATION
            + size_of_val(&*self.shards)
    }
}

/// The most keys one shard tracks: its share of `max_keys` and a margin
/// that keys spread by a random seed do not reach (a quarter of the share
/// and 64 more: hundreds of standard deviations at a million keys, tens at
/// the smallest default shard), so that the shards share one budget in
/// practice while each table stays bounded in bytes.
fn shard_bound(max_keys: usize, shards: usize) -> usize {
    let share = max_keys.div_ceil(shards);
    share
        .saturating_add(share / 4)
        .saturating_add(64)
        .min(max_keys)
}

/// The most buckets a hashbrown table allocates while holding at most `n`
/// entries: the buckets for `n`, doubled once (a table churned by removals
/// may grow once more before it rehashes in place).
fn table_bound_buckets(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let buckets = if n < 4 {
        4
    } else if n < 8 {
        8
    } else {
        (n * 8 / 7).next_power_of_two()
    };
    2 * buckets
}

/// The most bytes a hashbrown table of entries of type `T` allocates while
/// holding at most `n` of them: the buckets for `n`, doubled once (a table
/// churned by removals may grow once more before it rehashes in place), one
/// control byte per bucket plus a group's worth, and alignment.
fn table_bound_bytes<T>(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let buckets = table_bound_buckets(n);
    buckets * (size_of::<T>() + 1) + 16 + 16.max(align_of::<T>())
}

impl<A: Algorithm, C: Clock, K: Hash + Eq> Keyed<A, C, K> {
    /// A keyed limiter on `clock` with keys of any type `K` (`u64`, `IpAddr`,
    /// ...), and the defaults of [`Keyed::builder`].
    pub fn typed(algorithm: A, clock: C) -> Self {
        KeyedBuilder::new(algorithm)
            .clock(clock)
            .keys::<K>()
            .build()
    }

    fn from_parts(
        algorithm: A,
        clock: C,
        shards: usize,
        max_keys: usize,
        flood: FloodPolicy,
        seed: Option<u64>,
        idle_grace: u64,
    ) -> Self {
        let budget = Arc::new(Budget::new(max_keys, shards));
        let own_bound = shard_bound(max_keys, shards);
        let (hasher, digester) = match seed {
            None => (
                foldhash::fast::SeedableRandomState::random(),
                Digester::default(),
            ),
            Some(seed) => (
                foldhash::fast::SeedableRandomState::with_seed(
                    seed,
                    foldhash::SharedSeed::global_fixed(),
                ),
                Digester::seeded(seed),
            ),
        };
        Keyed {
            algorithm,
            clock,
            digester,
            shards: (0..shards)
                .map(|i| {
                    Padded(Mutex::new(Shard::new(
                        own_bound,
                        i,
                        Arc::clone(&budget),
                        hasher.clone(),
                        idle_grace,
                    )))
                })
                .collect(),
            // Fits: shards <= MAX_SHARDS.
            shard_mask: shards as u64 - 1,
            hasher,
            budget,
            max_keys,
            flood,
            issuer: Issuer::new(),
        }
    }

    /// Decides a request of weight `cost` for `key`: all or nothing. Cost 0 is
    /// a peek.
    #[inline]
    pub fn check_key<Q>(&self, key: &Q, cost: u32) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.decide::<false>(hash, |k| k.borrow() == key, || key.to_owned(), cost)
    }

    /// Decides as [`Keyed::check_key`] does, and answers only whether the
    /// request passed: see [`Keyed::check_lean`].
    #[inline]
    pub fn check_key_lean<Q>(&self, key: &Q, cost: u32) -> Result<Verdict<'_, A>, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.decide_marked::<false, false, Verdict<'_, A>>(
            hash,
            |k| k.borrow() == key,
            || key.to_owned(),
            cost,
            &mut Mark::None,
        )
    }

    /// The decision a request of weight `cost` for `key` would get now,
    /// consuming nothing and storing nothing.
    pub fn peek_key<Q>(&self, key: &Q, cost: u32) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.decide::<true>(hash, |k| k.borrow() == key, || key.to_owned(), cost)
    }

    /// Puts `key` back to full capacity: see [`Keyed::reset`].
    pub fn reset_key<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        self.forget(hash, |k| k.borrow() == key);
    }

    /// The settlement under every key type.
    fn settle_hashed(
        &self,
        hash: u64,
        is_key: impl Fn(&K) -> bool,
        to_key: impl FnOnce() -> K,
        settlement: Settlement,
    ) -> Result<Decision, Error> {
        let now = clamp_instant(self.clock.now_micros());
        let algorithm = &self.algorithm;
        let shard = &self.shards[self.shard_of(hash)].0;
        let mut shard = shard.lock();
        let now = shard.advance(now);
        if let Some((entry, ledger)) = shard.entry_and_ledger(hash, &is_key) {
            let before = algorithm.forgettable_at(&entry.state, ledger);
            let decision = algorithm.settle(&mut entry.state, ledger, now, settlement)?;
            let after = algorithm.forgettable_at(&entry.state, ledger);
            if after <= now {
                // Nothing left to hold: a key never seen decides the same.
                shard.remove(hash, |e| is_key(&e.key));
            } else if after < before {
                shard.refile(after, hash, &is_key);
            }
            return Ok(decision);
        }
        // Not tracked: forgotten (so nothing it admitted still weighs), or
        // decided by the shared cells (which keep what they counted).
        // Nothing comes back; a charge beyond the cost is still owed, to the
        // key's own state if there is room for it, else to its cells.
        let extra = settlement.actual.saturating_sub(settlement.charged);
        if extra > 0 {
            let charge = Settlement::charge(extra);
            if shard.claim() || (shard.make_room(algorithm, now) && shard.claim()) {
                let mut state = shard
                    .sketch
                    .as_ref()
                    .and_then(|sketch| sketch.seed(algorithm, hash, now))
                    .unwrap_or_else(|| algorithm.initial_state());
                let mut ledger = A::Ledger::default();
                let decision = algorithm.settle(&mut state, &mut ledger, now, charge);
                match decision {
                    Ok(_) if algorithm.forgettable_at(&state, &ledger) > now => {
                        shard.insert(algorithm, hash, to_key(), state);
                    }
                    _ => shard.unclaim(),
                }
                return decision;
            }
            if let FloodPolicy::Sketch { depth, .. } = self.flood {
                let width = self.sketch_cells_per_shard() / depth;
                shard
                    .sketch
                    .get_or_insert_with(|| Sketch::new(algorithm, width, depth))
                    .charge(algorithm, hash, now, charge)?;
            }
        }
        drop(shard);
        self.decide::<true>(hash, is_key, || unreachable!("a peek stores no key"), 0)
    }

    /// The reset under every key type: the key's state decides as a key
    /// never seen, and its ledger outlives whatever its receipts could still
    /// claim ([`Algorithm::reset`]).
    fn forget(&self, hash: u64, is_key: impl Fn(&K) -> bool) {
        let now = clamp_instant(self.clock.now_micros());
        let algorithm = &self.algorithm;
        let shard = &self.shards[self.shard_of(hash)].0;
        let mut shard = shard.lock();
        let now = shard.advance(now);
        if !shard.has_receipts(hash) {
            // No receipt was issued for it since it was last forgotten:
            // nothing can claim anything back, so it is forgotten at once.
            shard.remove(hash, |e| is_key(&e.key));
            return;
        }
        let Some((entry, ledger)) = shard.entry_and_ledger(hash, &is_key) else {
            return;
        };
        algorithm.reset(&mut entry.state, ledger, now);
        let after = algorithm.forgettable_at(&entry.state, ledger);
        if after <= now {
            shard.remove(hash, |e| is_key(&e.key));
        } else {
            shard.refile(after, hash, &is_key);
        }
    }

    /// The check under every key type: `is_key` recognises the stored key,
    /// `to_key` makes it, only if it is stored. A `DRY` run (a peek) decides
    /// on copies and stores nothing, and does not move the shard's time;
    /// the upkeep it may do (forgetting keys no receipt can use) changes no
    /// decision.
    #[inline(always)]
    fn decide<const DRY: bool>(
        &self,
        hash: u64,
        is_key: impl Fn(&K) -> bool,
        to_key: impl FnOnce() -> K,
        cost: u32,
    ) -> Result<Decision, Error> {
        self.decide_marked::<DRY, false, Decision>(hash, is_key, to_key, cost, &mut Mark::None)
    }

    /// [`Keyed::decide`], answering an `O` (a whole decision, or a lean
    /// verdict), and, when `MARK`, writing what the admission leaves for a
    /// receipt into `mark` (beside the answer, not in it, so that a check
    /// without a receipt returns its decision where the caller wants it).
    ///
    /// A key the table holds is decided here, on its own state, whether or
    /// not it is back to full capacity: that state decides exactly as a key
    /// never seen, so a client that comes back finds its key in place and
    /// pays no upkeep. Everything else ([`Keyed::decide_untracked`]) is out
    /// of line.
    #[inline(always)]
    fn decide_marked<'s, const DRY: bool, const MARK: bool, O: Outcome<'s, A>>(
        &'s self,
        hash: u64,
        is_key: impl Fn(&K) -> bool,
        to_key: impl FnOnce() -> K,
        cost: u32,
        mark: &mut Mark,
    ) -> Result<O, Error> {
        // Read before locking: the clock is the slow part of a check.
        let now = clamp_instant(self.clock.now_micros());
        let own = self.shard_of(hash);
        let mut shard = self.shards[own].0.lock();
        // A peek decides at the shard's time without moving it: after a
        // clock went back, a later check must decide as if the peek never
        // happened.
        let at = if DRY {
            now.max(shard.latest)
        } else {
            shard.advance(now)
        };
        if let Some(outcome) =
            self.decide_tracked::<DRY, MARK, O>(&mut shard, at, hash, &is_key, cost, mark)
        {
            return outcome;
        }
        self.decide_untracked::<DRY, MARK, O>(shard, own, now, hash, is_key, to_key, cost, mark)
    }

    /// Decides for the key `is_key` recognises at `at`, if the shard tracks
    /// it.
    #[inline(always)]
    fn decide_tracked<'s, const DRY: bool, const MARK: bool, O: Outcome<'s, A>>(
        &'s self,
        shard: &mut Shard<K, A::State, A::Ledger>,
        at: u64,
        hash: u64,
        is_key: &impl Fn(&K) -> bool,
        cost: u32,
        mark: &mut Mark,
    ) -> Option<Result<O, Error>> {
        let algorithm = &self.algorithm;
        let entry = shard.table.find_mut(hash, |e| is_key(&e.key))?;
        if DRY {
            return Some(O::decide(algorithm, &mut entry.state.clone(), at, cost));
        }
        let decision = match O::decide(algorithm, &mut entry.state, at, cost) {
            Ok(decision) => decision,
            Err(error) => return Some(Err(error)),
        };
        if MARK && decision.allowed() && cost > 0 {
            let stamp = shard.stamp(algorithm, hash, is_key, at);
            *mark = stamp.map_or(Mark::None, Mark::Own);
        }
        Some(Ok(decision))
    }

    /// The check of a key the shard does not track (or no longer: another
    /// thread may have stored it while the lock was let go): the shard's
    /// upkeep, a slot for the key if it needs one, else the flood policy.
    /// `shard` is locked, `now` the clock's reading.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn decide_untracked<'s, const DRY: bool, const MARK: bool, O: Outcome<'s, A>>(
        &'s self,
        mut shard: parking_lot::MutexGuard<'s, Shard<K, A::State, A::Ledger>>,
        own: usize,
        now: u64,
        hash: u64,
        is_key: impl Fn(&K) -> bool,
        to_key: impl FnOnce() -> K,
        cost: u32,
        mark: &mut Mark,
    ) -> Result<O, Error> {
        let algorithm = &self.algorithm;
        let admitted = |outcome: &O| MARK && outcome.allowed() && cost > 0;
        // Whether a key was looked for in the other shards (once per check),
        // and (a peek) found.
        let (mut asked_elsewhere, mut room_elsewhere) = (false, false);
        loop {
            let (now, upkeep) = if DRY {
                (now.max(shard.latest), shard.latest)
            } else {
                let now = shard.advance(now);
                (now, now)
            };
            // A check of a key the table does not hold forgets keys idle for
            // longer than the grace (a bounded amount): idle keys go without
            // a chore, and as fast as new keys come. A peek forgets keys only
            // as of the time already recorded.
            shard.forget_idle(algorithm, upkeep, UPKEEP_PER_CHECK, Some(hash));
            if asked_elsewhere
                && let Some(outcome) =
                    self.decide_tracked::<DRY, MARK, O>(&mut shard, now, hash, &is_key, cost, mark)
            {
                return outcome;
            }

            // A peek makes no room; it asks whether a check at its instant
            // would (some key forgettable by then), and decides as that
            // check. A check takes its slot at once (given back if the key
            // is not stored).
            let room = if DRY {
                shard.has_room() || room_elsewhere || shard.next_room(algorithm, now) == Some(0)
            } else {
                shard.claim() || (shard.make_room(algorithm, upkeep) && shard.claim())
            };
            if !room && !asked_elsewhere && shard.below_own_bound() && self.any_other_due(own, now)
            {
                // Only the shared bound keeps the key out, and another shard
                // may hold a key to forget: look there (never holding two
                // shards' locks), then decide again.
                drop(shard);
                asked_elsewhere = true;
                room_elsewhere = self.room_elsewhere::<DRY>(own, now);
                shard = self.shards[own].0.lock();
                continue;
            }
            if let (false, FloodPolicy::Sketch { depth, .. }) = (room, self.flood) {
                if DRY {
                    let decision = match &shard.sketch {
                        Some(sketch) => sketch.peek(algorithm, hash, now, cost),
                        None => algorithm.decide(&mut algorithm.initial_state(), now, cost),
                    }?;
                    return Ok(O::made(decision));
                }
                let width = self.sketch_cells_per_shard() / depth;
                let decision = shard
                    .sketch
                    .get_or_insert_with(|| Sketch::new(algorithm, width, depth))
                    .decide(algorithm, hash, now, cost)?;
                let decision = O::made(decision);
                if admitted(&decision) {
                    *mark = Mark::Shared;
                }
                return Ok(decision);
            }
            let claimed = room && !DRY;
            // A key that was decided by the sketch starts from its cells' debt.
            let mut state = shard
                .sketch
                .as_ref()
                .and_then(|sketch| sketch.seed(algorithm, hash, now))
                .unwrap_or_else(|| algorithm.initial_state());
            let decision = match O::decide(algorithm, &mut state, now, cost) {
                Ok(decision) => decision,
                Err(error) => {
                    if claimed {
                        shard.unclaim();
                    }
                    return Err(error);
                }
            };
            if algorithm.full_at(&state) <= now {
                // Nothing to remember: a peek, or a refusal of a full key.
                if claimed {
                    shard.unclaim();
                }
                return Ok(decision);
            }
            if !room {
                let mut wait = shard.next_room(algorithm, now);
                if shard.below_own_bound() {
                    // A slot freed in any shard would do.
                    drop(shard);
                    wait = self.next_room_elsewhere(own, now, wait);
                }
                return Err(Error::TooManyKeys {
                    max_keys: self.max_keys,
                    // No key at all to wait for: a table given no room.
                    retry_after: wait.map_or(Duration::MAX, Duration::from_micros),
                });
            }
            if DRY {
                return Ok(decision);
            }
            shard.insert(algorithm, hash, to_key(), state);
            if admitted(&decision) {
                let stamp = shard.stamp(algorithm, hash, &is_key, now);
                *mark = stamp.map_or(Mark::None, Mark::Own);
            }
            return Ok(decision);
        }
    }

    /// The shard of a key hashed to `hash`.
    #[inline]
    fn shard_of(&self, hash: u64) -> usize {
        // hashbrown uses the low bits (bucket) and the top 7 (tag): pick the
        // shard from bits in between so both stay fully random within it.
        // Fits: the mask is below the number of shards.
        ((hash >> 32) & self.shard_mask) as usize
    }

    /// Some shard other than `own` may hold a key forgettable at `now`
    /// (its index says so, without its lock).
    #[inline]
    fn any_other_due(&self, own: usize, now: u64) -> bool {
        (0..self.shards.len()).any(|i| i != own && self.budget.may_be_due(i, now))
    }

    /// Frees a slot in a shard other than `own` where a key is back to full
    /// capacity at `now`, each shard at its own time as a check would see
    /// it; a `DRY` run (a peek) only says whether a check would. Called with
    /// no shard locked.
    fn room_elsewhere<const DRY: bool>(&self, own: usize, now: u64) -> bool {
        (0..self.shards.len()).any(|i| {
            if i == own || !self.budget.may_be_due(i, now) {
                return false;
            }
            let mut shard = self.shards[i].0.lock();
            if DRY {
                let at = now.max(shard.latest);
                shard.next_room(&self.algorithm, at) == Some(0)
            } else {
                let at = shard.advance(now);
                shard.make_room(&self.algorithm, at)
            }
        })
    }

    /// The earliest wait from `now` until a slot frees in any shard, given
    /// `own`'s (`wait`). Called with no shard locked. A shard whose index
    /// (published without its lock, never later than its earliest key)
    /// cannot beat the wait found so far is not locked: during a flood under
    /// [`FloodPolicy::Refuse`], a refusal then usually locks one other shard,
    /// not all of them.
    fn next_room_elsewhere(&self, own: usize, now: u64, wait: Option<u64>) -> Option<u64> {
        let others = || (0..self.shards.len()).filter(move |&i| i != own);
        // The likeliest first: the shard with the earliest hint.
        let first = others().min_by_key(|&i| self.budget.hint(i));
        let mut best = wait;
        for i in first
            .into_iter()
            .chain(others().filter(|&i| Some(i) != first))
        {
            let hint = self.budget.hint(i);
            if hint == shard::NEVER || best.is_some_and(|b| hint.saturating_sub(now) >= b) {
                continue;
            }
            let found = self.shards[i].0.lock().next_room(&self.algorithm, now);
            best = best.into_iter().chain(found).min();
        }
        best
    }

    fn sketch_cells_per_shard(&self) -> usize {
        match self.flood {
            FloodPolicy::Sketch { cells, depth } => {
                // At least one cell per row; whole rows, as the sketch sizes
                // them.
                let per_shard = cells.div_ceil(self.shards.len()).max(depth);
                sketch::row_width(per_shard / depth) * depth
            }
            FloodPolicy::Refuse => 0,
        }
    }

    /// The number of keys tracked exactly now: keys back to full capacity
    /// are counted until their shard forgets them (past the idle grace, at
    /// the next upkeep that reaches them; see [`KeyedBuilder::idle_grace`]).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().table.len()).sum()
    }

    /// No key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound on the number of keys tracked exactly: the number asked for.
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// What happens to new keys when the table is full.
    pub fn flood_policy(&self) -> FloodPolicy {
        self.flood
    }

    /// Heap bytes held now by the tables, indexes and cells (not by the keys
    /// or what states own).
    pub fn allocated_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().bytes()).sum()
    }

    /// Forgets every key back to full capacity now. Never needed for
    /// correctness or to bound memory: shards forget keys by themselves.
    ///
    /// Time as this sweep sees it (never before what each shard has already
    /// seen) is recorded, so that a clock going back afterwards cannot meet
    /// a key forgotten at a later instant.
    pub fn sweep(&self) {
        let now = clamp_instant(self.clock.now_micros());
        for shard in self.shards.iter() {
            let mut shard = shard.0.lock();
            let now = shard.advance(now);
            shard.forget_due(&self.algorithm, now, usize::MAX, None);
        }
    }

    /// The algorithm and its parameters.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The clock read on every check.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<A: Algorithm, C: Clock> Limiter for Keyed<A, C, ByteKey> {
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

impl<A: Algorithm, C: Clock> RateLimiter for Keyed<A, C, ByteKey> {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        Keyed::check(self, key, cost)
    }

    fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        Keyed::peek(self, key, cost)
    }

    fn check_with_receipt(
        &self,
        key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        Keyed::check_with_receipt(self, key, cost)
    }

    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        Keyed::settle(self, receipt, actual)
    }

    fn reset(&self, key: &[u8]) -> Result<(), Error> {
        Keyed::reset(self, key);
        Ok(())
    }
}

impl<A: Algorithm + fmt::Debug, C: fmt::Debug, K> fmt::Debug for Keyed<A, C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            .field("algorithm", &self.algorithm)
            .field("clock", &self.clock)
            .field("shards", &self.shards.len())
            .field("max_keys", &self.max_keys)
            .field("flood", &self.flood)
            .finish_non_exhaustive()
    }
}

/// What a check of the store answers: a whole [`Decision`], or a lean
/// [`Verdict`] that computes it when asked.
trait Outcome<'a, A: Algorithm>: Sized {
    /// Decides a request of `cost` at `now` from `state`, changing it as
    /// [`Algorithm::decide`] does.
    fn decide(algorithm: &'a A, state: &mut A::State, now: u64, cost: u32) -> Result<Self, Error>;

    /// The outcome of a decision already made whole (by the flood cells).
    fn made(decision: Decision) -> Self;

    /// The request passed.
    fn allowed(&self) -> bool;
}

impl<'a, A: Algorithm> Outcome<'a, A> for Decision {
    #[inline(always)]
    fn decide(algorithm: &'a A, state: &mut A::State, now: u64, cost: u32) -> Result<Self, Error> {
        algorithm.decide(state, now, cost)
    }

    #[inline(always)]
    fn made(decision: Decision) -> Self {
        decision
    }

    #[inline(always)]
    fn allowed(&self) -> bool {
        self.allowed
    }
}

impl<'a, A: Algorithm> Outcome<'a, A> for Verdict<'a, A> {
    #[inline(always)]
    fn decide(algorithm: &'a A, state: &mut A::State, now: u64, cost: u32) -> Result<Self, Error> {
        if <A::Cell as StateCell>::ONE_WORD {
            let before = state.clone();
            // Only `allowed` is read: the compiler drops the rest.
            let allowed = algorithm.decide(state, now, cost)?.allowed;
            return Ok(Verdict::replay(algorithm, before, now, cost, allowed));
        }
        algorithm.decide(state, now, cost).map(Verdict::made)
    }

    #[inline(always)]
    fn made(decision: Decision) -> Self {
        Verdict::made(decision)
    }

    #[inline(always)]
    fn allowed(&self) -> bool {
        Verdict::allowed(self)
    }
}
