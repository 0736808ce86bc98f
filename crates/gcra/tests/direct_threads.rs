//! Threads racing on one `Direct` GCRA: its compare-and-swap loop carries
//! only the state and the decision is made again after it, so every
//! admission must report the state its own charge left.

use std::collections::BTreeSet;

use ratelab_core::{Direct, ManualClock, Quota};
use ratelab_gcra::Gcra;

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
