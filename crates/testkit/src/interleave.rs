//! Interleavings of the features that meet on one key: checks with and
//! without receipts, peeks, settlements below and above the cost (refunds
//! among them), receipts dropped, resets, and a clock that moves forward,
//! stands still or jumps back. [`run`] plays them against any limiter and
//! checks every admission against the [kept history](crate::kept).

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ratelab_core::{
    Algorithm, Bound, Decision, Direct, Error, Keyed, ManualClock, Quota, Receipt, Verdict,
};

use crate::kept::{Entry, History};
use crate::strategies::quotas;

/// One step of an interleaving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// The clock moves forward by this many µs.
    Forward(u64),
    /// The clock moves back by this many µs (never below 0).
    Back(u64),
    /// A check of `cost` on key `key`; with a receipt kept when `receipt`.
    Check {
        /// One of a few keys.
        key: u8,
        /// The request's weight (may be above the capacity: an error).
        cost: u32,
        /// Ask for a receipt.
        receipt: bool,
    },
    /// A peek of `cost` on key `key`.
    Peek {
        /// One of a few keys.
        key: u8,
        /// The weight asked about.
        cost: u32,
    },
    /// Settles an outstanding receipt (picked by this number among them) to
    /// `actual` units.
    Settle {
        /// Which receipt, modulo how many are outstanding.
        pick: usize,
        /// What the admission finally counts for (0 refunds it).
        actual: u32,
    },
    /// Drops an outstanding receipt: its admission keeps its charge.
    Drop {
        /// Which receipt, modulo how many are outstanding.
        pick: usize,
    },
    /// Resets key `key`.
    Reset {
        /// One of a few keys.
        key: u8,
    },
}

/// A quota and an interleaving of up to `len` steps on up to `keys` keys,
/// with moves in terms of the quota (bursts, a refill interval, whole
/// windows), and settlements of every size.
pub fn quota_and_ops(len: usize, keys: u8) -> impl Strategy<Value = (Quota, Vec<Op>)> {
    quotas().prop_flat_map(move |quota| {
        let t = quota.emission_interval_micros();
        let w = quota.window_micros();
        let burst = quota.burst();
        let op = prop_oneof![
            3 => prop_oneof![Just(0u64), Just(1), Just(t), Just(t - 1), 0..=2 * w].prop_map(Op::Forward),
            1 => prop_oneof![Just(1u64), Just(t), 0..=w].prop_map(Op::Back),
            6 => (0..keys, 1..=burst, proptest::bool::weighted(0.8))
                .prop_map(|(key, cost, receipt)| Op::Check { key, cost, receipt }),
            1 => (0..keys, 0..=burst + 1).prop_map(|(key, cost)| Op::Peek { key, cost }),
            4 => (any::<usize>(), prop_oneof![Just(0u32), 0..=burst]).prop_map(|(pick, actual)| Op::Settle { pick, actual }),
            1 => any::<usize>().prop_map(|pick| Op::Drop { pick }),
            1 => (0..keys).prop_map(|key| Op::Reset { key }),
        ];
        (Just(quota), proptest::collection::vec(op, 1..=len))
    })
}

/// What [`run`] needs of a limiter: one key space, on a clock the run
/// moves, deciding at the latest instant it has seen (time standing still
/// when the clock goes back).
pub trait Subject {
    /// A check, with a receipt when asked for.
    fn check(
        &self,
        key: u8,
        cost: u32,
        receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), Error>;
    /// A peek.
    fn peek(&self, key: u8, cost: u32) -> Result<Decision, Error>;
    /// A settlement.
    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error>;
    /// A reset.
    fn reset(&self, key: u8);
    /// Sets the clock.
    fn set_clock(&self, micros: u64);
    /// The capacity (a cost above it is an error).
    fn capacity(&self) -> u64;
}

/// Plays `ops` on `subject`, starting the clock at `start`, and fails at the
/// first admission the kept history of its key had no room for, with the
/// steps so far.
pub fn run<S: Subject>(
    subject: &S,
    bound: Bound,
    ops: &[Op],
    start: u64,
) -> Result<(), TestCaseError> {
    let mut clock = start;
    // The instant a limiter that stands still when the clock goes back
    // decides at: the latest reading a check, a settlement or a reset saw
    // (a peek moves nothing).
    let mut latest = start;
    subject.set_clock(clock);
    let mut histories: Vec<History> = Vec::new();
    let mut outstanding: Vec<(u8, Entry, Receipt)> = Vec::new();
    let history = |histories: &mut Vec<History>, key: u8| -> usize {
        let key = usize::from(key);
        while histories.len() <= key {
            histories.push(History::new(bound));
        }
        key
    };
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Forward(by) => {
                clock = clock.saturating_add(by);
                subject.set_clock(clock);
            }
            Op::Back(by) => {
                clock = clock.saturating_sub(by);
                subject.set_clock(clock);
            }
            Op::Check { key, cost, receipt } => {
                latest = latest.max(clock);
                let k = history(&mut histories, key);
                match subject.check(key, cost, receipt) {
                    Ok((decision, given)) => {
                        prop_assert_eq!(
                            given.is_some(),
                            receipt && decision.allowed && cost > 0,
                            "step {}: a receipt exactly for an admission asked with one",
                            step
                        );
                        if decision.allowed && cost > 0 {
                            prop_assert!(
                                histories[k].admits(latest, u64::from(cost)),
                                "step {}: key {} admitted {} at {} µs beyond what was kept: {:?}",
                                step,
                                key,
                                cost,
                                latest,
                                &ops[..=step]
                            );
                            let entry = histories[k].admit(latest, u64::from(cost));
                            if let Some(given) = given {
                                outstanding.push((key, entry, given));
                            }
                        }
                    }
                    Err(Error::CostTooHigh { .. }) => {
                        prop_assert!(u64::from(cost) > subject.capacity());
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("step {step}: {e}"))),
                }
            }
            Op::Peek { key, cost } => match subject.peek(key, cost) {
                Ok(_) => {}
                Err(Error::CostTooHigh { .. }) => {
                    prop_assert!(u64::from(cost) > subject.capacity());
                }
                Err(e) => return Err(TestCaseError::fail(format!("step {step}: {e}"))),
            },
            Op::Settle { pick, actual } => {
                if outstanding.is_empty() {
                    continue;
                }
                latest = latest.max(clock);
                let (key, entry, receipt) = outstanding.swap_remove(pick % outstanding.len());
                let k = history(&mut histories, key);
                match subject.settle(receipt, actual) {
                    Ok(after) => {
                        prop_assert!(after.allowed, "step {}: a settlement answers a peek", step);
                        histories[k].settle(entry, u64::from(actual), latest);
                    }
                    Err(Error::CostTooHigh { .. }) => {
                        prop_assert!(u64::from(actual) > subject.capacity());
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("step {step}: {e}"))),
                }
            }
            Op::Drop { pick } => {
                if !outstanding.is_empty() {
                    outstanding.swap_remove(pick % outstanding.len());
                }
            }
            Op::Reset { key } => {
                latest = latest.max(clock);
                let k = history(&mut histories, key);
                subject.reset(key);
                histories[k].reset();
            }
        }
    }
    Ok(())
}

/// A keyed in-memory limiter on a [`ManualClock`], as a [`Subject`]: one
/// shard, so that every key decides at the latest instant any has seen.
#[derive(Debug)]
pub struct InKeyed<A: Algorithm> {
    /// The limiter.
    pub limiter: Keyed<A, ManualClock>,
    clock: ManualClock,
}

impl<A: Algorithm> InKeyed<A> {
    /// `algorithm` in a keyed limiter of one shard on a new manual clock.
    pub fn new(algorithm: A) -> Self {
        let clock = ManualClock::new();
        InKeyed {
            limiter: Keyed::builder(algorithm)
                .clock(clock.clone())
                .shards(1)
                .build(),
            clock,
        }
    }
}

impl<A: Algorithm> Subject for InKeyed<A> {
    fn check(
        &self,
        key: u8,
        cost: u32,
        receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        if receipt {
            self.limiter.check_with_receipt(&[key], cost)
        } else {
            self.limiter.check(&[key], cost).map(|d| (d, None))
        }
    }
    fn peek(&self, key: u8, cost: u32) -> Result<Decision, Error> {
        self.limiter.peek(&[key], cost)
    }
    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        self.limiter.settle(receipt, actual)
    }
    fn reset(&self, key: u8) {
        self.limiter.reset(&[key]);
    }
    fn set_clock(&self, micros: u64) {
        self.clock.set(micros);
    }
    fn capacity(&self) -> u64 {
        self.limiter.algorithm().capacity()
    }
}

/// A single in-memory bucket on a [`ManualClock`], as a [`Subject`]: every
/// key is the one bucket (run it with one key).
#[derive(Debug)]
pub struct InDirect<A: Algorithm> {
    /// The limiter.
    pub limiter: Direct<A, ManualClock>,
    clock: ManualClock,
}

impl<A: Algorithm> InDirect<A> {
    /// `algorithm` in a single bucket on a new manual clock.
    pub fn new(algorithm: A) -> Self {
        let clock = ManualClock::new();
        InDirect {
            limiter: Direct::with_clock(algorithm, clock.clone()),
            clock,
        }
    }
}

impl<A: Algorithm> Subject for InDirect<A> {
    fn check(
        &self,
        _key: u8,
        cost: u32,
        receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        if receipt {
            self.limiter.check_with_receipt(cost)
        } else {
            self.limiter.check(cost).map(|d| (d, None))
        }
    }
    fn peek(&self, _key: u8, cost: u32) -> Result<Decision, Error> {
        self.limiter.peek(cost)
    }
    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        self.limiter.settle(receipt, actual)
    }
    fn reset(&self, _key: u8) {
        self.limiter.reset();
    }
    fn set_clock(&self, micros: u64) {
        self.clock.set(micros);
    }
    fn capacity(&self) -> u64 {
        self.limiter.algorithm().capacity()
    }
}

/// Every interleaving property of one algorithm in memory: `ops` on a keyed
/// limiter (keys as the ops say) and on a single bucket (every op on one
/// key), each checked against the kept history under the algorithm's own
/// [`Algorithm::bound`].
pub fn in_memory<A: Algorithm + Clone>(algorithm: &A, ops: &[Op]) -> Result<(), TestCaseError> {
    let bound = algorithm.bound();
    run(&InKeyed::new(algorithm.clone()), bound, ops, 0)?;
    run(&InDirect::new(algorithm.clone()), bound, &one_key(ops), 0)
}

/// Two limiters of one algorithm on one clock, fed the same steps: the
/// first checks lean ([`Keyed::check_lean`], [`Direct::check_lean`]) where
/// the second checks, and every answer of the first must be the second's
/// (whether it passed, and the whole decision computed on demand). Which
/// checks are lean: bit `n % 64` of `lean` for the `n`-th check without a
/// receipt (a check with one is made on both).
/// As a [`Subject`], it answers what the first decided, so [`run`] holds its
/// admissions to the kept history. A disagreement panics with both answers.
#[derive(Debug)]
pub struct LeanTwin<L> {
    lean: L,
    plain: L,
    clock: ManualClock,
    mask: u64,
    checks: std::cell::Cell<u32>,
    /// The second limiter's receipts, matched to the first's by what they
    /// hold (twins issue receipts with the same key, cost and stamp, and
    /// two such receipts settle alike).
    receipts: std::cell::RefCell<Vec<Receipt>>,
}

/// The verdict of a lean check, as a whole decision.
fn lean_decision<A: Algorithm>(verdict: Result<Verdict<'_, A>, Error>) -> Result<Decision, Error> {
    verdict.map(|verdict| {
        let decision = verdict.decision();
        assert_eq!(
            verdict.allowed(),
            decision.allowed,
            "a verdict's `allowed` is its decision's"
        );
        decision
    })
}

/// Both answers, the same: decisions equal, or errors alike.
fn agree(lean: Result<&Decision, &Error>, plain: Result<&Decision, &Error>, what: &str) {
    match (lean, plain) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{what}: the lean check answers what a check does"),
        (Err(a), Err(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{what}"),
        _ => panic!("{what}: lean {lean:?}, plain {plain:?}"),
    }
}

impl<L> LeanTwin<L> {
    /// Whether the next check is lean.
    fn next_is_lean(&self) -> bool {
        let n = self.checks.get();
        self.checks.set(n.wrapping_add(1));
        self.mask >> (n % 64) & 1 == 1
    }

    fn keep(&self, receipt: Option<Receipt>) {
        self.receipts.borrow_mut().extend(receipt);
    }

    /// The second limiter's receipt held like `receipt`.
    fn twin_of(&self, receipt: &Receipt) -> Receipt {
        let mut receipts = self.receipts.borrow_mut();
        let at = receipts
            .iter()
            .position(|r| {
                (r.key(), r.cost(), r.stamp()) == (receipt.key(), receipt.cost(), receipt.stamp())
            })
            .unwrap_or_else(|| panic!("the twin issued no receipt like {receipt:?}"));
        receipts.swap_remove(at)
    }
}

impl<A: Algorithm + Clone> LeanTwin<Keyed<A, ManualClock>> {
    /// Twin keyed limiters of one shard (as [`InKeyed`]), lean where `lean`
    /// says. One seed for both: the order in which a shard forgets keys due
    /// at the same instant follows their hashes, and with it what the
    /// ledgers keep and the receipts' stamps.
    pub fn keyed(algorithm: &A, lean: u64) -> Self {
        let clock = ManualClock::new();
        let build = || {
            Keyed::builder(algorithm.clone())
                .clock(clock.clone())
                .shards(1)
                .seed(0x1ea7)
                .build()
        };
        LeanTwin {
            lean: build(),
            plain: build(),
            clock,
            mask: lean,
            checks: std::cell::Cell::new(0),
            receipts: std::cell::RefCell::new(Vec::new()),
        }
    }
}

impl<A: Algorithm + Clone> LeanTwin<Direct<A, ManualClock>> {
    /// Twin single buckets (as [`InDirect`]), lean where `lean` says.
    pub fn direct(algorithm: &A, lean: u64) -> Self {
        let clock = ManualClock::new();
        LeanTwin {
            lean: Direct::with_clock(algorithm.clone(), clock.clone()),
            plain: Direct::with_clock(algorithm.clone(), clock.clone()),
            clock,
            mask: lean,
            checks: std::cell::Cell::new(0),
            receipts: std::cell::RefCell::new(Vec::new()),
        }
    }
}

impl<A: Algorithm> Subject for LeanTwin<Keyed<A, ManualClock>> {
    fn check(
        &self,
        key: u8,
        cost: u32,
        receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        let key = [key];
        if receipt {
            let plain = self.plain.check_with_receipt(&key, cost);
            let answer = self.lean.check_with_receipt(&key, cost);
            agree(
                answer.as_ref().map(|(d, _)| d),
                plain.as_ref().map(|(d, _)| d),
                "a check with a receipt",
            );
            self.keep(plain.ok().and_then(|(_, r)| r));
            return answer;
        }
        let plain = self.plain.check(&key, cost);
        let answer = if self.next_is_lean() {
            lean_decision(self.lean.check_lean(&key, cost))
        } else {
            self.lean.check(&key, cost)
        };
        agree(answer.as_ref(), plain.as_ref(), "a check");
        answer.map(|d| (d, None))
    }
    fn peek(&self, key: u8, cost: u32) -> Result<Decision, Error> {
        let (answer, plain) = (self.lean.peek(&[key], cost), self.plain.peek(&[key], cost));
        agree(answer.as_ref(), plain.as_ref(), "a peek");
        answer
    }
    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        let plain = self.plain.settle(self.twin_of(&receipt), actual);
        let answer = self.lean.settle(receipt, actual);
        agree(answer.as_ref(), plain.as_ref(), "a settlement");
        answer
    }
    fn reset(&self, key: u8) {
        self.lean.reset(&[key]);
        self.plain.reset(&[key]);
    }
    fn set_clock(&self, micros: u64) {
        self.clock.set(micros);
    }
    fn capacity(&self) -> u64 {
        self.lean.algorithm().capacity()
    }
}

impl<A: Algorithm> Subject for LeanTwin<Direct<A, ManualClock>> {
    fn check(
        &self,
        _key: u8,
        cost: u32,
        receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        if receipt {
            let plain = self.plain.check_with_receipt(cost);
            let answer = self.lean.check_with_receipt(cost);
            agree(
                answer.as_ref().map(|(d, _)| d),
                plain.as_ref().map(|(d, _)| d),
                "a check with a receipt",
            );
            self.keep(plain.ok().and_then(|(_, r)| r));
            return answer;
        }
        let plain = self.plain.check(cost);
        let answer = if self.next_is_lean() {
            lean_decision(self.lean.check_lean(cost))
        } else {
            self.lean.check(cost)
        };
        agree(answer.as_ref(), plain.as_ref(), "a check");
        answer.map(|d| (d, None))
    }
    fn peek(&self, _key: u8, cost: u32) -> Result<Decision, Error> {
        let (answer, plain) = (self.lean.peek(cost), self.plain.peek(cost));
        agree(answer.as_ref(), plain.as_ref(), "a peek");
        answer
    }
    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        let plain = self.plain.settle(self.twin_of(&receipt), actual);
        let answer = self.lean.settle(receipt, actual);
        agree(answer.as_ref(), plain.as_ref(), "a settlement");
        answer
    }
    fn reset(&self, _key: u8) {
        self.lean.reset();
        self.plain.reset();
    }
    fn set_clock(&self, micros: u64) {
        self.clock.set(micros);
    }
    fn capacity(&self) -> u64 {
        self.lean.algorithm().capacity()
    }
}

/// [`in_memory`] with lean checks: `ops` on [`LeanTwin`] keyed limiters
/// (keys as the ops say) and single buckets (every op on one key), the
/// checks `lean` marks lean, each answer the same as a check's and every
/// admission within the kept history under its bound. A peek of cost 0
/// becomes a check of cost 0 (the peek a check makes, which moves the
/// limiter's time as any check does): lean ones among them too.
pub fn lean_in_memory<A: Algorithm + Clone>(
    algorithm: &A,
    ops: &[Op],
    lean: u64,
) -> Result<(), TestCaseError> {
    let bound = algorithm.bound();
    let ops: Vec<Op> = ops
        .iter()
        .map(|op| match *op {
            Op::Peek { key, cost: 0 } => Op::Check {
                key,
                cost: 0,
                receipt: false,
            },
            other => other,
        })
        .collect();
    run(&LeanTwin::keyed(algorithm, lean), bound, &ops, 0)?;
    run(&LeanTwin::direct(algorithm, lean), bound, &one_key(&ops), 0)
}

/// `ops` with every key made key 0: a single bucket's steps.
fn one_key(ops: &[Op]) -> Vec<Op> {
    ops.iter()
        .map(|op| match *op {
            Op::Check { cost, receipt, .. } => Op::Check {
                key: 0,
                cost,
                receipt,
            },
            Op::Peek { cost, .. } => Op::Peek { key: 0, cost },
            Op::Reset { .. } => Op::Reset { key: 0 },
            other => other,
        })
        .collect()
}

/// Threads racing checks with receipts, refunds and partial settlements on
/// one bucket ([`Direct`]) and on one key of a [`Keyed`] limiter, at an
/// instant that does not move: panics unless what was kept never exceeds
/// the capacity and the limiter never has more room than the capacity less
/// what was kept (a settlement may give back less than it did not use, when
/// the limiter cannot prove it safe: see
/// [`Receipt`]).
pub fn racing_at_one_instant<A: Algorithm + Clone>(algorithm: &A) {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 2_000;
    let capacity = algorithm.capacity();
    let clock = ManualClock::starting_at(1_000_000);
    let keyed = Keyed::builder(algorithm.clone())
        .clock(clock.clone())
        .build();
    let direct = Direct::with_clock(algorithm.clone(), clock);
    let check = |which: bool, cost: u32| {
        if which {
            keyed.check_with_receipt(b"k", cost)
        } else {
            direct.check_with_receipt(cost)
        }
    };
    let settle = |which: bool, receipt: Receipt, actual: u32| {
        if which {
            keyed.settle(receipt, actual)
        } else {
            direct.settle(receipt, actual)
        }
    };
    for which in [true, false] {
        let kept: u64 = std::thread::scope(|s| {
            let threads: Vec<_> = (0..THREADS)
                .map(|t| {
                    s.spawn(move || {
                        // A small generator per thread: costs and choices
                        // differ between threads and rounds.
                        let mut x = 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(t + 1);
                        let mut next = move || {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x
                        };
                        let mut kept = 0;
                        let mut held: Vec<(Receipt, u32)> = Vec::new();
                        for _ in 0..ROUNDS {
                            let cost = u32::try_from(next() % capacity.min(3)).unwrap_or(0) + 1;
                            let (decision, receipt) = check(which, cost).unwrap();
                            if let Some(receipt) = receipt {
                                assert!(decision.allowed);
                                held.push((receipt, cost));
                            }
                            // Settle one held receipt, most of the time.
                            if !held.is_empty() && next() % 4 != 0 {
                                let i = usize::try_from(next()).unwrap_or(0) % held.len();
                                let (receipt, cost) = held.swap_remove(i);
                                let actual =
                                    u32::try_from(next() % u64::from(cost + 1)).unwrap_or(0);
                                let after = settle(which, receipt, actual).unwrap();
                                assert!(after.allowed);
                                kept += u64::from(actual);
                            }
                        }
                        kept + held.iter().map(|(_, cost)| u64::from(*cost)).sum::<u64>()
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).sum()
        });
        let remaining = if which {
            keyed.peek(b"k", 0)
        } else {
            direct.peek(0)
        }
        .unwrap()
        .remaining;
        let store = if which { "keyed" } else { "direct" };
        assert!(
            kept <= capacity,
            "{store}: {kept} kept, capacity {capacity}"
        );
        assert!(
            remaining <= capacity - kept,
            "{store}: {kept} kept of {capacity}, yet {remaining} remaining"
        );
    }
}
