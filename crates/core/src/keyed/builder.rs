//! [`KeyedBuilder`] and [`FloodPolicy`]: how a [`Keyed`] limiter is sized,
//! once, before it holds any state.

use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::time::Duration;

use super::key::ByteKey;
use super::sketch::MAX_DEPTH;
use super::{DEFAULT_MAX_KEYS, Keyed};
use crate::algorithm::Algorithm;
use crate::time::{Clock, SystemClock, duration_to_micros};

/// The most shards a [`Keyed`] limiter has: a larger request is clamped.
pub const MAX_SHARDS: usize = 1 << 16;

/// A shard chosen by default holds at least this many keys: fewer shards for
/// a small bound, so that no shard's share rounds down to nothing.
const MIN_KEYS_PER_DEFAULT_SHARD: usize = 64;

/// What a [`Keyed`] limiter does with a new key when its table is full and
/// no tracked key is back to full capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FloodPolicy {
    /// Refuse the new key with [`Error::TooManyKeys`](crate::Error::TooManyKeys),
    /// which says exactly when a slot frees (the earliest over the shards
    /// that could give the key one: each refusal reads every shard's
    /// earliest instant, published without its lock, and locks only the
    /// shards that could free a slot sooner than the best found so far,
    /// usually one). Every new client is shut out for as long as the flood
    /// lasts.
    Refuse,
    /// Decide the new key with a fixed set of shared algorithm states (a
    /// sketch; see the [`Keyed`] docs): new clients keep being served as long
    /// as the cells are not saturated, and no key is ever admitted past its
    /// bound. The default, with `cells` the power of two at or above
    /// 16 × `max_keys` and `depth = 1`.
    Sketch {
        /// Shared states in all, at most: split over the shards like the
        /// keys, each shard's row rounded down to a power of two (the widths
        /// at which every cell takes an equal share of keys).
        cells: usize,
        /// Cells per key (1 to 8): a request passes only if all of them
        /// admit it.
        depth: usize,
    },
}

impl FloodPolicy {
    /// A sketch of `cells` shared states, `depth` per key (clamped to 1..=8).
    pub const fn sketch(cells: usize, depth: usize) -> Self {
        let depth = if depth == 0 {
            1
        } else if depth > MAX_DEPTH {
            MAX_DEPTH
        } else {
            depth
        };
        FloodPolicy::Sketch { cells, depth }
    }

    /// The default for a table of `max_keys` keys: a sketch of at least
    /// sixteen cells per key slot (16 × `max_keys` rounded up to a power of
    /// two, so that the shards' rows use every cell), one cell per key.
    /// Sized for a flood of ten tables' worth of owing keys (a light client
    /// keeps all of its share there; four cells per slot kept about a
    /// third): 16 to 32 × `size_of::<State>()` bytes per slot, 128 to 256
    /// for GCRA, reserved only once the table is full and written as the
    /// flood goes on.
    pub const fn default_for(max_keys: usize) -> Self {
        let cells = match max_keys.saturating_mul(16).checked_next_power_of_two() {
            Some(cells) => cells,
            None => 1 << (usize::BITS - 1),
        };
        FloodPolicy::sketch(cells, 1)
    }
}

/// Builds a [`Keyed`] limiter: `Keyed::builder(algorithm).clock(c).max_keys(n).build()`.
///
/// Every setting is given before the limiter exists, so no setting can drop
/// state a limiter already holds.
pub struct KeyedBuilder<A, C = SystemClock, K = ByteKey> {
    pub(super) algorithm: A,
    pub(super) clock: C,
    pub(super) max_keys: usize,
    pub(super) shards: Option<usize>,
    pub(super) flood: Option<FloodPolicy>,
    pub(super) seed: Option<u64>,
    pub(super) idle_grace: Option<Duration>,
    pub(super) keys: PhantomData<fn() -> K>,
}

impl<A: Algorithm> KeyedBuilder<A> {
    pub(super) fn new(algorithm: A) -> Self {
        KeyedBuilder {
            algorithm,
            clock: SystemClock,
            max_keys: DEFAULT_MAX_KEYS,
            shards: None,
            flood: None,
            seed: None,
            idle_grace: None,
            keys: PhantomData,
        }
    }
}

impl<A: Algorithm, C: Clock, K: Hash + Eq> KeyedBuilder<A, C, K> {
    /// The clock read on every check (the precise [`SystemClock`] by
    /// default; [`CoarseClock`](crate::CoarseClock) reads in under a
    /// nanosecond but lags, which lengthens the quota's intervals by the
    /// lag: see its docs).
    pub fn clock<C2: Clock>(self, clock: C2) -> KeyedBuilder<A, C2, K> {
        KeyedBuilder {
            algorithm: self.algorithm,
            clock,
            max_keys: self.max_keys,
            shards: self.shards,
            flood: self.flood,
            seed: self.seed,
            idle_grace: self.idle_grace,
            keys: PhantomData,
        }
    }

    /// Keys of type `K2` (`u64`, `IpAddr`, ...) checked with
    /// [`Keyed::check_key`], instead of byte strings. A typed key is stored
    /// as it is: its size is the caller's to bound.
    pub fn keys<K2: Hash + Eq>(self) -> KeyedBuilder<A, C, K2> {
        KeyedBuilder {
            algorithm: self.algorithm,
            clock: self.clock,
            max_keys: self.max_keys,
            shards: self.shards,
            flood: self.flood,
            seed: self.seed,
            idle_grace: self.idle_grace,
            keys: PhantomData,
        }
    }

    /// Tracks at most `max_keys` keys exactly ([`DEFAULT_MAX_KEYS`] by
    /// default). The bound is exactly this number, shared by the shards: a
    /// new key gets a slot while fewer than `max_keys` keys are tracked in
    /// all, unless its own shard already holds its share plus a quarter plus
    /// 64 (which keys spread by a random seed do not reach).
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Spreads the keys over `shards` locks, rounded up to a power of two and
    /// clamped to `1..=`[`MAX_SHARDS`]. By default four per core, fewer when
    /// `max_keys` is small (at least 64 keys per shard). The shards share
    /// the bound, so any number of them leaves every key room while the
    /// table as a whole has it.
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// What to do with new keys when the table is full (by default
    /// [`FloodPolicy::default_for`] the bound).
    pub fn flood_policy(mut self, policy: FloodPolicy) -> Self {
        self.flood = Some(policy);
        self
    }

    /// Seeds the hashes that spread keys over the shards and over the flood
    /// sketch's cells, and the digests of long keys: the same seed, shard
    /// count and calls give the same decisions in every process (for
    /// simulations and tests; the shard count defaults from the machine's
    /// cores, so set [`shards`](Self::shards) too for the same decisions on
    /// every machine). Random by default, and leave it so in a service: a
    /// client that knows the seed can aim its keys at one shard or at the
    /// sketch cells another key uses.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// How long a key back to full capacity stays tracked while there is
    /// room for it: by default the quota's period. A client that comes back
    /// within it finds its key in place (a lookup, no insertion); a key
    /// idle for longer is forgotten by the upkeep of checks of new keys, or
    /// before its shard's table grows. At the bound ([`max_keys`]) any key
    /// back to full capacity makes room for a new one at once, the longest
    /// idle first, whatever this grace.
    ///
    /// Keeping a key tracked never changes a decision: a key back to full
    /// capacity decides exactly as a key never seen. Only memory is traded:
    /// a shorter grace keeps the table closer to the keys in use; a longer
    /// one spares returning clients their insertion. Zero forgets keys as
    /// soon as they are full.
    ///
    /// [`max_keys`]: Self::max_keys
    pub fn idle_grace(mut self, grace: Duration) -> Self {
        self.idle_grace = Some(grace);
        self
    }

    /// The limiter.
    pub fn build(self) -> Keyed<A, C, K> {
        let shards = match self.shards {
            Some(shards) => shards.clamp(1, MAX_SHARDS).next_power_of_two(),
            None => default_shards(self.max_keys),
        };
        let flood = self
            .flood
            .unwrap_or(FloodPolicy::default_for(self.max_keys));
        let idle_grace = self.idle_grace.map_or_else(
            || self.algorithm.quota().period_micros(),
            duration_to_micros,
        );
        Keyed::from_parts(
            self.algorithm,
            self.clock,
            shards,
            self.max_keys,
            flood,
            self.seed,
            idle_grace,
        )
    }
}

/// Four shards per core, as dashmap does (little contention, little memory
/// per shard), but at least 64 keys each.
fn default_shards(max_keys: usize) -> usize {
    let parallelism = std::thread::available_parallelism().map_or(4, usize::from);
    let mut shards = (parallelism * 4).next_power_of_two().clamp(4, 256);
    while shards > 1 && max_keys / shards < MIN_KEYS_PER_DEFAULT_SHARD {
        shards /= 2;
    }
    shards
}

impl<A: fmt::Debug, C: fmt::Debug, K> fmt::Debug for KeyedBuilder<A, C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBuilder")
            .field("algorithm", &self.algorithm)
            .field("clock", &self.clock)
            .field("max_keys", &self.max_keys)
            .field("shards", &self.shards)
            .field("flood", &self.flood)
            .field("seed", &self.seed)
            .field("idle_grace", &self.idle_grace)
            .finish()
    }
}
