//! The reference article's result table, on every in-memory algorithm:
//! capacity 10, refilled 5 per second; a burst of 20 simultaneous requests;
//! one second later, 10 more; the wait a refusal indicates, in whole seconds.
//!
//! Bucket algorithms express "capacity 10, 5 per second" exactly and must
//! reproduce the article's row: 10, 5, 1 s. The window algorithms cannot:
//! they map the quota to 10 per 2-second window (same capacity, same
//! long-run rate), so one second into the window nothing has come back. Their
//! rows record what they admit on that mapped quota.

use crate::common;

use std::time::Duration;

use ratelab::{Clock, ManualClock, Quota};
use ratelab_testkit::concurrency::release_together;

/// (algorithm, burst of 20 admits, wait its refusals indicate (s),
///  after 1 s 10 calls admit, wait their refusals indicate (s))
const TABLE: [(&str, usize, u64, usize, u64); 7] = [
    ("fixed-window", 10, 2, 0, 1),
    ("sliding-log", 10, 2, 0, 1),
    // The weighted previous window still holds 9 of the 10 at 0.2 s into
    // the next window: 2.2 s, then 1.2 s, rounded up.
    ("sliding-counter", 10, 3, 0, 2),
    ("leaky-meter", 10, 1, 5, 1),
    ("leaky-queue", 10, 1, 5, 1),
    ("token-bucket", 10, 1, 5, 1),
    ("gcra", 10, 1, 5, 1),
];

/// The rounded-up waits of the refusals among `decisions`, all equal.
fn indicated_wait(name: &str, decisions: &[ratelab::Decision]) -> u64 {
    let waits: Vec<u64> = decisions
        .iter()
        .filter(|d| !d.allowed)
        .map(|d| d.retry_after_secs())
        .collect();
    assert!(!waits.is_empty(), "{name}: nothing was refused");
    assert!(
        waits.iter().all(|&w| w == waits[0]),
        "{name}: every refusal indicates the same wait: {waits:?}"
    );
    waits[0]
}

#[test]
fn the_reference_table_on_every_in_memory_algorithm() {
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    assert_eq!(
        quota.window(),
        Duration::from_secs(2),
        "the windows' mapping"
    );
    for (name, burst_admits, burst_wait, later_admits, later_wait) in TABLE {
        // At a window start: the windows' rows depend on where in the window
        // the burst falls, the buckets' do not.
        let clock = ManualClock::starting_at(10_000_000);
        let limiter = common::keyed(name, quota, clock.clone());

        let burst = release_together(20, |_| limiter.check(b"client", 1).unwrap());
        clock.advance(Duration::from_secs(1));
        let later = release_together(10, |_| limiter.check(b"client", 1).unwrap());
        assert_eq!(clock.now_micros(), 11_000_000);

        let row = (
            name,
            burst.iter().filter(|d| d.allowed).count(),
            indicated_wait(name, &burst),
            later.iter().filter(|d| d.allowed).count(),
            indicated_wait(name, &later),
        );
        assert_eq!(
            row,
            (name, burst_admits, burst_wait, later_admits, later_wait),
            "row of {name}"
        );
    }
}
