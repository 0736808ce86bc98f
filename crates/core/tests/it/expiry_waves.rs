//! Keys filed together come due together, most still owing: the index
//! re-files some of them one by one, then rebuilds itself from the table.
//! No debt is lost on the way, and no check pays a scan.

use crate::common;

use std::time::Duration;

use common::Toy;
use ratelab_core::{FloodPolicy, Keyed, ManualClock, Quota};

#[test]
fn a_wave_of_stale_records_keeps_every_debt() {
    const KEYS: u64 = 4_000;
    const TRACKED: usize = 4_000;
    let clock = ManualClock::starting_at(1_000_000);
    // One unit per second, bursts of 1000: a key charged n times at once
    // is full n seconds later.
    let toy = Toy::new(Quota::per_second(1).unwrap().with_burst(1_000).unwrap());
    let limiter = Keyed::builder(toy)
        .clock(clock.clone())
        .keys::<u64>()
        .max_keys(TRACKED)
        .shards(1)
        .flood_policy(FloodPolicy::Refuse)
        .build();
    // Filed at their first charge (full 1 s later), then charged ten more
    // times: every record is stale by 10 s.
    for _ in 0..11 {
        for key in 0..KEYS {
            assert!(limiter.check_key(&key, 1).unwrap().allowed);
        }
    }
    clock.advance(Duration::from_secs(2));
    let calls_before = limiter.algorithm().calls();
    // Every record is due and its key still owes: the wave of re-files, and
    // the rebuilds, happen during these checks.
    for key in 0..KEYS {
        let decision = limiter.check_key(&key, 1).unwrap();
        // Twelve units owed, two of them paid back: a forgotten key would
        // have 999 left.
        assert!(decision.allowed);
        assert_eq!(decision.remaining, 1_000 - 10, "key {key}");
    }
    assert_eq!(limiter.len(), TRACKED);
    let per_check = (limiter.algorithm().calls() - calls_before) as f64 / KEYS as f64;
    assert!(per_check < 16.0, "{per_check:.1} full_at calls per check");
    // Once every key is back to full capacity, all are forgotten.
    clock.advance(Duration::from_secs(20));
    limiter.sweep();
    assert_eq!(limiter.len(), 0);
}
