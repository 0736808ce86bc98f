//! [`Keyed`]: one bucket per key, in a sharded map that forgets keys by itself
//! and never holds more than a fixed number of them.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use hashbrown::HashTable;
use parking_lot::Mutex;

use crate::algorithm::Algorithm;
use crate::limiter::{Limiter, RateLimiter};
use crate::time::{Clock, MAX_INSTANT_MICROS, SystemClock};
use crate::{Decision, Error, Quota};

/// The default bound on the number of keys a [`Keyed`] limiter tracks.
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// A sweep visits every key of a shard once per this many checks at least, so
/// small shards are not swept on every check.
const MIN_CHECKS_PER_SWEEP: usize = 64;

/// A limiter with one state per key, for many clients in one process.
///
/// **Concurrency.** Keys are spread over shards by a randomly seeded hash
/// (foldhash), each shard a [`hashbrown::HashTable`] behind its own lock; a
/// check holds one shard's lock for one lookup and one decision. Two threads
/// contend only when their keys share a shard.
///
/// **Forgetting keys.** A key whose state is back to full capacity decides
/// exactly like a key never seen, so it is dropped: each shard sweeps its
/// keys once per as many checks as it holds keys (amortised O(1) per check),
/// and a request that would leave a key full (a peek, a refusal of a new key)
/// never stores it. No `retain_recent` chore for the caller.
///
/// **Bounded.** At most `max_keys` keys are tracked (the bound is split evenly
/// over the shards). When a new key arrives at a full shard, the shard first
/// forgets its keys that are back to full capacity; if none is, the new key is
/// refused with [`Error::TooManyKeys`], which says when a slot frees. Keys that
/// are not back to full capacity are never forgotten: forgetting one would let
/// its client start again from a full burst, admitting more than the quota. A
/// flood of new keys therefore cannot grow memory past the bound, and cannot
/// erase the debt of the clients already tracked; the cost is that new
/// clients are refused (an error, not a [`Decision`], so a failure policy can
/// tell it from an over-limit client) until the flood's own keys refill. A
/// full shard with nothing to forget is not rescanned until its earliest key
/// is due, so the flood costs O(1) per refused key.
///
/// **Time.** Each shard never lets time go backwards for its keys: a clock
/// that jumps back is treated as standing still.
///
/// Keys are `Vec<u8>` by default (checked as `&[u8]`); any `K: Hash + Eq` works,
/// e.g. `u64` or `IpAddr`.
pub struct Keyed<A: Algorithm, C = SystemClock, K = Vec<u8>> {
    algorithm: A,
    clock: C,
    hasher: foldhash::fast::RandomState,
    shards: Box<[LockedShard<K, A::State>]>,
    shard_mask: u64,
    max_keys_per_shard: usize,
}

/// One shard's lock and what it guards.
type LockedShard<K, S> = Padded<Mutex<Shard<K, S>>>;

struct Shard<K, S> {
    table: HashTable<(K, S)>,
    /// The latest instant this shard has seen: time never goes back here.
    latest: u64,
    /// Checks since the last sweep.
    checks: usize,
    /// No key of this shard is back to full capacity before this instant.
    no_room_until: u64,
}

/// Keeps each shard on its own cache line, so two threads working on
/// different shards do not invalidate each other's.
#[repr(align(64))]
struct Padded<T>(T);

impl<A: Algorithm> Keyed<A, SystemClock, Vec<u8>> {
    /// A keyed limiter on the system clock, with byte-string keys and the
    /// default bound of [`DEFAULT_MAX_KEYS`] keys.
    pub fn new(algorithm: A) -> Self {
        Self::with_clock(algorithm, SystemClock)
    }
}

impl<A: Algorithm, C: Clock> Keyed<A, C, Vec<u8>> {
    /// A keyed limiter on `clock`, with byte-string keys and the default
    /// bound of [`DEFAULT_MAX_KEYS`] keys.
    pub fn with_clock(algorithm: A, clock: C) -> Self {
        Self::typed(algorithm, clock)
    }

    /// Decides a request of weight `cost` for `key`: all or nothing. Cost 0 is
    /// a peek.
    pub fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.check_key(key, cost)
    }
}

impl<A: Algorithm, C: Clock, K: Hash + Eq> Keyed<A, C, K> {
    /// A keyed limiter on `clock` with keys of any type `K` (`u64`, `IpAddr`,
    /// ...), and the default bound of [`DEFAULT_MAX_KEYS`] keys.
    pub fn typed(algorithm: A, clock: C) -> Self {
        let parallelism = std::thread::available_parallelism().map_or(4, usize::from);
        // Four shards per core, as dashmap does: little contention, little
        // memory per shard.
        let shards = (parallelism * 4).next_power_of_two().clamp(4, 256);
        Self::build(algorithm, clock, shards, DEFAULT_MAX_KEYS)
    }

    /// The same limiter with at most `max_keys` keys tracked (at least one
    /// per shard).
    pub fn with_max_keys(self, max_keys: usize) -> Self {
        let shards = self.shards.len();
        Self::build(self.algorithm, self.clock, shards, max_keys)
    }

    /// The same limiter with `shards` shards (rounded up to a power of two,
    /// at least 1): more shards, less contention between threads.
    pub fn with_shards(self, shards: usize) -> Self {
        let max_keys = self.max_keys();
        Self::build(self.algorithm, self.clock, shards, max_keys)
    }

    fn build(algorithm: A, clock: C, shards: usize, max_keys: usize) -> Self {
        let shards = shards.max(1).next_power_of_two();
        let max_keys_per_shard = (max_keys / shards).max(1);
        Keyed {
            algorithm,
            clock,
            hasher: foldhash::fast::RandomState::default(),
            shards: (0..shards)
                .map(|_| {
                    Padded(Mutex::new(Shard {
                        table: HashTable::new(),
                        latest: 0,
                        checks: 0,
                        no_room_until: 0,
                    }))
                })
                .collect(),
            shard_mask: shards as u64 - 1,
            max_keys_per_shard,
        }
    }

    /// Decides a request of weight `cost` for `key`: all or nothing. Cost 0 is
    /// a peek.
    pub fn check_key<Q>(&self, key: &Q, cost: u32) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // Read before locking: the clock is the slow part of a check.
        let now = self.clock.now_micros().min(MAX_INSTANT_MICROS);
        let hash = self.hasher.hash_one(key);
        // hashbrown uses the low bits (bucket) and the top 7 (tag): pick the
        // shard from bits in between so both stay fully random within it.
        let shard = &self.shards[((hash >> 32) & self.shard_mask) as usize].0;
        let mut shard = shard.lock();
        let now = now.max(shard.latest);
        shard.latest = now;

        shard.checks += 1;
        if shard.checks >= shard.table.len().max(MIN_CHECKS_PER_SWEEP) {
            shard.sweep(&self.algorithm, now);
        }

        if let Some((_, state)) = shard.table.find_mut(hash, |(k, _)| k.borrow() == key) {
            return self.algorithm.decide(state, now, cost);
        }

        let mut state = self.algorithm.initial_state();
        let decision = self.algorithm.decide(&mut state, now, cost)?;
        if self.algorithm.full_at(&state) <= now {
            // Nothing to remember: a peek, or a refusal.
            return Ok(decision);
        }
        if shard.table.len() >= self.max_keys_per_shard {
            if now >= shard.no_room_until {
                shard.sweep(&self.algorithm, now);
            }
            if shard.table.len() >= self.max_keys_per_shard {
                return Err(Error::TooManyKeys {
                    max_keys: self.max_keys(),
                    retry_after: Duration::from_micros(shard.no_room_until.saturating_sub(now)),
                });
            }
        }
        shard.no_room_until = shard.no_room_until.min(self.algorithm.full_at(&state));
        let hasher = &self.hasher;
        shard
            .table
            .insert_unique(hash, (key.to_owned(), state), |(k, _)| hasher.hash_one(k));
        Ok(decision)
    }

    /// The number of keys tracked now (keys back to full capacity may still
    /// be counted until their shard's next sweep).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().table.len()).sum()
    }

    /// No key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bound on the number of keys tracked.
    pub fn max_keys(&self) -> usize {
        self.max_keys_per_shard * self.shards.len()
    }

    /// Forgets every key back to full capacity now. Never needed for
    /// correctness or to bound memory: shards sweep themselves.
    pub fn sweep(&self) {
        let now = self.clock.now_micros().min(MAX_INSTANT_MICROS);
        for shard in self.shards.iter() {
            let mut shard = shard.0.lock();
            let now = now.max(shard.latest);
            shard.sweep(&self.algorithm, now);
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

impl<K, S> Shard<K, S> {
    /// Forgets the keys back to full capacity at `now`, and notes when the
    /// earliest remaining one will be.
    fn sweep<A: Algorithm<State = S>>(&mut self, algorithm: &A, now: u64) {
        let mut earliest = u64::MAX;
        self.table.retain(|(_, state)| {
            let full_at = algorithm.full_at(state);
            if full_at <= now {
                return false;
            }
            earliest = earliest.min(full_at);
            true
        });
        self.no_room_until = earliest;
        self.checks = 0;
    }
}

impl<A: Algorithm, C: Clock> Limiter for Keyed<A, C, Vec<u8>> {
    fn quota(&self) -> Quota {
        *self.algorithm.quota()
    }

    fn algorithm_name(&self) -> &'static str {
        self.algorithm.name()
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}

impl<A: Algorithm, C: Clock> RateLimiter for Keyed<A, C, Vec<u8>> {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.check_key(key, cost)
    }
}

impl<A: Algorithm + fmt::Debug, C: fmt::Debug, K> fmt::Debug for Keyed<A, C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            .field("algorithm", &self.algorithm)
            .field("clock", &self.clock)
            .field("shards", &self.shards.len())
            .field("max_keys", &(self.max_keys_per_shard * self.shards.len()))
            .finish_non_exhaustive()
    }
}
