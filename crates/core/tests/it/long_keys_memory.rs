//! Keys of a megabyte each cost the store no more than short ones: the
//! process's resident memory stays within the store's documented bound.
//! Alone in its test binary, so no other test's allocations blur the figure.

// Small test figures (random draws below a few thousand, key counts).
#![allow(clippy::cast_possible_truncation)]

use crate::common;

use common::Toy;
use ratelab_core::{FloodPolicy, Keyed, MAX_EXACT_KEY_LEN, ManualClock, Quota};

/// Resident memory of this process, in bytes (Linux).
fn rss_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn a_flood_of_one_mebibyte_keys_stays_within_the_bound() {
    const KEY_LEN: usize = 1 << 20;
    const MAX_KEYS: usize = 64;
    let limiter = Keyed::builder(Toy::new(Quota::per_hour(1).unwrap()))
        .clock(ManualClock::new())
        .max_keys(MAX_KEYS)
        .flood_policy(FloodPolicy::Refuse)
        .build();
    // One buffer, changed in place: the test itself allocates nothing per key.
    let mut key = vec![0u8; KEY_LEN];
    let before = rss_bytes().expect("/proc/self/status: this test runs on Linux");
    for i in 0..2 * MAX_KEYS as u64 {
        key[..8].copy_from_slice(&i.to_le_bytes());
        key[KEY_LEN - 8..].copy_from_slice(&i.to_be_bytes());
        let _ = limiter.check(&key, 1);
    }
    let after = rss_bytes().unwrap();
    assert_eq!(limiter.len(), MAX_KEYS);
    let grown = after.saturating_sub(before);
    let bound = limiter.memory_bound_bytes();
    println!(
        "{} keys of 1 MiB tracked: resident memory grew {} KiB; the store's bound is {} KiB \
         ({} bytes per key slot)",
        MAX_KEYS,
        grown / 1024,
        bound / 1024,
        bound / MAX_KEYS
    );
    // Before, each key was stored whole: 64 MiB here.
    // The allocator may keep a few pages of its own beyond the store's bytes.
    assert!(
        grown <= bound + (2 << 20),
        "grew {grown} bytes, bound {bound}"
    );
    assert!(bound < MAX_KEYS * 8 * MAX_EXACT_KEY_LEN);
}
