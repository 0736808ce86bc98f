//! Pre-generated random keys and a pre-generated random order to visit them
//! in, so that ratelab and governor see exactly the same accesses and no
//! random number is drawn inside a measurement.

/// SplitMix64: a tiny, well-mixed, seedable generator. Distinct states give
/// distinct outputs (it is a bijection of a counter), so the keys it draws
/// never repeat.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`; the modulo bias is below 2^-40 for the
    /// sizes used here).
    pub fn below(&mut self, n: usize) -> usize {
        let n = u64::try_from(n).expect("a usize fits in a u64");
        usize::try_from(self.next_u64() % n).expect("below n, a usize")
    }
}

/// `n` distinct random `u64` keys, and a random sequence of accesses to them.
#[derive(Debug, Clone)]
pub struct KeySet {
    /// The keys, each once.
    pub keys: Vec<u64>,
    /// Keys drawn uniformly from `keys`; the length is a power of two, so a
    /// bench cycles through it with a mask.
    pub accesses: Vec<u64>,
}

impl KeySet {
    /// `n` keys and `2^accesses_log2` accesses, from a fixed seed: every run
    /// and every limiter gets the same ones.
    pub fn new(n: usize, accesses_log2: u32) -> Self {
        let mut rng = SplitMix64::new(0x7261_7465_6C61_6221 ^ n as u64);
        let keys: Vec<u64> = (0..n).map(|_| rng.next_u64()).collect();
        let accesses = (0..1_usize << accesses_log2)
            .map(|_| keys[rng.below(n)])
            .collect();
        KeySet { keys, accesses }
    }

    /// A cursor over the accesses, from the first.
    pub fn cursor(&self) -> Cursor<'_> {
        Cursor {
            accesses: &self.accesses,
            mask: self.accesses.len() - 1,
            next: 0,
        }
    }
}

/// `n` distinct random `u64` keys (those of `KeySet::new(n, _)`) in a
/// random order, to be visited in turn, round after round: each key comes
/// back exactly `n` checks after its last visit.
pub fn visiting_order(n: usize) -> Vec<u64> {
    let mut keys = KeySet::new(n, 0).keys;
    let mut rng = SplitMix64::new(0x006f_7264_6572);
    for i in (1..keys.len()).rev() {
        keys.swap(i, rng.below(i + 1));
    }
    keys
}

/// Cycles through a [`KeySet`]'s accesses: one load and one add per key.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    accesses: &'a [u64],
    mask: usize,
    next: usize,
}

impl Cursor<'_> {
    /// The next key to check.
    #[inline]
    pub fn next_key(&mut self) -> u64 {
        let key = self.accesses[self.next & self.mask];
        self.next = self.next.wrapping_add(1);
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn distinct_keys_and_accesses_among_them() {
        let set = KeySet::new(10_000, 16);
        let keys: HashSet<u64> = set.keys.iter().copied().collect();
        assert_eq!(keys.len(), 10_000);
        assert_eq!(set.accesses.len(), 1 << 16);
        assert!(set.accesses.iter().all(|k| keys.contains(k)));
        // Random access: most keys are visited, none dominates.
        let visited: HashSet<u64> = set.accesses.iter().copied().collect();
        assert!(visited.len() > 9_000, "{}", visited.len());
    }

    #[test]
    fn the_cursor_cycles() {
        let set = KeySet::new(10, 2);
        let mut cursor = set.cursor();
        let first: Vec<u64> = (0..4).map(|_| cursor.next_key()).collect();
        let again: Vec<u64> = (0..4).map(|_| cursor.next_key()).collect();
        assert_eq!(first, set.accesses);
        assert_eq!(first, again);
    }

    #[test]
    fn the_visiting_order_holds_every_key_once() {
        let order = visiting_order(1_000);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        let mut keys = KeySet::new(1_000, 0).keys;
        keys.sort_unstable();
        assert_eq!(sorted, keys);
        assert_ne!(order, KeySet::new(1_000, 0).keys, "shuffled");
    }

    #[test]
    fn same_seed_same_keys() {
        assert_eq!(KeySet::new(100, 4).accesses, KeySet::new(100, 4).accesses);
    }
}
