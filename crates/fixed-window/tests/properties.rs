//! The fixed window admits at most `limit` per aligned window, hence at most
//! `2 × limit` within any window's length, and every field of its decisions
//! tells the truth, for every arrival sequence.

use proptest::prelude::*;
use ratelab_core::Algorithm;
use ratelab_fixed_window::FixedWindow;
use ratelab_testkit::interleave::{in_memory, quota_and_ops};
use ratelab_testkit::oracle::Bound;
use ratelab_testkit::props::{all_properties, config, simulate, wild_clock_properties};
use ratelab_testkit::strategies::{quota_and_arrivals, quota_and_wild_arrivals};

fn bound(window: &FixedWindow) -> Bound {
    Bound::AlignedWindow {
        limit: window.capacity(),
        window: window.window_micros(),
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn decisions_keep_the_bound_and_tell_the_truth((quota, arrivals) in quota_and_arrivals(80)) {
        let window = FixedWindow::new(quota);
        all_properties(&window, &arrivals, bound(&window))?;
    }

    #[test]
    fn each_aligned_window_holds_at_most_the_limit((quota, arrivals) in quota_and_arrivals(80)) {
        let window = FixedWindow::new(quota);
        let mut per_window = std::collections::HashMap::new();
        for step in simulate(&window, &arrivals) {
            if matches!(step.result, Ok(d) if d.allowed) {
                *per_window.entry((step.arrival.key, step.now / window.window_micros())).or_insert(0)
                    += u64::from(step.arrival.cost);
            }
        }
        for ((key, index), admitted) in per_window {
            prop_assert!(admitted <= window.capacity(), "key {} window {}: {} admitted", key, index, admitted);
        }
    }

    #[test]
    fn a_wild_clock_never_admits_beyond_the_bound((quota, arrivals) in quota_and_wild_arrivals(60)) {
        let window = FixedWindow::new(quota);
        wild_clock_properties(&window, &arrivals, bound(&window))?;
    }

    #[test]
    fn settlements_keep_every_admission_within_what_was_kept((quota, ops) in quota_and_ops(60, 3)) {
        let window = FixedWindow::new(quota);
        in_memory(&window, &ops)?;
    }
}
