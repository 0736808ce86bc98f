//! ratelab: the classic rate-limiting algorithms side by side, each in
//! memory and on Redis, behind one trait.
//!
//! This crate gathers the others behind features, so one dependency line is
//! enough: the shared contract ([`Quota`], [`Decision`], [`RateLimiter`],
//! [`Keyed`], [`Direct`], clocks, wait helpers) at the root, every algorithm
//! (default features), [`redis`] (feature `redis`) and [`http`] (feature
//! `http`). [`AlgorithmKind`] names every algorithm and builds any of them.
//!
//! ```
//! use ratelab::{Gcra, Keyed, ManualClock, Quota};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! // 5 per second, bursts of 10, one bucket per client.
//! let limiter = Keyed::with_clock(Gcra::new(Quota::per_second(5)?.with_burst(10)?), clock.clone());
//! let admitted = (0..20).filter(|_| limiter.check(b"client", 1).unwrap().allowed).count();
//! assert_eq!(admitted, 10);
//! assert_eq!(limiter.check(b"client", 1)?.retry_after, Duration::from_millis(200));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Features: `fixed-window`, `sliding-window`, `leaky-bucket`,
//! `token-bucket`, `gcra` (the default: every algorithm), `redis`, `http`,
//! `tokio` (async wait helpers), `full` (all of them).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub use ratelab_core::*;

#[cfg(feature = "fixed-window")]
pub use ratelab_fixed_window::{self as fixed_window, FixedWindow};
#[cfg(feature = "gcra")]
pub use ratelab_gcra::{self as gcra, Gcra};
#[cfg(feature = "http")]
pub use ratelab_http as http;
#[cfg(feature = "leaky-bucket")]
pub use ratelab_leaky_bucket::{self as leaky_bucket, LeakyMeter, LeakyQueue};
#[cfg(feature = "redis")]
pub use ratelab_redis as redis;
#[cfg(feature = "sliding-window")]
pub use ratelab_sliding_window::{self as sliding_window, SlidingCounter, SlidingLog};
#[cfg(feature = "token-bucket")]
pub use ratelab_token_bucket::{self as token_bucket, TokenBucket};

#[cfg(all(
    feature = "fixed-window",
    feature = "sliding-window",
    feature = "leaky-bucket",
    feature = "token-bucket",
    feature = "gcra"
))]
mod kind;
#[cfg(all(
    feature = "fixed-window",
    feature = "sliding-window",
    feature = "leaky-bucket",
    feature = "token-bucket",
    feature = "gcra"
))]
pub use kind::{AlgorithmKind, AlgorithmVisitor, KnownAlgorithm, UnknownAlgorithm};
