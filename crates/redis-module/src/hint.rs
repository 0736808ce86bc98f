//! Which read a check on the server's clock tries first: what the last such
//! check of a key decided, remembered by a bit of a fixed table that keys
//! share by their hash.
//!
//! A check after an admission opens its key to write and reads its expiry,
//! which proves most admissions before the key is read, so the string is
//! read in place and written over (one lookup, no `GET`). A check after a
//! refusal is likely refused: it reads with `GET` straight away, which
//! leaves the key as Redis stored it, and opens the key only if it writes.
//! The decision is always made on the bytes read: a wrong guess (a slot
//! another key shares, a key whose turn came) costs instructions, never an
//! admission.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bits in the table: 8 KiB, whatever the number of keys.
const SLOTS: usize = 1 << 16;

/// One bit a slot: set when the last check that hashed there was refused.
static REFUSED: [AtomicU64; SLOTS / 64] = [const { AtomicU64::new(0) }; SLOTS / 64];

/// A key's slot in the table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hint {
    word: usize,
    bit: u64,
}

impl Hint {
    /// The slot of the key named `key`.
    pub(crate) fn of(key: &[u8]) -> Hint {
        let slot = slot(key);
        Hint {
            word: slot / 64,
            bit: 1 << (slot % 64),
        }
    }

    /// Whether the last check in this slot was refused.
    pub(crate) fn refused_last(self) -> bool {
        REFUSED[self.word].load(Ordering::Relaxed) & self.bit != 0
    }

    /// Records what a check in this slot decided.
    pub(crate) fn record(self, refused: bool) {
        if self.refused_last() != refused {
            REFUSED[self.word].fetch_xor(self.bit, Ordering::Relaxed);
        }
    }
}

/// The slot of `key`: eight bytes at a time, multiplied and folded (keys
/// of one quota share their suffix, so every byte counts).
fn slot(key: &[u8]) -> usize {
    const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;
    let mix = |hash: u64, word: u64| {
        let hash = (hash ^ word).wrapping_mul(MULTIPLIER);
        hash ^ (hash >> 29)
    };
    let mut chunks = key.chunks_exact(8);
    let mut hash = key.len() as u64;
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        hash = mix(hash, u64::from_le_bytes(word));
    }
    let rest = chunks.remainder();
    let mut word = [0; 8];
    word[..rest.len()].copy_from_slice(rest);
    hash = mix(hash, u64::from_le_bytes(word)).wrapping_mul(MULTIPLIER);
    usize::try_from(hash >> (64 - SLOTS.trailing_zeros())).expect("a slot fits usize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_remembers_the_last_decision() {
        let hint = Hint::of(b"hint:test:a");
        hint.record(true);
        assert!(hint.refused_last());
        hint.record(true);
        assert!(hint.refused_last());
        hint.record(false);
        assert!(!hint.refused_last());
    }

    #[test]
    fn keys_that_share_a_suffix_spread_over_the_table() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..10_000 {
            seen.insert(slot(
                format!("ratelab:{{user{i}}}:gcra:42845743").as_bytes(),
            ));
        }
        // 10,000 keys over 65,536 slots: about 9,300 distinct if spread.
        assert!(seen.len() > 9_000, "{} slots", seen.len());
        assert!(slot(b"") < SLOTS && slot(&[0xff; 100]) < SLOTS);
    }
}
