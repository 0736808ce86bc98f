//! Sliding windows: the limit holds over the last window, wherever "now" is,
//! not over clock-aligned windows.
//!
//! - [`SlidingLog`] keeps the time of every admitted unit within the window
//!   (O(limit) memory per key) and is **exact**: at most `limit` units in any
//!   trailing window.
//! - [`SlidingCounter`] keeps two counters, the current aligned window and
//!   the previous one, and estimates the trailing window as
//!   `previous × (share of the previous window still inside) + current`.
//!   O(1) memory, **approximate**: it assumes the previous window's requests
//!   were spread evenly. It never admits more than `2 × limit` in a window's
//!   length; its measured error against the exact log is in the
//!   `ratelab-compare` report.
//!
//! **Quota mapping.** Both hold the quota's burst over
//! [`Quota::window`](ratelab_core::Quota::window): with the default burst,
//! exactly `limit` per `period`.
//!
//! ```
//! use ratelab_core::{Keyed, ManualClock, Quota};
//! use ratelab_sliding_window::{SlidingCounter, SlidingLog};
//!
//! let clock = ManualClock::new();
//! let quota = Quota::per_second(10)?;
//! let log = Keyed::with_clock(SlidingLog::new(quota), clock.clone());
//! let counter = Keyed::with_clock(SlidingCounter::new(quota), clock.clone());
//!
//! // 10 at 0.95 s, 10 more at 1.05 s: the fixed window's edge burst.
//! let mut passed = [0, 0];
//! for at in [950_000, 1_050_000] {
//!     clock.set(at);
//!     for _ in 0..10 {
//!         passed[0] += log.check(b"k", 1)?.allowed as u32;
//!         passed[1] += counter.check(b"k", 1)?.allowed as u32;
//!     }
//! }
//! assert_eq!(passed, [10, 10]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod conformance;
mod counter;
mod log;
pub mod remote;

pub use counter::{SlidingCounter, Windows};
pub use log::{Log, SlidingLog};

/// The largest limit (burst) a sliding log takes where it is stored one
/// entry per unit: the Redis scripts and module keep a sorted-set member for
/// each unit admitted in the window (about 60 bytes), and a call adds its
/// cost in members, while the server serves no one else: a call of 100,000
/// units took Redis 0.37 s here, and a quota of a billion units let one
/// request fill its memory. At this cap, a key holds about 600 KB and a call
/// blocks Redis for some 40 ms at most. Above it the scripts and the module
/// answer `invalid arguments`, and the Redis limiter refuses such a quota
/// before any call. In memory a log keeps one entry per admission, whatever its
/// cost, and takes any limit. For larger quotas on Redis: the sliding
/// counter.
pub const MAX_STORED_LOG_LIMIT: u32 = 10_000;
