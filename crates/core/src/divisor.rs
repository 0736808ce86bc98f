//! [`Divisor`]: division by a quota's fixed interval as a multiply and a
//! shift, exact for every value a decision computes.

use std::num::NonZeroU64;

/// Values below `2^BITS` are divided by multiplication: every instant and
/// span a decision computes stays below 2^53 (see
/// [`MAX_INSTANT_MICROS`](crate::MAX_INSTANT_MICROS)).
const BITS: u32 = 53;

/// A divisor fixed once (an algorithm's emission interval), dividing by one
/// 64 × 64 → 128-bit multiply and a shift instead of a 64-bit `div` (tens of
/// cycles on common x86 cores, the largest single cost of a GCRA check).
///
/// **Exact.** With `l = ceil(log2 d)` and `m = floor(2^(53 + l) / d) + 1`,
/// `2^(53 + l) < m × d <= 2^(53 + l) + 2^l`, so `floor(n / d) = floor(m × n
/// / 2^(53 + l))` for every `n < 2^53` (Granlund and Montgomery, *Division by
/// Invariant Integers using Multiplication*, 1994, Theorem 4.2). `m` fits in
/// 55 bits and `m × n` in 108. Larger `n` take the `div` instruction, so
/// [`Divisor::divide`] equals `n / d` for every `n`.
///
/// ```
/// use ratelab_core::toolkit::Divisor;
///
/// let third = Divisor::new(3);
/// assert_eq!(third.divide(10), 3);
/// assert_eq!(third.divide(u64::MAX), u64::MAX / 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Divisor {
    /// Non-zero by type, so that the `div` of large values has no
    /// division-by-zero panic: a decision whose result is dropped (the
    /// compare-and-swap loop's) then costs nothing for its divisions.
    divisor: NonZeroU64,
    multiplier: u64,
    /// `53 + l` is split into a shift of `n` left before the multiply and
    /// one of the product's high word right after, so that neither is a
    /// 128-bit shift: `pre = 64 - (53 + l)` when that is positive (`n <<
    /// pre` stays below 2^64), else `post = 53 + l - 64`.
    pre: u32,
    post: u32,
}

impl Divisor {
    /// Division by `divisor`.
    ///
    /// # Panics
    ///
    /// If `divisor` is zero.
    #[inline]
    pub const fn new(divisor: u64) -> Self {
        let Some(nonzero) = NonZeroU64::new(divisor) else {
            panic!("division by zero")
        };
        // ceil(log2 d): 0 for 1, 64 - lz(d - 1) above.
        let log = u64::BITS - (divisor - 1).leading_zeros();
        let shift = BITS + log;
        // Fits: below 2^(53 + 1) + 1, as d > 2^(l - 1).
        #[allow(clippy::cast_possible_truncation)]
        let multiplier = ((1u128 << shift) / divisor as u128) as u64 + 1;
        let (pre, post) = if shift < 64 {
            (64 - shift, 0)
        } else {
            (0, shift - 64)
        };
        Divisor {
            divisor: nonzero,
            multiplier,
            pre,
            post,
        }
    }

    /// The divisor.
    #[inline]
    pub const fn get(&self) -> u64 {
        self.divisor.get()
    }

    /// `n / divisor`, rounded down, exactly.
    #[inline]
    pub const fn divide(&self, n: u64) -> u64 {
        if n < 1 << BITS {
            // m × n / 2^(53 + l) = (m × (n << pre)) / 2^64 >> post. Fits:
            // the product's high word.
            #[allow(clippy::cast_possible_truncation)]
            let high = (((n << self.pre) as u128 * self.multiplier as u128) >> 64) as u64;
            high >> self.post
        } else {
            n / self.divisor.get()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divides_exactly_at_the_edges() {
        let divisors = [1, 2, 3, 7, 10, 1_000, 999_999, 1 << 20, (1 << 20) + 1]
            .into_iter()
            .chain([(1 << 32) - 1, 1 << 32, (1 << 52) + 3, 1 << 53, u64::MAX - 1])
            .chain([u64::MAX]);
        for d in divisors {
            let divisor = Divisor::new(d);
            let near = |x: u64| [x.saturating_sub(1), x, x.saturating_add(1)];
            let numerators = [0, 1, 2, d - 1, d, d.saturating_add(1)]
                .into_iter()
                .chain(near(d.saturating_mul(3)))
                .chain(near((1 << BITS) - 1))
                .chain(near(((1 << BITS) - 1) / d * d))
                .chain([u64::MAX]);
            for n in numerators {
                assert_eq!(divisor.divide(n), n / d, "{n} / {d}");
            }
        }
    }

    #[test]
    fn divides_exactly_at_random() {
        // splitmix64: reproducible, no dependency.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        for _ in 0..200_000 {
            let d = (next() >> (next() % 64)).max(1);
            let n = next() >> (next() % 64);
            let n_small = n & ((1 << BITS) - 1);
            let divisor = Divisor::new(d);
            assert_eq!(divisor.divide(n), n / d, "{n} / {d}");
            assert_eq!(divisor.divide(n_small), n_small / d, "{n_small} / {d}");
        }
    }
}
