//! Keys expire on their own: after any sequence of checks every key written
//! has a TTL, no longer than the time until it is back to full capacity
//! (rounded up to the millisecond); once full, the keys are gone.

use crate::common;

use ratelab::AlgorithmKind;

use std::collections::HashMap;
use std::time::Duration;

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

#[test]
fn every_key_has_a_ttl_no_longer_than_its_recovery_then_goes() {
    let (_, runtime, connection) = common::shared();
    // 100 per second, bursts of 5: full again within 50 ms.
    let quota = Quota::per_second(100).unwrap().with_burst(5).unwrap();
    runtime.block_on(async {
        for name in AlgorithmKind::ALL {
            let options = common::Options::new(TimeSource::Redis);
            let limiter = common::redis(name, quota, connection, &options);
            // An irregular sequence over 8 keys: costs 0 to 5, some refused.
            // Only an admission with a cost writes (and sets the TTL): its
            // `reset_after` bounds the TTL, which then counts down as fast as
            // the time to recovery does.
            let mut last_reset: HashMap<u8, Duration> = HashMap::new();
            for i in 0u32..60 {
                let key = u8::try_from(i * 7 % 8).unwrap();
                let cost = i * 13 % 6;
                let d = limiter.check_async(&[key], cost).await.unwrap();
                if d.allowed && cost > 0 {
                    last_reset.insert(key, d.reset_after());
                }
            }
            let written = keys(connection, &options.prefix).await;
            assert!(!written.is_empty(), "{name} wrote nothing");
            for key in &written {
                let pttl: i64 = connection.query(redis::cmd("PTTL").arg(key)).await.unwrap();
                // -1 would be no TTL. -2: it expired since KEYS listed it;
                // 0: under a millisecond left (a loaded machine is slow).
                assert_ne!(pttl, -1, "{name}: key {key:?} has no TTL");
                if pttl == -2 {
                    continue;
                }
                // The user key is the hash tag: `<prefix>:{<byte>}:<name>`.
                let user_key = key[options.prefix.len() + 2];
                let reset = last_reset[&user_key];
                let bound_ms = u64::try_from(reset.as_micros().div_ceil(1000)).unwrap();
                assert!(
                    u64::try_from(pttl).unwrap() <= bound_ms,
                    "{name}: TTL {pttl} ms > time to full recovery {reset:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(120)).await;
            assert_eq!(
                keys(connection, &options.prefix).await.len(),
                0,
                "{name}: keys outlived their recovery"
            );
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
        let d = limiter.check_async(b"k", 5).await.unwrap();
        assert_eq!(d.reset_after(), Duration::from_millis(50));
        // The key ends with the algorithm's code and its parameters' fingerprint.
        let suffix = ratelab::toolkit::RemoteForm::key_suffix(&ratelab::Gcra::new(quota));
        let key = format!("{}:{{k}}:{suffix}", options.prefix);
        let pttl: i64 = connection
            .query(redis::cmd("PTTL").arg(&key))
            .await
            .unwrap();
        // 50 ms of state, plus the default slack of one minute.
        assert!(pttl > 59_000 && pttl <= 60_050, "{pttl}");
    });
}
