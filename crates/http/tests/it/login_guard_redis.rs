//! The login guard through real HTTP with its limits on Redis
//! the owner on her known device always logs in
//! while attackers guess from 10 and from 100 networks, IPv4 and IPv6; their
//! evaluated guesses stay within the quotas, and the per-account key on
//! Redis holds exactly them; a forged or foreign token gives nothing, and
//! cookies planted in front of the owner's own hide nothing.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::login::{
    SECRET, Wall, attackers, attempt, login_server, owner, owner_against_attackers,
    tokens_that_give_nothing, tossed_cookies_hide_nothing,
};
use ratelab_core::{AsyncRateLimiter, ManualClock, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::Policy;
use ratelab_redis::{Connection, RedisStore, TimeSource};
use ratelab_testkit::redis::RedisServer;

/// Policies on Redis, each limiter its own (the keys are prefixed with the
/// policy's name, so they never meet), on a clock that stands still: what
/// the attempts took is still held when the test reads it, however long a
/// loaded machine takes.
fn on(connection: &Connection) -> impl Fn(&str, Quota) -> (Policy, Arc<dyn AsyncRateLimiter>) {
    let connection = connection.clone();
    let clock = ManualClock::starting_at(1_700_000_000_000_000);
    move |name, quota| {
        let limiter: Arc<dyn AsyncRateLimiter> = Arc::new(
            // Slowness is not what these tests test: a timeout no loaded
            // machine reaches.
            RedisStore::builder(connection.clone(), Gcra::new(quota))
                .time_source(TimeSource::Client(Arc::new(clock.clone())))
                .timeout(Duration::from_secs(30))
                .build(),
        );
        (
            Policy::shared(name, limiter.clone()).timeout(Duration::from_secs(30)),
            limiter,
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_owner_keeps_logging_in_while_10_and_100_networks_guess_on_redis() {
    let redis = RedisServer::start();
    let connection = Connection::single(&redis.url()).await.unwrap();
    for (n, kind) in [(10, "v4"), (10, "v6"), (100, "v4"), (100, "v6")] {
        // A fresh Redis database state for each: flush between runs.
        let _: () = connection.query(&redis::cmd("FLUSHALL")).await.unwrap();
        let policies = on(&connection);
        let server = login_server(&policies, SECRET, &Wall::new()).await;
        owner_against_attackers(&server, attackers(n, kind), u64::from(n)).await;
    }
    let _: () = connection.query(&redis::cmd("FLUSHALL")).await.unwrap();
    let policies = on(&connection);
    let server = login_server(&policies, SECRET, &Wall::new()).await;
    let evaluated = owner_against_attackers(&server, attackers(100, "one-64"), 1).await;
    assert!(evaluated <= 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_foreign_and_expired_tokens_give_nothing_on_redis() {
    let redis = RedisServer::start();
    let connection = Connection::single(&redis.url()).await.unwrap();
    let policies = on(&connection);
    let elsewhere = login_server(
        &policies,
        b"another secret of at least 32 bytes.....",
        &Wall::new(),
    )
    .await;
    let foreign = attempt(elsewhere.addr, owner(), "alice", "wonderland", None)
        .await
        .cookie()
        .unwrap();
    let _: () = connection.query(&redis::cmd("FLUSHALL")).await.unwrap();
    let wall = Wall::new();
    let server = login_server(&policies, SECRET, &wall).await;
    tokens_that_give_nothing(&server, &wall, &foreign).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tossed_cookies_do_not_hide_the_owners_device_on_redis() {
    let redis = RedisServer::start();
    let connection = Connection::single(&redis.url()).await.unwrap();
    let policies = on(&connection);
    let server = login_server(&policies, SECRET, &Wall::new()).await;
    tossed_cookies_hide_nothing(&server).await;
}
