//! Keys of any shape: empty, 64 KiB, binary, with `{`, `}`, `{}`. On a
//! single node and on a cluster: no CROSSSLOT, no error, no two user keys
//! sharing state.

use crate::common;

use ratelab::AlgorithmKind;

use ratelab::redis::{Connection, hash_tag};
use ratelab::{ManualClock, Quota};
use ratelab_testkit::redis::RedisCluster;

fn awkward_keys() -> Vec<Vec<u8>> {
    let mut huge = vec![b'k'; 64 * 1024];
    let mut huge_twin = huge.clone();
    *huge_twin.last_mut().unwrap() = b'j';
    huge[100] = b'{';
    vec![
        b"".to_vec(),
        b"%".to_vec(),
        b"{".to_vec(),
        b"}".to_vec(),
        b"{}".to_vec(),
        b"{a}".to_vec(),
        b"a}b{c".to_vec(),
        b"%7B".to_vec(),
        vec![0, 0xff, 0xfe, b'}', 0x80],
        huge,
        huge_twin,
    ]
}

async fn each_key_is_its_own(connection: &Connection) {
    let quota = Quota::per_minute(2).unwrap();
    let keys = awkward_keys();
    // A clock that stands still: no unit comes back, and no window ends,
    // between a key's checks, however long they take.
    let clock = ManualClock::starting_at(1_700_000_000_000_000);
    for name in AlgorithmKind::ALL {
        let limiter = common::redis(
            name,
            quota,
            connection,
            &common::Options::new(common::client_time(&clock)),
        );
        for key in &keys {
            // Exactly the quota passes for each key, whatever the others did.
            let mut admitted = 0;
            for _ in 0..3 {
                let decision = limiter
                    .check_async(key, 1)
                    .await
                    .unwrap_or_else(|e| panic!("{name}: key of {} bytes: {e}", key.len()));
                admitted += u32::from(decision.allowed);
            }
            assert_eq!(admitted, 2, "{name}: key {:?}", &key[..key.len().min(8)]);
        }
    }
}

#[test]
fn awkward_keys_on_a_single_node() {
    let (_, runtime, connection) = common::shared();
    runtime.block_on(each_key_is_its_own(connection));
}

#[test]
fn awkward_keys_on_a_cluster_land_in_their_own_slot() {
    let (_, runtime, _) = common::shared();
    let cluster = RedisCluster::start();
    runtime.block_on(async {
        let connection = Connection::cluster(&cluster.urls()).await.unwrap();
        each_key_is_its_own(&connection).await;
        // The slot Redis computes is the slot of the escaped user key alone.
        for key in awkward_keys().iter().take(9) {
            let redis_key = ratelab::redis::redis_key("ratelab", key, "gcra");
            let slot: u64 = connection
                .query(redis::cmd("CLUSTER").arg("KEYSLOT").arg(&redis_key))
                .await
                .unwrap();
            let tag_slot: u64 = connection
                .query(
                    redis::cmd("CLUSTER")
                        .arg("KEYSLOT")
                        .arg(hash_tag(&redis_key)),
                )
                .await
                .unwrap();
            assert_eq!(slot, tag_slot, "{key:?}");
        }
    });
}
