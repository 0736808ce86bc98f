//! Shared by the module's integration tests: the built module, servers that
//! load it, the Lua scripts it mirrors, and each algorithm's parameters.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::time::Duration;

use ratelab_core::{Algorithm, Quota};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_testkit::redis::RedisServer;
use ratelab_token_bucket::TokenBucket;

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

/// One algorithm as both sides run it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    FixedWindow,
    SlidingLog,
    SlidingCounter,
    LeakyMeter,
    LeakyQueue,
    TokenBucket,
    Gcra,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::FixedWindow,
        Kind::SlidingLog,
        Kind::SlidingCounter,
        Kind::LeakyMeter,
        Kind::LeakyQueue,
        Kind::TokenBucket,
        Kind::Gcra,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::FixedWindow => "fixed-window",
            Kind::SlidingLog => "sliding-log",
            Kind::SlidingCounter => "sliding-counter",
            Kind::LeakyMeter => "leaky-meter",
            Kind::LeakyQueue => "leaky-queue",
            Kind::TokenBucket => "token-bucket",
            Kind::Gcra => "gcra",
        }
    }

    /// The module's command.
    pub fn command(self) -> &'static str {
        ratelab_redis_module::command(self.name()).expect("every algorithm has a command")
    }

    /// The script's file in `lua/`.
    pub fn script_file(self) -> &'static str {
        match self {
            Kind::FixedWindow => "fixed_window.lua",
            Kind::SlidingLog => "sliding_log.lua",
            Kind::SlidingCounter => "sliding_counter.lua",
            Kind::LeakyMeter => "leaky_meter.lua",
            Kind::LeakyQueue => "leaky_queue.lua",
            Kind::TokenBucket => "token_bucket.lua",
            Kind::Gcra => "gcra.lua",
        }
    }

    /// The script as `ratelab-redis` sends it: the prologue, then the
    /// algorithm's file.
    pub fn script(self) -> String {
        let lua = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lua");
        let read = |file: &str| {
            std::fs::read_to_string(lua.join(file))
                .unwrap_or_else(|e| panic!("cannot read lua/{file}: {e}"))
        };
        read("prologue.lua") + &read(self.script_file())
    }

    /// The script's parameters for `quota`, as `ratelab-redis` computes them
    /// (`RedisAlgorithm::script_params`).
    pub fn params(self, quota: Quota) -> Vec<u64> {
        match self {
            Kind::FixedWindow => {
                let a = FixedWindow::new(quota);
                vec![a.window_micros(), a.capacity()]
            }
            Kind::SlidingLog => {
                let a = SlidingLog::new(quota);
                vec![a.window_micros(), a.capacity()]
            }
            Kind::SlidingCounter => {
                let a = SlidingCounter::new(quota);
                vec![a.window_micros(), a.capacity(), a.step_micros(), a.steps()]
            }
            Kind::LeakyMeter | Kind::LeakyQueue => vec![
                quota.emission_interval_micros(),
                quota.burst_tolerance_micros(),
                u64::from(quota.burst()),
            ],
            Kind::TokenBucket => {
                let a = TokenBucket::new(quota);
                vec![a.interval_micros(), a.capacity()]
            }
            Kind::Gcra => {
                let a = Gcra::new(quota);
                vec![a.interval_micros(), a.tolerance_micros(), a.capacity()]
            }
        }
    }
}

/// What a call does, as the scripts and the module take it (a reset is a
/// `DEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Check,
    Peek,
    /// A refund of an admission that still weighs this many µs.
    Refund(u64),
    Reset,
}

impl Op {
    /// `ARGV[6]`; `None` for a reset, which is no script call.
    pub fn arg(self) -> Option<String> {
        match self {
            Op::Check => Some("check".to_owned()),
            Op::Peek => Some("peek".to_owned()),
            Op::Refund(owed) => Some(format!("refund:{owed}")),
            Op::Reset => None,
        }
    }
}

/// A limiter in memory: the algorithm crate's `decide` (and `refund`) on a
/// local state, answering in the scripts' reply shape.
pub struct Memory {
    run: Box<dyn FnMut(Op, u64, u32) -> Reply>,
}

impl Memory {
    pub fn new(kind: Kind, quota: Quota) -> Self {
        fn boxed<A: Algorithm>(algorithm: A) -> Box<dyn FnMut(Op, u64, u32) -> Reply> {
            let mut state = algorithm.initial_state();
            let name = algorithm.name();
            Box::new(move |op, now, cost| {
                let d = match op {
                    Op::Check => algorithm.decide(&mut state, now, cost),
                    Op::Peek => algorithm.decide(&mut state.clone(), now, cost),
                    Op::Refund(owed) => algorithm.refund(&mut state, now, cost, owed),
                    Op::Reset => {
                        state = algorithm.initial_state();
                        return Ok(Vec::new());
                    }
                }
                .map_err(|_| format!("ratelab {name}: invalid arguments"))?;
                let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap();
                Ok(vec![
                    i64::from(d.allowed),
                    i64::try_from(d.limit).unwrap(),
                    i64::try_from(d.remaining).unwrap(),
                    micros(d.retry_after()),
                    micros(d.reset_after()),
                    micros(d.delay()),
                ])
            })
        }
        let run = match kind {
            Kind::FixedWindow => boxed(FixedWindow::new(quota)),
            Kind::SlidingLog => boxed(SlidingLog::new(quota)),
            Kind::SlidingCounter => boxed(SlidingCounter::new(quota)),
            Kind::LeakyMeter => boxed(LeakyMeter::new(quota)),
            Kind::LeakyQueue => boxed(LeakyQueue::new(quota)),
            Kind::TokenBucket => boxed(TokenBucket::new(quota)),
            Kind::Gcra => boxed(Gcra::new(quota)),
        };
        Memory { run }
    }

    pub fn decide(&mut self, now: u64, cost: u32) -> Reply {
        (self.run)(Op::Check, now, cost)
    }

    /// `op` at `now`: a reset answers an empty reply.
    pub fn run(&mut self, op: Op, now: u64, cost: u32) -> Reply {
        (self.run)(op, now, cost)
    }
}

/// `protocol now cost slack deadline check params...` for one check, as
/// `ratelab-redis` sends them.
pub fn argv(now: &str, cost: u32, slack_ms: u64, deadline: &str, params: &[u64]) -> Vec<String> {
    argv_op("check", now, cost, slack_ms, deadline, params)
}

/// `protocol now cost slack deadline op params...` for one call of `op`
/// (`check`, `peek`, `refund:<owed>`).
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
pub fn module_cmd(kind: Kind, key: &str, argv: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd(kind.command());
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
pub fn load_script(connection: &mut redis::Connection, kind: Kind) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(kind.script())
        .query(connection)
        .expect("the script loads")
}
