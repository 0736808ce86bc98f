//! The token bucket keeps `burst + floor(t / T)` in every interval `t`, and
//! every field of its decisions tells the truth, for every arrival sequence.

use proptest::prelude::*;
use ratelab_core::Algorithm;
use ratelab_testkit::interleave::{in_memory, lean_in_memory, quota_and_ops};
use ratelab_testkit::oracle::Bound;
use ratelab_testkit::props::{all_properties, config, wild_clock_properties};
use ratelab_testkit::strategies::{quota_and_arrivals, quota_and_wild_arrivals};
use ratelab_token_bucket::TokenBucket;

fn bound(bucket: &TokenBucket) -> Bound {
    Bound::Rate {
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
        in_memory(&TokenBucket::new(quota), &ops)?;
    }

    /// The bucket's state is two words behind a lock: its lean check builds
    /// the decision as a check does, and answers the same.
    #[test]
    fn a_lean_check_answers_what_a_check_does(
        (quota, ops) in quota_and_ops(60, 3),
        lean in any::<u64>(),
    ) {
        lean_in_memory(&TokenBucket::new(quota), &ops, lean)?;
    }
}

/// Early in a clock's life (before one interval has passed) a settlement can
/// ask for a bucket full at an instant whose last whole token would fall
/// before instant 0: the bucket counts from 0 instead, full at most one
/// interval later, never sooner, and never wraps to a bucket locked for ages.
#[test]
fn a_settlement_before_the_first_interval_counts_from_instant_0() {
    use ratelab_core::Quota;
    use ratelab_core::toolkit::Debt;
    use std::time::Duration;

    // 3 per 3 ms: a token every 1,000 µs.
    let bucket = TokenBucket::new(Quota::new(3, Duration::from_millis(3)).expect("a quota"));
    let mut state = bucket.initial_state();
    // Full again at 1,500 seen at 200: two tokens missing, the last whole
    // one at -500.
    bucket.set_full_at(&mut state, 1_500, 200);
    let full_at = bucket.full_at(&state);
    assert!(
        (1_500..2_500).contains(&full_at),
        "full at {full_at}, asked 1,500"
    );
    let mut probe = state;
    let now = bucket.decide(&mut probe, 200, 0).expect("a peek");
    assert_eq!(now.remaining, 1, "one token left at 200");
    assert!(!bucket.decide(&mut probe, 200, 2).expect("decides").allowed);
    // Every token is back by the time it says.
    let full = bucket.decide(&mut probe, full_at, 3).expect("decides");
    assert!(full.allowed, "full at {full_at}");
}
