//! The token bucket keeps `burst + floor(t / T)` in every interval `t`, and
//! every field of its decisions tells the truth, for every arrival sequence.

use proptest::prelude::*;
use ratelab_core::Algorithm;
use ratelab_testkit::interleave::{in_memory, lean_in_memory, quota_and_ops};
use ratelab_testkit::kept::Model;
use ratelab_testkit::oracle::Bound;
use ratelab_testkit::props::{all_properties, config, wild_clock_properties};
use ratelab_testkit::strategies::{quota_and_arrivals, quota_and_wild_arrivals};
use ratelab_token_bucket::TokenBucket;

fn bound(bucket: &TokenBucket) -> Bound {
    Bound::Bucket {
        burst: bucket.capacity(),
        interval: bucket.interval_micros(),
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn decisions_keep_the_bound_and_tell_the_truth((quota, arrivals) in quota_and_arrivals(80)) {
        let bucket = TokenBucket::new(quota);
        all_properties(&bucket, &arrivals, bound(&bucket))?;
    }

    #[test]
    fn a_wild_clock_never_admits_beyond_the_bound((quota, arrivals) in quota_and_wild_arrivals(60)) {
        let bucket = TokenBucket::new(quota);
        wild_clock_properties(&bucket, &arrivals, bound(&bucket))?;
    }

    #[test]
    fn settlements_keep_every_admission_within_what_was_kept((quota, ops) in quota_and_ops(60, 3)) {
        in_memory(&TokenBucket::new(quota), Model::debt(quota), &ops)?;
    }

    /// The bucket's state is two words behind a lock: its lean check builds
    /// the decision as a check does, and answers the same.
    #[test]
    fn a_lean_check_answers_what_a_check_does(
        (quota, ops) in quota_and_ops(60, 3),
        lean in any::<u64>(),
    ) {
        lean_in_memory(&TokenBucket::new(quota), Model::debt(quota), &ops, lean)?;
    }
}
