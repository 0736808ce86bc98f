//! Checks, peeks, settlements (of real stamps, replayed, and forged) and
//! resets on the module, decision for decision and stamp for stamp the
//! in-memory algorithm (run as the scripts run it) and the Lua scripts, on
//! random sequences with a clock that also steps back: the keys hold the
//! same bytes with the same TTL after every step, a peek writes nothing, and
//! a settlement never takes a key above its capacity. A debt's keys hold
//! shift tails (refunds of admissions other than the last, several
//! receipts outstanding, refunded out of order): the test counts them, and
//! fails if a debt never gets one. 16 cases per algorithm and quota;
//! `OPS_CASES=n` runs `n`.

mod support;

use std::cell::{Cell, RefCell};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use ratelab::AlgorithmKind;
use ratelab_core::Quota;
use ratelab_core::toolkit::Stamp;

use support::{
    Memory, OnTheModule, Op, argv_op, connect, load_script, module_cmd, query, script_cmd,
};

/// Keys live an hour past what their state needs: the virtual clock of the
/// sequences must never meet a real expiry.
const SLACK_MS: u64 = 3_600_000;

/// Where the virtual clocks start: a realistic Unix time, µs.
const START: u64 = 1_700_000_000_000_000;

fn quotas() -> Vec<Quota> {
    vec![
        Quota::per_second(5).unwrap().with_burst(10).unwrap(),
        Quota::new(7, Duration::from_secs(2))
            .unwrap()
            .with_burst(3)
            .unwrap(),
    ]
}

/// What one step does.
#[derive(Debug, Clone, Copy)]
enum Act {
    Check(u32),
    Peek(u32),
    /// Settles an admission seen so far (picked by this number; it may have
    /// been settled already: a replay) to `actual`.
    Settle {
        pick: usize,
        actual: u32,
    },
    /// Refunds an admission not settled yet (picked by this number): with
    /// several outstanding, often one other than the last, out of order.
    Refund {
        pick: usize,
    },
    /// Settles a stamp no check gave: `at` and `mark` near those seen, or
    /// anywhere.
    Forged {
        cost: u32,
        actual: u32,
        at: i64,
        mark: u64,
    },
    Reset,
}

#[derive(Debug, Clone)]
struct Step {
    delta: i64,
    act: Act,
}

fn steps(capacity: u32) -> impl Strategy<Value = Vec<Step>> {
    let delta = prop_oneof![
        3 => 0i64..1_000,
        3 => 0i64..400_000,
        2 => 0i64..3_000_000,
        1 => -1_000_000i64..0,
    ];
    let cost = prop_oneof![6 => Just(1u32), 3 => 0..=capacity, 1 => 0..=capacity + 1];
    let actual = prop_oneof![3 => Just(0u32), 2 => 0..=capacity, 1 => Just(capacity + 1)];
    let act = prop_oneof![
        6 => cost.clone().prop_map(Act::Check),
        2 => cost.clone().prop_map(Act::Peek),
        3 => (any::<usize>(), actual.clone()).prop_map(|(pick, actual)| Act::Settle { pick, actual }),
        3 => any::<usize>().prop_map(|pick| Act::Refund { pick }),
        1 => (cost, actual, -3_000_000i64..3_000_000, prop_oneof![Just(0u64), 0u64..5_000_000])
            .prop_map(|(cost, actual, at, mark)| Act::Forged { cost, actual, at, mark }),
        1 => Just(Act::Reset),
    ];
    proptest::collection::vec(
        (delta, act).prop_map(|(delta, act)| Step { delta, act }),
        1..50,
    )
}

fn dump(connection: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(connection).unwrap()
}

fn pttl(connection: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(connection).unwrap()
}

/// How many shifts follow a debt's state in `key` (0 for a window, or no
/// key).
fn shifts_stored(connection: &mut redis::Connection, kind: AlgorithmKind, key: &str) -> usize {
    let Some(size) = kind.fixed_size().filter(|_| kind.debt()) else {
        return 0;
    };
    let len: usize = redis::cmd("STRLEN").arg(key).query(connection).unwrap();
    len.saturating_sub(size) / 24
}

#[test]
fn checks_settlements_and_resets_answer_as_memory_and_as_the_scripts() {
    let server = support::server();
    let connection = RefCell::new(connect(&server.url()));
    let case = Cell::new(0u64);
    for kind in AlgorithmKind::ALL {
        let sha = load_script(&mut connection.borrow_mut(), kind);
        // Steps after which the key held shifts, and the most it held.
        let (tailed, most) = (Cell::new(0u64), Cell::new(0usize));
        for quota in quotas() {
            let params = kind.params(quota);
            let capacity = i64::from(quota.burst());
            let mut runner = TestRunner::new(Config {
                cases: std::env::var("OPS_CASES")
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(16),
                failure_persistence: Some(ratelab_testkit::props::regressions()),
                ..Config::default()
            });
            let result = runner.run(&steps(quota.burst()), |steps| {
                case.set(case.get() + 1);
                let case = case.get();
                let mut connection = connection.borrow_mut();
                let connection = &mut *connection;
                let module_key = format!("m:{case}");
                let script_key = format!("s:{case}");
                let mut memory = Memory::new(kind, quota);
                // Every admission answered so far: its cost and its stamp.
                let mut admitted: Vec<(u32, Stamp)> = Vec::new();
                // Those not settled yet, by their index in `admitted`.
                let mut outstanding: Vec<usize> = Vec::new();
                let mut now = START;
                let mut history: Vec<String> = Vec::new();
                for step in &steps {
                    now = now.saturating_add_signed(step.delta);
                    let (op, cost) = match step.act {
                        Act::Check(cost) => (Op::Check, cost),
                        Act::Peek(cost) => (Op::Peek, cost),
                        Act::Reset => (Op::Reset, 0),
                        Act::Settle { pick, actual } => {
                            let pick = pick % admitted.len().max(1);
                            let Some(&(cost, stamp)) = admitted.get(pick) else {
                                continue;
                            };
                            outstanding.retain(|&i| i != pick);
                            (Op::Settle { actual, stamp }, cost)
                        }
                        Act::Refund { pick } => {
                            if outstanding.is_empty() {
                                continue;
                            }
                            let i = outstanding.remove(pick % outstanding.len());
                            let (cost, stamp) = admitted[i];
                            (Op::Settle { actual: 0, stamp }, cost)
                        }
                        Act::Forged {
                            cost,
                            actual,
                            at,
                            mark,
                        } => {
                            // Near the instants (or window indexes) seen.
                            let near = admitted.last().map_or(0, |(_, s)| s.at);
                            let stamp = Stamp {
                                at: near.saturating_add_signed(at),
                                mark,
                            };
                            (Op::Settle { actual, stamp }, cost)
                        }
                    };
                    let before = dump(connection, &module_key);
                    let args = argv_op(&op.arg(), &now.to_string(), cost, SLACK_MS, "", &params);
                    let expected = memory.run(op, now, cost);
                    let sent = std::time::Instant::now();
                    let module = query(connection, &module_cmd(kind, &module_key, &args));
                    let script = query(connection, &script_cmd(&sha, &script_key, &args));
                    history.push(format!(
                        "{op:?} of {cost} at {now}: {expected:?} / {module:?}"
                    ));
                    let at = format!(
                        "{} {:?} of {} at {now}\n{}",
                        kind.name(),
                        op,
                        cost,
                        history.join("\n")
                    );
                    prop_assert_eq!(&module, &expected, "module: {}", at);
                    prop_assert_eq!(&script, &expected, "script: {}", at);
                    let after = dump(connection, &module_key);
                    prop_assert_eq!(&after, &dump(connection, &script_key), "stores: {}", at);
                    // Set alike, written and read one after the other: the
                    // two differ by 50 ms at most (each server reads its
                    // clock its own way), and the time all that took.
                    let (m, s) = (pttl(connection, &module_key), pttl(connection, &script_key));
                    let took = i64::try_from(sent.elapsed().as_millis()).unwrap_or(i64::MAX) + 50;
                    prop_assert!(
                        (m - s).abs() <= took,
                        "PTTL {} and {}, {} ms apart at most: {}",
                        m,
                        s,
                        took,
                        at
                    );
                    prop_assert!(after.is_none() || m > 0, "a key without a TTL: {}", at);
                    if let Ok(reply) = &expected {
                        prop_assert!(reply[2] <= capacity, "above capacity: {}", at);
                        if op == Op::Check && reply[0] == 1 && cost > 0 {
                            let stamp = Stamp {
                                at: u64::try_from(reply[6]).unwrap(),
                                mark: u64::try_from(reply[7]).unwrap(),
                            };
                            outstanding.push(admitted.len());
                            admitted.push((cost, stamp));
                        } else {
                            prop_assert_eq!(&reply[6..], &[0, 0][..], "a stamp: {}", at);
                        }
                    }
                    if op == Op::Peek {
                        prop_assert_eq!(&before, &after, "a peek wrote: {}", at);
                    }
                    let shifts = shifts_stored(connection, kind, &module_key);
                    tailed.set(tailed.get() + u64::from(shifts > 0));
                    most.set(most.get().max(shifts));
                }
                Ok(())
            });
            if let Err(e) = result {
                panic!("{} with {quota:?}: {e}", kind.name());
            }
        }
        eprintln!(
            "{}: {} steps left shifts stored, at most {}",
            kind.name(),
            tailed.get(),
            most.get()
        );
        let debt = kind.debt();
        assert!(
            !debt || tailed.get() > 0,
            "{}: no key had shifts",
            kind.name()
        );
    }
}

/// Many receipts outstanding on one debt, refunded in a shuffled order:
/// more than 64 shifts recorded (the oldest dropped from the tail, then
/// counted whole), shifts expired a tolerance later, and stamps of the
/// dropped ones: module, script and memory answer alike at every step, and
/// the keys hold the same bytes.
#[test]
fn many_refunds_out_of_order_answer_alike_past_the_kept_shifts() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let quota = Quota::per_second(100).unwrap().with_burst(100).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        usize::try_from(x % n as u64).unwrap()
    };
    for kind in AlgorithmKind::ALL.into_iter().filter(|kind| kind.debt()) {
        let sha = load_script(&mut connection, kind);
        let params = kind.params(quota);
        let (module_key, script_key) = (
            format!("many:m:{}", kind.name()),
            format!("many:s:{}", kind.name()),
        );
        let mut memory = Memory::new(kind, quota);
        let mut now = START;
        let mut most = 0;
        let mut run = |connection: &mut redis::Connection, op: Op, now: u64, cost: u32| {
            let args = argv_op(&op.arg(), &now.to_string(), cost, SLACK_MS, "", &params);
            let expected = memory.run(op, now, cost);
            let module = query(connection, &module_cmd(kind, &module_key, &args));
            let script = query(connection, &script_cmd(&sha, &script_key, &args));
            let at = format!("{} {op:?} of {cost} at {now}", kind.name());
            assert_eq!(module, expected, "module: {at}");
            assert_eq!(script, expected, "script: {at}");
            assert_eq!(
                dump(connection, &module_key),
                dump(connection, &script_key),
                "{at}"
            );
            expected.unwrap()
        };
        for round in 0..2 {
            // A burst of admissions a little apart, all outstanding.
            let mut receipts: Vec<(u32, Stamp)> = Vec::new();
            for _ in 0..90 {
                now += 100;
                let reply = run(&mut connection, Op::Check, now, 1);
                assert_eq!(reply[0], 1, "{} round {round}", kind.name());
                let stamp = Stamp {
                    at: u64::try_from(reply[6]).unwrap(),
                    mark: u64::try_from(reply[7]).unwrap(),
                };
                receipts.push((1, stamp));
            }
            // Refunded in a shuffled order; some receipts kept for later.
            let mut order: Vec<usize> = (0..receipts.len()).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, next(i + 1));
            }
            for &i in &order[..80] {
                now += 50;
                let (cost, stamp) = receipts[i];
                run(&mut connection, Op::Settle { actual: 0, stamp }, now, cost);
                most = most.max(shifts_stored(&mut connection, kind, &module_key));
            }
            // A tolerance later: every shift is forgotten, and the old
            // receipts give nothing.
            now += 1_100_000;
            for &i in &order[80..] {
                let (cost, stamp) = receipts[i];
                run(&mut connection, Op::Settle { actual: 0, stamp }, now, cost);
            }
        }
        assert_eq!(
            most,
            64,
            "{}: the tail never reached 64 shifts",
            kind.name()
        );
    }
}

/// Versions 1 to 3 are no longer answered, and an unknown operation (a
/// version 3 refund among them) is invalid arguments, in both runners.
#[test]
fn older_versions_and_unknown_operations_are_refused_alike() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    for kind in AlgorithmKind::ALL {
        let sha = load_script(&mut connection, kind);
        let params = kind.params(quota);
        let now = START.to_string();
        let (m, s) = (
            format!("v:m:{}", kind.name()),
            format!("v:s:{}", kind.name()),
        );
        for version in ["1", "2", "3", "4"] {
            let mut args = argv_op("check", &now, 1, 0, "", &params);
            args[0] = version.to_owned();
            let module = query(&mut connection, &module_cmd(kind, &m, &args));
            let script = query(&mut connection, &script_cmd(&sha, &s, &args));
            let refused = Err(format!(
                "ratelab: protocol version 5 expected, got {version}"
            ));
            assert_eq!(module, refused, "{} version {version}", kind.name());
            assert_eq!(script, refused, "{} version {version}", kind.name());
        }
        let invalid = Err(format!("ratelab {}: invalid arguments", kind.name()));
        for op in ["drop", "refund:1000", "refund", "settle"] {
            let bad = argv_op(op, &now, 1, 0, "", &params);
            let module = query(&mut connection, &module_cmd(kind, &m, &bad));
            let script = query(&mut connection, &script_cmd(&sha, &s, &bad));
            assert_eq!(module, invalid, "{} {op}", kind.name());
            assert_eq!(script, invalid, "{} {op}", kind.name());
        }
        let nothing = |c: &mut redis::Connection, key: &str| -> i64 {
            redis::cmd("EXISTS").arg(key).query(c).unwrap()
        };
        assert_eq!(
            nothing(&mut connection, &m) + nothing(&mut connection, &s),
            0
        );
    }
}
