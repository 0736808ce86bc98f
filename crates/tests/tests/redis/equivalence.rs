//! Memory and Redis decide alike: for random arrival sequences on one
//! `ManualClock`, each algorithm's Redis script (client time source) returns
//! exactly the decisions of its in-memory logic, on a single node and on a
//! cluster; with clocks that jump backwards and far forwards too.

use crate::common;

use ratelab::AlgorithmKind;

use proptest::prelude::*;
use ratelab::redis::{Connection, RedisStore};
use ratelab::toolkit::MAX_INSTANT_MICROS;
use ratelab::{AlgorithmVisitor, AsyncRateLimiter, KnownAlgorithm, ManualClock, Quota};
use ratelab_testkit::props::{Step, config, simulate};
use ratelab_testkit::redis::RedisCluster;
use ratelab_testkit::strategies::{Arrival, quota_and_arrivals, quota_and_wild_arrivals};

/// The pure logic's answers for `arrivals`.
fn expected(
    kind: AlgorithmKind,
    quota: Quota,
    arrivals: &[Arrival],
) -> Vec<Result<ratelab::Decision, String>> {
    struct Run<'a>(&'a [Arrival]);
    impl AlgorithmVisitor for Run<'_> {
        type Output = Vec<Result<ratelab::Decision, String>>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            simulate(&algorithm, self.0)
                .into_iter()
                .map(|s: Step<A::State>| s.result)
                .collect()
        }
    }
    kind.visit(quota, Run(arrivals))
}

/// A Redis limiter on `clock` whose stored instants may be any distance
/// ahead of now: a clock that steps back anywhere (the scripts otherwise
/// report state more than the TTL slack ahead of now as corrupt).
fn trusting_any_clock(
    name: AlgorithmKind,
    quota: Quota,
    connection: &Connection,
    clock: &ManualClock,
) -> Box<dyn AsyncRateLimiter> {
    struct Build<'a>(&'a Connection, &'a ManualClock);
    impl AlgorithmVisitor for Build<'_> {
        type Output = Box<dyn AsyncRateLimiter>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            Box::new(
                RedisStore::builder(self.0.clone(), algorithm)
                    .prefix(common::unique_prefix())
                    .time_source(common::client_time(self.1))
                    .timeout(common::PATIENT)
                    .ttl_slack(std::time::Duration::from_micros(MAX_INSTANT_MICROS))
                    .build(),
            )
        }
    }
    name.visit(quota, Build(connection, clock))
}

/// Runs `arrivals` on Redis for every algorithm and compares each answer.
fn agree(connection: &Connection, quota: Quota, arrivals: &[Arrival]) -> Result<(), TestCaseError> {
    agree_with(connection, quota, arrivals, false)
}

fn agree_with(
    connection: &Connection,
    quota: Quota,
    arrivals: &[Arrival],
    wild: bool,
) -> Result<(), TestCaseError> {
    let (_, runtime, _) = common::shared();
    for name in AlgorithmKind::ALL {
        let clock = ManualClock::new();
        let limiter = if wild {
            trusting_any_clock(name, quota, connection, &clock)
        } else {
            let options = common::Options::new(common::client_time(&clock));
            common::redis(name, quota, connection, &options)
        };
        let want = expected(name, quota, arrivals);
        for (arrival, want) in arrivals.iter().zip(want) {
            clock.set(arrival.at);
            let got = runtime
                .block_on(limiter.check_async(&[arrival.key], arrival.cost))
                .map_err(|e| e.to_string());
            prop_assert_eq!(
                got,
                want,
                "{} at {} (key {}, cost {})",
                name,
                arrival.at,
                arrival.key,
                arrival.cost
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn redis_decides_as_memory((quota, arrivals) in quota_and_arrivals(40)) {
        let (_, _, connection) = common::shared();
        agree(connection, quota, &arrivals)?;
    }

    #[test]
    fn redis_decides_as_memory_when_the_clock_goes_wild((quota, arrivals) in quota_and_wild_arrivals(30)) {
        let (_, _, connection) = common::shared();
        agree_with(connection, quota, &arrivals, true)?;
    }
}

#[test]
fn a_cluster_decides_as_memory() {
    let (_, runtime, _) = common::shared();
    let cluster = RedisCluster::start();
    let connection = runtime
        .block_on(Connection::cluster(&cluster.urls()))
        .unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(config(12));
    runner
        .run(&quota_and_arrivals(30), |(quota, arrivals)| {
            agree(&connection, quota, &arrivals)
        })
        .unwrap();
}
