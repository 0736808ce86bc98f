//! A local cache of refusals: a key refused with `retry_after = d` is refused
//! again without a round trip until `d` has passed, for a request of the same
//! cost.

use std::collections::HashMap;

use parking_lot::Mutex;
use ratelab_core::Decision;

/// Refusals remembered locally, per key.
pub(crate) struct RefusalCache {
    entries: Mutex<HashMap<Vec<u8>, Refusal>>,
    max_keys: usize,
}

#[derive(Clone, Copy)]
struct Refusal {
    /// The cost refused: requests of exactly this cost are refused again.
    /// A bigger one would need a later `retry_after`, which only the
    /// algorithm knows: it goes to the store.
    cost: u32,
    /// Until when, on the limiter's time source (µs).
    until: u64,
    /// When the key is full again, same clock.
    full_at: u64,
    limit: u64,
    remaining: u64,
}

impl RefusalCache {
    pub(crate) fn new(max_keys: usize) -> Self {
        RefusalCache {
            entries: Mutex::new(HashMap::new()),
            max_keys,
        }
    }

    pub(crate) fn refusal(&self, key: &[u8], cost: u32, now: u64) -> Option<Decision> {
        if cost == 0 {
            return None;
        }
        let mut entries = self.entries.lock();
        let refusal = *entries.get(key)?;
        if now >= refusal.until {
            entries.remove(key);
            return None;
        }
        (cost == refusal.cost).then(|| {
            Decision::refused(refusal.limit)
                .with_remaining(refusal.remaining)
                .with_retry_after_micros(refusal.until - now)
                .with_reset_after_micros(refusal.full_at.saturating_sub(now))
        })
    }

    /// Forgets `key`'s refusal: it got units back (a refund, a reset), so a
    /// refusal remembered before may no longer hold.
    pub(crate) fn forget(&self, key: &[u8]) {
        self.entries.lock().remove(key);
    }

    /// `now` was read before the request was sent: the store decided no earlier,
    /// so `now + retry_after` is never later than the instant it named.
    pub(crate) fn remember(&self, key: &[u8], cost: u32, now: u64, decision: &Decision) {
        let mut entries = self.entries.lock();
        if entries.len() >= self.max_keys {
            entries.retain(|_, r| r.until > now);
            if entries.len() >= self.max_keys {
                return;
            }
        }
        entries.insert(
            key.to_vec(),
            Refusal {
                cost,
                until: now + decision.retry_after_micros,
                full_at: now + decision.reset_after_micros,
                limit: decision.limit,
                remaining: decision.remaining,
            },
        );
    }
}
