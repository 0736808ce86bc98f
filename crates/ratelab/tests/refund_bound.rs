//! A refund never lets more pass than the quota. Each admitted request
//! either counts or is refunded later, after other arrivals: within its
//! window or across a window's end, before its debt is repaid or after. It
//! is refunded with what its admission still weighs (its `reset_after`, less
//! the time since its check), and the units that still count keep every
//! algorithm's bound, per key.
//!
//! Given back whole, whenever they came, refunds let a fixed window count 4
//! requests of 3 in one window, and a bucket give one unit twice: the first
//! tests show those cases, in memory and on Redis.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, Keyed, KnownAlgorithm, ManualClock, Quota,
};
use ratelab_testkit::oracle::{Admitted, Bound};
use ratelab_testkit::props::config;
use ratelab_testkit::strategies::{Arrival, quota_and_arrivals};

/// Three per ten seconds: for windows, 3 per aligned 10 s window.
fn quota() -> Quota {
    Quota::new(3, Duration::from_secs(10)).unwrap()
}

/// Requests counted in one aligned window of `window` µs, most of any.
fn most_in_an_aligned_window(counted: &[Admitted], window: u64) -> u64 {
    let mut per_window: BTreeMap<u64, u64> = BTreeMap::new();
    for a in counted {
        *per_window.entry(a.at / window).or_default() += a.units;
    }
    per_window.values().copied().max().unwrap_or(0)
}

/// A limiter of `kind` on `clock`: in memory, and on Redis with the
/// client's clock (the client works out what is still owed before it sends
/// the refund).
fn both(kind: AlgorithmKind, clock: &ManualClock) -> [Box<dyn AsyncRateLimiter>; 2] {
    let (_, _, connection) = common::shared();
    let options = common::Options::new(common::client_time(clock));
    [
        Box::new(common::keyed(kind, quota(), clock.clone())),
        common::redis(kind, quota(), connection, &options),
    ]
}

fn run(future: ratelab::CheckFuture<'_>) -> ratelab::Decision {
    common::shared().1.block_on(future).unwrap()
}

/// The case a reviewer would try first: request A is admitted at the end of
/// a window, the window after fills up, then A is refunded (it succeeded,
/// and only failures count). A's unit belongs to the window that ended:
/// giving it to the new window would let a fourth request count there.
#[test]
fn a_refund_across_a_window_end_gives_nothing_to_the_new_window() {
    for kind in [
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingCounter,
        AlgorithmKind::SlidingLog,
    ] {
        let clock = ManualClock::new();
        for limiter in both(kind, &clock) {
            let backend = limiter.backend();
            clock.set(9_000_000);
            let a = run(limiter.check_async(b"k", 1));
            assert!(a.allowed, "{kind} {backend}");
            let mut counted = vec![];
            for at in [10_000_000, 11_000_000, 19_500_000] {
                clock.set(at);
                if at == 11_000_000 {
                    let owed = a.reset_after().saturating_sub(Duration::from_secs(2));
                    run(limiter.refund_async(b"k", 1, owed));
                }
                while run(limiter.check_async(b"k", 1)).allowed {
                    counted.push(at);
                }
            }
            // [10 s, 20 s) is one window: the three a window holds (the
            // log: within any 10 s), whatever A's refund.
            assert!(counted.len() <= 3, "{kind} {backend}: {counted:?}");
        }
    }
}

/// A bucket's debt is repaid as time passes: A's unit came back on its own
/// before B, C and D took the bucket again. Refunding A then gives nothing.
#[test]
fn a_refund_after_the_debt_is_repaid_gives_nothing_back() {
    for kind in [
        AlgorithmKind::Gcra,
        AlgorithmKind::TokenBucket,
        AlgorithmKind::LeakyMeter,
        AlgorithmKind::LeakyQueue,
    ] {
        let clock = ManualClock::new();
        for limiter in both(kind, &clock) {
            let backend = limiter.backend();
            clock.set(1_000_000);
            let a = run(limiter.check_async(b"k", 1));
            assert!(a.allowed, "{kind} {backend}");
            clock.set(20_000_000);
            let mut counted = 0;
            while run(limiter.check_async(b"k", 1)).allowed {
                counted += 1;
            }
            assert_eq!(counted, 3, "{kind} {backend}");
            clock.set(21_000_000);
            let owed = a.reset_after().saturating_sub(Duration::from_secs(20));
            assert_eq!(owed, Duration::ZERO);
            run(limiter.refund_async(b"k", 1, owed));
            let fourth = run(limiter.check_async(b"k", 1));
            assert!(!fourth.allowed, "{kind} {backend}: a fourth within 1 s");
            // Refunded at once (owed in full), a unit does come back.
            clock.set(100_000_000);
            let b = run(limiter.check_async(b"k", 1));
            run(limiter.refund_async(b"k", 1, b.reset_after()));
            let full = run(limiter.peek_async(b"k", 0));
            assert_eq!(full.remaining, 3, "{kind} {backend}");
        }
    }
}

/// What each admission does after its check.
#[derive(Debug, Clone, Copy)]
enum Then {
    /// It counts.
    Counts,
    /// It is refunded this many µs after its check.
    RefundedAfter(u64),
}

fn thens(window: u64) -> impl Strategy<Value = Vec<Then>> {
    proptest::collection::vec(
        prop_oneof![
            2 => Just(Then::Counts),
            1 => Just(Then::RefundedAfter(0)),
            3 => (0..=3 * window).prop_map(Then::RefundedAfter),
        ],
        40,
    )
}

/// Runs `arrivals` on a keyed in-memory limiter of `algorithm`, refunding
/// admissions as `thens` say (each refund is made at the first arrival at
/// or after its instant, or after the last), and answers the units that
/// still count, per key.
struct Run<'a> {
    arrivals: &'a [Arrival],
    thens: &'a [Then],
}

/// An admission waiting for its refund.
struct Pending {
    due: u64,
    key: u8,
    checked: u64,
    cost: u32,
    reset_after: Duration,
    index: usize,
}

impl AlgorithmVisitor for Run<'_> {
    type Output = BTreeMap<u8, Vec<Admitted>>;

    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
        let clock = ManualClock::new();
        let limiter = Keyed::with_clock(algorithm, clock.clone());
        let mut admitted: Vec<(u8, Admitted)> = vec![];
        let mut pending: Vec<Pending> = vec![];
        let refund_due = |pending: &mut Vec<Pending>, admitted: &mut Vec<(u8, Admitted)>, now| {
            pending.sort_by_key(|p| p.due);
            while pending.first().is_some_and(|p| p.due <= now) {
                let p = pending.remove(0);
                clock.set(p.due);
                let since = Duration::from_micros(p.due - p.checked);
                let owed = p.reset_after.saturating_sub(since);
                limiter.refund(&[p.key], p.cost, owed).unwrap();
                // A refund while the admission still weighs gives back what
                // it holds: it no longer counts. Once it weighs nothing, it
                // gets nothing back and counts.
                if !owed.is_zero() {
                    admitted[p.index].1.units = 0;
                }
            }
        };
        for (arrival, then) in self.arrivals.iter().zip(self.thens.iter().cycle()) {
            refund_due(&mut pending, &mut admitted, arrival.at);
            clock.set(arrival.at);
            let Ok(decision) = limiter.check(&[arrival.key], arrival.cost) else {
                continue;
            };
            if !decision.allowed || arrival.cost == 0 {
                continue;
            }
            admitted.push((
                arrival.key,
                Admitted {
                    at: arrival.at,
                    units: u64::from(arrival.cost),
                },
            ));
            if let Then::RefundedAfter(after) = *then {
                pending.push(Pending {
                    due: arrival.at + after,
                    key: arrival.key,
                    checked: arrival.at,
                    cost: arrival.cost,
                    reset_after: decision.reset_after(),
                    index: admitted.len() - 1,
                });
            }
        }
        refund_due(&mut pending, &mut admitted, u64::MAX);
        let mut per_key: BTreeMap<u8, Vec<Admitted>> = BTreeMap::new();
        for (key, a) in admitted {
            if a.units > 0 {
                per_key.entry(key).or_default().push(a);
            }
        }
        per_key
    }
}

fn bound_holds(kind: AlgorithmKind, quota: Quota, counted: &[Admitted]) -> Result<(), String> {
    let burst = u64::from(quota.burst());
    let window = quota.window_micros();
    let violation = match kind {
        AlgorithmKind::FixedWindow | AlgorithmKind::SlidingCounter => {
            let most = most_in_an_aligned_window(counted, window);
            if most > burst {
                return Err(format!("{most} counted in one window of {burst}"));
            }
            None
        }
        AlgorithmKind::SlidingLog => Bound::Window {
            limit: burst,
            window,
            factor: 1,
        }
        .violation(counted),
        _ => Bound::Bucket {
            burst,
            interval: quota.emission_interval_micros(),
        }
        .violation(counted),
    };
    violation.map_or(Ok(()), |v| Err(v.to_string()))
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn refunded_admissions_never_let_more_count_than_the_quota(
        (quota, arrivals, thens) in quota_and_arrivals(40).prop_flat_map(|(quota, arrivals)| {
            let window = quota.window_micros();
            (Just(quota), Just(arrivals), thens(window))
        }),
    ) {
        for kind in AlgorithmKind::ALL {
            let counted = kind.visit(quota, Run { arrivals: &arrivals, thens: &thens });
            for (key, counted) in counted {
                if let Err(why) = bound_holds(kind, quota, &counted) {
                    prop_assert!(false, "{} key {}: {} in {:?}", kind, key, why, counted);
                }
            }
        }
    }
}
