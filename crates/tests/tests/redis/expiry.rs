//! Keys expire on their own: after any sequence of checks every key written
//! has a TTL, no longer than the time until it is back to full capacity
//! (rounded up to the millisecond); once full, the keys are gone.
//!
//! On Redis's clock, which the test cannot move: the TTLs are read on a
//! quota that takes an hour to recover (no key expires while the test
//! lists them, however slow the machine), and the keys' going is waited
//! for on one that recovers in 50 ms (a key that outlived its recovery by
//! more than the wait, a minute's slack say, fails it).

use crate::common;

use ratelab::AlgorithmKind;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ratelab::Quota;
use ratelab::redis::{Connection, TimeSource};

/// Every state key under `prefix` (not the quota registry's entries, each
/// kept a minute: `redis_state.rs` checks them).
async fn keys(connection: &Connection, prefix: &str) -> Vec<Vec<u8>> {
    let all: Vec<Vec<u8>> = connection
        .query(redis::cmd("KEYS").arg(format!("{prefix}:*")))
        .await
        .unwrap();
    all.into_iter()
        .filter(|key| !key.ends_with(b":quota"))
        .collect()
}

/// An irregular sequence over 8 keys (costs 0 to 5, some refused) through
/// `limiter`: for each key an admission with a cost wrote, the `reset_after`
/// of its last one. Only such an admission writes (and sets the TTL): its
/// `reset_after` bounds the TTL, which then counts down as fast as the time
/// to recovery does.
async fn irregular(limiter: &dyn ratelab::AsyncRateLimiter) -> HashMap<u8, Duration> {
    let mut last_reset = HashMap::new();
    for i in 0u32..60 {
        let key = u8::try_from(i * 7 % 8).unwrap();
        let cost = i * 13 % 6;
        let d = limiter.check_async(&[key], cost).await.unwrap();
        if d.allowed && cost > 0 {
            last_reset.insert(key, d.reset_after());
        }
    }
    last_reset
}

#[test]
fn every_key_has_a_ttl_no_longer_than_its_recovery() {
    let (_, runtime, connection) = common::shared();
    // 100 an hour, bursts of 5: a unit back every 36 s, full again within
    // three minutes.
    let quota = Quota::per_hour(100).unwrap().with_burst(5).unwrap();
    runtime.block_on(async {
        for name in AlgorithmKind::ALL {
            let options = common::Options::new(TimeSource::Redis);
            let limiter = common::redis(name, quota, connection, &options);
            let last_reset = irregular(&*limiter).await;
            let written = keys(connection, &options.prefix).await;
            // Nothing expired yet: one key per user key that was charged.
            assert_eq!(written.len(), last_reset.len(), "{name}: {written:?}");
            for key in &written {
                let pttl: i64 = connection.query(redis::cmd("PTTL").arg(key)).await.unwrap();
                assert!(pttl > 0, "{name}: key {key:?} has PTTL {pttl}");
                // The user key is the hash tag: `<prefix>:{<byte>}:<name>`.
                let user_key = key[options.prefix.len() + 2];
                let reset = last_reset[&user_key];
                let bound_ms = u64::try_from(reset.as_micros().div_ceil(1000)).unwrap();
                assert!(
                    u64::try_from(pttl).unwrap() <= bound_ms,
                    "{name}: TTL {pttl} ms > time to full recovery {reset:?}"
                );
            }
        }
    });
}

#[test]
fn keys_are_gone_once_full() {
    let (_, runtime, connection) = common::shared();
    // 100 per second, bursts of 5: full again within 50 ms.
    let quota = Quota::per_second(100).unwrap().with_burst(5).unwrap();
    runtime.block_on(async {
        for name in AlgorithmKind::ALL {
            let options = common::Options::new(TimeSource::Redis);
            let limiter = common::redis(name, quota, connection, &options);
            let last_reset = irregular(&*limiter).await;
            assert!(!last_reset.is_empty(), "{name} admitted nothing");
            // Each key expires 50 ms after its last write at the latest:
            // waited for, a generous while.
            let deadline = Instant::now() + Duration::from_secs(20);
            while !keys(connection, &options.prefix).await.is_empty() {
                assert!(
                    Instant::now() < deadline,
                    "{name}: keys outlived their recovery by 20 s"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
}

#[test]
fn a_client_clock_keeps_keys_its_slack_longer() {
    let (_, runtime, connection) = common::shared();
    let quota = Quota::per_second(100).unwrap().with_burst(5).unwrap();
    runtime.block_on(async {
        let clock = ratelab::ManualClock::starting_at(1_000_000);
        let options = common::Options::new(common::client_time(&clock));
        let limiter = common::redis(AlgorithmKind::Gcra, quota, connection, &options);
        let started = Instant::now();
        let d = limiter.check_async(b"k", 5).await.unwrap();
        assert_eq!(d.reset_after(), Duration::from_millis(50));
        // The key ends with the algorithm's code and its parameters' fingerprint.
        let suffix = ratelab::toolkit::RemoteForm::key_suffix(&ratelab::Gcra::new(quota));
        let key = format!("{}:{{k}}:{suffix}", options.prefix);
        let pttl: i64 = connection
            .query(redis::cmd("PTTL").arg(&key))
            .await
            .unwrap();
        // 50 ms of state, plus the default slack of one minute, less the
        // time since the write (at most what this test measured).
        let since = i64::try_from(started.elapsed().as_millis()).unwrap() + 1;
        assert!(
            pttl >= 60_050 - since && pttl <= 60_050,
            "{pttl}, {since} ms after"
        );
    });
}
