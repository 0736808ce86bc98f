//! Leaky buckets: water drains at a steady rate; a request pours in as much
//! water as it costs.
//!
//! Two ways to use the bucket, one crate:
//!
//! - [`LeakyMeter`], the bucket as a **meter**: a request that would overflow
//!   is refused; one that fits passes at once. This is the continuous-state
//!   leaky bucket of ITU-T I.371, which admits exactly what GCRA admits; its
//!   state is the water level and the time it was measured.
//! - [`LeakyQueue`], the bucket as a **queue** (a shaper): a request that fits
//!   is admitted into a bounded queue and given a slot, a
//!   [`Decision::delay`](ratelab_core::Decision::delay) to wait before it
//!   proceeds, so that what leaves the queue never goes faster than the rate.
//!   It refuses only when the queue is full. Its state is one word: the next
//!   free slot.
//!
//! **Quota mapping.** The bucket holds `burst` units; it drains one unit every
//! `T = ceil(period / limit)` µs. Admissions: in any closed interval of length
//! `t`, at most `burst + floor(t / T)` units (both). Output of the queue:
//! consecutive slots are at least `cost × T` apart.
//!
//! ```
//! use ratelab_core::{Keyed, ManualClock, Quota};
//! use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
//! use std::time::Duration;
//!
//! let clock = ManualClock::new();
//! let quota = Quota::per_second(5)?.with_burst(10)?;
//!
//! let meter = Keyed::with_clock(LeakyMeter::new(quota), clock.clone());
//! let admitted = (0..20).filter(|_| meter.check(b"client", 1).unwrap().allowed).count();
//! assert_eq!(admitted, 10);
//!
//! // The queue admits the same ten, each with its own slot, 200 ms apart.
//! let queue = Keyed::with_clock(LeakyQueue::new(quota), clock.clone());
//! let delays: Vec<_> = (0..3).map(|_| queue.check(b"client", 1).unwrap().delay()).collect();
//! assert_eq!(delays, [Duration::ZERO, Duration::from_millis(200), Duration::from_millis(400)]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod conformance;
mod meter;
mod queue;
mod remote;

pub use meter::{LeakyMeter, Level};
pub use queue::LeakyQueue;
