//! 20 threads released together against capacity 10 admit exactly 10, for
//! every algorithm, single-bucket and keyed, many times over: the
//! compare-and-swap loops and the locks leave no room for a race.

mod common;

use ratelab::AlgorithmKind;

use ratelab::{ManualClock, Quota};
use ratelab_testkit::concurrency::release_together;

const ROUNDS: usize = 200;

#[test]
fn twenty_threads_capacity_ten_admit_exactly_ten() {
    let quota = Quota::per_second(10).unwrap();
    for name in AlgorithmKind::ALL {
        for round in 0..ROUNDS {
            // Frozen time: nothing refills while the threads race.
            let clock = ManualClock::starting_at(5_000_000);
            let keyed = common::keyed(name, quota, clock.clone());
            let direct = common::direct(name, quota, clock);
            let results = release_together(20, |i| {
                // Every thread also spends on a key of its own, interleaved,
                // so that the shared key's shard sees other traffic too.
                let own = keyed
                    .check(&[b'o', u8::try_from(i).unwrap()], 1)
                    .unwrap()
                    .allowed;
                let shared = keyed.check(b"shared", 1).unwrap().allowed;
                (shared, direct(1).unwrap().allowed, own)
            });
            let count =
                |f: fn(&(bool, bool, bool)) -> bool| results.iter().filter(|r| f(r)).count();
            assert_eq!(count(|r| r.0), 10, "{name} keyed, round {round}");
            assert_eq!(count(|r| r.1), 10, "{name} direct, round {round}");
            assert_eq!(
                count(|r| r.2),
                20,
                "{name}: each own key admits its first request"
            );
        }
    }
}
