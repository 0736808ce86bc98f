//! The sliding log admits at most `limit` in every trailing window; the
//! sliding counter at most `2 × limit` within any window's length; every
//! field of their decisions tells the truth, for every arrival sequence.

use proptest::prelude::*;
use ratelab_core::Algorithm;
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_testkit::interleave::{in_memory, quota_and_ops};
use ratelab_testkit::kept::Model;
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

    #[test]
    fn log_settlements_keep_every_admission_within_what_was_kept((quota, ops) in quota_and_ops(60, 3)) {
        let log = SlidingLog::new(quota);
        let model = Model::Log { window: log.window_micros(), limit: log.capacity() };
        in_memory(&log, model, &ops)?;
    }

    #[test]
    fn counter_settlements_keep_every_admission_within_what_was_kept((quota, ops) in quota_and_ops(60, 3)) {
        let counter = SlidingCounter::new(quota);
        let model = Model::Counter {
            window: counter.window_micros(),
            limit: counter.capacity(),
            step: counter.step_micros(),
            steps: counter.steps(),
        };
        in_memory(&counter, model, &ops)?;
    }
}
