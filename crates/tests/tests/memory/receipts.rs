//! The reviewers' cases of refunds where features meet, in memory, on a
//! single bucket and on a keyed limiter, for every algorithm: each was a way
//! to get more than the quota with refunds that trusted a number the caller
//! computed, and each keeps the quota with receipts. (The same cases on
//! Redis are in `settle_bound.rs`; the random interleavings in each
//! algorithm crate's `tests/properties.rs`.)

use ratelab::{AlgorithmKind, Decision, Direct, Error, ManualClock, Quota, RateLimiter, Receipt};

/// A keyed limiter and a single bucket of `kind` for `quota`, each on its
/// own clock, both moved by `set`.
fn both_stores(kind: AlgorithmKind, quota: Quota) -> (Vec<Box<dyn RateLimiter>>, Vec<ManualClock>) {
    let keyed_clock = ManualClock::new();
    let direct_clock = ManualClock::new();
    let keyed = kind.keyed(quota, keyed_clock.clone());
    let direct = direct(kind, quota, direct_clock.clone());
    (vec![keyed, direct], vec![keyed_clock, direct_clock])
}

fn direct(kind: AlgorithmKind, quota: Quota, clock: ManualClock) -> Box<dyn RateLimiter> {
    struct Build(ManualClock);
    impl ratelab::AlgorithmVisitor for Build {
        type Output = Box<dyn RateLimiter>;
        fn visit<A: ratelab::KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            Box::new(Direct::with_clock(algorithm, self.0))
        }
    }
    kind.visit(quota, Build(clock))
}

/// The debts, the algorithms whose ledger records shifts.
fn debts() -> impl Iterator<Item = AlgorithmKind> {
    AlgorithmKind::ALL.into_iter().filter(|kind| kind.debt())
}

fn admit(limiter: &dyn RateLimiter, n: usize) -> Vec<Receipt> {
    (0..n)
        .map(|i| {
            let (decision, receipt) = limiter.check_with_receipt(b"k", 1).unwrap();
            assert!(decision.allowed, "admission {i}: {decision:?}");
            receipt.unwrap()
        })
        .collect()
}

fn admitted_now(limiter: &dyn RateLimiter) -> usize {
    let mut n = 0;
    while limiter.check(b"k", 1).unwrap().allowed {
        n += 1;
    }
    n
}

/// Item 1: at t = 0 admit a, b, c; refund a; at t = 2 s (the bucket full
/// again) admit three more; refund c. With the documented `owed` of the old
/// API, c's refund gave back a unit its debt no longer held, and a fourth
/// passed in one instant (bound 3). A receipt knows c's second was repaid by
/// 2 s: nothing comes back. The same with a burst of 10 (the bucket full
/// again at 9 s).
#[test]
fn a_refund_after_a_refund_gives_back_only_what_is_still_held() {
    for burst in [3u32, 10] {
        let quota = Quota::per_second(1).unwrap().with_burst(burst).unwrap();
        let full_again = u64::from(burst - 1) * 1_000_000;
        for kind in debts() {
            let (limiters, clocks) = both_stores(kind, quota);
            for (limiter, clock) in limiters.iter().zip(&clocks) {
                let limiter = &**limiter;
                clock.set(0);
                let mut first = admit(limiter, burst as usize);
                let last = first.pop().unwrap();
                let a = first.remove(0);
                limiter.refund(a).unwrap();
                clock.set(full_again);
                let second = admitted_now(limiter);
                assert_eq!(second, burst as usize, "{kind} burst {burst}: full again");
                limiter.refund(last).unwrap();
                let after = admitted_now(limiter);
                assert_eq!(
                    after, 0,
                    "{kind} burst {burst}: the refund of a repaid unit"
                );
            }
        }
    }
}

/// Item 2: refunds of long-repaid admissions (50 of them, an hour old) give
/// nothing; a refused check has no receipt to refund; a receipt cannot be
/// used twice (it is moved) or on another limiter.
#[test]
fn refunds_give_nothing_for_repaid_refused_or_foreign_admissions() {
    let quota = Quota::per_second(1).unwrap().with_burst(5).unwrap();
    for kind in AlgorithmKind::ALL {
        let (limiters, clocks) = both_stores(kind, quota);
        for (limiter, clock) in limiters.iter().zip(&clocks) {
            let limiter = &**limiter;
            clock.set(0);
            let mut old = Vec::new();
            for round in 0..50u64 {
                clock.set(round * 10_000_000);
                old.extend(admit(limiter, 1));
            }
            clock.set(3_600_000_000 + 500_000_000);
            let fresh = admitted_now(limiter);
            for receipt in old {
                limiter.refund(receipt).unwrap();
            }
            assert_eq!(
                admitted_now(limiter),
                0,
                "{kind}: long-repaid refunds gave room"
            );
            assert_eq!(fresh, 5, "{kind}");
            // A refusal hands back no receipt.
            let (refused, receipt) = limiter.check_with_receipt(b"k", 1).unwrap();
            assert!(!refused.allowed && receipt.is_none(), "{kind}");
        }
        // Another limiter's receipt is refused, and gives nothing.
        let (others, _) = both_stores(kind, quota);
        let (_, receipt) = others[0].check_with_receipt(b"k", 1).unwrap();
        assert!(matches!(
            others[1].refund(receipt.unwrap()),
            Err(Error::ForeignReceipt)
        ));
    }
}

/// A settlement above what was charged is debt the next requests wait out;
/// below, what was not used comes back (at the instant of the check, all of
/// it); and what the key answers after is a peek of cost 0, which always
/// passes, even in debt.
#[test]
fn settlements_charge_debt_and_give_back_what_was_not_used() {
    let quota = Quota::per_minute(60).unwrap().with_burst(10).unwrap();
    for kind in AlgorithmKind::ALL {
        let (limiters, clocks) = both_stores(kind, quota);
        for (limiter, clock) in limiters.iter().zip(&clocks) {
            let limiter = &**limiter;
            clock.set(1_000_000);
            let (decision, receipt) = limiter.check_with_receipt(b"k", 8).unwrap();
            assert!(decision.allowed);
            let after: Decision = limiter.settle(receipt.unwrap(), 3).unwrap();
            assert!(after.allowed, "{kind}: a settlement answers a peek");
            assert_eq!(after.remaining, 7, "{kind}: 5 of 8 came back");
            let (_, receipt) = limiter.check_with_receipt(b"k", 7).unwrap();
            let after = limiter.settle(receipt.unwrap(), 10).unwrap();
            assert!(after.allowed, "{kind}: cost 0 passes in debt");
            assert_eq!(after.remaining, 0, "{kind}");
            assert!(!limiter.check(b"k", 1).unwrap().allowed, "{kind}: in debt");
            // 13 units charged, 10 at most: 3.5 s later (3.5 units back for
            // a bucket, the same window for the others) still nothing passes.
            clock.set(1_000_000 + 3_500_000);
            let later = limiter.check(b"k", 1).unwrap();
            assert!(
                !later.allowed,
                "{kind}: 3.5 s after 13 units of 10: {later:?}"
            );
        }
    }
}

/// Item 7: a peek at a later instant, then the clock back: the next check
/// decides as if the peek never happened (the peek used to move the keyed
/// store's time forward).
#[test]
fn a_peek_does_not_move_a_keyed_limiters_time() {
    let quota = Quota::per_second(1).unwrap().with_burst(1).unwrap();
    for kind in AlgorithmKind::ALL {
        let clock = ManualClock::new();
        let keyed = kind.keyed(quota, clock.clone());
        let untouched = kind.keyed(quota, clock.clone());
        clock.set(10_000_000);
        assert!(keyed.check(b"k", 1).unwrap().allowed);
        assert!(untouched.check(b"k", 1).unwrap().allowed);
        clock.set(12_000_000);
        keyed.peek(b"k", 1).unwrap();
        clock.set(10_000_000);
        assert_eq!(
            keyed.check(b"k", 1).unwrap(),
            untouched.check(b"k", 1).unwrap(),
            "{kind}"
        );
    }
}
