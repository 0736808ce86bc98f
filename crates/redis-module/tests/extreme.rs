//! Quotas at the edges of what `Quota` accepts (limits and bursts up to
//! 2^32 - 1, periods up to 2^50 µs, one unit per µs), costs up to the burst,
//! instants up to the 2^52 µs clamp, settlements (of the stamps checks
//! answered, to anything up to the burst: debts that pile up to the
//! protocol's ceilings) and resets: the module, the Lua script (whose
//! numbers are doubles) and the in-memory algorithm give the same answer,
//! field for field (an `out of range` refusal alike), and the module's and
//! the script's keys hold the same bytes. The other equivalence tests draw small quotas; the arithmetic
//! that could lose a bit in a double lives out here. (This test found that a
//! sliding log of a billion units, one sorted-set member per unit, filled
//! Redis's memory from one call: the scripts and the module now refuse a log
//! above `MAX_STORED_LOG_LIMIT`.)

mod support;

use std::cell::{Cell, RefCell};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use ratelab::AlgorithmKind;
use ratelab_core::Quota;
use ratelab_core::toolkit::{MAX_INSTANT_MICROS, MAX_SPAN_MICROS};
use ratelab_sliding_window::MAX_STORED_LOG_LIMIT;

use ratelab_core::toolkit::Stamp;
use support::{
    Memory, OnTheModule, Op, argv_op, connect, load_script, module_cmd, query, script_cmd,
    without_detail,
};

/// A quota near some edge, or `None` if `Quota` refuses the draw.
fn extreme_quota() -> impl Strategy<Value = Quota> {
    let limit = prop_oneof![
        1 => 1u32..=12,
        1 => Just(u32::MAX),
        1 => (u32::MAX - 16)..=u32::MAX,
        2 => 1u32..=u32::MAX,
    ];
    let period = prop_oneof![
        1 => Just(MAX_SPAN_MICROS),
        1 => (MAX_SPAN_MICROS - 1_000)..=MAX_SPAN_MICROS,
        2 => 1u64..=MAX_SPAN_MICROS,
        // One unit per µs or close to it.
        1 => 0u64..=4,
    ];
    let burst = prop_oneof![
        1 => Just(None),
        1 => Just(Some(1u32)),
        1 => Just(Some(u32::MAX)),
        2 => (1u32..=u32::MAX).prop_map(Some),
    ];
    (limit, period, burst).prop_filter_map("a quota Quota refuses", |(limit, period, burst)| {
        // Small periods are read as "limit + that many µs".
        let period = if period <= 4 {
            u64::from(limit) + period
        } else {
            period
        };
        let quota = Quota::new(limit, Duration::from_micros(period)).ok()?;
        match burst {
            Some(burst) => quota.with_burst(burst).ok(),
            None => Some(quota),
        }
    })
}

/// What a step does.
#[derive(Debug, Clone, Copy)]
enum Act {
    Check(u32),
    /// Settles an admission answered so far (picked by this number) to
    /// this many units.
    Settle(usize, u32),
    Reset,
}

/// Steps: a move of the clock (µs, possibly huge) and what is done: a
/// check of a cost (0, 1, the burst, one past it, or anything between), a
/// settlement to anything up to the burst (often all of it: debt piles up),
/// or a reset.
fn steps(burst: u32) -> impl Strategy<Value = Vec<(u64, Act)>> {
    let delta = prop_oneof![
        2 => 0u64..1_000,
        2 => 0u64..(1 << 30),
        1 => 0u64..(1 << 50),
        1 => Just(0u64),
    ];
    let cost = prop_oneof![
        2 => Just(1u32),
        1 => Just(0u32),
        1 => Just(burst),
        1 => Just(burst.saturating_add(1)),
        2 => 0..=burst,
    ];
    let actual = prop_oneof![1 => Just(0u32), 2 => Just(burst), 1 => 0..=burst];
    let act = prop_oneof![
        6 => cost.prop_map(Act::Check),
        3 => (any::<usize>(), actual).prop_map(|(pick, actual)| Act::Settle(pick, actual)),
        1 => Just(Act::Reset),
    ];
    proptest::collection::vec((delta, act), 1..24)
}

#[test]
fn extreme_quotas_decide_alike_in_memory_in_the_module_and_in_the_scripts() {
    let server = support::server();
    let connection = RefCell::new(connect(&server.url()));
    let case = Cell::new(0u64);
    for kind in AlgorithmKind::ALL {
        let sha = load_script(&mut connection.borrow_mut(), kind);
        let mut runner = TestRunner::new(Config {
            cases: 160,
            failure_persistence: Some(ratelab_testkit::props::regressions()),
            ..Config::default()
        });
        let strategy = extreme_quota().prop_flat_map(|quota| {
            let start = prop_oneof![
                Just(1_700_000_000_000_000u64),
                0u64..(1 << 40),
                (MAX_INSTANT_MICROS - (1 << 40))..=MAX_INSTANT_MICROS,
            ];
            (Just(quota), start, steps(quota.burst()))
        });
        let result = runner.run(&strategy, |(quota, start, steps)| {
            case.set(case.get() + 1);
            let case = case.get();
            let mut connection = connection.borrow_mut();
            let connection = &mut *connection;
            let params = kind.params(quota);
            let (module_key, script_key) = (format!("m:{case}"), format!("s:{case}"));
            let mut memory = Memory::new(kind, quota);
            let mut now = start;
            let mut admitted: Vec<(u32, Stamp)> = Vec::new();
            for &(delta, act) in &steps {
                let (op, cost) = match act {
                    Act::Check(cost) => (Op::Check, cost),
                    Act::Reset => (Op::Reset, 0),
                    Act::Settle(pick, actual) => match admitted.get(pick % admitted.len().max(1)) {
                        Some(&(cost, stamp)) => (Op::Settle { actual, stamp }, cost),
                        None => continue,
                    },
                };
                // The runners clamp instants at 2^52 µs; `decide` is given
                // them clamped.
                now = now.saturating_add(delta).min(MAX_INSTANT_MICROS);
                // A TTL slack of an hour: the virtual clock must not meet a
                // real expiry.
                let args = argv_op(&op.arg(), &now.to_string(), cost, 3_600_000, "", &params);
                // A sliding log keeps one member per unit on Redis: above
                // its cap, both answer `invalid arguments`.
                let expected =
                    if kind == AlgorithmKind::SlidingLog && quota.burst() > MAX_STORED_LOG_LIMIT {
                        Err("ratelab sliding-log: invalid arguments".to_owned())
                    } else {
                        memory.run(op, now, cost)
                    };
                if let (Op::Check, Ok(reply)) = (op, &expected)
                    && reply[0] == 1
                    && cost > 0
                {
                    let stamp = |i: usize| u64::try_from(reply[i]).unwrap();
                    admitted.push((
                        cost,
                        Stamp {
                            at: stamp(6),
                            mark: stamp(7),
                        },
                    ));
                }
                let module =
                    without_detail(query(connection, &module_cmd(kind, &module_key, &args)));
                let script =
                    without_detail(query(connection, &script_cmd(&sha, &script_key, &args)));
                prop_assert_eq!(
                    &module,
                    &expected,
                    "{} module, {:?}, {:?} of {} at {}",
                    kind.name(),
                    quota,
                    op,
                    cost,
                    now
                );
                prop_assert_eq!(
                    &script,
                    &expected,
                    "{} script, {:?}, {:?} of {} at {}",
                    kind.name(),
                    quota,
                    op,
                    cost,
                    now
                );
                let dump = |key: &str, c: &mut redis::Connection| -> Option<Vec<u8>> {
                    redis::cmd("DUMP").arg(key).query(c).expect("DUMP answers")
                };
                prop_assert_eq!(
                    dump(&module_key, connection),
                    dump(&script_key, connection),
                    "{} stores differently, {:?}, at {}",
                    kind.name(),
                    quota,
                    now
                );
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{}: {e}", kind.name());
        }
    }
}
