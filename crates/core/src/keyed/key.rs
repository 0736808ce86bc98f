//! [`ByteKey`]: how a byte-string key is kept, so that a key's length never
//! decides how much memory the store holds.

use std::hash::{BuildHasher, DefaultHasher, Hash, Hasher, RandomState};

/// Byte-string keys up to this many bytes are kept as they are; longer ones
/// are kept as a 128-bit keyed digest (see [`ByteKey`]).
///
/// 64 bytes holds every IPv6 address in text, a UUID, a SHA-256 in hex, most
/// API keys and user names: the keys a limiter usually sees stay exact.
pub const MAX_EXACT_KEY_LEN: usize = 64;

/// Bytes hashed at a time when digesting a long key: both halves of the
/// digest are fed from the same cache-warm slice.
const DIGEST_CHUNK: usize = 4096;

/// A byte-string key as a [`Keyed`](crate::Keyed) limiter keeps it: the
/// bytes themselves up to [`MAX_EXACT_KEY_LEN`] bytes, else a 128-bit digest.
///
/// **The digest.** Two outputs of std's keyed, DoS-resistant hasher
/// (SipHash-1-3 today) under one random key drawn per limiter, each over the
/// key's bytes behind a different one-byte prefix, so the two halves are two
/// independent pseudo-random functions of the key. An outsider who does not
/// know the limiter's seed cannot aim for a collision; by the birthday bound
/// the probability that any two of `n` long keys tracked at once collide is
/// at most `n² / 2^129` (about 1.5 × 10⁻²⁷ for a million keys). A collision
/// only makes the two keys share one bucket: each is then limited by their
/// combined traffic, so it may refuse one of them early, never admit more
/// than the quota to either.
///
/// **The cost.** A long key is read twice by SipHash on every check (about a
/// nanosecond per byte); the store keeps 16 bytes whatever its length.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ByteKey(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Exact(Box<[u8]>),
    Digest([u64; 2]),
}

/// A key being looked up, before anything is allocated for it.
///
/// Hashes exactly as the [`ByteKey`] it would be stored as (the same
/// variants in the same order, a slice hashing as its box): the table keeps
/// no hash and hashes stored keys again.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Probe<'a> {
    Exact(&'a [u8]),
    Digest([u64; 2]),
}

impl Probe<'_> {
    /// Whether `key` is the key this probe looks for.
    #[inline]
    pub(super) fn matches(&self, key: &ByteKey) -> bool {
        match (self, &key.0) {
            (Probe::Exact(bytes), Repr::Exact(stored)) => *bytes == &stored[..],
            (Probe::Digest(digest), Repr::Digest(stored)) => digest == stored,
            _ => false,
        }
    }

    /// The key to store: at most [`MAX_EXACT_KEY_LEN`] bytes on the heap.
    #[inline]
    pub(super) fn to_key(self) -> ByteKey {
        ByteKey(match self {
            Probe::Exact(bytes) => Repr::Exact(bytes.into()),
            Probe::Digest(digest) => Repr::Digest(digest),
        })
    }
}

/// Turns byte strings into [`Probe`]s, digesting long ones under a seed of
/// its own: random, or the one the limiter was built with.
#[derive(Debug, Clone, Default)]
pub(super) struct Digester {
    random: RandomState,
    seed: Option<u64>,
}

impl Digester {
    /// Digests that are the same in every process for the same `seed`.
    pub(super) fn seeded(seed: u64) -> Self {
        Digester {
            random: RandomState::new(),
            seed: Some(seed),
        }
    }

    fn hasher(&self) -> DefaultHasher {
        match self.seed {
            None => self.random.build_hasher(),
            // SipHash under its fixed keys, keyed by the seed written first.
            Some(seed) => {
                let mut hasher = DefaultHasher::new();
                hasher.write_u64(seed);
                hasher
            }
        }
    }

    #[inline]
    pub(super) fn probe<'a>(&self, key: &'a [u8]) -> Probe<'a> {
        if key.len() <= MAX_EXACT_KEY_LEN {
            Probe::Exact(key)
        } else {
            Probe::Digest(self.digest(key))
        }
    }

    fn digest(&self, key: &[u8]) -> [u64; 2] {
        let mut low = self.hasher();
        let mut high = self.hasher();
        low.write_u8(0);
        high.write_u8(1);
        for chunk in key.chunks(DIGEST_CHUNK) {
            low.write(chunk);
            high.write(chunk);
        }
        // The length too, so that no two keys differ only in how they were
        // cut into writes.
        key.len().hash(&mut low);
        key.len().hash(&mut high);
        [low.finish(), high.finish()]
    }
}

impl ByteKey {
    /// The bytes heap-allocated for this key: its length if kept exact, else
    /// none (the digest sits inline).
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Exact(bytes) => bytes.len(),
            Repr::Digest(_) => 0,
        }
    }

    /// Whether the key is kept as a digest rather than as its bytes.
    pub fn is_digest(&self) -> bool {
        matches!(self.0, Repr::Digest(_))
    }
}

impl std::fmt::Debug for ByteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Exact(bytes) => f.debug_tuple("Exact").field(&bytes).finish(),
            Repr::Digest([low, high]) => write!(f, "Digest({high:016x}{low:016x})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_stay_exact_and_long_ones_become_digests() {
        let digester = Digester::default();
        let short = [7u8; MAX_EXACT_KEY_LEN];
        let long = [7u8; MAX_EXACT_KEY_LEN + 1];
        let key = digester.probe(&short).to_key();
        assert!(!key.is_digest());
        assert_eq!(key.heap_bytes(), MAX_EXACT_KEY_LEN);
        let key = digester.probe(&long).to_key();
        assert!(key.is_digest());
        assert_eq!(key.heap_bytes(), 0);
        assert!(digester.probe(&long).matches(&key));
        assert!(!digester.probe(&long[1..]).matches(&key));
    }

    #[test]
    fn a_stored_key_hashes_as_its_probe() {
        // The table stores no hash: a resize and the expiry index hash the
        // stored key, and must find what lookups of its probe find.
        let (digester, hasher) = (
            Digester::default(),
            foldhash::fast::SeedableRandomState::default(),
        );
        for len in [0, 1, MAX_EXACT_KEY_LEN, MAX_EXACT_KEY_LEN + 1, 5000] {
            let bytes = vec![3u8; len];
            let probe = digester.probe(&bytes);
            assert_eq!(hasher.hash_one(probe), hasher.hash_one(probe.to_key()));
        }
    }

    #[test]
    fn digests_differ_by_key_and_by_seed() {
        let (a, b) = (Digester::default(), Digester::default());
        let mut key = vec![0u8; 1000];
        let first = a.digest(&key);
        key[999] = 1;
        assert_ne!(a.digest(&key), first);
        assert_ne!(b.digest(&key), a.digest(&key));
        assert_ne!(first[0], first[1], "the two halves are independent");
        // Seeded: the same seed, the same digest; another seed, another.
        let (c, d) = (Digester::seeded(7), Digester::seeded(7));
        assert_eq!(c.digest(&key), d.digest(&key));
        assert_ne!(Digester::seeded(8).digest(&key), c.digest(&key));
    }
}
