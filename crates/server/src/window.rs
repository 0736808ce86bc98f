//! `envoy-fixed-window`: counting as envoyproxy/ratelimit counts, in
//! memory or on Redis with the very keys it writes.
//!
//! A counter per descriptor and window of the limit's unit on the wall
//! clock (UTC): `<prefix><domain>_<key>_<value>_..._<window start, Unix
//! seconds>`. Every hit is added with `INCRBY` (refused ones too), then
//! `EXPIRE` for the unit plus a random jitter, all of a request's
//! descriptors in one pipeline (one round trip on one node; on a Redis
//! Cluster, one pipeline per key, all at once). A descriptor is over its
//! limit when its counter passes `requests_per_unit`; `limit_remaining`
//! is what is left (0 when over); `duration_until_reset` the time to the
//! window's end, in whole seconds.
//!
//! With [`Settings::stop_increment_when_over_limit`] (the reference's
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`), the counters are read first
//! and, when one of the request's descriptors would go over, only those
//! descriptors are added to. A local cache (the reference's
//! `LOCAL_CACHE_SIZE_IN_BYTES`) remembers the keys found over their limit
//! until their window ends, and answers them without a round trip.
//!
//! Because the keys are the reference's, replicas of envoyproxy/ratelimit
//! and of ratelab-server on the same Redis (and the same
//! `CACHE_KEY_PREFIX`) share their counts: a fleet can move from one to
//! the other a replica at a time.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use ratelab::redis::Connection;

use crate::config::{Limit, Unit};
use crate::stats::{LimitStats, Stats};

/// How the counters are kept and answered.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// `CACHE_KEY_PREFIX`.
    pub(crate) prefix: String,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    pub(crate) stop_increment_when_over_limit: bool,
    /// `NEAR_LIMIT_RATIO` (0.8).
    pub(crate) near_limit_ratio: f32,
    /// `EXPIRATION_JITTER_MAX_SECONDS` (300): added to each key's expiry
    /// at random, so that keys written together do not expire together.
    pub(crate) expiration_jitter_max_seconds: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            prefix: String::new(),
            stop_increment_when_over_limit: false,
            near_limit_ratio: 0.8,
            expiration_jitter_max_seconds: 300,
        }
    }
}

/// One descriptor counted this way.
pub(crate) struct Hit {
    /// The counter's key, window included.
    pub(crate) key: String,
    pub(crate) hits: u64,
    pub(crate) limit: Arc<Limit>,
    pub(crate) unit: Unit,
    pub(crate) stats: Arc<LimitStats>,
}

/// What one descriptor's check said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    /// Over the limit (before shadow mode: a shadow limit over it is
    /// answered `OK`).
    pub(crate) over: bool,
    /// `OK` after shadow mode.
    pub(crate) ok: bool,
    pub(crate) remaining: u32,
}

/// The counter's key for a descriptor: the prefix, the domain, each entry's
/// key and value (or the wildcard its counter is shared under), and the
/// window's start in Unix seconds.
pub(crate) fn cache_key(
    prefix: &str,
    domain: &str,
    entries: &[(&str, &str)],
    share: Option<&[String]>,
    unit: Unit,
    now_secs: u64,
) -> String {
    let mut key = String::with_capacity(prefix.len() + domain.len() + 32);
    key.push_str(prefix);
    key.push_str(domain);
    key.push('_');
    for (i, (k, v)) in entries.iter().enumerate() {
        key.push_str(k);
        key.push('_');
        match share.and_then(|s| s.get(i)).filter(|p| !p.is_empty()) {
            Some(pattern) => key.push_str(pattern),
            None => key.push_str(v),
        }
        key.push('_');
    }
    let divider = unit.seconds();
    key.push_str(&((now_secs / divider) * divider).to_string());
    key
}

/// Seconds to the end of the current window of `unit`.
pub(crate) fn until_reset(unit: Unit, now_secs: u64) -> u64 {
    let divider = unit.seconds();
    divider - now_secs % divider
}

/// Why the store did not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreError {
    /// It is away or too slow: a timeout, a lost connection.
    Outage(String),
    /// It answered with an error (a key of another type, an overflow).
    Data(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Outage(why) => write!(f, "the backend is unavailable: {why}"),
            StoreError::Data(why) => write!(f, "the backend answered an error: {why}"),
        }
    }
}

/// One `INCRBY` and its `EXPIRE`.
pub(crate) struct Increment<'a> {
    pub(crate) key: &'a str,
    pub(crate) by: u64,
    pub(crate) expire_secs: u64,
    pub(crate) per_second: bool,
}

/// The counters in this process: one replica only. Bounded: past its
/// capacity a new key is counted in one of a fixed set of shared cells
/// (several keys to a cell), which can only refuse sooner, never admit
/// more than a key's own counter would.
#[derive(Debug)]
pub(crate) struct Memory {
    shards: Vec<Mutex<Shard>>,
    cells: Vec<Mutex<Cell>>,
    hasher: std::collections::hash_map::RandomState,
    per_shard: usize,
}

#[derive(Debug, Default)]
struct Shard {
    counters: HashMap<Box<str>, Cell>,
    next_sweep: u64,
}

#[derive(Debug, Default, Clone, Copy)]
struct Cell {
    count: u64,
    /// Unix seconds.
    expires: u64,
}

const SHARDS: usize = 64;

impl Memory {
    pub(crate) fn new(max_keys: usize) -> Self {
        let per_shard = max_keys.div_ceil(SHARDS).max(1);
        let cells = (per_shard * SHARDS / 16).clamp(64, 1 << 16);
        Memory {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            cells: (0..cells).map(|_| Mutex::new(Cell::default())).collect(),
            hasher: Default::default(),
            per_shard,
        }
    }

    /// The key's shard and, should it overflow, its shared cell.
    fn place(&self, key: &str) -> (usize, usize) {
        let hash = self.hasher.hash_one(key);
        let low = usize::try_from(hash & 0xFFFF_FFFF).unwrap_or(0);
        let high = usize::try_from(hash >> 32).unwrap_or(0);
        (low % SHARDS, high % self.cells.len())
    }

    fn get(&self, key: &str, now: u64) -> u64 {
        let (shard, overflow) = self.place(key);
        let shard = self.shards[shard].lock();
        match shard.counters.get(key) {
            Some(cell) if cell.expires > now => cell.count,
            Some(_) => 0,
            None => {
                let cell = *self.cells[overflow].lock();
                if cell.expires > now { cell.count } else { 0 }
            }
        }
    }

    fn incr(&self, key: &str, by: u64, expire_secs: u64, now: u64) -> Result<u64, StoreError> {
        let by = i64::try_from(by)
            .map_err(|_| StoreError::Data("value is not an integer or out of range".into()))?
            as u64;
        let add = |cell: &mut Cell| -> Result<u64, StoreError> {
            if cell.expires <= now {
                *cell = Cell::default();
            }
            let count = cell
                .count
                .checked_add(by)
                .filter(|c| i64::try_from(*c).is_ok())
                .ok_or_else(|| StoreError::Data("increment or decrement would overflow".into()))?;
            cell.count = count;
            cell.expires = cell.expires.max(now + expire_secs);
            Ok(count)
        };
        let (shard, overflow) = self.place(key);
        let mut shard = self.shards[shard].lock();
        if let Some(cell) = shard.counters.get_mut(key) {
            return add(cell);
        }
        if shard.counters.len() >= self.per_shard && shard.next_sweep <= now {
            shard.counters.retain(|_, cell| cell.expires > now);
            shard.next_sweep = now + 1;
        }
        if shard.counters.len() < self.per_shard {
            let cell = shard.counters.entry(key.into()).or_default();
            return add(cell);
        }
        drop(shard);
        let mut cell = self.cells[overflow].lock();
        add(&mut cell)
    }

    /// Keys held now (for tests of the bound).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().counters.len()).sum()
    }
}

/// The counters on Redis: the main connection, and the one for limits per
/// second when there is one (the reference's `REDIS_PERSECOND_*`).
#[derive(Debug, Clone)]
pub(crate) struct Redis {
    pub(crate) main: Connection,
    pub(crate) per_second: Option<Connection>,
}

fn redis_error(e: redis::RedisError) -> StoreError {
    if e.is_timeout()
        || e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
        || e.is_cluster_error()
    {
        StoreError::Outage(e.to_string())
    } else {
        StoreError::Data(e.to_string())
    }
}

fn as_count(value: &redis::Value) -> Result<u64, StoreError> {
    match value {
        redis::Value::Int(n) => {
            u64::try_from(*n).map_err(|_| StoreError::Data(format!("a counter is negative: {n}")))
        }
        redis::Value::Nil => Ok(0),
        redis::Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| StoreError::Data("a counter is not a number".into())),
        redis::Value::ServerError(e) => Err(StoreError::Data(format!("{e:?}"))),
        other => Err(StoreError::Data(format!("unexpected reply {other:?}"))),
    }
}

impl Redis {
    fn connection(&self, per_second: bool) -> &Connection {
        match (&self.per_second, per_second) {
            (Some(c), true) => c,
            _ => &self.main,
        }
    }

    /// `GET` each key (missing: 0).
    async fn get(&self, keys: &[(&str, bool)]) -> Result<Vec<u64>, StoreError> {
        let mut groups: Vec<(bool, Vec<usize>)> = Vec::new();
        for per_second in [false, true] {
            let indexes: Vec<usize> = (0..keys.len())
                .filter(|&i| (keys[i].1 && self.per_second.is_some()) == per_second)
                .collect();
            if !indexes.is_empty() {
                groups.push((per_second, indexes));
            }
        }
        let mut counts = vec![0; keys.len()];
        for (per_second, indexes) in groups {
            let connection = self.connection(per_second);
            let commands: Vec<Vec<redis::Cmd>> = indexes
                .iter()
                .map(|&i| {
                    let mut cmd = redis::cmd("GET");
                    cmd.arg(keys[i].0);
                    vec![cmd]
                })
                .collect();
            let replies = run(connection, commands).await?;
            for (&i, reply) in indexes.iter().zip(replies) {
                counts[i] = as_count(&reply[0])?;
            }
        }
        Ok(counts)
    }

    /// `INCRBY` and `EXPIRE` each key; the counts after.
    async fn incr(&self, ops: &[Increment<'_>]) -> Result<Vec<u64>, StoreError> {
        let mut counts = vec![0; ops.len()];
        for per_second in [false, true] {
            let indexes: Vec<usize> = (0..ops.len())
                .filter(|&i| (ops[i].per_second && self.per_second.is_some()) == per_second)
                .collect();
            if indexes.is_empty() {
                continue;
            }
            let commands: Vec<Vec<redis::Cmd>> = indexes
                .iter()
                .map(|&i| {
                    let op = &ops[i];
                    let mut incr = redis::cmd("INCRBY");
                    incr.arg(op.key).arg(op.by);
                    let mut expire = redis::cmd("EXPIRE");
                    expire.arg(op.key).arg(op.expire_secs);
                    vec![incr, expire]
                })
                .collect();
            let replies = run(self.connection(per_second), commands).await?;
            for (&i, reply) in indexes.iter().zip(replies) {
                counts[i] = as_count(&reply[0])?;
            }
        }
        Ok(counts)
    }
}

/// Runs groups of commands, each group on one key: on one node (or the
/// master Sentinel names) all in one pipeline; on a cluster, one pipeline
/// per group, all at once. Each group's replies.
async fn run(
    connection: &Connection,
    groups: Vec<Vec<redis::Cmd>>,
) -> Result<Vec<Vec<redis::Value>>, StoreError> {
    match connection {
        Connection::Single(manager) => {
            let mut pipe = redis::pipe();
            let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
            for cmd in groups.into_iter().flatten() {
                pipe.add_command(cmd);
            }
            let replies: Vec<redis::Value> = pipe
                .query_async(&mut manager.clone())
                .await
                .map_err(redis_error)?;
            let mut replies = replies.into_iter();
            Ok(sizes
                .into_iter()
                .map(|n| replies.by_ref().take(n).collect())
                .collect())
        }
        Connection::Cluster(cluster) => {
            let calls = groups.into_iter().map(|group| {
                let mut cluster = cluster.clone();
                async move {
                    let mut pipe = redis::pipe();
                    for cmd in group {
                        pipe.add_command(cmd);
                    }
                    pipe.query_async::<Vec<redis::Value>>(&mut cluster).await
                }
            });
            futures::future::join_all(calls)
                .await
                .into_iter()
                .map(|r| r.map_err(redis_error))
                .collect()
        }
        // The master's connection is the Sentinel wrapper's own: each
        // command alone, all at once (the multiplexed connection writes
        // them together).
        other => {
            let calls = groups.into_iter().map(|group| async move {
                let mut replies = Vec::with_capacity(group.len());
                for cmd in &group {
                    replies.push(other.query::<redis::Value>(cmd).await?);
                }
                Ok::<_, redis::RedisError>(replies)
            });
            futures::future::join_all(calls)
                .await
                .into_iter()
                .map(|r| r.map_err(redis_error))
                .collect()
        }
    }
}

/// The keys found over their limit, until their window ends, within a
/// budget of bytes (the reference's `LOCAL_CACHE_SIZE_IN_BYTES`).
#[derive(Debug)]
pub(crate) struct LocalCache {
    max_bytes: usize,
    state: Mutex<LocalState>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Debug, Default)]
struct LocalState {
    /// Key and when it expires (Unix seconds).
    keys: HashMap<Box<str>, u64>,
    bytes: usize,
}

/// What an entry costs besides its key.
const ENTRY_OVERHEAD: usize = 48;

impl LocalCache {
    pub(crate) fn new(max_bytes: usize) -> Self {
        LocalCache {
            max_bytes,
            state: Mutex::new(LocalState::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn contains(&self, key: &str, now: u64) -> bool {
        let mut state = self.state.lock();
        let found = match state.keys.get(key) {
            Some(&expires) if expires > now => true,
            Some(_) => {
                state.keys.remove(key);
                state.bytes -= key.len() + ENTRY_OVERHEAD;
                false
            }
            None => false,
        };
        let counter = if found { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    fn insert(&self, key: &str, ttl: u64, now: u64) {
        let size = key.len() + ENTRY_OVERHEAD;
        let mut state = self.state.lock();
        if state.keys.contains_key(key) {
            state.keys.insert(key.into(), now + ttl);
            return;
        }
        if state.bytes + size > self.max_bytes {
            let before = state.keys.len();
            state.keys.retain(|_, expires| *expires > now);
            let removed: usize = before - state.keys.len();
            // Recomputed: the removed keys' sizes are not kept apart.
            state.bytes = state.keys.keys().map(|k| k.len() + ENTRY_OVERHEAD).sum();
            let _ = removed;
        }
        if state.bytes + size <= self.max_bytes {
            state.keys.insert(key.into(), now + ttl);
            state.bytes += size;
        }
    }

    pub(crate) fn report(&self, stats: &Stats) {
        stats.gauge(
            "ratelimit.localcache.hitCount",
            self.hits.load(Ordering::Relaxed),
        );
        stats.gauge(
            "ratelimit.localcache.missCount",
            self.misses.load(Ordering::Relaxed),
        );
        stats.gauge(
            "ratelimit.localcache.entryCount",
            self.state.lock().keys.len() as u64,
        );
    }
}

/// Where the counters are.
#[derive(Debug)]
pub(crate) enum Store {
    Memory(Memory),
    Redis {
        redis: Redis,
        local: Option<LocalCache>,
    },
}

/// A small random source for the expiry jitter.
#[derive(Debug)]
pub(crate) struct Jitter(AtomicU64);

impl Jitter {
    pub(crate) fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9E37_79B9_7F4A_7C15, |d| {
                // The low bits are what varies: a seed.
                #[allow(clippy::cast_possible_truncation)]
                let seed = d.as_nanos() as u64;
                seed
            });
        Jitter(AtomicU64::new(seed))
    }

    /// A number in `0..max` (0 when `max` is 0).
    fn below(&self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        // splitmix64
        let mut z = self
            .0
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % max
    }
}

/// The reference's `DoLimit` for the descriptors it counts: the answers in
/// the order of `hits`, and the statistics it keeps.
pub(crate) async fn check(
    store: &Store,
    settings: &Settings,
    jitter: &Jitter,
    hits: &[Hit],
    now: u64,
    timeout: Duration,
) -> Result<Vec<Answer>, StoreError> {
    for hit in hits {
        hit.stats.total_hits.add(hit.hits);
    }
    let n = hits.len();
    let mut cached_over = vec![false; n];
    let mut any_cached_over = false;
    if let Store::Redis {
        local: Some(local), ..
    } = store
    {
        for (i, hit) in hits.iter().enumerate() {
            if local.contains(&hit.key, now) {
                cached_over[i] = true;
                any_cached_over = true;
            }
        }
    }

    // Stopping at the limit: read first; a descriptor that would pass its
    // limit is "near", and only near ones are added to.
    let mut near = vec![false; n];
    let mut any_near = false;
    if settings.stop_increment_when_over_limit && !any_cached_over {
        let counts = match store {
            Store::Memory(memory) => hits.iter().map(|h| memory.get(&h.key, now)).collect(),
            Store::Redis { redis, .. } => {
                let keys: Vec<(&str, bool)> = hits
                    .iter()
                    .map(|h| (h.key.as_str(), h.unit == Unit::Second))
                    .collect();
                within(timeout, redis.get(&keys)).await?
            }
        };
        for (i, hit) in hits.iter().enumerate() {
            if counts[i].saturating_add(hit.hits) > u64::from(hit.limit.requests_per_unit) {
                near[i] = true;
                any_near = true;
            }
        }
    }
    let addend = |i: usize| -> u64 {
        let hits = hits[i].hits;
        if !settings.stop_increment_when_over_limit {
            hits
        } else if any_cached_over {
            0
        } else if !any_near || near[i] {
            hits
        } else {
            0
        }
    };

    let indexes: Vec<usize> = (0..n).filter(|&i| !cached_over[i]).collect();
    let ops: Vec<Increment<'_>> = indexes
        .iter()
        .map(|&i| Increment {
            key: &hits[i].key,
            by: addend(i),
            expire_secs: hits[i].unit.seconds()
                + jitter.below(settings.expiration_jitter_max_seconds),
            per_second: hits[i].unit == Unit::Second,
        })
        .collect();
    let counts = match store {
        Store::Memory(memory) => ops
            .iter()
            .map(|op| memory.incr(op.key, op.by, op.expire_secs, now))
            .collect::<Result<Vec<_>, _>>()?,
        Store::Redis { redis, .. } if !ops.is_empty() => within(timeout, redis.incr(&ops)).await?,
        Store::Redis { .. } => Vec::new(),
    };
    let mut results = vec![0u64; n];
    for (&i, count) in indexes.iter().zip(counts) {
        results[i] = count;
    }

    let local = match store {
        Store::Redis { local, .. } => local.as_ref(),
        Store::Memory(_) => None,
    };
    Ok(hits
        .iter()
        .enumerate()
        .map(|(i, hit)| answer(settings, hit, results[i], cached_over[i], local, now))
        .collect())
}

async fn within<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| Err(StoreError::Outage(format!("no answer within {timeout:?}"))))
}

/// The count past which hits are "near" the limit: the reference's
/// `floor(float32(limit) * ratio)`, in single precision as it computes it.
pub(crate) fn near_threshold(limit: u64, ratio: f32) -> u64 {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let near = ((limit as f32) * ratio).floor() as u64;
    near
}

/// The reference's `GetResponseDescriptorStatus` for one descriptor whose
/// counter is now `after`: its answer and its statistics.
fn answer(
    settings: &Settings,
    hit: &Hit,
    after: u64,
    cached_over: bool,
    local: Option<&LocalCache>,
    now: u64,
) -> Answer {
    let stats = &hit.stats;
    let hits = hit.hits;
    let limit = u64::from(hit.limit.requests_per_unit);
    let before = after.wrapping_sub(hits);
    let near_threshold = near_threshold(limit, settings.near_limit_ratio);
    let (over, remaining) = if cached_over {
        stats.over_limit.add(hits);
        stats.over_limit_with_local_cache.add(hits);
        (true, 0)
    } else if after > limit {
        if before >= limit {
            stats.over_limit.add(hits);
        } else {
            stats.over_limit.add(after - limit);
            stats.near_limit.add(limit - near_threshold.max(before));
        }
        if let Some(local) = local {
            local.insert(&hit.key, hit.unit.seconds(), now);
        }
        (true, 0)
    } else {
        if after > near_threshold {
            if before >= near_threshold {
                stats.near_limit.add(hits);
            } else {
                stats.near_limit.add(after - near_threshold);
            }
        }
        stats.within_limit.add(hits);
        // At most `requests_per_unit`, a u32.
        (false, u32::try_from(limit - after).unwrap_or(u32::MAX))
    };
    if over && hit.limit.shadow {
        if cached_over || before >= limit {
            stats.shadow_mode.add(hits);
        } else {
            stats.shadow_mode.add(after - limit);
        }
    }
    Answer {
        over,
        ok: !over || hit.limit.shadow,
        remaining,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(requests_per_unit: u32, shadow: bool) -> Arc<Limit> {
        let mut limit = Limit::from_override("d.k".into(), requests_per_unit, Unit::Minute);
        limit.shadow = shadow;
        Arc::new(limit)
    }

    fn hit(key: &str, hits: u64, limit: &Arc<Limit>, stats: &Stats) -> Hit {
        Hit {
            key: key.into(),
            hits,
            limit: limit.clone(),
            unit: Unit::Minute,
            stats: stats.limit(&limit.full_key),
        }
    }

    async fn ask(store: &Store, settings: &Settings, hits: &[Hit], now: u64) -> Vec<(bool, u32)> {
        check(
            store,
            settings,
            &Jitter::new(),
            hits,
            now,
            Duration::from_secs(1),
        )
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.ok, a.remaining))
        .collect()
    }

    #[test]
    fn keys_are_the_references() {
        let key = cache_key(
            "p_",
            "d",
            &[("a", "1"), ("b", "2")],
            None,
            Unit::Minute,
            1_000_030,
        );
        assert_eq!(key, "p_d_a_1_b_2_1000020");
        let shared = ["".to_owned(), "x*".to_owned()];
        let key = cache_key(
            "",
            "d",
            &[("a", "1"), ("b", "xy")],
            Some(&shared),
            Unit::Second,
            7,
        );
        assert_eq!(key, "d_a_1_b_x*_7");
        assert_eq!(until_reset(Unit::Minute, 1_000_030), 50);
        assert_eq!(until_reset(Unit::Minute, 1_000_020), 60);
    }

    #[tokio::test]
    async fn refused_hits_are_counted_and_stopping_keeps_the_others() {
        let stats = Stats::default();
        let store = Store::Memory(Memory::new(1000));
        let settings = Settings::default();
        let five = limit(5, false);
        // 3, then 3 more: over, and counted (6).
        assert_eq!(
            ask(&store, &settings, &[hit("k", 3, &five, &stats)], 60).await,
            [(true, 2)]
        );
        assert_eq!(
            ask(&store, &settings, &[hit("k", 3, &five, &stats)], 60).await,
            [(false, 0)]
        );
        // Even one more is over now.
        assert_eq!(
            ask(&store, &settings, &[hit("k", 1, &five, &stats)], 60).await,
            [(false, 0)]
        );
        // The next window is another key: it starts afresh.
        let next = cache_key("", "d", &[("k", "v")], None, Unit::Minute, 120);
        assert_eq!(
            ask(&store, &settings, &[hit(&next, 1, &five, &stats)], 120).await,
            [(true, 4)]
        );
        assert_eq!(
            stats.value("ratelimit.service.rate_limit.d.k.total_hits"),
            8
        );
        assert_eq!(
            stats.value("ratelimit.service.rate_limit.d.k.over_limit"),
            2
        );

        // Stopping: a request with one descriptor over leaves the other.
        let stop = Settings {
            stop_increment_when_over_limit: true,
            ..Settings::default()
        };
        let store = Store::Memory(Memory::new(1000));
        let twenty = limit(20, false);
        let ten = limit(10, false);
        for i in 1..=12u32 {
            let answers = ask(
                &store,
                &stop,
                &[hit("a", 1, &twenty, &stats), hit("b", 1, &ten, &stats)],
                60,
            )
            .await;
            let expected = if i <= 10 {
                [(true, 20 - i), (true, 10 - i)]
            } else {
                [(true, 10), (false, 0)]
            };
            assert_eq!(answers, expected, "request {i}");
        }
    }

    #[tokio::test]
    async fn zero_is_always_over_and_shadow_answers_ok() {
        let stats = Stats::default();
        let store = Store::Memory(Memory::new(10));
        let settings = Settings::default();
        let zero = limit(0, false);
        assert_eq!(
            ask(&store, &settings, &[hit("z", 1, &zero, &stats)], 5).await,
            [(false, 0)]
        );
        let shadow = limit(1, true);
        let answers: Vec<_> = [
            ask(&store, &settings, &[hit("s", 1, &shadow, &stats)], 5).await,
            ask(&store, &settings, &[hit("s", 1, &shadow, &stats)], 5).await,
        ]
        .concat();
        assert_eq!(answers, [(true, 0), (true, 0)]);
        assert_eq!(
            stats.value("ratelimit.service.rate_limit.d.k.shadow_mode"),
            1
        );
    }

    #[test]
    fn memory_is_bounded_and_overflow_never_admits_more() {
        let memory = Memory::new(64);
        for i in 0..10_000 {
            memory.incr(&format!("k{i}"), 1, 60, 0).unwrap();
        }
        assert!(memory.len() <= 64, "{}", memory.len());
        // A key counted in a shared cell sees at least its own count.
        for _ in 0..3 {
            memory.incr("late", 1, 60, 0).unwrap();
        }
        assert!(memory.get("late", 0) >= 3);
        // Expired counters make room again.
        memory.incr("fresh", 1, 60, 100).unwrap();
        assert_eq!(memory.get("fresh", 100), 1);
        assert!(memory.incr("x", u64::MAX, 60, 0).is_err());
    }

    #[test]
    fn the_local_cache_keeps_to_its_budget_and_forgets_ended_windows() {
        let cache = LocalCache::new(200);
        cache.insert("a", 60, 0);
        assert!(cache.contains("a", 59));
        assert!(!cache.contains("a", 60));
        for i in 0..100 {
            cache.insert(&format!("key-{i}"), 60, 100);
        }
        let state = cache.state.lock();
        assert!(state.bytes <= 200 && !state.keys.is_empty());
    }
}
