//! The conformance table on Redis: every Redis limiter, on a single node and
//! on a cluster, gives exactly the decisions worked out by hand.

use crate::common;

use ratelab::redis::Connection;
use ratelab::{AsyncRateLimiter, ManualClock, Quota};
use ratelab_testkit::conformance::{Factory, run};
use ratelab_testkit::redis::RedisCluster;

#[test]
fn every_redis_limiter_conforms_on_a_node_and_a_cluster() {
    let (_, runtime, single) = common::shared();
    let cluster = RedisCluster::start();
    runtime.block_on(async {
        let cluster = Connection::cluster(&cluster.urls()).await.unwrap();
        let on = |connection: Connection| {
            move |name: &'static str,
                  quota: Quota,
                  clock: ManualClock|
                  -> Box<dyn AsyncRateLimiter> {
                common::redis(
                    name,
                    quota,
                    &connection,
                    &common::Options::new(common::client_time(&clock)),
                )
            }
        };
        let (redis, redis_cluster) = (on(single.clone()), on(cluster));
        let backends: [(&str, Factory<'_>); 2] =
            [("redis", &redis), ("redis-cluster", &redis_cluster)];
        let (failures, checked) = run(&scenarios(), &backends).await;
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert_eq!(
            checked,
            2 * scenarios().iter().map(|s| s.steps.len()).sum::<usize>()
        );
    });
}

/// Every algorithm's own scenario.
fn scenarios() -> Vec<ratelab::toolkit::conformance::Scenario> {
    ratelab::AlgorithmKind::ALL
        .map(ratelab::AlgorithmKind::conformance)
        .to_vec()
}
