//! What ratelab puts around a limiter whose state lives outside this
//! process: written once, for any [`Store`] (the Redis backend of
//! `ratelab-redis`, or a store added later), so that a store implements
//! only its calls and gets all of it by being wrapped.
//!
//! [`Resilience::wrap`] puts a store behind
//!
//! - a **timeout** per call, and the caller's **give-up instant** handed to
//!   the store, which charges nothing once it has passed (the Redis backend
//!   turns it into a deadline on Redis's measured clock);
//! - a **circuit breaker**: after consecutive outages the store is not
//!   called for a cool-down, and one probe at a time tries it again;
//! - a **failure policy** for outages ([`FailurePolicy`]): return the error,
//!   fail open, fail closed, or decide with an in-memory **fallback** of the
//!   same algorithm (whose receipts settle in the fallback); data errors are
//!   not outages, and are returned;
//! - a **cache of refusals**, **alerts** (a callback and a rate-limited
//!   `tracing` warning) and **stats**.
//!
//! The result, [`Resilient`], is an
//! [`AsyncRateLimiter`](ratelab_core::AsyncRateLimiter) with receipts.
//!
//! ```
//! use std::time::{Duration, Instant};
//!
//! use ratelab_core::{Decision, Error, Quota};
//! use ratelab_core::toolkit::{Settlement, Stamp};
//! use ratelab_gcra::Gcra;
//! use ratelab_resilience::{FailurePolicy, Resilience, Store};
//!
//! /// A store that is never there: every call is an outage.
//! struct Unreachable(Gcra);
//!
//! impl Store for Unreachable {
//!     type Algorithm = Gcra;
//!     fn algorithm(&self) -> &Gcra { &self.0 }
//!     fn name(&self) -> &'static str { "unreachable" }
//!     fn max_wait_micros(&self) -> u64 { self.0.tolerance_micros() }
//!     async fn check(&self, _: &[u8], _: u32, _: Option<Instant>) -> Result<(Decision, Stamp), Error> {
//!         Err(Error::backend("connection refused"))
//!     }
//!     async fn peek(&self, _: &[u8], _: u32, _: Option<Instant>) -> Result<Decision, Error> {
//!         Err(Error::backend("connection refused"))
//!     }
//!     async fn settle(&self, _: &[u8], _: Settlement, _: Option<Instant>) -> Result<Decision, Error> {
//!         Err(Error::backend("connection refused"))
//!     }
//!     async fn reset(&self, _: &[u8], _: Option<Instant>) -> Result<(), Error> {
//!         Err(Error::backend("connection refused"))
//!     }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let quota = Quota::per_second(5)?.with_burst(10)?;
//! let limiter = Resilience::new()
//!     .on_failure(FailurePolicy::Fallback)
//!     .breaker(1, Duration::from_secs(30))
//!     .wrap(Unreachable(Gcra::new(quota)));
//!
//! // The store failed: the in-memory fallback decided, and said so.
//! let (decision, receipt) = limiter.check_with_receipt(b"client-42", 4).await?;
//! assert!(decision.allowed && decision.degraded);
//! // Its receipt settles in the fallback.
//! assert_eq!(limiter.refund(receipt.expect("admitted")).await?.remaining, 10);
//! // One outage opened the breaker: the store is not called for a while.
//! assert!(limiter.stats().breaker_open);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Next: [`Store`] for what a store promises (the give-up instant, outages
//! and data errors, stamps), [`Resilient`] for each operation's contract.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod alert;
mod breaker;
mod refusal_cache;
mod resilient;
mod settings;
mod stats;
mod store;

pub use alert::Alert;
pub use resilient::{Resilience, Resilient};
pub use settings::{
    DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_THRESHOLD, DEFAULT_TIMEOUT, FailurePolicy,
    LATE_REPLY_WAIT,
};
pub use stats::Stats;
pub use store::Store;
