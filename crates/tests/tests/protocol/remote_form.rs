//! Every algorithm's remote form, whatever the algorithm: its parameters
//! build it back on every quota (the sliding log above what a store keeps is
//! the one quota refused, and says so), and its state, after checks,
//! settlements and resets, is read back from its own encoding.

use std::time::Duration;

use ratelab::sliding_window::MAX_STORED_LOG_LIMIT;
use ratelab::toolkit::Settlement;
use ratelab::toolkit::remote::{Shape, Stored, Value};
use ratelab::{AlgorithmKind, AlgorithmVisitor, KnownAlgorithm, Quota};

fn quotas() -> Vec<Quota> {
    let mut quotas = vec![
        Quota::per_second(5).unwrap().with_burst(10).unwrap(),
        Quota::per_second(3).unwrap(),
        Quota::per_minute(7).unwrap().with_burst(1).unwrap(),
        Quota::per_hour(1_000_000).unwrap().with_burst(3).unwrap(),
        Quota::new(1, Duration::from_micros(1)).unwrap(),
        Quota::new(u32::MAX, Duration::from_secs(1 << 20)).unwrap(),
    ];
    // The longest period, with a burst past the limit and one below.
    let longest = Duration::from_micros(1 << 50);
    quotas.push(Quota::new(3, longest).unwrap());
    quotas.push(Quota::new(1000, longest).unwrap().with_burst(999).unwrap());
    quotas
}

#[test]
fn every_quota_s_parameters_build_the_same_algorithm_back() {
    struct RoundTrip(Quota);
    impl AlgorithmVisitor for RoundTrip {
        type Output = ();
        fn visit<A: KnownAlgorithm>(self, algorithm: A) {
            let quota = self.0;
            let params = algorithm.params();
            assert_eq!(params.len(), A::PARAMS, "{}", A::NAME);
            let back = A::parse(&params);
            // A sliding log above its cap is the one quota Redis refuses,
            // before any call.
            if A::SHAPE == Shape::SortedSet && quota.burst() > MAX_STORED_LOG_LIMIT {
                assert!(back.is_none(), "{quota:?}: a log above the cap");
                assert!(algorithm.unsupported().is_some());
                return;
            }
            assert_eq!(algorithm.unsupported(), None, "{} {quota:?}", A::NAME);
            let back =
                back.unwrap_or_else(|| panic!("{} {quota:?}: no quota for {params:?}", A::NAME));
            assert_eq!(back.params(), params, "{} {quota:?}", A::NAME);
            // Its name is the algorithm's own.
            assert_eq!(A::NAME, algorithm.name());
        }
    }
    for kind in AlgorithmKind::ALL {
        for quota in quotas() {
            kind.visit(quota, RoundTrip(quota));
        }
    }
}

#[test]
fn every_state_is_read_back_from_its_encoding() {
    struct RoundTrip;
    impl AlgorithmVisitor for RoundTrip {
        type Output = ();
        fn visit<A: KnownAlgorithm>(self, algorithm: A) {
            let now = 1_700_000_000_000_000;
            let mut stored = Stored {
                state: algorithm.initial_state(),
                ledger: Default::default(),
                latest: 0,
            };
            let check = |stored: &mut Stored<A::State, A::Ledger>, at: u64, cost| {
                algorithm.decide(&mut stored.state, at, cost).unwrap();
                stored.latest = stored.latest.max(at);
                algorithm.stamp(&stored.state, &stored.ledger, at)
            };
            let a = check(&mut stored, now, 3);
            let b = check(&mut stored, now + 10, 2);
            check(&mut stored, now + 20, 1);
            // The middle one's refund moves the last (a debt records a
            // shift); the first's settlement charges more.
            let settle = |stored: &mut Stored<A::State, A::Ledger>, stamp, charged, actual| {
                let s = Settlement {
                    stamp,
                    charged,
                    actual,
                };
                algorithm
                    .settle(&mut stored.state, &mut stored.ledger, now + 30, s)
                    .unwrap();
                stored.latest = now + 30;
            };
            settle(&mut stored, b, 2, 0);
            settle(&mut stored, a, 3, 4);
            let read_back = |stored: &Stored<A::State, A::Ledger>| {
                let value = algorithm.encode(stored);
                match (&value, A::SHAPE) {
                    (Value::String(_), Shape::String) | (Value::SortedSet(_), Shape::SortedSet) => {
                    }
                    _ => panic!("{}: stored as another shape than it says", A::NAME),
                }
                let back = algorithm
                    .decode(&value, now + 30, 0)
                    .unwrap_or_else(|e| panic!("{}: {e}", A::NAME));
                assert_eq!(algorithm.encode(&back), value, "{}", A::NAME);
                assert_eq!(back.ledger, stored.ledger, "{}", A::NAME);
                assert_eq!(algorithm.out_of_range(&back), None, "{}", A::NAME);
            };
            read_back(&stored);
            // A reset's tombstone.
            algorithm.reset(&mut stored.state, &mut stored.ledger, now + 30);
            read_back(&stored);
        }
    }
    for kind in AlgorithmKind::ALL {
        kind.visit(Quota::per_second(10).unwrap(), RoundTrip);
    }
}
