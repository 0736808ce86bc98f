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
//! A missing `redis-server` or module fails the bench. A redis-cell that
//! cannot be built is said loudly (stderr, and `redis_cell` in the rows
//! file's facts) and its rows are missing; the rest still runs.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use ratelab::redis::{Connection, DEFAULT_PREFIX, Op, Script, ScriptArgs, redis_key};
use ratelab::toolkit::RemoteForm;
use ratelab::{AlgorithmKind, KnownAlgorithm};
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
const GROUPS: [&str; 6] = [
    "module-throughput-hot",
    "module-throughput-100k",
    "module-server-hot",
    "module-server-100k",
    "module-paired-hot",
    "module-paired-100k",
];

fn main() {
    let mode = Mode::from_args();
    if !GROUPS
        .iter()
        .any(|g| mode.wants_any(g, ratelab_benches::NAMES))
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
    c.final_summary();
    rec.finish();
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
        let args = ScriptArgs::call(None, 1, 0, None, Op::Check, &algorithm.params());
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
        [
            Side {
                backend: MODULE,
                stat: command.to_ascii_lowercase(),
                commands: Arc::new(module),
                admitted: |reply| reply.first() == Some(&1),
            },
            Side {
                backend: LUA,
                stat: "evalsha".to_owned(),
                commands: Arc::new(lua),
                admitted: |reply| reply.first() == Some(&1),
            },
        ]
    }

    /// redis-cell's command on the GCRA quota of this setting:
    /// `CL.THROTTLE key max_burst count period 1`, its burst `max_burst + 1`
    /// and its rate `count` per `period` seconds.
    fn cell_side(&self) -> Side {
        let quota = quota(self.setting, AlgorithmKind::Gcra);
        let period = quota.period();
        assert_eq!(
            period.subsec_nanos(),
            0,
            "redis-cell takes whole seconds: {period:?}"
        );
        let commands = (0..self.keys)
            .map(|i| {
                let mut cmd = redis::cmd("CL.THROTTLE");
                cmd.arg(format!("cell:{i}"))
                    .arg(quota.burst() - 1)
                    .arg(quota.limit())
                    .arg(period.as_secs())
                    .arg(1);
                cmd
            })
            .collect();
        Side {
            backend: CELL,
            stat: "cl.throttle".to_owned(),
            commands: Arc::new(commands),
            admitted: |reply| reply.first() == Some(&0),
        }
    }

    /// Checks every key of `side` once: the keys exist before measuring,
    /// and the quota is seen to admit.
    fn check_every_key(&self, what: &str, side: &Side) {
        let mut next = 0;
        let share = admitted_share(u32::try_from(self.keys).unwrap_or(u32::MAX), || {
            let command = &side.commands[next % side.commands.len()];
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

    /// Checks every key of both sides once, then runs paired rounds (see
    /// the crate docs) and records each side's medians.
    fn paired(&mut self, name: &str, a: &Side, b: &Side) {
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
                self.paired_group(),
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
                self.paired_group(),
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
                self.paired_group(),
                side.backend
            );
            let group = self.paired_group();
            self.rec.push(Row::new(
                &group,
                name,
                side.backend,
                Metric::UsecPerCall,
                usec,
            ));
            self.rec.push(Row::new(
                &group,
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
            && self.mode.wants(&format!("{}/{name}", self.paired_group()))
        {
            self.paired(name, module, cell);
        }
        // The next algorithm starts on an empty server.
        self.server.command(&["FLUSHALL"]).expect("FLUSHALL");
    }
}
