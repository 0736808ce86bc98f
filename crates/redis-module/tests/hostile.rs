//! Hostile calls: every command with arguments an attacker or a broken
//! client would send (numbers at and past every bound, signs, blanks,
//! exponents, binary bytes, huge strings, arguments missing or extra,
//! settlements with fields missing, extra, not integers or past 2^53, stamps
//! replayed or forged) and keys of every shape (empty, binary, braces,
//! 64 KiB), against a key that is empty or already holds a state (checked,
//! then sometimes reset: a tombstone with its ledger or fence; or a debt's
//! state planted with a tail of shifts, well formed or not: an odd length,
//! 65 shifts, `before`s out of order or at the total, numbers that are no
//! integers below 2^53). The module must answer exactly what
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
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use ratelab::AlgorithmKind;
use ratelab_core::Quota;
use redis::Value;

use support::{OnTheModule, argv_op, connect, error_text, load_script};

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
    "5",
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
    /// A state a script could write (a debt's, under the call's quota,
    /// full again `ahead` µs after the call's instant), followed by a tail
    /// of shifts (`SET`).
    Tailed { ahead: u64, shifts: Shifts },
}

/// A tail of shifts to plant after a state.
#[derive(Debug, Clone)]
struct Shifts {
    /// How many, before any spoiling (65 is one too many).
    n: usize,
    /// The ledger's total is `n × step + extra`; the `before`s are `i ×
    /// step`.
    step: u64,
    extra: u64,
    /// Positions and instants, µs from the call's instant.
    positions: Vec<i64>,
    instants: Vec<i64>,
    flaw: Flaw,
}

/// What is wrong with a planted tail.
#[derive(Debug, Clone)]
enum Flaw {
    None,
    /// This many bytes more (1 to 23).
    Odd(usize),
    /// A `before` (picked by this number) equal to the one before it.
    Disordered(usize),
    /// The last `before` at the total, plus this.
    AtTotal(u64),
    /// A number (picked by this number, of the 3 × n) replaced.
    NotInteger(usize, f64),
}

fn flaw() -> impl Strategy<Value = Flaw> {
    let bad = prop_oneof![
        Just(0.5),
        Just(-1.0),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(9_007_199_254_740_992.0),
        Just(1e300),
    ];
    prop_oneof![
        3 => Just(Flaw::None),
        1 => (1usize..24).prop_map(Flaw::Odd),
        1 => any::<usize>().prop_map(Flaw::Disordered),
        1 => prop_oneof![Just(0u64), Just(1), 0u64..1 << 40].prop_map(Flaw::AtTotal),
        1 => (any::<usize>(), bad).prop_map(|(at, value)| Flaw::NotInteger(at, value)),
    ]
}

fn shifts() -> impl Strategy<Value = Shifts> {
    (
        prop_oneof![4 => 1usize..8, 1 => 60usize..=65],
        prop_oneof![Just(1u64), 1u64..3_000_000],
        prop_oneof![Just(1u64), 1u64..3_000_000],
        flaw(),
    )
        .prop_flat_map(|(n, step, extra, flaw)| {
            let near = prop_oneof![Just(0i64), -3_000_000i64..3_000_000];
            (
                Just((n, step, extra, flaw)),
                proptest::collection::vec(near.clone(), n),
                proptest::collection::vec(near, n),
            )
        })
        .prop_map(|((n, step, extra, flaw), positions, instants)| Shifts {
            n,
            step,
            extra,
            positions,
            instants,
            flaw,
        })
}

impl Shifts {
    /// The ledger's total.
    fn total(&self) -> u64 {
        self.n as u64 * self.step + self.extra
    }

    /// The tail's bytes, about the call's instant `clock`.
    #[allow(clippy::cast_precision_loss)]
    fn bytes(&self, clock: u64) -> Vec<u8> {
        let mut numbers: Vec<f64> = (0..self.n)
            .flat_map(|i| {
                let near = |d: i64| clock.saturating_add_signed(d) as f64;
                [
                    (i as u64 * self.step) as f64,
                    if self.positions[i] == 0 {
                        0.0
                    } else {
                        near(self.positions[i])
                    },
                    near(self.instants[i]),
                ]
            })
            .collect();
        match self.flaw {
            Flaw::None | Flaw::Odd(_) => {}
            Flaw::Disordered(at) if self.n > 1 => {
                let i = 1 + at % (self.n - 1);
                numbers[3 * i] = numbers[3 * (i - 1)];
            }
            Flaw::Disordered(_) => numbers[0] = self.total() as f64,
            Flaw::AtTotal(plus) => {
                numbers[3 * (self.n - 1)] = (self.total() + plus) as f64;
            }
            Flaw::NotInteger(at, value) => {
                let len = numbers.len();
                numbers[at % len] = value;
            }
        }
        let mut out: Vec<u8> = numbers.iter().flat_map(|v| v.to_le_bytes()).collect();
        if let Flaw::Odd(more) = self.flaw {
            out.extend(std::iter::repeat_n(0x41, more));
        }
        out
    }
}

/// A state of `kind` under [`QUOTAS`]`[0]` that a script could write at
/// `clock`: full again `ahead` µs later, with a ledger of `total`, then
/// `tail`. A window's state is followed by the tail too (never valid).
#[allow(clippy::cast_precision_loss)]
fn tailed(kind: AlgorithmKind, clock: u64, ahead: u64, total: u64, tail: &[u8]) -> Vec<u8> {
    let le = |x: u64| (x as f64).to_le_bytes();
    let (t, burst) = (200_000u64, 10u64);
    let end = clock + ahead.min(burst * t);
    let mut out: Vec<u8> = match kind {
        AlgorithmKind::Gcra | AlgorithmKind::LeakyQueue => [le(end), le(total), le(clock)].concat(),
        AlgorithmKind::LeakyMeter => [le(end - clock), le(clock), le(total)].concat(),
        AlgorithmKind::TokenBucket => {
            let missing = (end - clock).div_ceil(t);
            let tokens = u32::try_from(burst - missing).unwrap();
            [
                tokens.to_le_bytes().to_vec(),
                le(end - missing * t).to_vec(),
                le(total).to_vec(),
                le(clock).to_vec(),
            ]
            .concat()
        }
        AlgorithmKind::FixedWindow => [le(0), le(0), le(0)].concat(),
        AlgorithmKind::SlidingCounter => [le(0), le(0), le(0), le(0)].concat(),
        AlgorithmKind::SlidingLog => Vec::new(),
        other => panic!("{other}: no planted state in hostile.rs's `tailed`"),
    };
    out.extend_from_slice(tail);
    out
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
        3 => (0u64..3_000_000, shifts()).prop_map(|(ahead, shifts)| Prime::Tailed { ahead, shifts }),
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
    for kind in AlgorithmKind::ALL {
        let mut loader = connect(&server.url());
        let sha = load_script(&mut loader, kind);
        let params = kind.params(quota);
        let module = RefCell::new(side(
            &server.url(),
            0,
            Box::new(move |key, args| {
                let mut cmd = redis::cmd(&kind.command());
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
            failure_persistence: Some(ratelab_testkit::props::regressions()),
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
                            Prime::Tailed { ahead, shifts } => {
                                let tail = shifts.bytes(clock);
                                let value = tailed(kind, clock, *ahead, shifts.total(), &tail);
                                let mut cmd = redis::cmd("SET");
                                cmd.arg(&case.key).arg(value);
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

/// Each way a debt's tail of shifts can be wrong, under each operation:
/// the module and the script answer alike and leave the same bytes. A
/// length that no tail has (an odd one, 65 shifts) is refused by every
/// call; the numbers are read, and refused, by a settlement and a reset
/// (a check reads only the state before them, and writes the tail back as
/// it was); a well-formed tail is accepted by all.
#[test]
fn corrupt_tails_are_refused_alike() {
    let server = support::server();
    let quota = primed_quota(0);
    let clock = START + 7_000_000;
    let shifts = |n: usize, flaw: Flaw| Shifts {
        n,
        step: 1_000,
        extra: 500,
        positions: (0..n).map(|i| 100 * i as i64).collect(),
        instants: (0..n).map(|i| -1_000 * i as i64).collect(),
        flaw,
    };
    // (what, the tail, whether a check reads it as a wrong length)
    let cases = [
        ("well formed", shifts(3, Flaw::None), None),
        ("64 shifts", shifts(64, Flaw::None), None),
        ("an odd length", shifts(2, Flaw::Odd(5)), Some("bytes, not")),
        ("65 shifts", shifts(65, Flaw::None), Some("bytes, not")),
        (
            "befores out of order",
            shifts(3, Flaw::Disordered(1)),
            Some(""),
        ),
        (
            "a before at the total",
            shifts(3, Flaw::AtTotal(0)),
            Some(""),
        ),
        (
            "a before above the total",
            shifts(3, Flaw::AtTotal(7)),
            Some(""),
        ),
        ("a half", shifts(3, Flaw::NotInteger(4, 0.5)), Some("")),
        ("a NaN", shifts(3, Flaw::NotInteger(2, f64::NAN)), Some("")),
        (
            "2^53",
            shifts(3, Flaw::NotInteger(7, 9_007_199_254_740_992.0)),
            Some(""),
        ),
        ("a negative", shifts(1, Flaw::NotInteger(0, -1.0)), Some("")),
    ];
    for kind in AlgorithmKind::ALL.into_iter().filter(|kind| kind.debt()) {
        let sha = load_script(&mut connect(&server.url()), kind);
        let params = kind.params(quota);
        let key = format!("tail:{}", kind.name()).into_bytes();
        let mut module = side(
            &server.url(),
            0,
            Box::new(move |key, args| {
                let mut cmd = redis::cmd(&kind.command());
                cmd.arg(key).arg(args);
                cmd
            }),
        );
        let mut script = side(
            &server.url(),
            1,
            Box::new(move |key, args| {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(&sha).arg(1).arg(key).arg(args);
                cmd
            }),
        );
        for (what, tail, flaw) in &cases {
            let bytes = tail.bytes(clock);
            let planted = tailed(kind, clock, 1_000_000, tail.total(), &bytes);
            // A stamp of an admission ending 0.6 s ahead, with a mark of 0.
            let stamp = format!("settle:0:{}:0", clock + 600_000);
            for (op, cost) in [("check", 1), ("peek", 1), (stamp.as_str(), 1), ("reset", 0)] {
                let args: Vec<Vec<u8>> = argv_op(op, &clock.to_string(), cost, 0, "", &params)
                    .into_iter()
                    .map(String::into_bytes)
                    .collect();
                let mut replies = Vec::new();
                for side in [&mut module, &mut script] {
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(&planted)
                        .query::<()>(&mut side.connection)
                        .unwrap();
                    replies.push(side.run(&key, &args).unwrap());
                }
                let shown = format!("{} {what}, {op}", kind.name());
                assert_eq!(replies[0], replies[1], "{shown}");
                assert_eq!(module.dump(&key), script.dump(&key), "{shown}");
                let error = error_line(&replies[0]);
                let reads_shifts = op.starts_with("settle") || op == "reset";
                match flaw {
                    None => assert_eq!(error, None, "{shown}"),
                    Some(length) if !length.is_empty() || reads_shifts => {
                        let error = error.unwrap_or_else(|| panic!("{shown}: accepted"));
                        assert!(
                            error.contains(": corrupt state at ") && error.contains(length),
                            "{shown}: {error}"
                        );
                        eprintln!("{shown}: {error}");
                    }
                    Some(_) => {
                        assert_eq!(error, None, "{shown}");
                        // A check writes the tail back as it was.
                        let stored: Vec<u8> = redis::cmd("GET")
                            .arg(&key)
                            .query(&mut module.connection)
                            .unwrap();
                        assert!(stored.ends_with(&bytes), "{shown}: the tail changed");
                    }
                }
            }
        }
    }
}
