//! Both leaky buckets admit at most `burst + floor(t / T)` in every interval
//! `t`; the queue's slots never leave faster than the rate; every field of
//! every decision tells the truth, for every arrival sequence.

use proptest::prelude::*;
use ratelab_core::Algorithm;
use ratelab_core::toolkit::duration_to_micros;
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
use ratelab_testkit::interleave::{in_memory, lean_in_memory, quota_and_ops};
use ratelab_testkit::oracle::Bound;
use ratelab_testkit::props::{all_properties, config, simulate, wild_clock_properties};
use ratelab_testkit::strategies::{quota_and_arrivals, quota_and_wild_arrivals};

fn bound(algorithm: &impl Algorithm) -> Bound {
    Bound::Rate {
        burst: algorithm.capacity(),
        interval: algorithm.quota().emission_interval_micros(),
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn meter_decisions_keep_the_bound_and_tell_the_truth((quota, arrivals) in quota_and_arrivals(80)) {
        let meter = LeakyMeter::new(quota);
        all_properties(&meter, &arrivals, bound(&meter))?;
    }

    #[test]
    fn queue_decisions_keep_the_bound_and_tell_the_truth((quota, arrivals) in quota_and_arrivals(80)) {
        let queue = LeakyQueue::new(quota);
        all_properties(&queue, &arrivals, bound(&queue))?;
    }

    /// What leaves the queue is smooth: each admitted request's slot
    /// (`now + delay`) starts no earlier than the previous slot plus the
    /// previous request's `cost × T`, and no admitted request waits longer
    /// than a full queue takes to drain.
    #[test]
    fn queue_output_never_exceeds_the_rate((quota, arrivals) in quota_and_arrivals(80)) {
        let queue = LeakyQueue::new(quota);
        let interval = quota.emission_interval_micros();
        let mut previous_end: [Option<u64>; 3] = [None; 3];
        for step in simulate(&queue, &arrivals) {
            let Ok(decision) = step.result else { continue };
            if !decision.allowed || step.arrival.cost == 0 {
                continue;
            }
            let delay = duration_to_micros(decision.delay());
            let slot = step.now + delay;
            prop_assert!(delay <= quota.burst_tolerance_micros());
            let key = usize::from(step.arrival.key);
            if let Some(end) = previous_end[key] {
                prop_assert!(slot >= end, "slot {} before the previous one ended at {}", slot, end);
            }
            previous_end[key] = Some(slot + u64::from(step.arrival.cost) * interval);
        }
    }

    #[test]
    fn meter_under_a_wild_clock_never_admits_beyond_the_bound((quota, arrivals) in quota_and_wild_arrivals(60)) {
        let meter = LeakyMeter::new(quota);
        wild_clock_properties(&meter, &arrivals, bound(&meter))?;
    }

    #[test]
    fn queue_under_a_wild_clock_never_admits_beyond_the_bound((quota, arrivals) in quota_and_wild_arrivals(60)) {
        let queue = LeakyQueue::new(quota);
        wild_clock_properties(&queue, &arrivals, bound(&queue))?;
    }

    #[test]
    fn meter_settlements_keep_every_admission_within_what_was_kept((quota, ops) in quota_and_ops(60, 3)) {
        in_memory(&LeakyMeter::new(quota), &ops)?;
    }

    #[test]
    fn queue_settlements_keep_every_admission_within_what_was_kept((quota, ops) in quota_and_ops(60, 3)) {
        in_memory(&LeakyQueue::new(quota), &ops)?;
    }

    /// The queue's state is one word: its lean check decides again on
    /// demand, and answers what a check does (with its slot's delay).
    #[test]
    fn a_lean_check_of_the_queue_answers_what_a_check_does(
        (quota, ops) in quota_and_ops(60, 3),
        lean in any::<u64>(),
    ) {
        lean_in_memory(&LeakyQueue::new(quota), &ops, lean)?;
    }
}
