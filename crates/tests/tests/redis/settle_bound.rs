//! Settlements on Redis (the scripts and the module, on the caller's clock)
//! never let more count than each algorithm's bound: the kept history (every
//! admission with what it finally counts for, every extra charge) replayed
//! through the algorithm left room for every admission (`Receipt`'s rule,
//! checked from the outside by `ratelab_testkit::kept`).
//!
//! First the cases a reviewer tries: refunds that meet (a refund of an
//! earlier admission moved the later ones), a refund after the debt was
//! repaid, a window's units across its end, long-repaid admissions, a
//! reset; then what a caller that sends the script a stamp of its own can do
//! (a replay, a forgery): no more than `lua/README.md` says. Then the
//! interleaving property, for all seven algorithms on both backends.
//!
//! The property keeps the clock monotonic on Redis (a step back becomes a
//! step of 0): its oracle decides each admission at the latest reading, as
//! the in-memory runners do, while Redis checks decide at the raw instant
//! sent (the equivalence tests compare them with the pure logic at raw
//! instants). With a monotonic clock the two are the same instant; what a
//! clock stepping back does on Redis is the module's `ops` test's (module,
//! script and memory deciding alike, settlements at the latest instant
//! written) and this file's `a_clock_that_steps_back_gives_nothing_more`.

use crate::common;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use ratelab::redis::{
    Connection, Op, RedisLimiter, RedisStore, Script, ScriptArgs, ScriptBackend, TimeSource,
};
use ratelab::toolkit::Stamp;
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, Clock, Decision, Error, KnownAlgorithm, ManualClock, Quota,
    Receipt,
};
use ratelab_testkit::interleave::{self, Subject, quota_and_ops};
use ratelab_testkit::redis::{RedisServer, module_path};

/// One server that loads the module, for every test of this file: the
/// scripts and the module run on it side by side.
fn server() -> &'static (RedisServer, tokio::runtime::Runtime, Connection) {
    static SHARED: std::sync::OnceLock<(RedisServer, tokio::runtime::Runtime, Connection)> =
        std::sync::OnceLock::new();
    SHARED.get_or_init(|| {
        let module = module_path().to_str().expect("a UTF-8 path").to_owned();
        let server = RedisServer::start_with(&["--loadmodule", &module]);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let connection = runtime
            .block_on(Connection::single(&server.url()))
            .expect("connect to the test server");
        (server, runtime, connection)
    })
}

const BACKENDS: [ScriptBackend; 2] = [ScriptBackend::Lua, ScriptBackend::Module];

/// A limiter on Redis, on `clock`, with its own prefix.
fn limiter<A: KnownAlgorithm>(
    algorithm: A,
    backend: ScriptBackend,
    clock: &ManualClock,
) -> RedisLimiter<A> {
    let (_, _, connection) = server();
    RedisStore::builder(connection.clone(), algorithm)
        .backend(backend)
        .prefix(common::unique_prefix())
        .time_source(TimeSource::Client(Arc::new(clock.clone()) as Arc<dyn Clock>))
        .timeout(common::PATIENT)
        .build()
}

fn block<T>(future: impl Future<Output = T>) -> T {
    server().1.block_on(future)
}

/// A check with its receipt, admitted.
fn admit<A: KnownAlgorithm>(limiter: &RedisLimiter<A>, key: &[u8], cost: u32) -> Receipt {
    let (decision, receipt) = block(limiter.check_with_receipt(key, cost)).unwrap();
    assert!(decision.allowed, "{decision:?}");
    receipt.expect("an admission of a positive cost has a receipt")
}

/// Checks of 1 until one is refused: how many passed.
fn fill<A: KnownAlgorithm>(limiter: &RedisLimiter<A>, key: &[u8]) -> u64 {
    let mut admitted = 0;
    while block(limiter.check(key, 1)).unwrap().allowed {
        admitted += 1;
    }
    admitted
}

fn gcra(limit_per_s: u32, burst: u32) -> ratelab::Gcra {
    ratelab::Gcra::new(
        Quota::per_second(limit_per_s)
            .unwrap()
            .with_burst(burst)
            .unwrap(),
    )
}

/// The reviewer's case: GCRA 1/s, burst 3, a manual clock. At 0 s a, b, c
/// pass; a is refunded (its second moves b and c a second earlier). At 2 s
/// d, e, f pass; then c is refunded: c's debt, moved up by a's refund, ended
/// at 2 s (d took its place), so nothing comes back, and g is refused.
/// Trusting a refund's own figure (c's `reset_after` less the time since:
/// one second) let g pass: four units in [0 s, 2 s] with b, where the bound
/// is burst + 2 = 5 with a and c given back.
#[test]
fn refunds_that_meet_give_back_only_what_is_held() {
    for backend in BACKENDS {
        let clock = ManualClock::new();
        let limiter = limiter(gcra(1, 3), backend, &clock);
        let [a, _b, c] = [0; 3].map(|_| admit(&limiter, b"k", 1));
        let after_a = block(limiter.refund(a)).unwrap();
        assert_eq!(after_a.remaining, 1, "{backend:?}: a gave its second back");
        clock.set(2_000_000);
        assert_eq!(fill(&limiter, b"k"), 3, "{backend:?}: d, e, f");
        let after_c = block(limiter.refund(c)).unwrap();
        assert_eq!(after_c.remaining, 0, "{backend:?}: c gave something back");
        assert!(
            !block(limiter.check(b"k", 1)).unwrap().allowed,
            "{backend:?}: g passed"
        );
    }
}

/// The same pattern with a burst of 10: ten at 0 s, the first refunded,
/// three at 2 s (the two seconds repaid and the one given back), then the
/// third of the first ten refunded: its debt ended at 2 s, nothing comes
/// back, and nothing more passes. Twelve units are kept in [0 s, 2 s], the
/// bound (burst + 2); the refund's own figure (one second still owed) let a
/// thirteenth pass.
#[test]
fn with_a_burst_of_ten_the_pattern_keeps_the_bound() {
    for backend in BACKENDS {
        let clock = ManualClock::new();
        let limiter = limiter(gcra(1, 10), backend, &clock);
        let mut first: Vec<Receipt> = (0..10).map(|_| admit(&limiter, b"k", 1)).collect();
        let third = first.remove(2);
        block(limiter.refund(first.remove(0))).unwrap();
        clock.set(2_000_000);
        let at_two = fill(&limiter, b"k");
        assert_eq!(at_two, 3, "{backend:?}");
        let after = block(limiter.refund(third)).unwrap();
        assert_eq!(after.remaining, 0, "{backend:?}: {after:?}");
        assert_eq!(fill(&limiter, b"k"), 0, "{backend:?}");
        // Kept: nine of the first ten, and the three at 2 s.
        assert_eq!(9 + at_two, 10 + 2, "{backend:?}");
        // The last of the first ten still held its second (its debt ends at
        // 9 s, moved up by the first's refund): that one does come back.
        let last = first.pop().unwrap();
        assert_eq!(block(limiter.refund(last)).unwrap().remaining, 1);
    }
}

/// The debts, the algorithms whose ledger records shifts.
const DEBTS: [AlgorithmKind; 4] = [
    AlgorithmKind::Gcra,
    AlgorithmKind::TokenBucket,
    AlgorithmKind::LeakyMeter,
    AlgorithmKind::LeakyQueue,
];

/// The case the single-total ledger failed on Redis (and in memory): 1/s,
/// burst 3, a, b and c admitted at one instant and refunded b first (it
/// moves c, not a), then a, then c. Every shift since a's check counted
/// against a, b's included, which did not move it: a's end looked passed
/// and it gave nothing back, and c then ended after the key's end and gave
/// nothing either. With the shifts' positions each gives back its second:
/// the key ends full (remaining = burst, nothing to wait for).
#[test]
fn three_refunds_middle_first_give_back_exactly() {
    let quota = Quota::per_second(1).unwrap().with_burst(3).unwrap();
    for kind in DEBTS {
        for backend in BACKENDS {
            struct Run(ScriptBackend);
            impl AlgorithmVisitor for Run {
                type Output = ();
                fn visit<A: KnownAlgorithm>(self, algorithm: A) {
                    let clock = ManualClock::new();
                    clock.set(1_000_000_000);
                    let name = algorithm.name();
                    let limiter = limiter(algorithm, self.0, &clock);
                    let [a, b, c] = [0; 3].map(|_| admit(&limiter, b"k", 1));
                    let after_b = block(limiter.refund(b)).unwrap();
                    assert_eq!(after_b.remaining, 1, "{name} {:?}: b", self.0);
                    let after_a = block(limiter.refund(a)).unwrap();
                    assert_eq!(after_a.remaining, 2, "{name} {:?}: a", self.0);
                    let after_c = block(limiter.refund(c)).unwrap();
                    assert_eq!(after_c.remaining, 3, "{name} {:?}: c", self.0);
                    assert_eq!(after_c.reset_after(), Duration::ZERO, "{name} {:?}", self.0);
                    assert_eq!(fill(&limiter, b"k"), 3, "{name} {:?}", self.0);
                }
            }
            kind.visit(quota, Run(backend));
        }
    }
}

/// Refunded in any order, every receipt gives back all it did not use
/// (while no more than 64 refunds came between its check and its own):
/// every order of 3 admissions of 2 units, and 20 shuffled orders of 40,
/// on one key at an instant that does not move, 1/s with bursts of 80.
/// The key ends full each time: remaining = burst.
#[test]
fn refunds_in_a_shuffled_order_give_back_exactly() {
    let quota = Quota::per_second(1).unwrap().with_burst(80).unwrap();
    let mut orders: Vec<Vec<usize>> = vec![
        vec![0, 1, 2],
        vec![0, 2, 1],
        vec![1, 0, 2],
        vec![1, 2, 0],
        vec![2, 0, 1],
        vec![2, 1, 0],
    ];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20 {
        let mut order: Vec<usize> = (0..40).collect();
        for i in (1..order.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            order.swap(i, usize::try_from(x % (i as u64 + 1)).unwrap());
        }
        orders.push(order);
    }
    for kind in DEBTS {
        for backend in BACKENDS {
            struct Run<'a>(ScriptBackend, &'a [Vec<usize>]);
            impl AlgorithmVisitor for Run<'_> {
                type Output = ();
                fn visit<A: KnownAlgorithm>(self, algorithm: A) {
                    let clock = ManualClock::new();
                    clock.set(1_000_000_000);
                    let name = algorithm.name();
                    let limiter = limiter(algorithm, self.0, &clock);
                    for (n, order) in self.1.iter().enumerate() {
                        let key = format!("k{n}");
                        let mut receipts: Vec<Option<Receipt>> = (0..order.len())
                            .map(|_| Some(admit(&limiter, key.as_bytes(), 2)))
                            .collect();
                        let mut remaining = 0;
                        for &i in order {
                            let receipt = receipts[i].take().unwrap();
                            remaining = block(limiter.refund(receipt)).unwrap().remaining;
                        }
                        assert_eq!(remaining, 80, "{name} {:?}: {order:?}", self.0);
                    }
                }
            }
            kind.visit(quota, Run(backend, &orders));
        }
    }
}

/// Fifty admissions, each settled long after its debt was repaid (or its
/// window ended): nothing comes back, whatever the algorithm.
#[test]
fn settlements_of_long_repaid_admissions_give_back_nothing() {
    let quota = Quota::per_second(10).unwrap().with_burst(5).unwrap();
    for kind in AlgorithmKind::ALL {
        for backend in BACKENDS {
            struct Run(ScriptBackend);
            impl AlgorithmVisitor for Run {
                type Output = ();
                fn visit<A: KnownAlgorithm>(self, algorithm: A) {
                    let clock = ManualClock::new();
                    let name = algorithm.name();
                    let window = algorithm.quota().window_micros();
                    let limiter = limiter(algorithm, self.0, &clock);
                    let mut receipts = Vec::new();
                    for i in 0..50u64 {
                        clock.set(1_000_000_000 + i * 3 * window);
                        receipts.push(admit(&limiter, b"k", 1));
                    }
                    // Long after: two windows past the last admission, which
                    // then fills the key.
                    clock.set(1_000_000_000 + 52 * 3 * window);
                    let full = fill(&limiter, b"k");
                    let before = block(limiter.peek(b"k", 0)).unwrap();
                    for receipt in receipts {
                        let after = block(limiter.refund(receipt)).unwrap();
                        assert_eq!(after, before, "{name} {:?}: gave back", self.0);
                    }
                    assert_eq!(fill(&limiter, b"k"), 0, "{name}: after {full}");
                }
            }
            kind.visit(quota, Run(backend));
        }
    }
}

/// A reset leaves no receipt able to give anything back: after a reset and
/// a full burst again, refunding every admission from before the reset
/// changes nothing.
#[test]
fn after_a_reset_no_receipt_gives_anything_back() {
    let quota = Quota::per_second(10).unwrap().with_burst(5).unwrap();
    for kind in AlgorithmKind::ALL {
        for backend in BACKENDS {
            struct Run(ScriptBackend);
            impl AlgorithmVisitor for Run {
                type Output = ();
                fn visit<A: KnownAlgorithm>(self, algorithm: A) {
                    let clock = ManualClock::new();
                    clock.set(1_000_000_000);
                    let name = algorithm.name();
                    let limiter = limiter(algorithm, self.0, &clock);
                    let old: Vec<Receipt> = (0..5).map(|_| admit(&limiter, b"k", 1)).collect();
                    block(limiter.reset(b"k")).unwrap();
                    assert_eq!(fill(&limiter, b"k"), 5, "{name}: a reset gives all back");
                    let before = block(limiter.peek(b"k", 0)).unwrap();
                    for receipt in old {
                        let after = block(limiter.refund(receipt)).unwrap();
                        assert_eq!(after, before, "{name} {:?}: gave back", self.0);
                    }
                    assert_eq!(fill(&limiter, b"k"), 0, "{name}");
                }
            }
            kind.visit(quota, Run(backend));
        }
    }
}

/// A client clock that steps back does not find an admission's debt still
/// ahead: a settlement decides at the latest instant the key was written
/// at. GCRA 1/s, burst 3: a of 3 at 0 s (repaid at 3 s), then three more
/// at 5 s; the clock steps back to 0.5 s and a is refunded. At the raw
/// 0.5 s a's end looks 2.5 s ahead, and giving that back would let two
/// more pass at 5 s; at 5 s, where the key was last written, a's debt is
/// long repaid: nothing comes back, and the answer is a peek at 5 s.
#[test]
fn a_clock_that_steps_back_gives_nothing_more() {
    for backend in BACKENDS {
        let clock = ManualClock::new();
        let limiter = limiter(gcra(1, 3), backend, &clock);
        let a = admit(&limiter, b"k", 3);
        clock.set(5_000_000);
        assert_eq!(fill(&limiter, b"k"), 3, "{backend:?}");
        let at_five = block(limiter.peek(b"k", 0)).unwrap();
        clock.set(500_000);
        let after = block(limiter.refund(a)).unwrap();
        assert_eq!(after, at_five, "{backend:?}");
        clock.set(5_000_000);
        assert_eq!(fill(&limiter, b"k"), 0, "{backend:?}");
    }
}

/// The reply of one raw call to the script or the module: what a caller
/// that sends its own stamps (not a Rust receipt) gets.
fn raw<A: KnownAlgorithm>(
    limiter: &RedisLimiter<A>,
    backend: ScriptBackend,
    key: &[u8],
    now: u64,
    cost: u32,
    op: Op,
) -> Vec<i64> {
    let algorithm = limiter.algorithm();
    let args = ScriptArgs::call(Some(now), cost, 60_000, None, op, &algorithm.params());
    let redis_key = limiter.store().redis_key(key);
    block(async {
        match backend {
            ScriptBackend::Module => {
                let mut cmd = redis::cmd(&algorithm.module_command());
                cmd.arg(&redis_key);
                for arg in args.iter() {
                    cmd.arg(arg);
                }
                limiter.store().connection().query(&cmd).await
            }
            _ => {
                Script::of::<A>()
                    .invoke(limiter.store().connection(), &redis_key, &args, || {})
                    .await
            }
        }
    })
    .unwrap()
}

/// The attack on a receipt replayed to the script (a caller that keeps the
/// numbers, where a Rust receipt is spent once: a job queue that delivers a
/// serialized receipt twice, or thirty times): one admission refunded, then
/// checks and replays of its stamp in turn, all at one instant. The replays
/// give nothing back, so no more pass than the burst, for every algorithm,
/// on the scripts and the module. Each replay giving its unit back again let
/// 30 pass on a burst of 10.
#[test]
fn a_refunded_stamp_replayed_between_checks_gives_nothing_more() {
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    for kind in AlgorithmKind::ALL {
        for backend in BACKENDS {
            struct Run(ScriptBackend);
            impl AlgorithmVisitor for Run {
                type Output = ();
                fn visit<A: KnownAlgorithm>(self, algorithm: A) {
                    let (name, backend) = (algorithm.name(), self.0);
                    let clock = ManualClock::new();
                    let now = 1_000_000_000_000;
                    clock.set(now);
                    let limiter = limiter(algorithm, backend, &clock);
                    let stamp = admit(&limiter, b"k", 1).stamp();
                    let refund = Op::Settle { actual: 0, stamp };
                    raw(&limiter, backend, b"k", now, 1, refund);
                    let mut passed = 0;
                    for _ in 0..30 {
                        passed += raw(&limiter, backend, b"k", now, 1, Op::Check)[0];
                        raw(&limiter, backend, b"k", now, 1, refund);
                    }
                    assert_eq!(passed, 10, "{name} {backend:?}: passed past the burst");
                    let left = block(limiter.peek(b"k", 0)).unwrap();
                    assert_eq!(left.remaining, 0, "{name} {backend:?}");
                }
            }
            kind.visit(quota, Run(backend));
        }
    }
}

/// A stamp settled again and again gives back its own admission's units
/// once, never those of the admissions before it, for every algorithm and
/// on both backends: ten admissions of 1 at one instant, the third's stamp
/// replayed 50 times gives back one unit, the last one's one more; a stamp
/// no admission had (a mark past what was counted) gives nothing; and no
/// forged stamp takes the key past its capacity.
#[test]
fn a_replayed_stamp_gives_back_its_own_units_once() {
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    for kind in AlgorithmKind::ALL {
        for backend in BACKENDS {
            struct Run(ScriptBackend);
            impl AlgorithmVisitor for Run {
                type Output = ();
                fn visit<A: KnownAlgorithm>(self, algorithm: A) {
                    let (name, backend) = (algorithm.name(), self.0);
                    let debt = A::DEBT;
                    let clock = ManualClock::new();
                    let now = 1_000_000_000_000;
                    clock.set(now);
                    let limiter = limiter(algorithm, backend, &clock);
                    let stamps: Vec<Stamp> =
                        (0..10).map(|_| admit(&limiter, b"k", 1).stamp()).collect();
                    assert!(
                        stamps.windows(2).all(|w| w[0] != w[1]),
                        "{name} {backend:?}: two admissions share a stamp: {stamps:?}"
                    );
                    let refund = |stamp| Op::Settle { actual: 0, stamp };
                    let mut remaining = 0;
                    for _ in 0..50 {
                        remaining = raw(&limiter, backend, b"k", now, 1, refund(stamps[2]))[2];
                    }
                    assert_eq!(remaining, 1, "{name} {backend:?}: the third, replayed");
                    for _ in 0..50 {
                        remaining = raw(&limiter, backend, b"k", now, 1, refund(stamps[9]))[2];
                    }
                    assert_eq!(remaining, 2, "{name} {backend:?}: the last, replayed");
                    // A window's mark no admission had: nothing.
                    if !debt {
                        let unissued = Stamp {
                            mark: stamps[9].mark + 5,
                            ..stamps[9]
                        };
                        let reply = raw(&limiter, backend, b"k", now, 1, refund(unissued));
                        assert_eq!(reply[2], 2, "{name} {backend:?}: an unissued mark gave");
                    }
                    // Never past full capacity, however many stamps are forged.
                    for at in (0..40).map(|i| now - 2_000_000 + i * 100_000) {
                        for mark in 0..3 {
                            let forged = Stamp { at, mark };
                            let reply = raw(&limiter, backend, b"k", now, 10, refund(forged));
                            assert!(reply[2] <= 10, "{name} {backend:?}: {reply:?}");
                        }
                    }
                }
            }
            kind.visit(quota, Run(backend));
        }
    }
}

/// A window's stamp gives nothing for a window that has ended.
#[test]
fn a_window_stamp_gives_nothing_once_its_window_ended() {
    let second = 1_000_000;
    for backend in BACKENDS {
        let clock = ManualClock::new();
        let window = ratelab::FixedWindow::new(Quota::per_second(3).unwrap());
        let limiter = limiter(window, backend, &clock);
        clock.set(10 * second);
        let stamps: Vec<Stamp> = (0..3).map(|_| admit(&limiter, b"w", 1).stamp()).collect();
        clock.set(11 * second);
        assert_eq!(fill(&limiter, b"w"), 3, "{backend:?}");
        let refund = Op::Settle {
            actual: 0,
            stamp: stamps[0],
        };
        let reply = raw(&limiter, backend, b"w", 11 * second, 1, refund);
        assert_eq!(reply[2], 0, "{backend:?}: an ended window gave back");
    }
}

/// A Redis limiter as the interleavings' [`Subject`]: keys are one byte,
/// time is a manual clock the run sets.
struct OnRedis<A: KnownAlgorithm> {
    limiter: RedisLimiter<A>,
    clock: ManualClock,
}

impl<A: KnownAlgorithm> Subject for OnRedis<A> {
    fn check(
        &self,
        key: u8,
        cost: u32,
        receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        if receipt {
            block(self.limiter.check_with_receipt(&[key], cost))
        } else {
            block(self.limiter.check(&[key], cost)).map(|d| (d, None))
        }
    }
    fn peek(&self, key: u8, cost: u32) -> Result<Decision, Error> {
        block(self.limiter.peek(&[key], cost))
    }
    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        block(self.limiter.settle(receipt, actual))
    }
    fn reset(&self, key: u8) {
        block(self.limiter.reset(&[key])).expect("Redis answers a reset");
    }
    fn set_clock(&self, micros: u64) {
        self.clock.set(micros);
    }
    fn capacity(&self) -> u64 {
        self.limiter.algorithm().capacity()
    }
}

/// Cases per algorithm and backend (`SETTLE_CASES=n` runs `n`).
fn cases() -> u32 {
    std::env::var("SETTLE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

/// The interleaving property (checks with and without receipts, peeks,
/// settlements below and above the cost, receipts dropped, resets), 64
/// cases of up to 40 steps per algorithm and backend (about 2 s for the
/// fourteen on a 2-core machine), all on one key so that every step meets
/// the others, with the clock kept monotonic (see the module docs): every
/// admission on Redis is one the kept history left room for. A script that
/// ignored the ledger failed it in 5 runs of 5 at 64 cases (on three keys
/// at 48 cases it did in 0 of 1).
#[test]
fn settlements_on_redis_keep_every_admission_within_what_was_kept() {
    let started = Instant::now();
    for kind in AlgorithmKind::ALL {
        for backend in BACKENDS {
            let mut runner = TestRunner::new(Config {
                cases: cases(),
                failure_persistence: Some(ratelab_testkit::props::regressions()),
                ..Config::default()
            });
            let result = runner.run(&quota_and_ops(40, 1), |(quota, ops)| {
                struct Run<'a>(ScriptBackend, &'a [interleave::Op]);
                impl AlgorithmVisitor for Run<'_> {
                    type Output = Result<(), TestCaseError>;
                    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
                        let clock = ManualClock::new();
                        let bound = algorithm.bound();
                        let subject = OnRedis {
                            limiter: limiter(algorithm, self.0, &clock),
                            clock,
                        };
                        interleave::run(&subject, bound, self.1, 1_000_000_000)
                    }
                }
                // Monotonic: a step back is a step of 0.
                let ops: Vec<interleave::Op> = ops
                    .into_iter()
                    .map(|op| match op {
                        interleave::Op::Back(_) => interleave::Op::Forward(0),
                        other => other,
                    })
                    .collect();
                kind.visit(quota, Run(backend, &ops))
            });
            if let Err(e) = result {
                panic!("{kind} on {backend:?}: {e}");
            }
        }
    }
    eprintln!(
        "{} cases per algorithm and backend in {:.1?}",
        cases(),
        started.elapsed()
    );
}
