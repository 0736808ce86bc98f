//! The reference article's table on a real Redis, with real time and the
//! Redis clock: capacity 10, 5 per second; 20 concurrent requests admit 10;
//! one second later, 10 requests admit 5; a refusal says wait 1 s.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelab::redis::{Connection, TimeSource};
use ratelab::{AsyncRateLimiter, Decision, Quota};
use ratelab_testkit::redis::RedisCluster;

/// 20 requests released at once, from 20 tasks.
async fn burst(limiter: &Arc<dyn AsyncRateLimiter>, n: usize) -> Vec<Decision> {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (limiter, barrier) = (limiter.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                limiter.check_async(b"client", 1).await.unwrap()
            })
        })
        .collect();
    let mut decisions = Vec::new();
    for task in tasks {
        decisions.push(task.await.unwrap());
    }
    decisions
}

async fn the_table(connection: &Connection) {
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    for name in ["token-bucket", "gcra", "leaky-meter", "leaky-queue"] {
        let options = common::Options::new(TimeSource::Redis);
        let limiter: Arc<dyn AsyncRateLimiter> =
            common::redis(name, quota, connection, &options).into();
        // Real time on Redis's clock: on a loaded machine the burst spreads
        // out and more than one second passes between the bursts, and one
        // more unit comes back per 200 ms of it. So each count is bounded
        // by the time measured around it: 10 at once (an idle machine's
        // table) up to what the time that passed allows.
        let units_back = |since: Instant| (since.elapsed().as_millis() / 200) as usize;
        let started = Instant::now();
        let first = burst(&limiter, 20).await;
        let first_most = 10 + units_back(started);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = burst(&limiter, 10).await;
        let total_most = 10 + units_back(started);
        let admitted = |d: &[Decision]| d.iter().filter(|d| d.allowed).count();
        let waits: Vec<u64> = first
            .iter()
            .chain(&second)
            .filter(|d| !d.allowed)
            .map(Decision::retry_after_secs)
            .collect();
        assert!(
            (10..=first_most).contains(&admitted(&first)),
            "{name}: a burst of 20 admits 10 (at most {first_most} after the time it took), not {}",
            admitted(&first)
        );
        assert!(
            (5..=10).contains(&admitted(&second)),
            "{name}: 10 after one second admit 5, not {}",
            admitted(&second)
        );
        assert!(
            admitted(&first) + admitted(&second) <= total_most,
            "{name}: {} and {} admitted, at most {total_most} after the time that passed",
            admitted(&first),
            admitted(&second)
        );
        assert_eq!(waits.len(), 30 - admitted(&first) - admitted(&second));
        assert!(waits.iter().all(|&w| w == 1), "{name}: waits {waits:?}");
    }
}

#[test]
fn the_reference_table_on_a_single_node() {
    let (_, runtime, connection) = common::shared();
    runtime.block_on(the_table(connection));
}

#[test]
fn the_reference_table_on_a_cluster() {
    let (_, runtime, _) = common::shared();
    let cluster = RedisCluster::start();
    runtime.block_on(async {
        let connection = Connection::cluster(&cluster.urls()).await.unwrap();
        the_table(&connection).await;
    });
}
