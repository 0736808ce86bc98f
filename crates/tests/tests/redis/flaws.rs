//! The flaws the article's tests expose, proved on a real server: a
//! read-then-write limiter (GET, decide in the client, SET) admits more than
//! its limit under 20 concurrent requests while the Lua script admits exactly
//! 10; two in-memory limiters behind a round-robin balancer admit 20 of 30
//! requests at limit 10 while two instances sharing Redis admit 10.
//!
//! The flawed limiters live here, in test code, never in the algorithm
//! crates.

use crate::common;

use ratelab::AlgorithmKind;

use std::sync::Arc;

use ratelab::FixedWindow;
use ratelab::redis::Connection;
use ratelab::{AsyncRateLimiter, Keyed, ManualClock, Quota};

/// A DELIBERATELY FLAWED limiter: reads the count with GET, decides in the
/// client, writes it back with SET. Two requests that read the same count
/// both pass.
struct ReadThenWrite {
    connection: Connection,
    key: String,
    limit: u64,
}

impl ReadThenWrite {
    async fn check(&self) -> bool {
        let count: Option<u64> = self
            .connection
            .query(redis::cmd("GET").arg(&self.key))
            .await
            .unwrap();
        let count = count.unwrap_or(0);
        if count >= self.limit {
            return false;
        }
        let _: () = self
            .connection
            .query(
                redis::cmd("SET")
                    .arg(&self.key)
                    .arg(count + 1)
                    .arg("PX")
                    .arg(60_000),
            )
            .await
            .unwrap();
        true
    }
}

/// `n` concurrent requests, released together; how many passed.
async fn concurrently<F, Fut>(n: usize, request: F) -> usize
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let request = Arc::new(request);
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (request, barrier) = (request.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                request().await
            })
        })
        .collect();
    let mut passed = 0;
    for task in tasks {
        passed += usize::from(task.await.unwrap());
    }
    passed
}

#[test]
fn read_then_write_admits_more_than_the_limit_the_script_does_not() {
    let (_, runtime, connection) = common::shared();
    runtime.block_on(async {
        let quota = Quota::per_minute(10).unwrap();
        for round in 0..5 {
            let flawed = Arc::new(ReadThenWrite {
                connection: connection.clone(),
                key: format!("{}:flawed", common::unique_prefix()),
                limit: 10,
            });
            let racy = concurrently(20, move || {
                let flawed = flawed.clone();
                async move { flawed.check().await }
            })
            .await;

            // Time stands still: the script admits exactly the limit,
            // however long the 20 checks take.
            let clock = ManualClock::starting_at(1_000_000);
            let options = common::Options::new(common::client_time(&clock));
            let atomic: Arc<dyn AsyncRateLimiter> =
                common::redis(AlgorithmKind::TokenBucket, quota, connection, &options).into();
            let exact = concurrently(20, move || {
                let atomic = atomic.clone();
                async move { atomic.check_async(b"k", 1).await.unwrap().allowed }
            })
            .await;

            assert!(
                racy > 10,
                "round {round}: read-then-write admitted only {racy}"
            );
            assert_eq!(exact, 10, "round {round}: the script");
        }
    });
}

#[test]
fn per_instance_memory_behind_a_balancer_admits_twice_shared_redis_does_not() {
    let (server, runtime, _) = common::shared();
    let quota = Quota::per_minute(10).unwrap();

    // Two instances, each with its own in-memory counters.
    let clock = ManualClock::starting_at(1_000_000);
    let instances = [
        Keyed::with_clock(FixedWindow::new(quota), clock.clone()),
        Keyed::with_clock(FixedWindow::new(quota), clock),
    ];
    let in_memory = (0..30)
        .filter(|i| instances[i % 2].check(b"client", 1).unwrap().allowed)
        .count();
    assert_eq!(in_memory, 20);

    // Two instances, each with its own connection, sharing Redis (on one
    // clock that stands still, as the in-memory pair's).
    runtime.block_on(async {
        let clock = ManualClock::starting_at(1_000_000);
        let options = common::Options::new(common::client_time(&clock));
        let mut shared = Vec::new();
        for _ in 0..2 {
            let connection = Connection::single(&server.url()).await.unwrap();
            shared.push(common::redis(
                AlgorithmKind::TokenBucket,
                quota,
                &connection,
                &options,
            ));
        }
        let mut admitted = 0;
        for i in 0..30 {
            admitted += usize::from(
                shared[i % 2]
                    .check_async(b"client", 1)
                    .await
                    .unwrap()
                    .allowed,
            );
        }
        assert_eq!(admitted, 10);
    });
}
