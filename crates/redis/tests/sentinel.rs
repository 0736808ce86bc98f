//! `Connection::sentinel`: a limiter on the master Redis Sentinel names
//! follows a failover that real sentinels (`redis-server --sentinel`)
//! carry out, onto the replica they promote.

use std::time::{Duration, Instant};

use ratelab_core::Quota;
use ratelab_gcra::Gcra;
use ratelab_redis::{Connection, FailurePolicy, RedisStore};
use ratelab_testkit::redis::{RedisServer, command};

const SERVICE: &str = "ratelab";

/// `SENTINEL MASTER <service>` on the sentinel at `port`: its field `name`.
fn master_field(port: u16, name: &str) -> Option<String> {
    let reply = command(port, &["SENTINEL", "MASTER", SERVICE]).ok()?;
    let fields: Vec<&str> = reply.lines().collect();
    fields
        .chunks(2)
        .find(|pair| pair[0] == name)
        .and_then(|pair| pair.get(1))
        .map(|value| (*value).to_owned())
}

/// Waits until every sentinel knows the replica and the other sentinels,
/// so that they can agree on a failover.
fn wait_until_sentinels_see_all(sentinels: &[RedisServer]) {
    let others = (sentinels.len() - 1).to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    for sentinel in sentinels {
        loop {
            let replicas = master_field(sentinel.port(), "num-slaves");
            let peers = master_field(sentinel.port(), "num-other-sentinels");
            if replicas.as_deref() == Some("1") && peers.as_deref() == Some(others.as_str()) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "sentinel {} sees {replicas:?} replicas and {peers:?} other sentinels",
                sentinel.port()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limiter_follows_a_sentinel_failover() {
    let mut master = RedisServer::start();
    let replica = RedisServer::start_replica_of(master.port(), &[]);
    // A master down for 2 s: longer than a loaded machine keeps a healthy
    // one from answering the sentinels' pings.
    let sentinels: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_sentinel(master.port(), SERVICE, 2, 2_000))
        .collect();
    wait_until_sentinels_see_all(&sentinels);
    let urls: Vec<String> = sentinels.iter().map(RedisServer::url).collect();

    let connection = Connection::sentinel(&urls, SERVICE)
        .await
        .expect("the sentinels name the master");
    assert_eq!(connection.kind(), "sentinel");
    // Ten at once, one back every six minutes: no refill during the test.
    let quota = Quota::per_hour(10).expect("a quota");
    let limiter = RedisStore::builder(connection, Gcra::new(quota))
        .timeout(Duration::from_secs(30))
        .breaker(0, Duration::ZERO)
        .on_failure(FailurePolicy::Error)
        .build();
    for _ in 0..4 {
        assert!(limiter.check(b"k", 1).await.expect("a check").allowed);
    }
    replica.wait_caught_up(master.port());
    master.kill();

    // Checks fail (outages) until the sentinels promote the replica; then
    // the next one reaches it, through the sentinels.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut failures = 0;
    let decision = loop {
        match limiter.check(b"k", 1).await {
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
    // The promoted replica had the four admissions: the fifth leaves five.
    assert!(decision.allowed);
    assert_eq!(decision.remaining, 5);
    let named = command(
        sentinels[0].port(),
        &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE],
    )
    .expect("the sentinel answers");
    assert_eq!(named, format!("127.0.0.1\n{}", replica.port()));
    let role = replica.command(&["ROLE"]).expect("ROLE");
    assert!(role.starts_with("master"), "{role}");
    eprintln!("the limiter reached the promoted replica after {failures} failed checks");
}

#[tokio::test]
async fn no_sentinel_is_an_error_that_says_so() {
    let none: [&str; 0] = [];
    let error = Connection::sentinel(&none, SERVICE)
        .await
        .expect_err("no sentinel");
    assert!(
        error.to_string().contains("at least one Sentinel"),
        "{error}"
    );
    // A server that is no sentinel, or a service no sentinel watches.
    let server = RedisServer::start();
    assert!(
        Connection::sentinel(&[server.url()], SERVICE)
            .await
            .is_err()
    );
    let master = RedisServer::start();
    let sentinel = RedisServer::start_sentinel(master.port(), SERVICE, 1, 500);
    assert!(
        Connection::sentinel(&[sentinel.url()], "elsewhere")
            .await
            .is_err()
    );
    assert!(
        Connection::sentinel(&[sentinel.url()], SERVICE)
            .await
            .is_ok()
    );
}
