//! Nothing read from Redis is trusted: state no script could have written is
//! an error naming the key (never a reset, an admit-all or an endless
//! refusal), data errors are not outages, long keys are hashed, a changed
//! quota starts clean, and another limiter using a key with another quota is
//! reported (the quota registry), never obeyed.

use crate::common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratelab::redis::{Connection, FailurePolicy, RedisLimiter, RedisStore};
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, ErrorKind, KnownAlgorithm, ManualClock,
    Quota,
};
use ratelab_testkit::redis::RedisServer;

/// A Redis limiter of `kind` and the Redis key of user key `k`, with the
/// alerts it raised.
struct Built {
    limiter: Box<dyn AsyncRateLimiter>,
    key: Vec<u8>,
    code: &'static str,
    alerts: Arc<AtomicU64>,
}

struct Build<'a> {
    connection: &'a Connection,
    prefix: &'a str,
    policy: FailurePolicy,
    policy_on_data_errors: bool,
    time: Option<&'a ManualClock>,
}

impl AlgorithmVisitor for Build<'_> {
    type Output = Built;
    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Built {
        let alerts = Arc::new(AtomicU64::new(0));
        let seen = alerts.clone();
        let code = A::CODE;
        let mut builder = RedisStore::builder(self.connection.clone(), algorithm)
            .prefix(self.prefix)
            .timeout(common::PATIENT)
            .on_failure(self.policy)
            .policy_on_data_errors(self.policy_on_data_errors)
            .on_alert(move |_| {
                seen.fetch_add(1, Ordering::Relaxed);
            });
        if let Some(clock) = self.time {
            builder = builder.time_source(common::client_time(clock));
        }
        let limiter = builder.build();
        Built {
            key: limiter.store().redis_key(b"k"),
            limiter: Box::new(limiter),
            code,
            alerts,
        }
    }
}

fn build(
    kind: AlgorithmKind,
    quota: Quota,
    connection: &Connection,
    policy: FailurePolicy,
) -> Built {
    kind.visit(
        quota,
        Build {
            connection,
            prefix: &common::unique_prefix(),
            policy,
            policy_on_data_errors: false,
            time: None,
        },
    )
}

fn unix_micros() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as f64
}

/// Values no script of `code` could have written (10 per second, burst 10).
fn corrupt_values(code: &str) -> Vec<Vec<u8>> {
    let far = unix_micros() + 1e13; // about four months ahead
    let mut values: Vec<Vec<u8>> = [
        "abc",
        "nan",
        "inf",
        "-inf",
        "1e300",
        "1e17",
        "-5",
        "0x7fffffffffffffff",
        "",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let le = |x: f64| x.to_le_bytes().to_vec();
    // Written at an instant after now (beyond the slack and a second).
    let later = le(far);
    // A debt ending past the protocol's ceiling (2^52 + 2^51 µs), a window
    // counting past 2^36 units: no settlement gets there.
    let beyond_end = le(6.8e15);
    let beyond_count = le(2f64.powi(37));
    match code {
        "gcra" | "lq" => {
            // Version 3's decimal state.
            values.push(format!("{far}").into_bytes());
            values.push([beyond_end.clone(), le(0.0), le(0.0)].concat());
            values.push([le(1.0), le(0.0), later.clone()].concat());
            values.push([le(f64::NAN), le(0.0), le(0.0)].concat());
            values.push([le(1.0), le(-1.0), le(0.0)].concat());
        }
        "tb" => {
            // 4294967295 tokens: the reviewed admit-all.
            values.push([vec![0xff; 4], le(0.0), le(0.0), le(0.0)].concat());
            values.push([vec![1, 0, 0, 0], le(f64::NAN), le(0.0), le(0.0)].concat());
            values.push([vec![1, 0, 0, 0], beyond_end.clone(), le(0.0), le(0.0)].concat());
            values.push([vec![1, 0, 0, 0], le(1.5), le(0.0), le(0.0)].concat());
            values.push([vec![1, 0, 0, 0], le(0.0), le(0.0), later.clone()].concat());
        }
        "fw" => {
            values.push([le(far / 1e6), le(0.0), le(0.0)].concat());
            values.push([le(0.0), beyond_count.clone(), le(0.0)].concat());
            values.push([le(f64::NAN), le(0.0), le(0.0)].concat());
            values.push([le(1.0), le(-1.0), le(0.0)].concat());
            // A fence past the window after the counter's.
            values.push([le(1.0), le(1.0), le(3.0)].concat());
        }
        "sc" => {
            values.push([le(far / 1e6), le(0.0), le(0.0), le(0.0)].concat());
            values.push([le(0.0), beyond_count.clone(), le(0.0), le(0.0)].concat());
            values.push([le(0.0), le(0.0), le(f64::INFINITY), le(0.0)].concat());
            values.push([le(1.0), le(1.0), le(1.0), le(3.0)].concat());
        }
        "lm" => {
            values.push([beyond_end, le(0.0), le(0.0)].concat());
            values.push([le(0.0), later, le(0.0)].concat());
            values.push([le(f64::NAN), le(0.0), le(0.0)].concat());
        }
        _ => {}
    }
    values
}

async fn set(connection: &Connection, key: &[u8], value: &[u8]) {
    let _: () = connection.query(redis::cmd("DEL").arg(key)).await.unwrap();
    let _: () = connection
        .query(redis::cmd("SET").arg(key).arg(value))
        .await
        .unwrap();
}

async fn pttl(connection: &Connection, key: &[u8]) -> i64 {
    connection.query(redis::cmd("PTTL").arg(key)).await.unwrap()
}

#[test]
fn corrupt_state_is_an_error_naming_the_key_under_every_policy() {
    let (_, runtime, connection) = common::shared();
    let quota = Quota::per_second(10).unwrap();
    runtime.block_on(async {
        for kind in AlgorithmKind::ALL {
            for policy in [
                FailurePolicy::Allow,
                FailurePolicy::Deny,
                FailurePolicy::Error,
            ] {
                let built = build(kind, quota, connection, policy);
                let mut values = corrupt_values(built.code);
                if built.code == "sl" {
                    // The log is a sorted set: any string is the wrong type.
                    values.truncate(2);
                }
                for value in &values {
                    set(connection, &built.key, value).await;
                    for cost in [0, 1] {
                        let error = built
                            .limiter
                            .check_async(b"k", cost)
                            .await
                            .expect_err(&format!("{kind:?} {policy:?} accepted {value:?}"));
                        assert_eq!(error.kind(), ErrorKind::Data, "{kind:?}: {error}");
                        let text = error.to_string();
                        let key = String::from_utf8_lossy(&built.key).into_owned();
                        assert!(
                            text.contains(&format!(
                                "ratelab {}: corrupt state at {key}: ",
                                kind.name()
                            )),
                            "{text}"
                        );
                    }
                    // Untouched: the script wrote nothing, and gave it no TTL.
                    let stored: Vec<u8> = connection
                        .query(redis::cmd("GET").arg(&built.key))
                        .await
                        .unwrap();
                    assert_eq!(&stored, value, "{kind:?}");
                    assert_eq!(pttl(connection, &built.key).await, -1);
                }
                assert_eq!(
                    built.alerts.load(Ordering::Relaxed),
                    2 * values.len() as u64
                );
            }
        }
    });
}

#[test]
fn a_sliding_log_with_impossible_entries_is_corrupt() {
    let (_, runtime, connection) = common::shared();
    // A window of a minute: the entries written at this process's "now"
    // are still inside it when a slow machine reaches the last case (with
    // a second's window they could slide out and be pruned, not refused).
    let quota = Quota::per_minute(10).unwrap();
    runtime.block_on(async {
        let built = build(
            AlgorithmKind::SlidingLog,
            quota,
            connection,
            FailurePolicy::Allow,
        );
        let far = format!("{}", unix_micros() + 1e13);
        let now = format!("{}", unix_micros());
        // Not a whole microsecond: no script logs that.
        let half = format!("{}.5", unix_micros());
        // Members no script writes, at an instant that counts: before v4,
        // counted as units.
        let numbered = |n: &str| format!("{now}:{n}");
        let (zero, other) = (numbered("0"), format!("{}:1", unix_micros() - 5.0));
        let cases: Vec<Vec<(&str, &str)>> = vec![
            vec![("inf", "x")],
            vec![(far.as_str(), "x")],
            vec![(half.as_str(), "x")],
            vec![(now.as_str(), "x")],
            vec![(now.as_str(), zero.as_str())],
            vec![(now.as_str(), other.as_str())],
            // A fence no reset writes.
            vec![(half.as_str(), "fence")],
        ];
        for entries in cases {
            let _: () = connection
                .query(redis::cmd("DEL").arg(&built.key))
                .await
                .unwrap();
            for (score, member) in &entries {
                let _: () = connection
                    .query(redis::cmd("ZADD").arg(&built.key).arg(*score).arg(*member))
                    .await
                    .unwrap();
            }
            let error = built.limiter.check_async(b"k", 1).await.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Data, "{entries:?}: {error}");
            assert!(error.to_string().contains("corrupt state at"), "{error}");
        }
    });
}

#[test]
fn a_key_of_another_type_is_a_data_error_not_an_outage() {
    let (_, runtime, connection) = common::shared();
    let quota = Quota::per_second(10).unwrap();
    runtime.block_on(async {
        for kind in AlgorithmKind::ALL {
            let built = build(kind, quota, connection, FailurePolicy::Allow);
            let _: () = connection
                .query(redis::cmd("RPUSH").arg(&built.key).arg("x"))
                .await
                .unwrap();
            for _ in 0..12 {
                let error = built.limiter.check_async(b"k", 1).await.unwrap_err();
                assert_eq!(error.kind(), ErrorKind::Data, "{kind:?}");
                assert!(!error.is_unavailable());
                assert!(error.to_string().contains("a list, not a"), "{error}");
            }
            assert_eq!(built.alerts.load(Ordering::Relaxed), 12);
            // Opted in, the policy applies to data errors too.
            let opted = kind.visit(
                quota,
                Build {
                    connection,
                    prefix: &common::unique_prefix(),
                    policy: FailurePolicy::Deny,
                    policy_on_data_errors: true,
                    time: None,
                },
            );
            let _: () = connection
                .query(redis::cmd("RPUSH").arg(&opted.key).arg("x"))
                .await
                .unwrap();
            let refused = opted.limiter.check_async(b"k", 1).await.unwrap();
            assert!(!refused.allowed);
            assert_eq!(opted.alerts.load(Ordering::Relaxed), 1);
        }
    });
}

#[test]
fn out_of_memory_is_a_data_error_not_an_admit_all() {
    let (_, runtime, _) = common::shared();
    let server = RedisServer::start();
    let quota = Quota::per_second(10).unwrap();
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        let config = |name: &str, value: &str| server.command(&["CONFIG", "SET", name, value]);
        assert_eq!(config("maxmemory-policy", "noeviction").unwrap(), "OK");
        // Any server uses more than one byte: every first write is refused.
        assert_eq!(config("maxmemory", "1").unwrap(), "OK");
        for kind in AlgorithmKind::ALL {
            let built = build(kind, quota, &connection, FailurePolicy::Allow);
            let answer = built.limiter.check_async(b"k", 1).await;
            if kind == AlgorithmKind::SlidingLog {
                // Its first write trims the log, and Redis lets a script
                // that has written go on writing (atomicity): Redis decides.
                assert!(answer.unwrap().allowed);
                continue;
            }
            let error = answer.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Data, "{kind:?}: {error}");
            assert!(error.to_string().contains("OOM"), "{error}");
            assert_eq!(built.alerts.load(Ordering::Relaxed), 1);
            // A peek writes nothing: Redis answers it.
            let peek = built.limiter.check_async(b"k", 0).await.unwrap();
            assert_eq!(peek.remaining, 10, "{kind:?}");
        }
    });
}

#[test]
fn long_keys_take_bounded_memory_and_stay_apart() {
    let (_, runtime, connection) = common::shared();
    let quota = Quota::per_hour(1).unwrap();
    runtime.block_on(async {
        let prefix = common::unique_prefix();
        let limiter = RedisStore::builder(connection.clone(), ratelab::Gcra::new(quota))
            .prefix(prefix.clone())
            // Megabyte keys on a loaded machine: slowness is not tested here.
            .timeout(common::PATIENT)
            .build();
        let mut a = vec![b'x'; 1 << 20];
        let mut b = a.clone();
        a.push(b'a');
        b.push(b'b');
        assert!(limiter.check(&a, 1).await.unwrap().allowed);
        assert!(!limiter.check(&a, 1).await.unwrap().allowed);
        // Same first megabyte, another key: its own state.
        assert!(limiter.check(&b, 1).await.unwrap().allowed);
        let keys: Vec<Vec<u8>> = connection
            .query(redis::cmd("KEYS").arg(format!("{prefix}:*")))
            .await
            .unwrap();
        // Both states, and the quota registry's entry of the first check
        // (the limiter's first, then every 100th, records its quota).
        assert_eq!(keys.len(), 3);
        for key in keys {
            assert!(key.len() < 100, "{}", String::from_utf8_lossy(&key));
            assert!(key.starts_with(format!("{prefix}:{{%H").as_bytes()));
        }
    });
}

/// The quotas a live key goes through.
fn quota_changes() -> [Quota; 4] {
    [
        Quota::per_second(10).unwrap(),
        Quota::per_minute(600).unwrap(),
        Quota::per_hour(1).unwrap(),
        Quota::per_second(10).unwrap(),
    ]
}

/// Drains `check`: what it admits, and the longest wait it answers, checked
/// against the quota's own bounds. With `frozen` the clock stands still and
/// the key must start full; else units come back while the loop runs.
async fn drain<F, Fut>(what: &str, quota: Quota, frozen: bool, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<ratelab::Decision, ratelab::Error>>,
{
    let capacity = u64::from(quota.burst());
    // The longest wait any algorithm answers: two windows (the sliding
    // counter's reset), the window being at least the refill time.
    let longest = quota
        .window()
        .max(quota.emission_interval() * quota.burst())
        * 2;
    let started = std::time::Instant::now();
    let mut admitted = 0;
    for _ in 0..capacity + 3 {
        let decision = check().await.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(decision.retry_after() <= longest, "{what}: {decision:?}");
        assert!(decision.reset_after() <= longest, "{what}: {decision:?}");
        assert!(decision.remaining <= capacity, "{what}: {decision:?}");
        admitted += u64::from(decision.allowed);
    }
    // On Redis time, units come back while the loop runs (one more for a
    // unit half refilled at the start).
    let refilled = if frozen {
        0
    } else {
        u64::try_from(started.elapsed().as_micros() / u128::from(quota.emission_interval_micros()))
            .unwrap()
            + 1
    };
    assert!(
        admitted <= capacity + refilled,
        "{what}: {admitted} admitted, quota {quota:?}"
    );
    if frozen {
        assert_eq!(admitted, capacity, "{what}: not clean under {quota:?}");
    }
}

#[test]
fn quota_changes_on_live_keys_start_clean_in_memory_and_on_redis() {
    let (_, runtime, connection) = common::shared();
    runtime.block_on(async {
        for kind in AlgorithmKind::ALL {
            let clock = ManualClock::starting_at(1_700_000_000_000_000);
            let prefix = common::unique_prefix();
            for (phase, quota) in quota_changes().into_iter().enumerate() {
                let what = format!("{kind:?} phase {phase} redis");
                let built = kind.visit(
                    quota,
                    Build {
                        connection,
                        prefix: &prefix,
                        policy: FailurePolicy::Error,
                        policy_on_data_errors: false,
                        time: Some(&clock),
                    },
                );
                drain(&what, quota, true, || built.limiter.check_async(b"k", 1)).await;
                // A changed quota is a new limiter in memory: it starts
                // clean there too, on the same clock.
                let memory = kind.keyed(quota, clock.clone());
                let what = format!("{kind:?} phase {phase} memory");
                drain(&what, quota, true, || {
                    std::future::ready(memory.check(b"k", 1))
                })
                .await;
                clock.advance(Duration::from_secs(1));
            }
        }
    });
}

#[test]
fn quota_changes_with_redis_time_never_lock_out() {
    let (_, runtime, connection) = common::shared();
    runtime.block_on(async {
        for kind in AlgorithmKind::ALL {
            let prefix = common::unique_prefix();
            let mut keys = Vec::new();
            for (phase, quota) in quota_changes().into_iter().enumerate() {
                let built = kind.visit(
                    quota,
                    Build {
                        connection,
                        prefix: &prefix,
                        policy: FailurePolicy::Error,
                        policy_on_data_errors: false,
                        time: None,
                    },
                );
                keys.push(built.key.clone());
                let what = format!("{kind:?} phase {phase} redis time");
                drain(&what, quota, false, || built.limiter.check_async(b"k", 1)).await;
            }
            // Each quota its own key; the first and last are the same quota.
            assert_eq!(keys[0], keys[3]);
            assert_ne!(keys[0], keys[1]);
            assert_ne!(keys[1], keys[2]);
        }
    });
}

/// A sliding log keeps one sorted-set member per unit on Redis: above
/// `MAX_STORED_LOG_LIMIT` units one request could make Redis add millions
/// of them. The limiter refuses such a quota on every call, before any
/// round trip, and the script itself refuses it when called directly; at
/// the cap it runs.
#[test]
fn a_sliding_log_too_large_for_redis_is_refused_before_any_call() {
    use ratelab::SlidingLog;
    use ratelab::sliding_window::MAX_STORED_LOG_LIMIT;
    use ratelab::toolkit::RemoteForm;

    let (_, runtime, connection) = common::shared();
    runtime.block_on(async {
        let per_hour = |limit| Quota::per_hour(limit).unwrap();
        let over = SlidingLog::new(per_hour(MAX_STORED_LOG_LIMIT + 1));
        assert!(over.unsupported().is_some());
        let limiter = RedisStore::limiter(connection.clone(), over);
        for call in [
            limiter.check(b"big", 1).await,
            limiter.peek(b"big", 1).await,
            limiter.check_with_receipt(b"big", 1).await.map(|(d, _)| d),
            limiter
                .reset(b"big")
                .await
                .map(|()| ratelab::Decision::admitted(0)),
        ] {
            let error = call.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
            assert!(error.to_string().contains("sliding counter"), "{error}");
        }
        let (stats, calls) = (limiter.stats(), limiter.store().stats());
        assert_eq!(
            (stats.answered, calls.module_calls, calls.script_calls),
            (0, 0, 0),
            "no call reached Redis"
        );

        // The script, called as another client would: invalid arguments.
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(SlidingLog::script()).arg(1).arg("raw-big");
        cmd.arg(&["5", "", "1", "0", "", "check"]);
        cmd.arg(&*over.params());
        let reply: Result<redis::Value, _> = connection.query(&cmd).await;
        let error = reply.unwrap_err().to_string();
        assert!(error.contains("sliding-log: invalid arguments"), "{error}");

        // At the cap: a whole burst at once (some 40 ms of Redis's time
        // here: more than the default timeout on a slow machine), then
        // refused.
        let at_cap = SlidingLog::new(per_hour(MAX_STORED_LOG_LIMIT));
        assert_eq!(at_cap.unsupported(), None);
        let limiter = RedisStore::builder(connection.clone(), at_cap)
            .timeout(common::PATIENT)
            .build();
        assert!(
            limiter
                .check(b"cap", MAX_STORED_LOG_LIMIT)
                .await
                .unwrap()
                .allowed
        );
        assert!(!limiter.check(b"cap", 1).await.unwrap().allowed);
    });
}

/// The TTL slack is at most 2^52 µs (the range of instants: no clock steps
/// back further): the scripts refuse more as invalid arguments, and the
/// limiter refuses it on every call before any round trip. At the bound,
/// it runs.
#[test]
fn a_ttl_slack_past_the_range_of_instants_is_refused_before_any_call() {
    use ratelab::Gcra;
    use ratelab::redis::MAX_TTL_SLACK_MS;
    use ratelab::toolkit::MAX_INSTANT_MICROS;

    let (_, runtime, connection) = common::shared();
    let quota = Quota::per_second(5).unwrap();
    runtime.block_on(async {
        let with_slack = |slack| {
            RedisStore::builder(connection.clone(), Gcra::new(quota))
                .prefix(common::unique_prefix())
                .time_source(common::client_time(&ManualClock::new()))
                .timeout(common::PATIENT)
                .ttl_slack(slack)
                .build()
        };
        let over = with_slack(Duration::from_micros(MAX_INSTANT_MICROS + 1_000));
        for call in [
            over.check(b"k", 1).await,
            over.peek(b"k", 1).await,
            over.check_with_receipt(b"k", 1).await.map(|(d, _)| d),
            over.reset(b"k")
                .await
                .map(|()| ratelab::Decision::admitted(0)),
        ] {
            let error = call.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");
            assert!(error.to_string().contains("TTL slack"), "{error}");
        }
        let (stats, calls) = (over.stats(), over.store().stats());
        assert_eq!(
            (stats.answered, calls.script_calls),
            (0, 0),
            "a call went out"
        );

        let at_bound = with_slack(Duration::from_micros(MAX_INSTANT_MICROS));
        assert!(at_bound.check(b"k", 1).await.unwrap().allowed);
        let pttl: i64 = connection
            .query(redis::cmd("PTTL").arg(at_bound.store().redis_key(b"k")))
            .await
            .unwrap();
        let most = i64::try_from(MAX_TTL_SLACK_MS).unwrap() + 1_000;
        assert!(pttl > 0 && pttl <= most, "PTTL {pttl}");
    });
}

/// Two limiters use one key with different quotas: each keeps its own state
/// (the fingerprint names another Redis key), so the registry reports it to
/// both, every time one records its quota after the other, and never
/// changes a decision.
#[test]
fn another_quota_on_the_same_key_is_reported_never_obeyed() {
    use ratelab::redis::QuotaMismatch;
    use std::num::NonZeroU32;
    use std::sync::Mutex;

    let (_, runtime, connection) = common::shared();
    runtime.block_on(async {
        let prefix = common::unique_prefix();
        let seen: Arc<Mutex<Vec<QuotaMismatch>>> = Arc::default();
        let build = |quota: Quota, every: Option<u32>| {
            let seen = seen.clone();
            RedisStore::builder(connection.clone(), ratelab::Gcra::new(quota))
                .prefix(prefix.clone())
                .timeout(common::PATIENT)
                .quota_check_every(every.map(|n| NonZeroU32::new(n).unwrap()))
                .on_quota_mismatch(move |m| seen.lock().unwrap().push(m.clone()))
                .build()
        };
        let ten = Quota::per_second(10).unwrap();
        let five = Quota::per_second(5).unwrap();
        let a = build(ten, Some(1));
        let same = build(ten, Some(1));
        let b = build(five, Some(3));
        let mismatches = |l: &RedisLimiter<ratelab::Gcra>| l.store().stats().quota_mismatches;

        // The first check records; the same quota again is no mismatch.
        assert_eq!(a.check(b"k", 1).await.unwrap().remaining, 9);
        assert_eq!(same.check(b"k", 1).await.unwrap().remaining, 8);
        assert_eq!((mismatches(&a), mismatches(&same)), (0, 0));
        let registry = a.store().quota_registry_key(b"k");
        assert_eq!(registry, format!("{prefix}:{{k}}:gcra:quota").as_bytes());
        // In the key's slot; kept a minute (the quota's longest wait is less).
        assert_eq!(
            ratelab::redis::hash_tag(&registry),
            ratelab::redis::hash_tag(&a.store().redis_key(b"k"))
        );
        let ttl: i64 = connection
            .query(redis::cmd("PTTL").arg(&registry))
            .await
            .unwrap();
        assert!((59_000..=60_000).contains(&ttl), "{ttl}");

        // Another quota: its own bucket (5 left, not 3), and reported once.
        assert_eq!(b.check(b"k", 1).await.unwrap().remaining, 4);
        assert_eq!(mismatches(&b), 1);
        {
            let seen = seen.lock().unwrap();
            assert_eq!(seen.len(), 1);
            assert_eq!(seen[0].key, b"k");
            assert_eq!(seen[0].ours, "v3:gcra:200000,1000000,5");
            assert_eq!(seen[0].theirs, "v3:gcra:100000,1000000,10");
        }
        // b records again on its 4th check only (every 3rd after the
        // first); a, recording on every check, meets b's entry once.
        assert_eq!(a.check(b"k", 1).await.unwrap().remaining, 7);
        assert_eq!(mismatches(&a), 1);
        assert_eq!(a.check(b"k", 1).await.unwrap().remaining, 6);
        assert_eq!(mismatches(&a), 1, "a's own entry now");
        for left in [3, 2] {
            assert_eq!(b.check(b"k", 1).await.unwrap().remaining, left);
        }
        assert_eq!(mismatches(&b), 1, "b's 2nd and 3rd checks do not record");
        assert_eq!(b.check(b"k", 1).await.unwrap().remaining, 1);
        assert_eq!(mismatches(&b), 2);
        assert_eq!(seen.lock().unwrap().len(), 3);
        // A limiter told never to record writes no registry entry.
        let quiet = RedisStore::builder(connection.clone(), ratelab::Gcra::new(ten))
            .prefix(prefix.clone())
            .timeout(common::PATIENT)
            .quota_check_every(None)
            .build();
        assert!(quiet.check(b"other", 1).await.unwrap().allowed);
        let exists: i64 = connection
            .query(redis::cmd("EXISTS").arg(quiet.store().quota_registry_key(b"other")))
            .await
            .unwrap();
        assert_eq!(exists, 0);
    });
}
