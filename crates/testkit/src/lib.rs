//! Test support shared by every ratelab crate: proptest strategies for
//! quotas and arrival sequences, oracles that check an algorithm's bound on
//! what it admitted, property runners written once and applied to every
//! algorithm, and a harness that releases threads together.
//!
//! ```
//! use ratelab_testkit::oracle::{Admitted, Bound};
//!
//! // Three units within 0.5 s, for a bucket of 2 refilling one per second.
//! let admitted = [Admitted { at: 0, units: 2 }, Admitted { at: 500_000, units: 1 }];
//! let bound = Bound::Bucket { burst: 2, interval: 1_000_000 };
//! assert!(bound.violation(&admitted).is_some());
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod concurrency;
pub mod conformance;
pub mod interleave;
pub mod kept;
pub mod oracle;
pub mod props;
pub mod redis;
pub mod redis_cell;
pub mod replication;
pub mod strategies;
