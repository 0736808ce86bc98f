//! The sliding log admits at most `limit` in every trailing window; the
//! sliding counter at most `2 × limit` within any window's length; every
//! field of their decisions tells the truth, for every arrival sequence.

use proptest::prelude::*;
use ratelab_core::Algorithm;
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_testkit::interleave::{in_memory, quota_and_ops};
use ratelab_testkit::oracle::Bound;
use ratelab_testkit::props::{all_properties, config, wild_clock_properties};
use ratelab_testkit::strategies::{quota_and_arrivals, quota_and_wild_arrivals};

/// The log's: at most its limit in every trailing window.
fn log_bound(log: &SlidingLog) -> Bound {
    Bound::TrailingWindow {
        limit: log.capacity(),
        window: log.quota().window_micros(),
    }
}

/// The counter's: the current window and the previous one weighted, so up
/// to twice its limit within a window's length.
fn counter_bound(counter: &SlidingCounter) -> Bound {
    Bound::WeightedWindows {
        limit: counter.capacity(),
        window: counter.quota().window_micros(),
        step: counter.step_micros(),
        steps: counter.steps(),
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn log_decisions_keep_the_bound_and_tell_the_truth((quota, arrivals) in quota_and_arrivals(80)) {
        let log = SlidingLog::new(quota);
        all_properties(&log, &arrivals, log_bound(&log))?;
    }

    #[test]
    fn counter_decisions_keep_the_bound_and_tell_the_truth((quota, arrivals) in quota_and_arrivals(80)) {
        let counter = SlidingCounter::new(quota);
        all_properties(&counter, &arrivals, counter_bound(&counter))?;
    }

    #[test]
    fn log_under_a_wild_clock_never_admits_beyond_the_bound((quota, arrivals) in quota_and_wild_arrivals(60)) {
        let log = SlidingLog::new(quota);
        wild_clock_properties(&log, &arrivals, log_bound(&log))?;
    }

    #[test]
    fn counter_under_a_wild_clock_never_admits_beyond_the_bound((quota, arrivals) in quota_and_wild_arrivals(60)) {
        let counter = SlidingCounter::new(quota);
        wild_clock_properties(&counter, &arrivals, counter_bound(&counter))?;
    }

    #[test]
    fn log_settlements_keep_every_admission_within_what_was_kept((quota, ops) in quota_and_ops(60, 3)) {
        let log = SlidingLog::new(quota);
        in_memory(&log, &ops)?;
    }

    #[test]
    fn counter_settlements_keep_every_admission_within_what_was_kept((quota, ops) in quota_and_ops(60, 3)) {
        let counter = SlidingCounter::new(quota);
        in_memory(&counter, &ops)?;
    }
}
