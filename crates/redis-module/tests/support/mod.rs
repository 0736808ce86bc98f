//! Shared by the module's integration tests: the built module, servers that
//! load it, the Lua scripts it mirrors, and each algorithm's parameters,
//! every algorithm named by the facade's `AlgorithmKind` and described by
//! its own crate's remote form.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use ratelab::toolkit::remote::{Shape, Stored, Value};
use ratelab::toolkit::{Settlement, Stamp};
use ratelab::{AlgorithmKind, AlgorithmVisitor, KnownAlgorithm, Quota};
use ratelab_testkit::redis::RedisServer;

pub use ratelab_testkit::redis::module_path;

/// A `redis-server` that loads the module.
pub fn server() -> RedisServer {
    let path = module_path().to_str().expect("a UTF-8 path").to_owned();
    RedisServer::start_with(&["--loadmodule", &path])
}

/// A connection to `url`.
pub fn connect(url: &str) -> redis::Connection {
    let client = redis::Client::open(url).expect("a valid URL");
    let connection = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .expect("the server answers");
    connection
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a read timeout");
    connection
}

/// A command's reply: its integers, or its error message.
pub type Reply = Result<Vec<i64>, String>;

/// Runs `cmd`, reading a reply of integers or an error.
pub fn query(connection: &mut redis::Connection, cmd: &redis::Cmd) -> Reply {
    match cmd.query::<redis::Value>(connection) {
        Ok(redis::Value::Array(items)) => Ok(items
            .into_iter()
            .map(|item| match item {
                redis::Value::Int(n) => n,
                other => panic!("not an integer: {other:?}"),
            })
            .collect()),
        Ok(redis::Value::ServerError(e)) => Err(server_error(&e)),
        Ok(other) => panic!("unexpected reply {other:?}"),
        Err(e) => Err(error_text(&e)),
    }
}

fn server_error(e: &redis::ServerError) -> String {
    match e.details() {
        Some(details) => format!("{} {details}", e.code()),
        None => e.code().to_owned(),
    }
}

/// The error line as the server sent it (without the `-`).
pub fn error_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        _ => e.to_string(),
    }
}

/// What the module's tests ask of an algorithm named by the facade's
/// [`AlgorithmKind`] (the one list of algorithms): each answer is the
/// algorithm crate's own ([`RemoteForm`]).
pub trait OnTheModule: Copy {
    /// The module's command.
    fn command(self) -> String;

    /// The script as `ratelab-redis` sends it: the prologue, then the
    /// algorithm's file.
    fn script(self) -> String;

    /// The script's parameters for `quota`.
    fn params(self, quota: Quota) -> Vec<u64>;

    /// A debt (its ledger's shifts follow its state).
    fn debt(self) -> bool;

    /// The length of the state's fixed part, for a state kept in a string
    /// (`None` for the sliding log's sorted set).
    fn fixed_size(self) -> Option<usize>;
}

impl OnTheModule for AlgorithmKind {
    fn command(self) -> String {
        ratelab_redis_module::command(self.name()).unwrap_or_else(|| {
            panic!(
                "the module runs no {self}, though its commands are built from \
                 ratelab::each_algorithm! (crates/redis-module/src/registry.rs)"
            )
        })
    }

    fn script(self) -> String {
        struct Script;
        impl AlgorithmVisitor for Script {
            type Output = String;
            fn visit<A: KnownAlgorithm>(self, _: A) -> String {
                A::script()
            }
        }
        self.visit(any_quota(), Script)
    }

    fn params(self, quota: Quota) -> Vec<u64> {
        struct Params;
        impl AlgorithmVisitor for Params {
            type Output = Vec<u64>;
            fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Vec<u64> {
                algorithm.params().to_vec()
            }
        }
        self.visit(quota, Params)
    }

    fn debt(self) -> bool {
        struct Debt;
        impl AlgorithmVisitor for Debt {
            type Output = bool;
            fn visit<A: KnownAlgorithm>(self, _: A) -> bool {
                A::DEBT
            }
        }
        self.visit(any_quota(), Debt)
    }

    fn fixed_size(self) -> Option<usize> {
        struct Size;
        impl AlgorithmVisitor for Size {
            type Output = Option<usize>;
            fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Option<usize> {
                // A key never seen, as stored: the fixed part alone.
                let fresh = Stored {
                    state: algorithm.initial_state(),
                    ledger: Default::default(),
                    latest: 0,
                };
                match algorithm.encode(&fresh) {
                    Value::String(raw) => Some(raw.len()),
                    Value::SortedSet(_) => None,
                }
            }
        }
        self.visit(any_quota(), Size)
    }
}

fn any_quota() -> Quota {
    Quota::per_second(5).expect("a valid quota")
}

/// What a call does, as the scripts and the module take it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Check,
    Peek,
    /// The admission stamped `stamp`, of the call's cost, finally counts
    /// for `actual` units.
    Settle {
        actual: u32,
        stamp: Stamp,
    },
    Reset,
}

impl Op {
    /// `ARGV[6]`.
    pub fn arg(self) -> String {
        match self {
            Op::Check => "check".to_owned(),
            Op::Peek => "peek".to_owned(),
            Op::Settle { actual, stamp } => {
                format!("settle:{actual}:{}:{}", stamp.at, stamp.mark)
            }
            Op::Reset => "reset".to_owned(),
        }
    }
}

/// A limiter in memory: the algorithm crate's `decide`, `stamp`, `settle`
/// and `reset` on a local state and ledger, run as the scripts run them on
/// Redis (a check or a peek at `now`; a debt's settlement at the latest of
/// `now` and the latest instant written; a key that can be forgotten reads
/// as a key never seen; a reset of such a key is no tombstone), answering
/// in the scripts' reply shape.
pub struct Memory {
    run: Box<dyn FnMut(Op, u64, u32) -> Reply>,
}

impl Memory {
    pub fn new(kind: AlgorithmKind, quota: Quota) -> Self {
        struct Build;
        impl AlgorithmVisitor for Build {
            type Output = Box<dyn FnMut(Op, u64, u32) -> Reply>;
            fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
                boxed(algorithm)
            }
        }
        Memory {
            run: kind.visit(quota, Build),
        }
    }

    pub fn decide(&mut self, now: u64, cost: u32) -> Reply {
        (self.run)(Op::Check, now, cost)
    }

    /// `op` at `now`, of `cost`.
    pub fn run(&mut self, op: Op, now: u64, cost: u32) -> Reply {
        (self.run)(op, now, cost)
    }
}

/// `algorithm` run as the scripts run it (see [`Memory`]).
fn boxed<A: KnownAlgorithm>(algorithm: A) -> Box<dyn FnMut(Op, u64, u32) -> Reply> {
    let debt = A::DEBT;
    // The sliding log's check prunes what left the window, whatever it
    // decides.
    let prunes = A::SHAPE == Shape::SortedSet;
    // Past one of the protocol's ceilings (lua/README.md, "State"), as the
    // algorithm's remote form says.
    let past_a_ceiling = |algorithm: &A, state: &A::State, ledger: &A::Ledger| {
        let stored = Stored {
            state: state.clone(),
            ledger: ledger.clone(),
            latest: 0,
        };
        algorithm.out_of_range(&stored).is_some()
    };
    let mut state = algorithm.initial_state();
    let mut ledger = A::Ledger::default();
    // The latest instant the key was written at.
    let mut latest = 0u64;
    let name = algorithm.name();
    Box::new(move |op, now, cost| {
        let invalid = |_| format!("ratelab {name}: invalid arguments");
        // What the call reads: a key whose state can be forgotten
        // reads as a key never seen (it stays in Redis until a
        // write deletes it, or it expires).
        let held = algorithm.forgettable_at(&state, &ledger) > now;
        let (mut st, mut led, lat) = if held {
            (state.clone(), ledger.clone(), latest)
        } else {
            (algorithm.initial_state(), A::Ledger::default(), 0)
        };
        // Writes what the call leaves, decided at `at`, or deletes
        // the key when it can be forgotten then.
        let mut store = |st: A::State, led: A::Ledger, lat: u64, at: u64| {
            if algorithm.forgettable_at(&st, &led) <= at {
                state = algorithm.initial_state();
                (ledger, latest) = (A::Ledger::default(), 0);
            } else {
                state = st;
                (ledger, latest) = (led, lat.max(at));
            }
        };
        let (decision, stamp) = match op {
            Op::Check | Op::Peek => {
                let d = algorithm.decide(&mut st, now, cost).map_err(invalid)?;
                if op == Op::Check && d.allowed && cost > 0 {
                    let stamp = algorithm.stamp(&st, &led, now);
                    store(st, led, lat, now);
                    (d, stamp)
                } else {
                    // The sliding log's check prunes what left the
                    // window, whatever it decides.
                    if op == Op::Check && prunes {
                        store(st, led, lat, now);
                    }
                    (d, Stamp::default())
                }
            }
            Op::Settle { actual, stamp } => {
                let at = if debt { now.max(lat) } else { now };
                let settlement = Settlement {
                    stamp,
                    charged: cost,
                    actual,
                };
                let d = algorithm
                    .settle(&mut st, &mut led, at, settlement)
                    .map_err(invalid)?;
                // Past a ceiling: refused, nothing written.
                if past_a_ceiling(&algorithm, &st, &led) {
                    return Err(format!("ratelab {name}: out of range"));
                }
                store(st, led, lat, at);
                (d, Stamp::default())
            }
            Op::Reset => {
                if held {
                    algorithm.reset(&mut st, &mut led, now);
                    if past_a_ceiling(&algorithm, &st, &led) {
                        return Err(format!("ratelab {name}: out of range"));
                    }
                }
                let d = algorithm.decide(&mut st.clone(), now, 0).map_err(invalid)?;
                store(st, led, lat, now);
                (d, Stamp::default())
            }
        };
        let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap();
        Ok(vec![
            i64::from(decision.allowed),
            i64::try_from(decision.limit).unwrap(),
            i64::try_from(decision.remaining).unwrap(),
            micros(decision.retry_after()),
            micros(decision.reset_after()),
            micros(decision.delay()),
            i64::try_from(stamp.at).unwrap(),
            i64::try_from(stamp.mark).unwrap(),
        ])
    })
}

/// `reply` with an `out of range` error's key and detail cut off: the
/// in-memory runner knows neither.
pub fn without_detail(reply: Reply) -> Reply {
    reply.map_err(|e| match e.find(": out of range") {
        Some(at) => e[..at + ": out of range".len()].to_owned(),
        None => e,
    })
}

/// `protocol now cost slack deadline check params...` for one check, as
/// `ratelab-redis` sends them.
pub fn argv(now: &str, cost: u32, slack_ms: u64, deadline: &str, params: &[u64]) -> Vec<String> {
    argv_op("check", now, cost, slack_ms, deadline, params)
}

/// `protocol now cost slack deadline op params...` for one call of `op`
/// (`check`, `peek`, `settle:<actual>:<at>:<mark>`, `reset`).
pub fn argv_op(
    op: &str,
    now: &str,
    cost: u32,
    slack_ms: u64,
    deadline: &str,
    params: &[u64],
) -> Vec<String> {
    let mut argv = vec![
        ratelab_redis_module::PROTOCOL.to_string(),
        now.to_owned(),
        cost.to_string(),
        slack_ms.to_string(),
        deadline.to_owned(),
        op.to_owned(),
    ];
    argv.extend(params.iter().map(u64::to_string));
    argv
}

/// The module command for `key` and `argv`.
pub fn module_cmd(kind: AlgorithmKind, key: &str, argv: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd(&kind.command());
    cmd.arg(key).arg(argv);
    cmd
}

/// `EVALSHA` of the script for `key` and `argv`.
pub fn script_cmd(sha: &str, key: &str, argv: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(1).arg(key).arg(argv);
    cmd
}

/// Loads `kind`'s script, returns its SHA1.
pub fn load_script(connection: &mut redis::Connection, kind: AlgorithmKind) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(kind.script())
        .query(connection)
        .expect("the script loads")
}
