//! The sliding log admits at most `limit` in every trailing window; the
//! sliding counter at most `2 × limit` within any window's length; every
//! field of their decisions tells the truth, for every arrival sequence.

use proptest::prelude::*;
use ratelab_core::Algorithm;
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_testkit::oracle::Bound;
use ratelab_testkit::props::{all_properties, config, wild_clock_properties};
use ratelab_testkit::strategies::{quota_and_arrivals, quota_and_wild_arrivals};

fn bound(algorithm: &impl Algorithm, factor: u64) -> Bound {
    Bound::Window {
        limit: algorithm.capacity(),
        window: algorithm.quota().window_micros(),
        factor,
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn log_decisions_keep_the_bound_and_tell_the_truth((quota, arrivals) in quota_and_arrivals(80)) {
        let log = SlidingLog::new(quota);
        all_properties(&log, &arrivals, bound(&log, 1))?;
    }

    #[test]
    fn counter_decisions_keep_the_bound_and_tell_the_truth((quota, arrivals) in quota_and_arrivals(80)) {
        let counter = SlidingCounter::new(quota);
        all_properties(&counter, &arrivals, bound(&counter, 2))?;
    }

    #[test]
    fn log_under_a_wild_clock_never_admits_beyond_the_bound((quota, arrivals) in quota_and_wild_arrivals(60)) {
        let log = SlidingLog::new(quota);
        wild_clock_properties(&log, &arrivals, bound(&log, 1))?;
    }

    #[test]
    fn counter_under_a_wild_clock_never_admits_beyond_the_bound((quota, arrivals) in quota_and_wild_arrivals(60)) {
        let counter = SlidingCounter::new(quota);
        wild_clock_properties(&counter, &arrivals, bound(&counter, 2))?;
    }
}
