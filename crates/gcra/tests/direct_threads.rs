//! Threads racing on one `Direct` GCRA: its compare-and-swap loop carries
//! only the state and the decision is made again after it, so every
//! admission must report the state its own charge left.

use std::collections::BTreeSet;

use ratelab_core::{Direct, ManualClock, Quota};
use ratelab_gcra::Gcra;
use ratelab_testkit::interleave::racing_at_one_instant;

#[test]
fn racing_admissions_each_report_their_own_charge() {
    const BURST: u32 = 4_000;
    let quota = Quota::per_second(1)
        .and_then(|q| q.with_burst(BURST))
        .unwrap();
    let limiter = Direct::with_clock(Gcra::new(quota), ManualClock::starting_at(1_000_000));
    let remaining: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..BURST)
                        .map(|_| limiter.check(1).unwrap())
                        .filter(|d| d.allowed)
                        .map(|d| d.remaining)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    // The clock stands still: exactly the burst passes, and each admission
    // saw a different state, from BURST - 1 units left down to none.
    assert_eq!(remaining.len(), BURST as usize);
    let distinct: BTreeSet<u64> = remaining.into_iter().collect();
    assert_eq!(distinct, (0..u64::from(BURST)).collect());
}

#[test]
fn racing_settlements_keep_exact_accounts() {
    let quota = Quota::per_second(1).and_then(|q| q.with_burst(50)).unwrap();
    racing_at_one_instant(&Gcra::new(quota));
}

/// Settled in the order they were admitted, or in the reverse order, every
/// receipt gets back all it did not use; settled out of order, an earlier
/// admission may get less (the ledger cannot tell which later admissions a
/// refund moved), never more.
#[test]
fn settlements_in_order_or_in_reverse_are_exact() {
    let quota = Quota::per_second(1).and_then(|q| q.with_burst(6)).unwrap();
    for order in [[0usize, 1, 2], [2, 1, 0], [1, 0, 2]] {
        let limiter = Direct::with_clock(Gcra::new(quota), ManualClock::starting_at(1_000_000));
        let mut receipts: Vec<_> = (0..3)
            .map(|_| Some(limiter.check_with_receipt(2).unwrap().1.unwrap()))
            .collect();
        let mut remaining = 0;
        for &i in &order {
            remaining = limiter
                .refund(receipts[i].take().unwrap())
                .unwrap()
                .remaining;
        }
        if order == [1, 0, 2] {
            // The middle one first: it moved the last, and the ledger then
            // takes that shift off the first too.
            assert!(remaining < 6, "{order:?}: {remaining}");
        } else {
            assert_eq!(remaining, 6, "{order:?}");
        }
    }
}
