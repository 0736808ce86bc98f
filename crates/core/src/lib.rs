//! The shared contract of ratelab's rate limiters.
//!
//! Every algorithm crate (`ratelab-gcra`, `ratelab-token-bucket`, ...) writes
//! its decision logic once as an [`Algorithm`]: a pure function of
//! `(state, now, cost)` on integer microseconds. This crate runs it in memory,
//! as one bucket ([`Direct`]) or one bucket per key ([`Keyed`], a bounded,
//! self-cleaning sharded map); each algorithm's [`RemoteForm`] (its key code,
//! parameters, stored encoding and Lua script, described by its own crate)
//! is how `ratelab-redis`, the native Redis module and the clients in other
//! languages run the same logic. Callers see [`RateLimiter`] (sync) or
//! [`AsyncRateLimiter`] (async; every `RateLimiter` is one), a [`Quota`] in,
//! a [`Decision`] out, and time from a [`Clock`].
//!
//! ```
//! use ratelab_core::{Algorithm, Bound, Decision, Error, Keyed, ManualClock, Quota, RateLimiter};
//! use ratelab_core::toolkit::AtomicCell;
//! use std::time::Duration;
//!
//! /// A toy algorithm: `burst` units, never refilled before `period` of rest.
//! #[derive(Debug)]
//! struct Allowance(Quota);
//!
//! impl Algorithm for Allowance {
//!     type State = u64; // (used << 32) | rest_start_secs, say; here: units used
//!     type Cell = AtomicCell;
//!     type Ledger = u64;
//!     fn name(&self) -> &'static str { "allowance" }
//!     fn quota(&self) -> &Quota { &self.0 }
//!     fn capacity(&self) -> u64 { self.0.burst().into() }
//!     fn bound(&self) -> Bound { Bound::Rate { burst: self.capacity(), interval: u64::MAX } }
//!     fn initial_state(&self) -> u64 { 0 }
//!     fn decide(&self, used: &mut u64, _now: u64, cost: u32) -> Result<Decision, Error> {
//!         let cost = u64::from(cost);
//!         if cost > self.capacity() {
//!             return Err(Error::CostTooHigh { cost: cost as u32, capacity: self.capacity() });
//!         }
//!         if *used + cost > self.capacity() {
//!             return Ok(Decision::refused(self.capacity())
//!                 .with_remaining(self.capacity() - *used)
//!                 .with_retry_after_micros(u64::MAX)
//!                 .with_reset_after_micros(u64::MAX));
//!         }
//!         *used += cost;
//!         Ok(Decision::admitted(self.capacity())
//!             .with_remaining(self.capacity() - *used)
//!             .with_reset_after_micros(u64::MAX))
//!     }
//!     fn full_at(&self, used: &u64) -> u64 { if *used == 0 { 0 } else { u64::MAX } }
//! }
//!
//! let clock = ManualClock::new();
//! let limiter = Keyed::with_clock(Allowance(Quota::per_minute(2)?), clock.clone());
//! assert!(limiter.check(b"alice", 2)?.allowed);
//! assert!(!limiter.check(b"alice", 1)?.allowed);
//! assert!(limiter.check(b"bob", 1)?.allowed);
//! // Cost 0 is a peek; a cost above the burst can never fit.
//! assert_eq!(limiter.check(b"bob", 0)?.remaining, 1);
//! assert!(matches!(limiter.check(b"bob", 3), Err(Error::CostTooHigh { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Time.** Every limiter reads a [`Clock`]. The default, [`SystemClock`],
//! reads the processor's time-stamp counter calibrated against the
//! monotonic system clock: exact to the microsecond at about ten
//! nanoseconds a read, and the time now, so the quota holds over every
//! interval of real time. [`CoarseClock`] is opt-in: the
//! system clock copied into an atomic every millisecond by a background
//! thread, read in a fraction of a nanosecond, but a reading lags by up to a
//! millisecond (more if the refresh thread is scheduled late), and the quota
//! then holds only over intervals of real time lengthened by that lag (one
//! unit more than the precise clock in some windows, for quotas slower than
//! one unit per millisecond; see [`CoarseClock`]). [`ManualClock`] is moved
//! by hand, for tests and simulations.
//!
//! Next: [`Quota`] for what a quota means to each algorithm, [`Decision`] for
//! what every field promises, [`Verdict`] for a lean check that computes the
//! decision only when asked, [`Keyed`] for how keys are stored and
//! forgotten, [`wait_and_consume`] to wait for a turn.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod algorithm;
mod bound;
mod decision;
mod direct;
mod divisor;
mod error;
pub mod keyed;
mod limiter;
mod log_gate;
mod quota;
mod receipt;
mod spent;
mod throttle;
mod time;
pub mod toolkit;
mod verdict;
mod wait;

pub use algorithm::Algorithm;
pub use bound::Bound;
pub use decision::{Decision, ceil_secs};
pub use direct::Direct;
pub use error::{Error, ErrorKind, Source};
pub use keyed::{
    ByteKey, DEFAULT_MAX_KEYS, FloodPolicy, Keyed, KeyedBuilder, MAX_EXACT_KEY_LEN, MAX_SHARDS,
};
pub use limiter::{
    AsyncRateLimiter, CheckFuture, Limiter, RateLimiter, ReceiptFuture, ResetFuture,
};
pub use quota::{Quota, QuotaError};
pub use receipt::Receipt;
pub use throttle::BlockingThrottle;
pub use time::{Clock, CoarseClock, ManualClock, SystemClock};
pub use verdict::Verdict;
#[cfg(feature = "tokio")]
pub use wait::wait_and_consume_async;
pub use wait::{MIN_RETRY_PAUSE, WaitError, wait_and_consume, wait_for, wait_for_on};

// The toolkit, for this crate's own modules under its short paths.
#[allow(unused_imports)]
pub(crate) use toolkit::*;
