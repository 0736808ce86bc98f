//! Token bucket: tokens refill at a steady rate up to a capacity; a request
//! takes as many tokens as it costs, or none.
//!
//! The state is whole tokens and the instant the last whole token was counted:
//! a partial token is never rounded into existence, it stays as the time since
//! `last`. All arithmetic is integer microseconds.
//!
//! **Quota mapping.** Capacity = the quota's burst; one token every
//! `T = ceil(period / limit)` µs. In any closed interval of length `t`, at
//! most `burst + floor(t / T)` tokens are spent.
//!
//! ```
//! use ratelab_core::{Keyed, ManualClock, Quota};
//! use ratelab_token_bucket::TokenBucket;
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! // The reference article's bucket: capacity 10, 5 tokens per second.
//! let quota = Quota::per_second(5)?.with_burst(10)?;
//! let limiter = Keyed::with_clock(TokenBucket::new(quota), clock.clone());
//!
//! let admitted = (0..20).filter(|_| limiter.check(b"client", 1).unwrap().allowed).count();
//! assert_eq!(admitted, 10);
//! assert_eq!(limiter.check(b"client", 1)?.retry_after_secs(), 1);
//!
//! clock.advance(Duration::from_secs(1));
//! let admitted = (0..10).filter(|_| limiter.check(b"client", 1).unwrap().allowed).count();
//! assert_eq!(admitted, 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod remote;

use ratelab_core::toolkit::Debt;
use ratelab_core::toolkit::{LockedCell, RemoteForm, Shifts, ensure_fits};
use ratelab_core::{Algorithm, Bound, Decision, Error, Quota};

/// Token bucket parameters derived from a [`Quota`]. See the crate docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    quota: Quota,
    /// Tokens when full.
    capacity: u64,
    /// µs per token.
    interval: u64,
}

/// A bucket: whole tokens, and when the last whole token was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bucket {
    /// Whole tokens in the bucket at `last`.
    tokens: u64,
    /// The instant `tokens` was counted, µs; the next token arrives
    /// `interval` after it. Never moves backwards, but for a settlement
    /// (which brings the next token sooner); ahead of now when a settlement
    /// charged more than the bucket held (no token arrives before then).
    last: u64,
}

impl Bucket {
    /// `tokens` whole tokens counted at instant `last` (as a store that
    /// keeps the state elsewhere read it back).
    #[inline]
    pub const fn from_parts(tokens: u64, last: u64) -> Self {
        Bucket { tokens, last }
    }

    /// Whole tokens in the bucket at [`Bucket::last`].
    #[inline]
    pub const fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The instant the tokens were counted, µs.
    #[inline]
    pub const fn last(&self) -> u64 {
        self.last
    }
}

impl TokenBucket {
    /// A token bucket for `quota`.
    #[inline]
    pub fn new(quota: Quota) -> Self {
        TokenBucket {
            quota,
            capacity: u64::from(quota.burst()),
            interval: quota.emission_interval_micros(),
        }
    }

    /// µs per token.
    #[inline]
    pub fn interval_micros(&self) -> u64 {
        self.interval
    }

    /// Adds the whole tokens that arrived by `now`, keeping the fraction of
    /// the next one as time since `last`.
    #[inline]
    fn refill(&self, bucket: &mut Bucket, now: u64) {
        if now <= bucket.last {
            // Nothing arrived, or the clock went back: time stands still.
            return;
        }
        let arrived = (now - bucket.last) / self.interval;
        if bucket.tokens + arrived >= self.capacity {
            bucket.tokens = self.capacity;
            bucket.last = now;
        } else {
            bucket.tokens += arrived;
            bucket.last += arrived * self.interval;
        }
    }

    /// The instant the bucket holds `tokens` tokens, given what it holds now.
    #[inline]
    fn when_holding(&self, bucket: &Bucket, tokens: u64) -> u64 {
        bucket.last + tokens.saturating_sub(bucket.tokens) * self.interval
    }
}

impl Algorithm for TokenBucket {
    type State = Bucket;
    type Cell = LockedCell<Bucket>;
    type Ledger = Shifts;
    const REFUNDS: bool = true;

    #[inline]
    fn name(&self) -> &'static str {
        <Self as RemoteForm>::NAME
    }

    #[inline]
    fn quota(&self) -> &Quota {
        &self.quota
    }

    #[inline]
    fn capacity(&self) -> u64 {
        self.capacity
    }

    #[inline]
    fn bound(&self) -> Bound {
        Bound::rate(&self.quota)
    }

    #[inline]
    fn initial_state(&self) -> Bucket {
        Bucket {
            tokens: self.capacity,
            last: 0,
        }
    }

    #[inline]
    fn decide(&self, stored: &mut Bucket, now: u64, cost: u32) -> Result<Decision, Error> {
        let cost = ensure_fits(cost, self.capacity)?;
        // Refill a copy: only an admission with a cost is written back, so a
        // refusal or a peek changes nothing (and costs the Redis script no
        // write).
        let mut bucket = *stored;
        self.refill(&mut bucket, now);
        if cost <= bucket.tokens {
            bucket.tokens -= cost;
            if cost > 0 {
                *stored = bucket;
            }
            let full_at = self.when_holding(&bucket, self.capacity);
            return Ok(Decision::admitted(self.capacity)
                .with_remaining(bucket.tokens)
                .with_reset_after_micros(full_at.saturating_sub(now)));
        }
        Ok(Decision::refused(self.capacity)
            .with_remaining(bucket.tokens)
            .with_retry_after_micros(self.when_holding(&bucket, cost) - now)
            .with_reset_after_micros(
                self.when_holding(&bucket, self.capacity)
                    .saturating_sub(now),
            ))
    }

    #[inline]
    fn full_at(&self, bucket: &Bucket) -> u64 {
        self.when_holding(bucket, self.capacity)
    }

    // stamp, settle, reset and forgettable_at: a debt's (`ratelab_core::toolkit::debt`).
    ratelab_core::debt_receipts!();
}

/// The bucket is full again when it holds its capacity.
impl Debt for TokenBucket {
    #[inline]
    fn interval_micros(&self) -> u64 {
        self.interval
    }

    #[inline]
    fn tolerance_micros(&self) -> u64 {
        self.capacity * self.interval
    }

    /// Makes `bucket` full again at `full_at`, as seen at `now`: the tokens
    /// it lacks then, and the time since the last whole one (less than one
    /// interval). Past empty, `last` moves ahead of now: no token arrives
    /// before then, and the bucket decides as GCRA's TAT of `full_at` would.
    #[inline]
    fn set_full_at(&self, bucket: &mut Bucket, full_at: u64, now: u64) {
        if full_at <= now {
            *bucket = Bucket {
                tokens: self.capacity,
                last: now,
            };
            return;
        }
        let missing = (full_at - now).div_ceil(self.interval);
        *bucket = if missing <= self.capacity {
            Bucket {
                tokens: self.capacity - missing,
                // Before the clock's first interval has passed, the last
                // whole token may fall before instant 0: the bucket then
                // counts from 0, full a fraction of an interval after
                // `full_at`, never before.
                last: full_at.saturating_sub(missing * self.interval),
            }
        } else {
            Bucket {
                tokens: 0,
                last: full_at - self.capacity * self.interval,
            }
        };
    }
}
