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

/// Refunded in any order, every receipt gets back all it did not use, as
/// long as no more than `MAX_RECENT_SHIFTS` refunds came between its check
/// and its own (the ledger records which admissions each refund moved):
/// every order of 3 receipts, and shuffled orders of 40, on one bucket and
/// one key, at an instant that does not move.
#[test]
fn refunds_in_any_order_give_back_exactly() {
    use ratelab_core::{Keyed, RateLimiter};
    let quota = Quota::per_second(1).and_then(|q| q.with_burst(80)).unwrap();
    let mut orders: Vec<Vec<usize>> = vec![
        vec![0, 1, 2],
        vec![0, 2, 1],
        vec![1, 0, 2],
        vec![1, 2, 0],
        vec![2, 0, 1],
        vec![2, 1, 0],
    ];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20 {
        let mut order: Vec<usize> = (0..40).collect();
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, usize::try_from(x % (i as u64 + 1)).unwrap());
        }
        orders.push(order);
    }
    for order in orders {
        let direct = Direct::with_clock(Gcra::new(quota), ManualClock::starting_at(1_000_000));
        let keyed = Keyed::with_clock(Gcra::new(quota), ManualClock::starting_at(1_000_000));
        let limiters: [&dyn RateLimiter; 2] = [&direct, &keyed];
        for limiter in limiters {
            let mut receipts: Vec<_> = (0..order.len())
                .map(|_| Some(limiter.check_with_receipt(b"k", 2).unwrap().1.unwrap()))
                .collect();
            let mut remaining = 0;
            for &i in &order {
                remaining = limiter
                    .refund(receipts[i].take().unwrap())
                    .unwrap()
                    .remaining;
            }
            assert_eq!(remaining, 80, "{order:?}");
        }
    }
}
