//! GCRA keeps `burst + floor(t / T)` in every interval `t`, and every field
//! of its decisions tells the truth, for every arrival sequence.

use proptest::prelude::*;
use ratelab_gcra::Gcra;
use ratelab_testkit::interleave::{in_memory, lean_in_memory, quota_and_ops};
use ratelab_testkit::oracle::Bound;
use ratelab_testkit::props::{all_properties, config, wild_clock_properties};
use ratelab_testkit::strategies::{quota_and_arrivals, quota_and_wild_arrivals};

fn bound(gcra: &Gcra) -> Bound {
    Bound::Rate {
        burst: gcra.tolerance_micros() / gcra.interval_micros(),
        interval: gcra.interval_micros(),
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn decisions_keep_the_bound_and_tell_the_truth((quota, arrivals) in quota_and_arrivals(80)) {
        let gcra = Gcra::new(quota);
        all_properties(&gcra, &arrivals, bound(&gcra))?;
    }

    #[test]
    fn a_wild_clock_never_admits_beyond_the_bound((quota, arrivals) in quota_and_wild_arrivals(60)) {
        let gcra = Gcra::new(quota);
        wild_clock_properties(&gcra, &arrivals, bound(&gcra))?;
    }

    #[test]
    fn settlements_keep_every_admission_within_what_was_kept((quota, ops) in quota_and_ops(60, 3)) {
        in_memory(&Gcra::new(quota), &ops)?;
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// A lean check answers what a check does (whether it passed, and the
    /// whole decision on demand), interleaved with checks, receipts and
    /// their settlements, peeks and a clock that goes back, on one key and
    /// on several; and what it admits stays within what was kept.
    #[test]
    fn a_lean_check_answers_what_a_check_does(
        (quota, ops) in quota_and_ops(60, 3),
        lean in any::<u64>(),
    ) {
        lean_in_memory(&Gcra::new(quota), &ops, lean)?;
    }
}
