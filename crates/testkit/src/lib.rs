//! Test support shared by every ratelab crate: proptest strategies for
//! quotas and arrival sequences, oracles that check an algorithm's bound on
//! what it admitted, property runners written once and applied to every
//! algorithm, and a harness that releases threads together.
//!
//! ```
//! use ratelab_testkit::oracle::{Admitted, Bound, Oracle};
//!
//! // Three units within 0.5 s, for a bucket of 2 refilling one per second.
//! let admitted = [Admitted { at: 0, units: 2 }, Admitted { at: 500_000, units: 1 }];
//! let bound = Bound::Rate { burst: 2, interval: 1_000_000 };
//! assert!(bound.violation(&admitted).is_some());
//! ```

//! The proptest parts ([`props`], [`strategies`], [`interleave`]) are behind
//! the default feature `proptest`; the Redis guards and the oracles build
//! without it (the compare binary uses them so, and builds no proptest).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod concurrency;
pub mod conformance;
#[cfg(feature = "proptest")]
pub mod interleave;
pub mod kept;
pub mod oracle;
#[cfg(feature = "proptest")]
pub mod props;
pub mod redis;
pub mod redis_cell;
pub mod replication;
#[cfg(feature = "proptest")]
pub mod strategies;
