//! The native module beside the Lua scripts and redis-cell, on one
//! `redis-server` that loads both modules: every algorithm through
//! `RATELAB.<ALGORITHM>` (backend `redis-module`) and through `EVALSHA` of
//! its script (`redis-lua`), and GCRA through redis-cell's `CL.THROTTLE`
//! (`redis-cell`), on one hot key and on 100,000 keys.
//!
//! Every side runs the same way: raw commands through the same redis-rs
//! client (`ratelab::redis::Connection`, one multiplexed connection), 64
//! tasks each with one command in flight, the server clock, cost 1, a
//! quota that admits every check (checked before measuring). redis-cell
//! runs the GCRA quota itself: `CL.THROTTLE key burst-1 limit period 1`.
//!
//! Criterion groups (function = `<algorithm>/<backend>`):
//! `module-throughput-hot`, `module-throughput-100k` (checks per second);
//! measured by hand over the same runs: `module-server-hot`,
//! `module-server-100k` (server µs per call, `INFO commandstats` after
//! `CONFIG RESETSTAT`).
//!
//! Then module GCRA and redis-cell once more, in paired rounds
//! (`module-paired-hot`, `module-paired-100k`): both sides' keys on the
//! server, each round runs one side then the other (the order alternating),
//! the same number of checks each, and the medians over the rounds of each
//! side's server µs per call and checks per second are its figures. Two
//! sides measured minutes apart can differ by a fifth on this machine for
//! no reason of their own; paired, the drift falls on both.
//!
//! Keys live through the run: on 100,000 keys each key's first check
//! charges ten minutes of the keyed quota (a key that expired between two of
//! its checks would be written afresh, not updated). The refusal path, in
//! paired rounds too (`module-paired-refused-hot`, `module-paired-refused-100k`):
//! module GCRA and redis-cell on one per hour, burst 1, each key spent by its
//! first check. And, counted by callgrind on a `redis-server` under valgrind
//! (`module-instructions-admitted`, `module-instructions-refused`, one key):
//! the instructions Redis runs inside `processCommand` for one call, 2N calls
//! less N, over N. `MEMORY USAGE` of a GCRA key by name length, module and
//! redis-cell (`module-memory-name-<n>`).
//!
//! A missing `redis-server` or module fails the bench. A redis-cell that
//! cannot be built is said loudly (stderr, and `redis_cell` in the rows
//! file's facts) and its rows are missing; the rest still runs.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use ratelab::redis::{Connection, DEFAULT_PREFIX, Op, Script, ScriptArgs, redis_key};
use ratelab::toolkit::RemoteForm;
use ratelab::{AlgorithmKind, KnownAlgorithm, Quota};
use ratelab_benches::algorithms::{admitted_share, assert_mostly_admits, quota};
use ratelab_benches::redis_tools::parse_commandstats;
use ratelab_benches::{
    Metric, Mode, Recorder, Row, Setting, Visit, each_algorithm_on_redis, median,
};
use ratelab_testkit::redis::{RedisServer, module_path};
use ratelab_testkit::redis_cell;
use tokio::runtime::Runtime;

/// Concurrent tasks sharing the connection: requests in flight.
const TASKS: usize = 64;

/// The backends, as the rows name them.
const MODULE: &str = "redis-module";
const LUA: &str = "redis-lua";
const CELL: &str = "redis-cell";

/// Every group this bench fills, criterion's and by hand.
const GROUPS: [&str; 10] = [
    "module-throughput-hot",
    "module-throughput-100k",
    "module-server-hot",
    "module-server-100k",
    "module-paired-hot",
    "module-paired-100k",
    "module-paired-refused-hot",
    "module-paired-refused-100k",
    INSTRUCTIONS_ADMITTED,
    INSTRUCTIONS_REFUSED,
];

/// Instructions per call inside Redis's `processCommand`, module GCRA and
/// `CL.THROTTLE` on one key: admitted, and refused.
const INSTRUCTIONS_ADMITTED: &str = "module-instructions-admitted";
const INSTRUCTIONS_REFUSED: &str = "module-instructions-refused";

fn main() {
    let mode = Mode::from_args();
    if !GROUPS
        .iter()
        .any(|g| mode.wants_any(g, ratelab_benches::NAMES))
        && !mode.wants(MEMORY)
    {
        // Filtered out: no server to start.
        return;
    }
    let mut c = ratelab_benches::criterion(&mode);
    let mut rec = Recorder::new("module", &mode);
    let module = module_path();
    let cell = redis_cell::library();
    let mut args = vec!["--loadmodule".to_owned(), path_arg(module)];
    match &cell {
        Ok(library) => {
            args.extend(["--loadmodule".to_owned(), path_arg(library)]);
            rec.meta("redis_cell", redis_cell::version());
        }
        Err(why) => {
            eprintln!(
                "\n*** module bench: redis-cell is MISSING, its rows will be missing: {why}\n"
            );
            rec.meta("redis_cell", format!("missing: {why}"));
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = RedisServer::start_with(&args);
    let info = server.command(&["INFO", "server"]).expect("INFO server");
    if let Some(version) = info.lines().find_map(|l| l.strip_prefix("redis_version:")) {
        rec.meta("redis_version", version.trim());
    }
    assert_eq!(
        server.command(&["RATELAB.PROTOCOL"]),
        Ok(ratelab::redis::PROTOCOL_VERSION.to_string()),
        "the ratelab module did not load from {}",
        module.display()
    );
    // One thread for the client; the server gets the other core.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let connection = rt
        .block_on(Connection::single(&server.url()))
        .expect("connect to the Redis node");
    let many = mode.size(100_000, 100_000, 1_000);
    for (setting, keys, label) in [
        (Setting::OneKey, 1, "hot"),
        (Setting::ManyKeys, many, "100k"),
    ] {
        each_algorithm_on_redis(
            setting,
            &mut Bench {
                c: &mut c,
                rec: &mut rec,
                mode: &mode,
                rt: &rt,
                server: &server,
                connection: connection.clone(),
                setting,
                keys,
                label,
                cell: cell.is_ok(),
            },
        );
    }
    if cell.is_ok() && !mode.criterion_only() && mode.wants(MEMORY) {
        memory_by_name_length(&mut rec, &rt, &server, &connection);
    }
    drop(server);
    if let Ok(library) = &cell
        && mode.is_bench()
        && [INSTRUCTIONS_ADMITTED, INSTRUCTIONS_REFUSED]
            .iter()
            .any(|g| mode.wants(g))
    {
        instructions_inside_redis(&mut rec, module, library);
    }
    c.final_summary();
    rec.finish();
}

/// The group prefix of `MEMORY USAGE` by key name length.
const MEMORY: &str = "module-memory";

/// Key name lengths, bytes, at which `MEMORY USAGE` is compared.
const NAME_LENGTHS: [usize; 6] = [4, 8, 16, 32, 64, 128];

/// `MEMORY USAGE` of a GCRA key the module wrote and of one redis-cell
/// wrote, under names of the same length (`module-memory-name-<length>`,
/// bytes): each key checked four times (stored, then updated in place),
/// on the keyed quota.
fn memory_by_name_length(
    rec: &mut Recorder,
    rt: &Runtime,
    server: &RedisServer,
    connection: &Connection,
) {
    let quota = quota(Setting::ManyKeys, AlgorithmKind::Gcra);
    let gcra = ratelab::Gcra::new(quota);
    server.command(&["FLUSHALL"]).expect("FLUSHALL");
    for length in NAME_LENGTHS {
        let name = |first: char| {
            let mut name = String::from(first);
            name.push_str(&"k".repeat(length - 1));
            name
        };
        let (ours, theirs) = (name('m'), name('c'));
        let module = module_check(&gcra, &ours);
        let mut cell = redis::cmd("CL.THROTTLE");
        cell.arg(&theirs)
            .arg(quota.burst() - 1)
            .arg(quota.limit())
            .arg(quota.period().as_secs())
            .arg(1);
        for _ in 0..4 {
            let reply: Vec<i64> = rt.block_on(connection.query(&module)).expect("a check");
            assert_eq!(reply.first(), Some(&1), "the module admits");
            let reply: Vec<i64> = rt.block_on(connection.query(&cell)).expect("a check");
            assert_eq!(reply.first(), Some(&0), "redis-cell admits");
        }
        let group = format!("{MEMORY}-name-{length}");
        for (key, backend) in [(&ours, MODULE), (&theirs, CELL)] {
            let bytes: f64 = server
                .command(&["MEMORY", "USAGE", key])
                .expect("MEMORY USAGE")
                .trim()
                .parse()
                .expect("MEMORY USAGE answers bytes");
            eprintln!("{group}/gcra/{backend}: {bytes} bytes");
            rec.push(Row::new(
                &group,
                "gcra",
                backend,
                Metric::BytesPerKey,
                bytes,
            ));
        }
    }
    server.command(&["FLUSHALL"]).expect("FLUSHALL");
}

/// Counts, with callgrind, the instructions Redis runs inside
/// `processCommand` for one call (module GCRA and `CL.THROTTLE`, one hot
/// key, admitted and refused): a `redis-server` loading both modules runs
/// under `valgrind --tool=callgrind --collect-atstart=no
/// --toggle-collect=processCommand`; for each case, after a warm-up,
/// `callgrind_control` zeroes the counts, N calls go through one connection
/// and the counts are dumped, then the same with 2N; the figure is the
/// difference over N. Only the server's work on the command is counted
/// (not reading the request or writing the reply to the socket), exactly,
/// whatever the machine's load. Without valgrind the bench says so and
/// records nothing here.
fn instructions_inside_redis(rec: &mut Recorder, module: &std::path::Path, cell: &std::path::Path) {
    let calls: u64 = 2_000;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = std::env::temp_dir().join(format!(
        "ratelab-module-instructions-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    let out = dir.join("redis.callgrind");
    let spawned = std::process::Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--collect-atstart=no")
        .arg("--toggle-collect=processCommand")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--loadmodule")
        .arg(module)
        .arg("--loadmodule")
        .arg(cell)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut valgrind) = spawned else {
        eprintln!(
            "\n*** module bench: valgrind did not start: no instruction counts inside Redis\n"
        );
        return;
    };
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("a URL");
    let started = Instant::now();
    let mut connection = loop {
        if let Ok(mut c) = client.get_connection()
            && redis::cmd("PING").query::<String>(&mut c).is_ok()
        {
            break c;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = valgrind.kill();
            panic!("redis-server under valgrind did not answer within 2 minutes");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut counter = Counter {
        pid: valgrind.id().to_string(),
        out: out.clone(),
        dumps: 0,
    };
    let admitting = quota(Setting::OneKey, AlgorithmKind::Gcra);
    let refusing = Quota::per_hour(1).expect("a valid quota");
    for (group, quota) in [
        (INSTRUCTIONS_ADMITTED, admitting),
        (INSTRUCTIONS_REFUSED, refusing),
    ] {
        let gcra = ratelab::Gcra::new(quota);
        let sides = [
            (MODULE, module_check(&gcra, "counted:module")),
            (
                CELL,
                cell_commands_named(&quota, 1, 1, "counted:cell").remove(0),
            ),
        ];
        for (backend, command) in sides {
            // Warm: the key exists (and, refusing, is spent).
            for _ in 0..200 {
                let _: Vec<i64> = command.query(&mut connection).expect("a call");
            }
            let reply: Vec<i64> = command.query(&mut connection).expect("a call");
            let admitted = if backend == CELL {
                reply.first() == Some(&0)
            } else {
                reply.first() == Some(&1)
            };
            assert_eq!(
                admitted,
                group == INSTRUCTIONS_ADMITTED,
                "{group}/{backend}: {reply:?}"
            );
            let single = counter.count(&mut connection, &command, calls);
            let double = counter.count(&mut connection, &command, 2 * calls);
            #[allow(clippy::cast_precision_loss)]
            let per_call = (double - single) / calls as f64;
            eprintln!("{group}/gcra/{backend}: {per_call:.0} instructions inside processCommand");
            rec.push(Row::new(
                group,
                "gcra",
                backend,
                Metric::InstructionsPerCheck,
                per_call,
            ));
        }
    }
    let _: Result<(), _> = redis::cmd("SHUTDOWN").arg("NOSAVE").query(&mut connection);
    let _ = valgrind.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The callgrind of a `redis-server`, driven by `callgrind_control`.
struct Counter {
    pid: String,
    /// `--callgrind-out-file`: the dumps are `<out>.1`, `<out>.2`, ...
    out: std::path::PathBuf,
    dumps: usize,
}

impl Counter {
    fn control(&self, what: &str) {
        let status = std::process::Command::new("callgrind_control")
            .args([what, &self.pid])
            .stdout(std::process::Stdio::null())
            .status()
            .expect("callgrind_control runs");
        assert!(status.success(), "callgrind_control {what} failed");
    }

    /// The instructions `n` calls of `command` cost the server, counted
    /// from zero.
    fn count(&mut self, connection: &mut redis::Connection, command: &redis::Cmd, n: u64) -> f64 {
        self.control("-z");
        for _ in 0..n {
            let _: Vec<i64> = command.query(connection).expect("a call");
        }
        self.control("-d");
        self.dumps += 1;
        let path = std::path::PathBuf::from(format!("{}.{}", self.out.display(), self.dumps));
        // The dump is written by the server's process: wait for it whole.
        let started = Instant::now();
        loop {
            if let Some(total) = std::fs::read_to_string(&path)
                .ok()
                .as_deref()
                .and_then(callgrind_total)
            {
                return total;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no dump at {}",
                path.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The instructions a callgrind dump counted (its `totals:` line), once the
/// dump is whole.
fn callgrind_total(dump: &str) -> Option<f64> {
    dump.lines()
        .find_map(|l| l.strip_prefix("totals:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Each key's first check charges this many units of the keyed quota (one
/// a second): ten minutes, longer than the whole run.
const FILL_COST: u32 = 600;

/// redis-cell's checks on `quota`, one per key (`cell:<i>`), at `cost`:
/// `CL.THROTTLE key max_burst count period cost`, its burst `max_burst + 1`
/// and its rate `count` per `period` seconds.
fn cell_commands(quota: &Quota, keys: usize, cost: u32) -> Vec<redis::Cmd> {
    cell_commands_named(quota, keys, cost, "cell")
}

/// [`cell_commands`] on keys `<prefix>:<i>`.
fn cell_commands_named(quota: &Quota, keys: usize, cost: u32, prefix: &str) -> Vec<redis::Cmd> {
    let period = quota.period();
    assert_eq!(
        period.subsec_nanos(),
        0,
        "redis-cell takes whole seconds: {period:?}"
    );
    (0..keys)
        .map(|i| {
            let mut cmd = redis::cmd("CL.THROTTLE");
            cmd.arg(format!("{prefix}:{i}"))
                .arg(quota.burst() - 1)
                .arg(quota.limit())
                .arg(period.as_secs())
                .arg(cost);
            cmd
        })
        .collect()
}

/// The module's check of `algorithm` (cost 1, the server's clock) on `key`.
fn module_check<A: RemoteForm>(algorithm: &A, key: &str) -> redis::Cmd {
    let args = ScriptArgs::call(None, 1, 0, None, Op::Check, &algorithm.params());
    let mut cmd = redis::cmd(&algorithm.module_command());
    cmd.arg(key);
    for arg in args.iter() {
        cmd.arg(arg);
    }
    cmd
}

fn path_arg(path: &std::path::Path) -> String {
    path.to_str()
        .unwrap_or_else(|| panic!("{} is not UTF-8", path.display()))
        .to_owned()
}

struct Bench<'a> {
    c: &'a mut Criterion,
    rec: &'a mut Recorder,
    mode: &'a Mode,
    rt: &'a Runtime,
    server: &'a RedisServer,
    connection: Connection,
    setting: Setting,
    /// How many keys the checks go round.
    keys: usize,
    /// `hot` or `100k`, in the group names.
    label: &'static str,
    /// Whether redis-cell is loaded.
    cell: bool,
}

/// One side's commands, one per key, and the command `INFO commandstats`
/// names them by.
struct Side {
    backend: &'static str,
    stat: String,
    commands: Arc<Vec<redis::Cmd>>,
    /// Each key's first check, before measuring: a cost that keeps the key
    /// alive longer than the run (a key that expired between two of its
    /// checks would be written afresh, not updated).
    fill: Arc<Vec<redis::Cmd>>,
    /// Whether a reply admits: ratelab's first field is 1, redis-cell's 0.
    admitted: fn(&[i64]) -> bool,
}

/// This thread's CPU time so far, µs, where the system tells it
/// (`/proc/thread-self/schedstat` on Linux): the client's, as its runtime
/// runs on this thread alone.
fn client_cpu_usec() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: f64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(nanos / 1e3)
}

/// `checks` commands from [`TASKS`] tasks, over the commands in turn; the
/// time they took.
async fn concurrent(
    connection: &Connection,
    commands: &Arc<Vec<redis::Cmd>>,
    checks: u64,
) -> Duration {
    let checks = usize::try_from(checks).expect("checks fit in memory");
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let connection = connection.clone();
            let commands = Arc::clone(commands);
            let mine = checks / TASKS + usize::from(task < checks % TASKS);
            tokio::spawn(async move {
                for i in 0..mine {
                    let command = &commands[(task + i * TASKS) % commands.len()];
                    let reply: Vec<i64> = connection.query(command).await.expect("a check");
                    black_box(reply);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a bench task panicked");
    }
    started.elapsed()
}

impl Bench<'_> {
    fn throughput_group(&self) -> String {
        format!("module-throughput-{}", self.label)
    }

    fn server_group(&self) -> String {
        format!("module-server-{}", self.label)
    }

    fn wants(&self, algorithm: &str, backend: &str) -> bool {
        !self.mode.criterion_only()
            && [self.throughput_group(), self.server_group()]
                .iter()
                .any(|g| self.mode.wants(&format!("{g}/{algorithm}/{backend}")))
    }

    /// The module's and the script's commands for `algorithm`, on keys of
    /// their own.
    fn ratelab_sides<A: RemoteForm>(&self, algorithm: &A) -> [Side; 2] {
        let [module, lua] = self.ratelab_commands(algorithm, 1);
        let [module_fill, lua_fill] = self.ratelab_commands(algorithm, self.fill_cost());
        let command = algorithm.module_command();
        [
            Side {
                backend: MODULE,
                stat: command.to_ascii_lowercase(),
                commands: Arc::new(module),
                fill: Arc::new(module_fill),
                admitted: |reply| reply.first() == Some(&1),
            },
            Side {
                backend: LUA,
                stat: "evalsha".to_owned(),
                commands: Arc::new(lua),
                fill: Arc::new(lua_fill),
                admitted: |reply| reply.first() == Some(&1),
            },
        ]
    }

    /// The cost each key is first charged, before measuring: many keys are
    /// charged ten minutes of the keyed quota (1/s), so that none is back
    /// to full capacity (and expires) between two of its checks; one key
    /// takes a unit, as it is checked without pause.
    fn fill_cost(&self) -> u32 {
        match self.setting {
            Setting::OneKey => 1,
            Setting::ManyKeys => FILL_COST,
        }
    }

    /// The module's and the script's commands for `algorithm` at `cost`,
    /// one per key, on keys of their own.
    fn ratelab_commands<A: RemoteForm>(&self, algorithm: &A, cost: u32) -> [Vec<redis::Cmd>; 2] {
        let args = ScriptArgs::call(None, cost, 0, None, Op::Check, &algorithm.params());
        let script = Script::new(&A::script());
        let command = algorithm.module_command();
        let key = |side: &str, i: usize| {
            redis_key(
                DEFAULT_PREFIX,
                format!("{side}:{i}").as_bytes(),
                algorithm.key_suffix(),
            )
        };
        let module = (0..self.keys)
            .map(|i| {
                let mut cmd = redis::cmd(&command);
                cmd.arg(key("module", i));
                for arg in args.iter() {
                    cmd.arg(arg);
                }
                cmd
            })
            .collect();
        let lua = (0..self.keys)
            .map(|i| {
                let mut cmd = redis::cmd("EVALSHA");
                cmd.arg(script.sha()).arg(1).arg(key("lua", i));
                for arg in args.iter() {
                    cmd.arg(arg);
                }
                cmd
            })
            .collect();
        [module, lua]
    }

    /// redis-cell's command on the GCRA quota of this setting:
    /// `CL.THROTTLE key max_burst count period 1`, its burst `max_burst + 1`
    /// and its rate `count` per `period` seconds.
    fn cell_side(&self) -> Side {
        let quota = quota(self.setting, AlgorithmKind::Gcra);
        Side {
            backend: CELL,
            stat: "cl.throttle".to_owned(),
            commands: Arc::new(cell_commands(&quota, self.keys, 1)),
            fill: Arc::new(cell_commands(&quota, self.keys, self.fill_cost())),
            admitted: |reply| reply.first() == Some(&0),
        }
    }

    /// Module GCRA and redis-cell on a quota that refuses every check after
    /// each key's first (one per hour, burst 1): the refusal path, the one
    /// a limiter takes for a client over its quota. Each key's first check
    /// (the fill) admits, and keeps the key for an hour.
    fn refusal_sides(&self) -> [Side; 2] {
        let quota = Quota::per_hour(1).expect("a valid quota");
        let gcra = ratelab::Gcra::new(quota);
        let module: Vec<redis::Cmd> = (0..self.keys)
            .map(|i| module_check(&gcra, &format!("refused:module:{i}")))
            .collect();
        let module = Arc::new(module);
        let cell = Arc::new(cell_commands_named(&quota, self.keys, 1, "refused:cell"));
        [
            Side {
                backend: MODULE,
                stat: gcra.module_command().to_ascii_lowercase(),
                commands: Arc::clone(&module),
                fill: module,
                admitted: |reply| reply.first() == Some(&1),
            },
            Side {
                backend: CELL,
                stat: "cl.throttle".to_owned(),
                commands: Arc::clone(&cell),
                fill: cell,
                admitted: |reply| reply.first() == Some(&0),
            },
        ]
    }

    /// Checks every key of `side` once: the keys exist before measuring,
    /// and the quota is seen to admit.
    fn check_every_key(&self, what: &str, side: &Side) {
        let mut next = 0;
        let share = admitted_share(u32::try_from(self.keys).unwrap_or(u32::MAX), || {
            let command = &side.fill[next % side.fill.len()];
            next += 1;
            self.rt
                .block_on(self.connection.query::<Vec<i64>>(command))
                .ok()
                .map(|reply| (side.admitted)(&reply))
        });
        assert_mostly_admits(what, share);
    }

    /// The server's µs per call of `side`'s command since the last
    /// `CONFIG RESETSTAT`.
    fn usec_per_call(&self, name: &str, side: &Side) -> f64 {
        let info = self
            .server
            .command(&["INFO", "commandstats"])
            .expect("INFO commandstats");
        parse_commandstats(&info)
            .get(&side.stat)
            .copied()
            .filter(|s| s.calls > 0)
            .unwrap_or_else(|| panic!("{name}: no `{}` in INFO commandstats: {info}", side.stat))
            .usec_per_call
    }

    /// The server's main thread's CPU time so far, µs (`INFO cpu`).
    fn server_cpu_usec(&self) -> Option<f64> {
        let info = self.server.command(&["INFO", "cpu"]).ok()?;
        let field = |key: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        Some((field("used_cpu_sys_main_thread")? + field("used_cpu_user_main_thread")?) * 1e6)
    }

    fn paired_group(&self) -> String {
        format!("module-paired-{}", self.label)
    }

    fn refused_group(&self) -> String {
        format!("module-paired-refused-{}", self.label)
    }

    /// Checks every key of both sides once, then runs paired rounds (see
    /// the crate docs) and records each side's medians.
    fn paired(&mut self, group: &str, name: &str, a: &Side, b: &Side) {
        let rounds = self.mode.size(16, 6, 2);
        let checks = self.mode.size(60_000, 20_000, 500);
        let rt = self.rt;
        let connection = &self.connection;
        self.server.command(&["FLUSHALL"]).expect("FLUSHALL");
        for side in [a, b] {
            self.check_every_key(&format!("{name} on {}, paired", side.backend), side);
        }
        let mut usec: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut per_sec: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        // CPU µs per check, server and client: which one the throughput of
        // one connection waits on (time on a CPU, which the machine's load
        // stretches less than the time the rounds take).
        let mut server_cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut client_cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        #[allow(clippy::cast_precision_loss)]
        let per_check =
            |before: Option<f64>, after: Option<f64>| Some((after? - before?) / checks as f64);
        for round in 0..rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let side = [a, b][i];
                self.server
                    .command(&["CONFIG", "RESETSTAT"])
                    .expect("CONFIG RESETSTAT");
                let (server_before, client_before) = (self.server_cpu_usec(), client_cpu_usec());
                let took = rt.block_on(concurrent(connection, &side.commands, checks));
                let (server_after, client_after) = (self.server_cpu_usec(), client_cpu_usec());
                usec[i].push(self.usec_per_call(name, side));
                #[allow(clippy::cast_precision_loss)]
                per_sec[i].push(checks as f64 / took.as_secs_f64());
                server_cpu[i].extend(per_check(server_before, server_after));
                client_cpu[i].extend(per_check(client_before, client_after));
            }
        }
        for (i, side) in [a, b].into_iter().enumerate() {
            if server_cpu[i].is_empty() || client_cpu[i].is_empty() {
                continue;
            }
            eprintln!(
                "{}/{name}/{}: CPU µs per check, median of {rounds} rounds: server {:.2} (main thread), client {:.2} (its one thread)",
                group,
                side.backend,
                median(&mut server_cpu[i]),
                median(&mut client_cpu[i]),
            );
        }
        // The spread, round by round: the first side's server time and
        // throughput over the second's in the same round.
        for (what, figures) in [("server time", &usec), ("throughput", &per_sec)] {
            let mut ratios: Vec<f64> = figures[0]
                .iter()
                .zip(&figures[1])
                .map(|(first, second)| first / second)
                .collect();
            ratios.sort_by(f64::total_cmp);
            let quartile = |q: usize| ratios[(ratios.len() - 1) * q / 4];
            eprintln!(
                "{}/{name}: {what} {} / {} per round: median {:.3}, quartiles {:.3} to {:.3}, range {:.3} to {:.3}",
                group,
                a.backend,
                b.backend,
                median(&mut ratios.clone()),
                quartile(1),
                quartile(3),
                quartile(0),
                quartile(4),
            );
        }
        for (i, side) in [a, b].into_iter().enumerate() {
            let usec = median(&mut usec[i]);
            let per_sec = median(&mut per_sec[i]);
            eprintln!(
                "{}/{name}/{}: median of {rounds} rounds of {checks}: {usec:.2} µs per call, {per_sec:.0} checks/s",
                group, side.backend
            );
            self.rec.push(Row::new(
                group,
                name,
                side.backend,
                Metric::UsecPerCall,
                usec,
            ));
            self.rec.push(Row::new(
                group,
                name,
                side.backend,
                Metric::ChecksPerSec,
                per_sec,
            ));
        }
    }

    /// Empties the server, checks every key once (the keys exist before
    /// measuring, and the quota is seen to admit), then measures `side`'s throughput and the
    /// server's time per call over the same run.
    fn measure(&mut self, name: &str, side: &Side) {
        let rt = self.rt;
        let connection = &self.connection;
        // Each side runs on a server holding its own keys only: what earlier
        // runs left (a hot log of millions of units, 100k keys that live for
        // days) would otherwise weigh on whichever side comes later.
        self.server.command(&["FLUSHALL"]).expect("FLUSHALL");
        self.check_every_key(&format!("{name} on {}", side.backend), side);

        self.server
            .command(&["CONFIG", "RESETSTAT"])
            .expect("CONFIG RESETSTAT");
        let group_name = self.throughput_group();
        let mut group = self.c.benchmark_group(&group_name);
        group.throughput(Throughput::Elements(1));
        let commands = &side.commands;
        group.bench_function(BenchmarkId::new(name, side.backend), |b| {
            b.to_async(rt).iter_custom(|checks| async move {
                concurrent(connection, commands, checks).await
            });
        });
        group.finish();
        self.rec.criterion(
            &group_name,
            &format!("{name}/{}", side.backend),
            (name, side.backend),
            Metric::ChecksPerSec,
            1.0,
        );
        let usec = self.usec_per_call(name, side);
        self.rec.push(Row::new(
            &self.server_group(),
            name,
            side.backend,
            Metric::UsecPerCall,
            usec,
        ));
    }
}

impl Visit for Bench<'_> {
    fn visit<A: KnownAlgorithm>(&mut self, algorithm: A) {
        let name = algorithm.name();
        let rt = self.rt;
        rt.block_on(
            self.connection
                .query::<String>(redis::cmd("SCRIPT").arg("LOAD").arg(A::script())),
        )
        .expect("SCRIPT LOAD");
        let mut sides: Vec<Side> = self.ratelab_sides(&algorithm).into();
        if name == AlgorithmKind::Gcra.name() && self.cell {
            sides.push(self.cell_side());
        }
        for side in &sides {
            if self.wants(name, side.backend) {
                self.measure(name, side);
            }
        }
        if let [module, _, cell] = sides.as_slice()
            && !self.mode.criterion_only()
        {
            let group = self.paired_group();
            if self.mode.wants(&format!("{group}/{name}")) {
                self.paired(&group, name, module, cell);
            }
            let group = self.refused_group();
            if self.mode.wants(&format!("{group}/{name}")) {
                let [module, cell] = self.refusal_sides();
                self.server.command(&["FLUSHALL"]).expect("FLUSHALL");
                self.paired(&group, name, &module, &cell);
            }
        }
        // The next algorithm starts on an empty server.
        self.server.command(&["FLUSHALL"]).expect("FLUSHALL");
    }
}
