//! The example server on Redis: two instances share
//! one quota (the reference article's load-balancer table: 30 requests
//! round-robin, a limit of 10, 10 pass), and the login scenarios,
//! with the limits on one Redis.

use crate::common;

use common::example::{Instance, WRONG, burst_of_wrong_passwords, one_ipv6_network, round_robin};
use common::localhost;
use ratelab_testkit::redis::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_table_on_redis_admits_10() {
    // 10 per hour, so that nothing refills while the test runs.
    let quota = ["--anonymous", "10/h"];
    let redis = RedisServer::start();
    let url = redis.url();
    let on_redis = [
        Instance::start(Some(&url), &quota),
        Instance::start(Some(&url), &quota),
    ];
    assert_eq!(round_robin(&on_redis).await, 10);
}

/// The burst on Redis: 60 concurrent wrong passwords from one
/// address left `login-account` holding 55 units and the owner refused
/// (`Retry-After: 72`); now it holds the evaluated guesses only, on
/// Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_wrong_passwords_leaves_the_wider_policy_untouched_on_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let args = ["--anonymous", "1000/h", "--trusted-proxy", "127.0.0.1"];
    let server = Instance::start(Some(&url), &args);
    burst_of_wrong_passwords(server.addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ipv6_network_gets_one_networks_guesses_on_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let server = Instance::start(
        Some(&url),
        &["--anonymous", "1000/h", "--trusted-proxy", "127.0.0.1"],
    );
    one_ipv6_network(server.addr, localhost()).await;
}

/// `--redis-timeout-ms` is the wait a check gets, for the layer's policies
/// too (whose own bound is 100 ms unless told): with 30,000 ms, a wrong
/// password checked while Redis holds every client for 400 ms is still
/// decided (401), not refused by the fail-closed login policies (503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_is_waited_for_as_long_as_the_timeout_says() {
    let redis = RedisServer::start();
    let url = redis.url();
    let server = Instance::start(Some(&url), &["--anonymous", "1000/h"]);
    // Scripts loaded and connections made before Redis pauses.
    let warm = common::send(server.addr, localhost(), "POST", "/login", &[WRONG]).await;
    assert_eq!(warm.status, 401, "{warm:?}");
    // Read before the pause starts: a request Redis held is answered 400 ms
    // after this at the earliest, however slow the machine.
    let started = std::time::Instant::now();
    redis
        .command(&["CLIENT", "PAUSE", "400", "ALL"])
        .expect("CLIENT PAUSE");
    let slow = common::send(server.addr, localhost(), "POST", "/login", &[WRONG]).await;
    assert_eq!(slow.status, 401, "{slow:?}");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(400),
        "decided before Redis answered: {:?}",
        started.elapsed()
    );
}
