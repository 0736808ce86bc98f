//! ratelab: the classic rate-limiting algorithms side by side, each in
//! memory and on Redis, behind one trait.
//!
//! This crate gathers the others behind features, so one dependency line is
//! enough: the shared contract ([`Quota`], [`Decision`], [`RateLimiter`],
//! [`Keyed`], [`Direct`], clocks, wait helpers) at the root, every algorithm
//! (default features), [`redis`] (feature `redis`), [`resilience`] (the
//! wrapper any store of limits gets: feature `resilience`, part of
//! `redis`), [`http`] (feature `http`, the tower layer; `axum` for axum's
//! connect info), [`http_core`] (feature `http-core`, the same decisions for
//! any other server), [`throttle`] (feature `throttle`, the client side)
//! and [`lease`] (feature `lease`: a shared limit checked from local leases
//! at memory speed, with a stated bound).
//! [`AlgorithmKind`] names every algorithm and builds any of them.
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
//! assert_eq!(limiter.check(b"client", 1)?.retry_after(), Duration::from_millis(200));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Waiting for a turn** in plain blocking code, as the reference article's
//! scraper does (2 requests per second, bursts of 5, at most 10 s of waiting
//! for each): a [`BlockingThrottle`] on a single bucket ([`Direct`]). On a
//! [`ManualClock`] the waits are simulated, so this runs in no time.
//!
//! ```
//! use ratelab::{BlockingThrottle, Direct, ManualClock, Quota, TokenBucket};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! let bucket = Direct::with_clock(TokenBucket::new(Quota::per_second(2)?.with_burst(5)?), clock.clone());
//! let scraper = BlockingThrottle::with_clock(bucket, clock.clone()).timeout(Duration::from_secs(10));
//!
//! let mut fetched = Vec::new();
//! for page in 0..9 {
//!     scraper.call(|| fetched.push((page, clock.now_micros())))?;
//! }
//! // The burst of 5 at once, then one every 0.5 s.
//! let times: Vec<u64> = fetched.iter().map(|&(_, at)| at).collect();
//! assert_eq!(times, [0, 0, 0, 0, 0, 500_000, 1_000_000, 1_500_000, 2_000_000]);
//! // "When could I send 3 more?" without taking anything: a peek.
//! let peek = scraper.limiter().peek(3)?;
//! assert!(!peek.allowed);
//! assert_eq!(peek.retry_after(), Duration::from_millis(1_500));
//! # use ratelab::Clock;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Features: `fixed-window`, `sliding-window`, `leaky-bucket`,
//! `token-bucket`, `gcra` (the default: every algorithm; any subset builds),
//! `redis`, `resilience`, `http`, `axum`, `http-core`, `throttle`, `lease`,
//! `tokio` (async wait helpers), `full` (all of them).
//!
//! A module is documented only with its feature: the default features
//! document the contract and the algorithms. `cargo doc -p ratelab
//! --features full --open` documents the whole service API (Redis, the HTTP
//! layer, the throttles, the resilience wrapper), as docs.rs does; without
//! a module's feature, its link above goes to docs.rs.
//!
#![cfg_attr(
    not(feature = "redis"),
    doc = "[`redis`]: https://docs.rs/ratelab/latest/ratelab/redis/index.html"
)]
#![cfg_attr(
    not(feature = "resilience"),
    doc = "[`resilience`]: https://docs.rs/ratelab/latest/ratelab/resilience/index.html"
)]
#![cfg_attr(
    not(feature = "http"),
    doc = "[`http`]: https://docs.rs/ratelab/latest/ratelab/http/index.html"
)]
#![cfg_attr(
    not(feature = "http-core"),
    doc = "[`http_core`]: https://docs.rs/ratelab/latest/ratelab/http_core/index.html"
)]
#![cfg_attr(
    not(feature = "throttle"),
    doc = "[`throttle`]: https://docs.rs/ratelab/latest/ratelab/throttle/index.html"
)]
#![cfg_attr(
    not(feature = "lease"),
    doc = "[`lease`]: https://docs.rs/ratelab/latest/ratelab/lease/index.html"
)]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub use ratelab_core::*;

#[cfg(feature = "fixed-window")]
pub use ratelab_fixed_window::{self as fixed_window, FixedWindow};
#[cfg(feature = "gcra")]
pub use ratelab_gcra::{self as gcra, Gcra};
#[cfg(feature = "http")]
#[doc(inline)]
pub use ratelab_http as http;
#[cfg(feature = "http-core")]
#[doc(inline)]
pub use ratelab_http_core as http_core;
#[cfg(feature = "leaky-bucket")]
pub use ratelab_leaky_bucket::{self as leaky_bucket, LeakyMeter, LeakyQueue};
#[cfg(feature = "lease")]
#[doc(inline)]
pub use ratelab_lease as lease;
#[cfg(feature = "redis")]
#[doc(inline)]
pub use ratelab_redis as redis;
#[cfg(feature = "resilience")]
#[doc(inline)]
pub use ratelab_resilience as resilience;
#[cfg(feature = "sliding-window")]
pub use ratelab_sliding_window::{self as sliding_window, SlidingCounter, SlidingLog};
#[cfg(feature = "throttle")]
#[doc(inline)]
pub use ratelab_throttle as throttle;
#[cfg(feature = "token-bucket")]
pub use ratelab_token_bucket::{self as token_bucket, TokenBucket};

/// The README's Rust snippets, compiled (and run, unless marked `no_run`) as
/// doctests, so they cannot drift from the API. Only under `cargo test`: the
/// README is outside this crate's folder, so a packaged crate never reads it.
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeSnippets;

mod kind;
pub use kind::{AlgorithmKind, AlgorithmVisitor, KnownAlgorithm, UnknownAlgorithm};
