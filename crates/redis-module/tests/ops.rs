//! Peek, refund and reset on the module, decision for decision the
//! in-memory algorithm and the Lua scripts, on random sequences that
//! interleave them with checks: the keys hold the same bytes after every
//! step, a peek writes nothing, and a refund never takes a key above its
//! capacity.

mod support;

use std::cell::{Cell, RefCell};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use ratelab_core::Quota;

use support::{Kind, Memory, Op, argv_op, connect, load_script, module_cmd, query, script_cmd};

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

#[derive(Debug, Clone)]
struct Step {
    delta: i64,
    op: Op,
    cost: u32,
}

fn steps(capacity: u32) -> impl Strategy<Value = Vec<Step>> {
    let delta = prop_oneof![
        3 => 0i64..1_000,
        3 => 0i64..400_000,
        2 => 0i64..3_000_000,
        1 => -1_000_000i64..0,
    ];
    let op = prop_oneof![
        5 => Just(Op::Check),
        2 => Just(Op::Peek),
        // What the admission still weighs: none, some, or all of it.
        3 => prop_oneof![
            Just(0u64),
            0u64..4_000_000,
            Just(1u64 << 52),
        ]
        .prop_map(Op::Refund),
        1 => Just(Op::Reset),
    ];
    let cost = prop_oneof![6 => Just(1u32), 3 => 0..=capacity, 1 => 0..=capacity + 1];
    proptest::collection::vec(
        (delta, op, cost).prop_map(|(delta, op, cost)| Step { delta, op, cost }),
        1..50,
    )
}

fn dump(connection: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(connection).unwrap()
}

fn del(connection: &mut redis::Connection, key: &str) {
    redis::cmd("DEL").arg(key).query::<()>(connection).unwrap();
}

#[test]
fn peek_refund_and_reset_answer_as_memory_and_as_the_scripts() {
    let server = support::server();
    let connection = RefCell::new(connect(&server.url()));
    let case = Cell::new(0u64);
    for kind in Kind::ALL {
        let sha = load_script(&mut connection.borrow_mut(), kind);
        for quota in quotas() {
            let params = kind.params(quota);
            let capacity = i64::from(quota.burst());
            let mut runner = TestRunner::new(Config {
                cases: 16,
                failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
                    "proptest-regressions",
                ))),
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
                let mut now = START;
                for step in &steps {
                    now = now.saturating_add_signed(step.delta);
                    let Some(op) = step.op.arg() else {
                        memory.run(Op::Reset, now, 0).unwrap();
                        del(connection, &module_key);
                        del(connection, &script_key);
                        continue;
                    };
                    let before = dump(connection, &module_key);
                    let full = memory.run(Op::Peek, now, 0);
                    let args = argv_op(&op, &now.to_string(), step.cost, SLACK_MS, "", &params);
                    let expected = memory.run(step.op, now, step.cost);
                    let module = query(connection, &module_cmd(kind, &module_key, &args));
                    let script = query(connection, &script_cmd(&sha, &script_key, &args));
                    let at = format!("{} {:?} {} at {now}", kind.name(), step.op, step.cost);
                    prop_assert_eq!(&module, &expected, "module: {}", at);
                    prop_assert_eq!(&script, &expected, "script: {}", at);
                    let after = dump(connection, &module_key);
                    prop_assert_eq!(&after, &dump(connection, &script_key), "stores: {}", at);
                    if let Ok(reply) = &expected {
                        prop_assert!(reply[2] <= capacity, "above capacity: {}", at);
                    }
                    match step.op {
                        Op::Peek => prop_assert_eq!(&before, &after, "a peek wrote: {}", at),
                        Op::Refund(_) => {
                            // A full key stays full: the refund answers the
                            // peek it would have answered anyway.
                            if let (Ok(full), Ok(_)) = (&full, &expected)
                                && full[2] == capacity
                                && full[4] == 0
                            {
                                prop_assert_eq!(&expected, &Ok(full.clone()), "{}", at);
                            }
                        }
                        _ => {}
                    }
                }
                Ok(())
            });
            if let Err(e) = result {
                panic!("{} with {quota:?}: {e}", kind.name());
            }
        }
    }
}

/// A version 1 call (no operation) is still a check, and a version 2 call
/// with an unknown operation is invalid arguments, in both runners.
#[test]
fn version_1_still_checks_and_unknown_operations_are_invalid() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    for kind in Kind::ALL {
        let sha = load_script(&mut connection, kind);
        let params = kind.params(quota);
        let now = START.to_string();
        let mut v1 = vec![
            "1".to_owned(),
            now.clone(),
            "1".into(),
            "0".into(),
            String::new(),
        ];
        v1.extend(params.iter().map(u64::to_string));
        let v2 = argv_op("check", &now, 1, 0, "", &params);
        let (m, s) = (
            format!("v:m:{}", kind.name()),
            format!("v:s:{}", kind.name()),
        );
        let mut memory = Memory::new(kind, quota);
        for (i, args) in [v1, v2].iter().enumerate() {
            let module = query(&mut connection, &module_cmd(kind, &m, args));
            let script = query(&mut connection, &script_cmd(&sha, &s, args));
            let expected = memory.decide(START, 1);
            assert_eq!(module, expected, "{} call {i}", kind.name());
            assert_eq!(script, expected, "{} call {i}", kind.name());
        }
        let bad = argv_op("drop", &now, 1, 0, "", &params);
        let module = query(&mut connection, &module_cmd(kind, &m, &bad));
        let script = query(&mut connection, &script_cmd(&sha, &s, &bad));
        let invalid = Err(format!("ratelab {}: invalid arguments", kind.name()));
        assert_eq!(module, invalid);
        assert_eq!(script, invalid);
    }
}
