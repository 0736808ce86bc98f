//! Hostile calls: every command with arguments an attacker or a broken
//! client would send (numbers at and past every bound, signs, blanks,
//! exponents, binary bytes, huge strings, arguments missing or extra,
//! settlements with fields missing, extra, not integers or past 2^53, stamps
//! replayed or forged) and keys of every shape (empty, binary, braces,
//! 64 KiB), against a key that is empty or already holds a state (checked,
//! then sometimes reset: a tombstone with its ledger or fence). The module must answer exactly what
//! its Lua script answers (the same integers or the same error line), leave
//! the key holding the same bytes with a TTL, and never take the server
//! down: a panic in a module aborts `redis-server`.
//!
//! The module and the script run on the same key names in two databases of
//! one server, so that replies quoting a key are comparable byte for byte.
//! 400 cases per algorithm; `HOSTILE_CASES=n` runs `n`.

mod support;

use std::cell::{Cell, RefCell};

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError, TestRunner};
use ratelab_core::Quota;
use redis::Value;

use support::{Kind, argv_op, connect, error_text, load_script};

/// Where the virtual clocks start: a realistic Unix time, µs.
const START: u64 = 1_700_000_000_000_000;

/// The quotas keys are primed under: the call's own (5/s, burst 10) and
/// others, as after a quota change.
const QUOTAS: [(u32, u64, u32); 4] = [(5, 1, 10), (1, 1, 1), (100, 60, 3), (7, 2, 40)];

/// [`QUOTAS`]`[i]`: `limit` per `period` seconds, with its burst.
fn primed_quota(i: usize) -> Quota {
    let (limit, secs, burst) = QUOTAS[i];
    Quota::new(limit, std::time::Duration::from_secs(secs))
        .and_then(|q| q.with_burst(burst))
        .expect("a valid quota")
}

/// The start of the error a call past its deadline answers.
const EXPIRED: &str = "ratelab expired: ran ";

/// Values that sit on or just past a bound somewhere: the scripts' 2^53,
/// the signed and unsigned 64-bit ranges, zero in its spellings, and text
/// that a lenient parser would take for a number.
const EDGES: &[&str] = &[
    "0",
    "-0",
    "+0",
    "00",
    "1",
    "-1",
    "+1",
    "01",
    " 1",
    "1 ",
    "1.0",
    "0.5",
    "1e3",
    "1E3",
    "0x10",
    "inf",
    "-inf",
    "nan",
    "4294967295",
    "4294967296",
    "4503599627370496",
    "9007199254740991",
    "9007199254740992",
    "9007199254740993",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "1\0",
    "1\0junk",
    "0x1p3",
    "1_000",
    "\u{661}",
    "infinity",
    "nan(1)",
    "\t1\n",
    "\u{b}1",
    "1.",
    ".5",
    "",
    "check",
    "peek",
    "reset",
    "reset:0",
    "refund",
    "refund:1000",
    "settle",
    "settle:",
    "settle:1",
    "settle:1:2",
    "settle:1:2:",
    "settle:1:2:3:",
    "settle:1:2:3:4",
    "settle::2:3",
    "settle:x:1:2",
    "settle:-1:2:3",
    "settle:1:-2:3",
    "settle:1.5:2:3",
    "settle:1e3:0:0",
    "settle: 1:2:3",
    "settle:1:0x10:3",
    "settle:1:2:9007199254740992",
    "settle:1:9007199254740991:9007199254740991",
    "settle:1:18446744073709551616:0",
    "settle:1\0:2:3",
    "settle:0:1700000000000000:0",
    "settle:11:1:0",
    "SETTLE:0:1:0",
    "4",
    "3",
];

/// One argument an attacker might send instead of a valid one.
fn hostile_arg() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => proptest::sample::select(EDGES).prop_map(|s| s.as_bytes().to_vec()),
        2 => any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        2 => any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        2 => proptest::collection::vec(any::<u8>(), 0..12),
        1 => (1usize..400).prop_map(|n| "9".repeat(n).into_bytes()),
        1 => Just(vec![b'7'; 70_000]),
    ]
}

/// A key of any shape a client may use.
fn hostile_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => "[a-z]{1,8}".prop_map(String::into_bytes),
        1 => Just(Vec::new()),
        1 => Just(b"{}".to_vec()),
        1 => "\\{[a-z]{0,3}\\}[a-z{}]{0,4}".prop_map(String::into_bytes),
        2 => proptest::collection::vec(any::<u8>(), 1..16),
        1 => Just(vec![0xff; 65_536]),
    ]
}

/// How a valid call is spoiled.
#[derive(Debug, Clone)]
enum Spoil {
    /// Argument `at` (modulo the count) replaced.
    Replace(usize, Vec<u8>),
    /// Argument `at` removed.
    Remove(usize),
    /// An argument inserted before `at`.
    Insert(usize, Vec<u8>),
    /// Only the first `n` arguments kept.
    Truncate(usize),
}

fn spoil() -> impl Strategy<Value = Spoil> {
    prop_oneof![
        6 => (any::<usize>(), hostile_arg()).prop_map(|(at, v)| Spoil::Replace(at, v)),
        1 => any::<usize>().prop_map(Spoil::Remove),
        1 => (any::<usize>(), hostile_arg()).prop_map(|(at, v)| Spoil::Insert(at, v)),
        1 => (0usize..12).prop_map(Spoil::Truncate),
    ]
}

/// What the key holds before the hostile call.
#[derive(Debug, Clone)]
enum Prime {
    /// Nothing.
    Empty,
    /// The state valid checks leave: `times` checks of `cost` under the
    /// quota [`QUOTAS`]`[quota]` (another quota than the call's, sometimes),
    /// at `offset` µs from the call's instant (sometimes after it).
    Checked {
        quota: usize,
        cost: u32,
        times: u32,
        offset: i64,
        reset: bool,
    },
    /// A string of foreign bytes (`SET`): a stranger's, or a corrupted one.
    Foreign(Vec<u8>),
    /// Another type altogether (`RPUSH`).
    List,
    /// Members of a sorted set (`ZADD`), with these scores.
    Zset(Vec<f64>),
}

fn prime() -> impl Strategy<Value = Prime> {
    let score = prop_oneof![
        3 => (0u64..1 << 53).prop_map(|n| n as f64),
        1 => Just(-1.0),
        1 => Just(0.5),
        1 => Just(f64::INFINITY),
        1 => Just(1.7e15),
        1 => Just(9.1e15),
    ];
    prop_oneof![
        3 => Just(Prime::Empty),
        3 => (
            0..QUOTAS.len(),
            0u32..12,
            1u32..4,
            prop_oneof![3 => -5_000_000i64..0, 1 => 0i64..90_000_000],
            proptest::bool::weighted(0.25),
        )
            .prop_map(|(quota, cost, times, offset, reset)| Prime::Checked {
                quota,
                cost,
                times,
                offset,
                reset,
            }),
        2 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Prime::Foreign),
        2 => hostile_arg().prop_map(Prime::Foreign),
        1 => Just(Prime::List),
        1 => proptest::collection::vec(score, 1..5).prop_map(Prime::Zset),
    ]
}

/// The operation of a hostile call, before it is spoiled.
#[derive(Debug, Clone, Copy)]
enum CaseOp {
    Check,
    Peek,
    Reset,
    /// A settlement to `actual` of a stamp `at` µs from the call's instant
    /// (or a small window index), with `mark`.
    Settle {
        actual: u32,
        at: i64,
        mark: u64,
    },
}

impl CaseOp {
    fn arg(self, clock: u64) -> String {
        match self {
            CaseOp::Check => "check".to_owned(),
            CaseOp::Peek => "peek".to_owned(),
            CaseOp::Reset => "reset".to_owned(),
            CaseOp::Settle { actual, at, mark } => {
                let at = if at.unsigned_abs() < 1_000 {
                    at.unsigned_abs()
                } else {
                    clock.saturating_add_signed(at)
                };
                format!("settle:{actual}:{at}:{mark}")
            }
        }
    }
}

fn case_op() -> impl Strategy<Value = CaseOp> {
    prop_oneof![
        3 => Just(CaseOp::Check),
        1 => Just(CaseOp::Peek),
        1 => Just(CaseOp::Reset),
        3 => (0u32..12, -5_000_000i64..5_000_000, prop_oneof![Just(0u64), 0u64..10_000_000])
            .prop_map(|(actual, at, mark)| CaseOp::Settle { actual, at, mark }),
    ]
}

/// One hostile case: a key, what it holds first, the call's operation and
/// cost, and what spoils it.
#[derive(Debug, Clone)]
struct Case {
    key: Vec<u8>,
    prime: Prime,
    op: CaseOp,
    cost: u32,
    spoils: Vec<Spoil>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        hostile_key(),
        prime(),
        case_op(),
        prop_oneof![3 => 0u32..12, 1 => Just(0u32)],
        proptest::collection::vec(spoil(), 0..4),
    )
        .prop_map(|(key, prime, op, cost, spoils)| Case {
            key,
            prime,
            op,
            cost,
            spoils,
        })
}

/// `argv` with `spoils` applied in turn.
fn spoiled(argv: Vec<String>, spoils: &[Spoil]) -> Vec<Vec<u8>> {
    let mut args: Vec<Vec<u8>> = argv.into_iter().map(String::into_bytes).collect();
    for spoil in spoils {
        match spoil {
            Spoil::Replace(at, value) if !args.is_empty() => {
                let at = at % args.len();
                args[at].clone_from(value);
            }
            Spoil::Remove(at) if !args.is_empty() => {
                let at = at % args.len();
                args.remove(at);
            }
            Spoil::Insert(at, value) => {
                let at = at % (args.len() + 1);
                args.insert(at, value.clone());
            }
            Spoil::Truncate(n) => args.truncate(*n),
            _ => {}
        }
    }
    args
}

/// The reply as it came (integers, an error, anything else), failing the
/// test on a broken connection: the server died.
fn call(connection: &mut redis::Connection, cmd: &redis::Cmd) -> Result<Value, TestCaseError> {
    match cmd.query::<Value>(connection) {
        Ok(value) => Ok(value),
        Err(e) if e.is_io_error() || e.is_connection_dropped() => Err(TestCaseError::fail(
            format!("the server went away: {e} (after {cmd:?})"),
        )),
        Err(e) => Ok(Value::SimpleString(format!("error: {}", error_text(&e)))),
    }
}

/// An error line, however the client surfaced it.
fn error_line(value: &Value) -> Option<String> {
    match value {
        Value::ServerError(e) => Some(format!("{} {}", e.code(), e.details().unwrap_or(""))),
        Value::SimpleString(s) if s.starts_with("error: ") => Some(s.clone()),
        _ => None,
    }
}

/// Builds one side's call for a key and its arguments.
type CommandFor = dyn Fn(&[u8], &[Vec<u8>]) -> redis::Cmd;

/// The module or the script, on a connection to its own database.
struct Side {
    connection: redis::Connection,
    command: Box<CommandFor>,
}

impl Side {
    fn run(&mut self, key: &[u8], args: &[Vec<u8>]) -> Result<Value, TestCaseError> {
        let cmd = (self.command)(key, args);
        call(&mut self.connection, &cmd)
    }

    fn dump(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        redis::cmd("DUMP")
            .arg(key)
            .query(&mut self.connection)
            .expect("DUMP answers")
    }

    fn pttl(&mut self, key: &[u8]) -> i64 {
        redis::cmd("PTTL")
            .arg(key)
            .query(&mut self.connection)
            .expect("PTTL answers")
    }
}

fn side(url: &str, db: u8, command: Box<CommandFor>) -> Side {
    let mut connection = connect(url);
    redis::cmd("SELECT")
        .arg(db)
        .query::<()>(&mut connection)
        .expect("SELECT answers");
    Side {
        connection,
        command,
    }
}

#[test]
fn hostile_calls_answer_as_the_scripts_and_never_take_the_server_down() {
    let server = support::server();
    let quota = primed_quota(0);
    for kind in Kind::ALL {
        let mut loader = connect(&server.url());
        let sha = load_script(&mut loader, kind);
        let params = kind.params(quota);
        let module = RefCell::new(side(
            &server.url(),
            0,
            Box::new(move |key, args| {
                let mut cmd = redis::cmd(kind.command());
                cmd.arg(key).arg(args);
                cmd
            }),
        ));
        let script = RefCell::new(side(
            &server.url(),
            1,
            Box::new(move |key, args| {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(&sha).arg(1).arg(key).arg(args);
                cmd
            }),
        ));
        let mut runner = TestRunner::new(Config {
            cases: std::env::var("HOSTILE_CASES")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(400),
            failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
                "proptest-regressions",
            ))),
            ..Config::default()
        });
        let clock = Cell::new(START);
        let result = runner.run(&case(), |case| {
            clock.set(clock.get() + 1_000);
            let clock = clock.get();
            let (mut module, mut script) = (module.borrow_mut(), script.borrow_mut());
            for side in [&mut *module, &mut *script] {
                redis::cmd("DEL")
                    .arg(&case.key)
                    .query::<()>(&mut side.connection)
                    .expect("DEL answers");
            }
            match &case.prime {
                Prime::Empty => {}
                &Prime::Checked {
                    quota: primed_under,
                    cost,
                    times,
                    offset,
                    reset,
                } => {
                    let at = clock.saturating_add_signed(offset).to_string();
                    let params = kind.params(primed_quota(primed_under));
                    let prime: Vec<Vec<u8>> = argv_op("check", &at, cost, 0, "", &params)
                        .into_iter()
                        .map(String::into_bytes)
                        .collect();
                    for _ in 0..times {
                        let m = module.run(&case.key, &prime)?;
                        let s = script.run(&case.key, &prime)?;
                        prop_assert_eq!(&m, &s, "priming {}", kind.name());
                    }
                    if reset {
                        let reset: Vec<Vec<u8>> = argv_op("reset", &at, 0, 0, "", &params)
                            .into_iter()
                            .map(String::into_bytes)
                            .collect();
                        let m = module.run(&case.key, &reset)?;
                        let s = script.run(&case.key, &reset)?;
                        prop_assert_eq!(&m, &s, "resetting {}", kind.name());
                    }
                }
                planted => {
                    for side in [&mut *module, &mut *script] {
                        let cmd = match planted {
                            Prime::Foreign(bytes) => {
                                let mut cmd = redis::cmd("SET");
                                cmd.arg(&case.key).arg(bytes);
                                cmd
                            }
                            Prime::List => {
                                let mut cmd = redis::cmd("RPUSH");
                                cmd.arg(&case.key).arg("x");
                                cmd
                            }
                            Prime::Zset(scores) => {
                                let mut cmd = redis::cmd("ZADD");
                                cmd.arg(&case.key);
                                for (i, score) in scores.iter().enumerate() {
                                    cmd.arg(*score).arg(format!("m{i}"));
                                }
                                cmd
                            }
                            Prime::Empty | Prime::Checked { .. } => unreachable!(),
                        };
                        cmd.query::<()>(&mut side.connection)
                            .expect("the plant is written");
                    }
                }
            }
            let op = case.op.arg(clock);
            // A reset takes no cost (one spoil in four gives it one).
            let cost = if matches!(case.op, CaseOp::Reset) {
                0
            } else {
                case.cost
            };
            let valid = argv_op(&op, &clock.to_string(), cost, 0, "", &params);
            let args = spoiled(valid, &case.spoils);
            let m = module.run(&case.key, &args)?;
            let s = script.run(&case.key, &args)?;
            let shown = || {
                let head: Vec<String> = args
                    .iter()
                    .map(|a| String::from_utf8_lossy(&a[..a.len().min(40)]).into_owned())
                    .collect();
                format!("{} {head:?}", kind.name())
            };
            // The server clock (an empty `now`) moves between the two calls:
            // then only the verdict and the errors must agree.
            let on_server_clock = args.get(1).is_some_and(Vec::is_empty);
            match (error_line(&m), error_line(&s)) {
                // How late the call ran is the server's clock, read twice.
                (Some(a), Some(b)) if a.contains(EXPIRED) || b.contains(EXPIRED) => {
                    prop_assert!(
                        a.contains(EXPIRED) && b.contains(EXPIRED),
                        "{}: {a} / {b}",
                        shown()
                    );
                }
                (None, None) if on_server_clock => {
                    let verdict = |v: &Value| match v {
                        Value::Array(items) => items.first().cloned(),
                        other => Some(other.clone()),
                    };
                    prop_assert_eq!(verdict(&m), verdict(&s), "{}", shown());
                }
                _ => prop_assert_eq!(&m, &s, "{}", shown()),
            }
            if let Some(line) = error_line(&m) {
                prop_assert!(
                    line.contains("ratelab"),
                    "{}: an error that is not the protocol's: {line}",
                    shown()
                );
            }
            if !on_server_clock {
                prop_assert_eq!(
                    module.dump(&case.key),
                    script.dump(&case.key),
                    "{} left different bytes",
                    shown()
                );
            }
            for side in [&mut *module, &mut *script] {
                // A key planted without a TTL keeps none if the call refuses it.
                if matches!(case.prime, Prime::Empty | Prime::Checked { .. }) {
                    let ttl = side.pttl(&case.key);
                    prop_assert_ne!(ttl, -1, "{}: a key without a TTL", shown());
                }
                let pong: String = redis::cmd("PING")
                    .query(&mut side.connection)
                    .map_err(|e| TestCaseError::fail(format!("the server went away: {e}")))?;
                prop_assert_eq!(pong, "PONG");
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{}: {e}", kind.name());
        }
    }
}
