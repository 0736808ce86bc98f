//! Peek, refund (of a receipt) and reset, in memory and on Redis (the Lua
//! scripts, client time): for random arrivals that interleave them with
//! checks, every algorithm answers the same, decision for decision, keyed
//! and single-bucket; a peek is what the check right after it at the same
//! instant decides; a refund never takes a key above its capacity (a full
//! key's peek is unchanged by it).
//!
//! One difference is by design, and kept out of the comparison: a window
//! algorithm's reset fences the window it happens in (receipts of it give
//! nothing back), and memory fences a key that has had receipts (a single
//! bucket: always), where Redis, which cannot know of receipts, fences a
//! key that holds anything a receipt could claim. So for two windows after
//! a reset of a window algorithm's key, its checks ask for no receipt.

use crate::common;

use std::time::Duration;

use proptest::prelude::*;
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, Decision, Direct, KnownAlgorithm,
    ManualClock, Quota, RateLimiter, Receipt,
};
use ratelab_testkit::props::config;
use ratelab_testkit::strategies::{Arrival, quota_and_arrivals};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Check,
    /// A peek, then a check of the same cost at the same instant.
    PeekThenCheck,
    Refund,
    Reset,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            4 => Just(Op::Check),
            2 => Just(Op::PeekThenCheck),
            3 => Just(Op::Refund),
            1 => Just(Op::Reset),
        ],
        40,
    )
}

/// A single-bucket limiter of `kind`, behind the keyed trait (the key is
/// ignored).
fn direct(kind: AlgorithmKind, quota: Quota, clock: &ManualClock) -> Box<dyn RateLimiter> {
    struct Build<'a>(&'a ManualClock);
    impl AlgorithmVisitor for Build<'_> {
        type Output = Box<dyn RateLimiter>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            Box::new(Direct::with_clock(algorithm, self.0.clone()))
        }
    }
    kind.visit(quota, Build(clock))
}

/// A receipt from memory and one from Redis, for the same admission.
type Pair = (Receipt, Receipt);

fn agree(quota: Quota, arrivals: &[Arrival], ops: &[Op]) -> Result<(), TestCaseError> {
    let (_, runtime, connection) = common::shared();
    let capacity = u64::from(quota.burst());
    for kind in AlgorithmKind::ALL {
        for single in [false, true] {
            let clock = ManualClock::new();
            let memory = if single {
                direct(kind, quota, &clock)
            } else {
                common::keyed(kind, quota, clock.clone())
            };
            let options = common::Options::new(common::client_time(&clock));
            let redis = common::redis(kind, quota, connection, &options);
            let window = quota.window_micros();
            let windows = !kind.bound(quota).is_debt();
            // Per key: receipts outstanding (memory's, Redis's), and until
            // when checks ask for none (see the module docs).
            let mut outstanding: Vec<Vec<Pair>> = (0..=u8::MAX).map(|_| Vec::new()).collect();
            let mut no_receipts_until = [0u64; 256];
            let run = |f: ratelab::CheckFuture<'_>| runtime.block_on(f).map_err(|e| e.to_string());
            for (arrival, &op) in arrivals.iter().zip(ops.iter().cycle()) {
                clock.set(arrival.at);
                // One bucket: every arrival on the one key Redis holds.
                let key = [if single { 0 } else { arrival.key }];
                let k = usize::from(key[0]);
                let cost = arrival.cost;
                let at = format!(
                    "{kind} ({}) {op:?} of {cost} on key {} at {}",
                    if single { "single" } else { "keyed" },
                    key[0],
                    arrival.at
                );
                let full = memory.peek(&key, 0).map_err(|e| e.to_string());
                let (want, got) = match op {
                    Op::Check if arrival.at >= no_receipts_until[k] => {
                        let want = memory.check_with_receipt(&key, cost);
                        let got = runtime.block_on(redis.check_with_receipt_async(&key, cost));
                        let answers = (
                            want.as_ref().map(|(d, _)| *d).map_err(|e| e.to_string()),
                            got.as_ref().map(|(d, _)| *d).map_err(|e| e.to_string()),
                        );
                        if let (Ok((_, Some(a))), Ok((_, Some(b)))) = (want, got) {
                            outstanding[k].push((a, b));
                        }
                        answers
                    }
                    Op::Check => (
                        memory.check(&key, cost).map_err(|e| e.to_string()),
                        run(redis.check_async(&key, cost)),
                    ),
                    Op::PeekThenCheck => (
                        memory.peek(&key, cost).map_err(|e| e.to_string()),
                        run(redis.peek_async(&key, cost)),
                    ),
                    Op::Refund => {
                        let Some((a, b)) = outstanding[k].pop() else {
                            continue;
                        };
                        (
                            memory.refund(a).map_err(|e| e.to_string()),
                            run(redis.refund_async(b)),
                        )
                    }
                    Op::Reset => {
                        if windows {
                            outstanding[k].clear();
                            no_receipts_until[k] = arrival.at + 2 * window;
                        }
                        let done = |r: Result<(), ratelab::Error>| {
                            r.map(|()| Decision::admitted(0)).map_err(|e| e.to_string())
                        };
                        (
                            done(memory.reset(&key)),
                            done(runtime.block_on(redis.reset_async(&key))),
                        )
                    }
                };
                prop_assert_eq!(&got, &want, "{}", at);
                if let Ok(decision) = &want {
                    prop_assert!(decision.remaining <= capacity, "above capacity: {}", at);
                }
                match op {
                    Op::PeekThenCheck => {
                        let checked = memory.check(&key, cost).map_err(|e| e.to_string());
                        prop_assert_eq!(&checked, &want, "memory: a peek, then its check: {}", at);
                        let checked = run(redis.check_async(&key, cost));
                        prop_assert_eq!(&checked, &want, "Redis: a peek, then its check: {}", at);
                    }
                    Op::Refund => {
                        // A full key stays full: nothing to give back.
                        if let (Ok(full), Ok(_)) = (&full, &want)
                            && full.remaining == capacity
                            && full.reset_after().is_zero()
                        {
                            prop_assert_eq!(&want, &Ok(*full), "a full key changed: {}", at);
                        }
                    }
                    Op::Check | Op::Reset => {}
                }
                if op == Op::Reset {
                    // Back to full capacity, as a key never seen.
                    let after = memory.peek(&key, 0).unwrap();
                    prop_assert_eq!(after.remaining, capacity, "reset: {}", at);
                    prop_assert_eq!(run(redis.peek_async(&key, 0)), Ok(after), "{}", at);
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(32))]

    #[test]
    fn peek_refund_and_reset_agree_in_memory_and_on_redis(
        (quota, arrivals) in quota_and_arrivals(40),
        ops in ops(),
    ) {
        agree(quota, &arrivals, &ops)?;
    }
}

/// Through the async trait objects the HTTP layer holds: a refund of the
/// last admission gives its unit back, a reset gives everything back, on
/// Redis as in memory.
#[test]
fn a_refund_gives_back_and_a_reset_forgets() {
    let (_, runtime, connection) = common::shared();
    let quota = Quota::per_minute(3).unwrap();
    for kind in AlgorithmKind::ALL {
        let clock = ManualClock::new();
        clock.set(1_000_000_000);
        let options = common::Options::new(common::client_time(&clock));
        let limiters: Vec<Box<dyn AsyncRateLimiter>> = vec![
            Box::new(common::keyed(kind, quota, clock.clone())),
            common::redis(kind, quota, connection, &options),
        ];
        for limiter in &limiters {
            let run = |f: ratelab::CheckFuture<'_>| runtime.block_on(f).unwrap();
            let mut last = None;
            for _ in 0..3 {
                let (decision, receipt) = runtime
                    .block_on(limiter.check_with_receipt_async(b"k", 1))
                    .unwrap();
                assert!(decision.allowed, "{kind}");
                last = receipt;
            }
            assert!(!run(limiter.check_async(b"k", 1)).allowed, "{kind}");
            // Given back at the instant of the check: all of it is held.
            let last = last.expect("a receipt for an admission");
            assert_eq!(run(limiter.refund_async(last)).remaining, 1, "{kind}");
            assert!(run(limiter.peek_async(b"k", 1)).allowed, "{kind}");
            assert!(!run(limiter.peek_async(b"k", 2)).allowed, "{kind}");
            runtime.block_on(limiter.reset_async(b"k")).unwrap();
            assert_eq!(run(limiter.peek_async(b"k", 3)).remaining, 0, "{kind}");
            assert_eq!(run(limiter.check_async(b"k", 0)).remaining, 3, "{kind}");
        }
        // At once: memory decides and consumes; Redis, which must wait for
        // its answer, decides nothing and consumes nothing.
        let now = limiters[0]
            .check_now(b"now", 1)
            .expect("memory answers at once");
        assert_eq!(now.unwrap().remaining, 2, "{kind}");
        assert_eq!(run_peek(runtime, &*limiters[0]), 2, "{kind}");
        assert!(limiters[1].check_now(b"now", 1).is_none(), "{kind}");
        assert_eq!(run_peek(runtime, &*limiters[1]), 3, "{kind}");
    }
}

/// What a peek of key `now` says remains.
fn run_peek(runtime: &tokio::runtime::Runtime, limiter: &dyn AsyncRateLimiter) -> u64 {
    runtime
        .block_on(limiter.peek_async(b"now", 0))
        .unwrap()
        .remaining
}

/// With Redis down, a peek answers as the failure policy says, and charges
/// nothing: not the in-memory fallback either. A refund of a receipt Redis
/// issued, and a reset, return the outage (nothing to give back on a store
/// that is not there); one the fallback issued during the outage is
/// settled there. Failing open issues no receipt: nothing was charged.
#[test]
fn a_peek_during_an_outage_charges_no_fallback() {
    use ratelab::Gcra;
    use ratelab::redis::{Connection, FailurePolicy, RedisStore};
    use ratelab_testkit::redis::RedisServer;

    let (_, runtime, _) = common::shared();
    let mut server = RedisServer::start();
    let quota = Quota::per_minute(2).unwrap();
    runtime.block_on(async {
        let connection = Connection::single(&server.url()).await.unwrap();
        let build = |policy| {
            RedisStore::builder(connection.clone(), Gcra::new(quota))
                .prefix(common::unique_prefix())
                .timeout(Duration::from_millis(200))
                .on_failure(policy)
                .build()
        };
        let fallback = build(FailurePolicy::Fallback);
        let open = build(FailurePolicy::Allow);
        // An admission Redis decided (a loaded machine may time out the
        // first calls: the fallback decides those, and they are asked again).
        let issued = loop {
            let (decided, issued) = fallback.check_with_receipt(b"r", 1).await.unwrap();
            if !decided.degraded {
                break issued.expect("Redis admitted it");
            }
        };
        server.kill();
        for _ in 0..5 {
            let peeked = fallback.peek(b"k", 2).await.unwrap();
            assert!(peeked.allowed && peeked.degraded, "{peeked:?}");
            assert_eq!(peeked.remaining, 0);
        }
        // The fallback still holds its whole capacity.
        assert_eq!(fallback.check(b"k", 2).await.unwrap().remaining, 0);
        assert!(!fallback.peek(b"k", 1).await.unwrap().allowed);

        let peeked = open.peek(b"k", 1).await.unwrap();
        assert!(peeked.allowed && peeked.degraded, "{peeked:?}");
        assert_eq!(peeked.remaining, 1);
        assert!(!peeked.reset_after().is_zero());

        assert!(fallback.refund(issued).await.unwrap_err().is_unavailable());
        assert!(fallback.reset(b"k").await.unwrap_err().is_unavailable());

        // Decided in memory: the fallback's receipt, settled there.
        let (decided, receipt) = fallback.check_with_receipt(b"m", 2).await.unwrap();
        assert!(decided.allowed && decided.degraded, "{decided:?}");
        let refunded = fallback
            .refund(receipt.expect("the fallback's"))
            .await
            .unwrap();
        assert!(refunded.degraded && refunded.remaining == 2, "{refunded:?}");
        let (opened, none) = open.check_with_receipt(b"m", 1).await.unwrap();
        assert!(
            opened.allowed && opened.degraded && none.is_none(),
            "{opened:?}"
        );
    });
}
