//! Toy algorithms for the store's tests (the real ones live in crates that
//! depend on this one), a bound oracle, and a small deterministic PRNG.

#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU64, Ordering};

use ratelab_core::toolkit::{AtomicCell, ensure_fits};
use ratelab_core::{Algorithm, Decision, Error, Quota};

/// GCRA, as `ratelab-gcra` computes it, counting how often the store asks
/// for `full_at` (what a scan of a shard would call once per key).
#[derive(Debug)]
pub struct Toy {
    quota: Quota,
    interval: u64,
    tolerance: u64,
    pub full_at_calls: AtomicU64,
}

impl Toy {
    pub fn new(quota: Quota) -> Self {
        Toy {
            quota,
            interval: quota.emission_interval_micros(),
            tolerance: quota.burst_tolerance_micros(),
            full_at_calls: AtomicU64::new(0),
        }
    }

    pub fn calls(&self) -> u64 {
        self.full_at_calls.load(Ordering::Relaxed)
    }

    /// The bound GCRA keeps: in every closed interval of length `t`, at most
    /// `burst + floor(t / T)` units.
    pub fn bound(&self) -> Bound {
        Bound {
            burst: u64::from(self.quota.burst()),
            interval: self.interval,
        }
    }
}

impl Algorithm for Toy {
    type State = u64;
    type Cell = AtomicCell;
    type Ledger = u64;

    fn name(&self) -> &'static str {
        "toy-gcra"
    }

    fn quota(&self) -> &Quota {
        &self.quota
    }

    fn capacity(&self) -> u64 {
        u64::from(self.quota.burst())
    }

    fn bound(&self) -> ratelab_core::Bound {
        ratelab_core::Bound::rate(&self.quota)
    }

    fn initial_state(&self) -> u64 {
        0
    }

    fn decide(&self, tat: &mut u64, now: u64, cost: u32) -> Result<Decision, Error> {
        let limit = self.capacity();
        let cost = ensure_fits(cost, limit)?;
        let current = (*tat).max(now);
        let next = current + cost * self.interval;
        let room = |tat: u64| (now + self.tolerance).saturating_sub(tat) / self.interval;
        if next <= now + self.tolerance {
            if cost > 0 {
                *tat = next;
            }
            return Ok(Decision::admitted(limit)
                .with_remaining(room(next))
                .with_reset_after_micros(next - now));
        }
        Ok(Decision::refused(limit)
            .with_remaining(room(current))
            .with_retry_after_micros(next - self.tolerance - now)
            .with_reset_after_micros(current - now))
    }

    fn full_at(&self, tat: &u64) -> u64 {
        self.full_at_calls.fetch_add(1, Ordering::Relaxed);
        *tat
    }
}

/// In every closed interval `[a, b]`: at most `burst + floor((b - a) / interval)`.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    pub burst: u64,
    pub interval: u64,
}

impl Bound {
    /// The first interval breaking the bound in `admitted` (instants of unit
    /// admissions, in order), if any. O(n²) in the worst case, but stops an
    /// interval as soon as it cannot break the bound any more.
    pub fn violation(&self, admitted: &[u64]) -> Option<(u64, u64, u64)> {
        for (i, &first) in admitted.iter().enumerate() {
            for (j, &last) in admitted.iter().enumerate().skip(i) {
                let count = (j - i + 1) as u64;
                let allowed = self.burst + (last - first) / self.interval;
                if count > allowed {
                    return Some((first, last, count));
                }
            }
        }
        None
    }
}

/// xorshift64*: reproducible randomness without a dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
