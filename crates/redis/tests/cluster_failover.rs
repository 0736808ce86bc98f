//! A Redis Cluster with a replica for each master, failed over by the
//! cluster itself when a master dies: strict mode's `WAIT` reaches each
//! key's master, whose replica acknowledges it, and the admissions it
//! confirmed are still there on the replica the cluster promoted.

use std::time::{Duration, Instant};

use ratelab_core::Quota;
use ratelab_gcra::Gcra;
use ratelab_redis::{Connection, FailurePolicy, RedisStore};
use ratelab_testkit::redis::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_admissions_survive_a_cluster_failover() {
    let mut cluster = RedisCluster::start_with_replicas(&[]);
    let connection = Connection::cluster(&cluster.urls())
        .await
        .expect("a cluster");
    // Ten at once, one back every six minutes: no refill during the test.
    let quota = Quota::per_hour(10).expect("a quota");
    let build = |strict: bool| {
        let builder = RedisStore::builder(connection.clone(), Gcra::new(quota))
            .timeout(Duration::from_secs(30))
            .breaker(0, Duration::ZERO)
            .on_failure(FailurePolicy::Error);
        if strict {
            // Long enough for a loaded machine's replica to acknowledge.
            builder.replicas(1, Duration::from_secs(2)).build()
        } else {
            builder.build()
        }
    };
    let strict = build(true);
    let keys: Vec<Vec<u8>> = (0..6).map(|i| format!("key-{i}").into_bytes()).collect();
    for key in &keys {
        for _ in 0..4 {
            let decision = strict.check(key, 1).await.expect("confirmed");
            assert!(decision.allowed);
        }
    }
    assert_eq!(strict.store().stats().unconfirmed, 0);

    // Kill the master that holds the first key.
    let held = strict.store().redis_key(&keys[0]);
    let held = std::str::from_utf8(&held).expect("an ASCII key");
    let owner = cluster
        .nodes()
        .iter()
        .position(|node| {
            let role = node.command(&["ROLE"]).unwrap_or_default();
            role.starts_with("master") && node.command(&["EXISTS", held]).as_deref() == Ok("1")
        })
        .expect("a master holds the key");
    cluster.nodes_mut()[owner].kill();

    // The cluster promotes the replica; until then the key has no answer.
    let plain = build(false);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut failures = 0;
    let decision = loop {
        match plain.check(&keys[0], 1).await {
            Ok(decision) => break decision,
            Err(error) => {
                assert!(error.is_unavailable(), "{error}");
                assert!(
                    Instant::now() < deadline,
                    "no failover after {failures} failures: {error}"
                );
                failures += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    // The promoted replica holds the four confirmed admissions.
    assert!(decision.allowed);
    assert_eq!(decision.remaining, 5);
    // It has no replica of its own now: strict mode cannot confirm there.
    let error = strict.check(&keys[0], 1).await.expect_err("no replica");
    assert!(error.to_string().contains("0 of the 1 replicas"), "{error}");
    // Every other key kept its four, on whichever master it lives.
    for key in &keys[1..] {
        let peeked = plain.peek(key, 0).await.expect("a peek");
        assert_eq!(peeked.remaining, 6, "{peeked:?}");
    }
    eprintln!("the key answered again after {failures} failed checks");
}
