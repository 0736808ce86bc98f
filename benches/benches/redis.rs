//! Redis: every algorithm through `RedisLimiter`, on a single node and on a
//! 3-master cluster this bench starts itself; raw EVALSHA against EVAL; what
//! the server says (cost per call, commands received, memory per key); and
//! `redis-benchmark` on the same script, keys and arguments as the ceiling.
//!
//! Criterion groups (function = algorithm): `redis-latency`,
//! `redis-cluster-latency`, `redis-throughput-64`,
//! `redis-cluster-throughput-64`, `redis-evalsha`, `redis-eval`. Measured by
//! hand: `redis-round-trips`, `redis-server-evalsha`, `redis-server-eval`,
//! `redis-memory`, and `redis-benchmark` (recorded in `redis-throughput-64`
//! with `-c 64`, backend `redis-benchmark`, and with `-c 1 -P 64`, backend
//! `redis-benchmark-pipelined`; in `redis-latency` with `-c 1`, backend
//! `redis-benchmark`).
//!
//! Then the client and `redis-benchmark` in paired rounds, like with like
//! (`redis-paired-throughput-64`: 64 tasks on one connection against
//! `-c 1 -P 64`; `redis-paired-latency`: one task against `-c 1`): each
//! round runs one then the other, the order alternating, the same number of
//! checks each, and each side's figure is its median over the rounds. The
//! criterion run and `redis-benchmark` above lie minutes apart, and this
//! machine drifts by a fifth over minutes; paired, drift falls on both.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use ratelab::KnownAlgorithm;
use ratelab::redis::{
    Connection, DEFAULT_PREFIX, Op, RedisLimiter, RedisStore, Script, ScriptArgs, redis_key,
};
use ratelab::toolkit::RemoteForm;
use ratelab_benches::algorithms::{admitted_share, assert_mostly_admits};
use ratelab_benches::redis_tools::{
    count_client_commands, parse_commandstats, redis_benchmark, redis_benchmark_pipelined,
};
use ratelab_benches::{
    Metric, Mode, Recorder, Row, Setting, Visit, each_algorithm_on_redis, median,
};
use ratelab_testkit::redis::{RedisCluster, RedisServer};
use tokio::runtime::Runtime;

/// Concurrent tasks sharing one connection, and `redis-benchmark -c`.
const TASKS: usize = 64;
/// Keys the checks are spread over (`redis-benchmark -r`).
const KEYSPACE: usize = 1_000;
/// A check waits this long before it fails: a busy machine must show as
/// slow figures, not as errors.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Every group this bench fills, criterion's and by hand.
const GROUPS: [&str; 13] = [
    "redis-latency",
    "redis-cluster-latency",
    "redis-throughput-64",
    "redis-cluster-throughput-64",
    "redis-evalsha",
    "redis-eval",
    "redis-round-trips",
    "redis-server-evalsha",
    "redis-server-eval",
    "redis-memory",
    "redis-benchmark",
    "redis-paired-throughput-64",
    "redis-paired-latency",
];

fn main() {
    let mode = Mode::from_args();
    if !GROUPS
        .iter()
        .any(|g| mode.wants_any(g, ratelab_benches::NAMES))
    {
        // Filtered out: no servers to start.
        return;
    }
    let mut c = ratelab_benches::criterion(&mode);
    let mut rec = Recorder::new("redis", &mode);
    // One thread for the client, like redis-benchmark; the server gets the
    // other core.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let server = RedisServer::start();
    let cluster = RedisCluster::start();
    let info = server.command(&["INFO", "server"]).expect("INFO server");
    if let Some(version) = info.lines().find_map(|l| l.strip_prefix("redis_version:")) {
        rec.meta("redis_version", version.trim());
    }
    let single = rt
        .block_on(Connection::single(&server.url()))
        .expect("connect to the Redis node");
    let clustered = rt
        .block_on(Connection::cluster(&cluster.urls()))
        .expect("connect to the Redis cluster");
    let keys: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..KEYSPACE)
            .map(|i| format!("bench:{i:012}").into_bytes())
            .collect(),
    );
    each_algorithm_on_redis(
        Setting::ManyKeys,
        &mut Bench {
            c: &mut c,
            rec: &mut rec,
            mode: &mode,
            rt: &rt,
            server: &server,
            cluster: &cluster,
            single,
            clustered,
            keys,
        },
    );
    c.final_summary();
    rec.finish();
}

struct Bench<'a> {
    c: &'a mut Criterion,
    rec: &'a mut Recorder,
    mode: &'a Mode,
    rt: &'a Runtime,
    server: &'a RedisServer,
    cluster: &'a RedisCluster,
    single: Connection,
    clustered: Connection,
    keys: Arc<Vec<Vec<u8>>>,
}

/// `checks` checks from [`TASKS`] tasks sharing `limiter`, over the keys in
/// turn; the time they took.
async fn concurrent<A: RemoteForm>(
    limiter: &RedisLimiter<A>,
    keys: &Arc<Vec<Vec<u8>>>,
    checks: u64,
) -> Duration {
    let checks = usize::try_from(checks).expect("checks fit in memory");
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let limiter = limiter.clone();
            let keys = Arc::clone(keys);
            let mine = checks / TASKS + usize::from(task < checks % TASKS);
            tokio::spawn(async move {
                for i in 0..mine {
                    let key = &keys[(task + i * TASKS) % keys.len()];
                    black_box(limiter.check(key, 1).await.expect("a Redis check"));
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
    fn wants(&self, group: &str, algorithm: &str) -> bool {
        !self.mode.criterion_only() && self.mode.wants(&format!("{group}/{algorithm}"))
    }

    /// Latency from one task, then throughput from 64, on `connection`.
    fn client<A: RemoteForm>(
        &mut self,
        limiter: &RedisLimiter<A>,
        (latency, throughput): (&str, &str),
        backend: &str,
    ) {
        let name = limiter.algorithm().name();
        let rt = self.rt;
        let mut group = self.c.benchmark_group(latency);
        group.throughput(Throughput::Elements(1));
        let keys: &[Vec<u8>] = &self.keys;
        let mut next = 0;
        group.bench_function(name, |b| {
            b.to_async(rt).iter(|| {
                let key = &keys[next % keys.len()];
                next += 1;
                async move { limiter.check(key, 1).await.expect("a Redis check") }
            });
        });
        group.finish();
        self.rec
            .criterion(latency, name, (name, backend), Metric::NsPerCheck, 1.0);

        let mut group = self.c.benchmark_group(throughput);
        group.throughput(Throughput::Elements(1));
        let keys = &self.keys;
        group.bench_function(name, |b| {
            b.to_async(rt)
                .iter_custom(|checks| async move { concurrent(limiter, keys, checks).await });
        });
        group.finish();
        self.rec
            .criterion(throughput, name, (name, backend), Metric::ChecksPerSec, 1.0);
    }

    /// The limiter's call, built by hand: EVALSHA with the SHA1, or EVAL with
    /// the source, one task.
    fn raw<A: RemoteForm>(&mut self, algorithm: &A) {
        let name = algorithm.name();
        let source = A::script();
        let script = Script::new(&source);
        let params = algorithm.params();
        let redis_keys: Vec<Vec<u8>> = self
            .keys
            .iter()
            .map(|k| redis_key(DEFAULT_PREFIX, k, algorithm.key_suffix()))
            .collect();
        let connection = &self.single;
        let rt = self.rt;
        rt.block_on(connection.query::<String>(redis::cmd("SCRIPT").arg("LOAD").arg(&source)))
            .expect("SCRIPT LOAD");
        for (group, sha) in [("redis-evalsha", true), ("redis-eval", false)] {
            let mut g = self.c.benchmark_group(group);
            g.throughput(Throughput::Elements(1));
            let mut next = 0;
            let (redis_keys, params) = (&redis_keys, &params);
            g.bench_function(name, |b| {
                b.to_async(rt).iter(|| {
                    let key = &redis_keys[next % redis_keys.len()];
                    next += 1;
                    let mut cmd = if sha {
                        let mut cmd = redis::cmd("EVALSHA");
                        cmd.arg(script.sha());
                        cmd
                    } else {
                        let mut cmd = redis::cmd("EVAL");
                        cmd.arg(&source);
                        cmd
                    };
                    // The limiter's own arguments: Redis TIME, cost 1, no
                    // slack, no deadline, a check.
                    cmd.arg(1).arg(key);
                    for arg in ScriptArgs::call(None, 1, 0, None, Op::Check, params).iter() {
                        cmd.arg(arg);
                    }
                    async move {
                        let reply: Vec<u64> = connection.query(&cmd).await.expect("a raw call");
                        reply
                    }
                });
            });
            g.finish();
            self.rec
                .criterion(group, name, (name, "redis"), Metric::NsPerCheck, 1.0);
        }
    }

    /// Commands the servers on `ports` received per check, over checks from
    /// 64 tasks.
    fn round_trips<A: RemoteForm>(&self, limiter: &RedisLimiter<A>, ports: &[u16]) -> f64 {
        let checks = self.mode.size(1_000, 1_000, 64);
        let commands = count_client_commands(ports, || {
            self.rt.block_on(concurrent(limiter, &self.keys, checks));
        })
        .expect("MONITOR");
        commands as f64 / checks as f64
    }

    /// `redis-benchmark -c 64`, then `-c 1`, running the limiter's exact
    /// call.
    fn ceiling<A: RemoteForm>(&mut self, algorithm: &A) {
        let name = algorithm.name();
        let command = benchmark_command(algorithm);
        let port = self.server.port();
        let requests = self.mode.size(200_000, 50_000, 500);
        let run = redis_benchmark(port, TASKS, requests, KEYSPACE, &command)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        self.rec.push(Row::new(
            "redis-throughput-64",
            name,
            "redis-benchmark",
            Metric::ChecksPerSec,
            run.rps,
        ));
        // Like with like: the client's 64 tasks share one connection and keep
        // up to 64 requests in flight on it; so does `-c 1 -P 64`.
        let run = redis_benchmark_pipelined(port, 1, TASKS, requests, KEYSPACE, &command)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        self.rec.push(Row::new(
            "redis-throughput-64",
            name,
            "redis-benchmark-pipelined",
            Metric::ChecksPerSec,
            run.rps,
        ));
        // One connection, one request at a time: the round trip's floor on
        // this machine, to read the one-task latency against.
        let requests = self.mode.size(20_000, 5_000, 100);
        let run = redis_benchmark(port, 1, requests, KEYSPACE, &command)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        self.rec.push(Row::new(
            "redis-latency",
            name,
            "redis-benchmark",
            Metric::NsPerCheck,
            1e9 / run.rps,
        ));
    }

    /// The client and `redis-benchmark` in paired rounds (see the crate
    /// docs): 64 tasks against `-c 1 -P 64`, one task against `-c 1`.
    fn paired<A: RemoteForm>(&mut self, limiter: &RedisLimiter<A>) {
        let algorithm = limiter.algorithm();
        let name = algorithm.name();
        let command = benchmark_command(algorithm);
        let port = self.server.port();
        let rounds = self.mode.size(8, 4, 2);
        let (many, one) = (
            self.mode.size(40_000, 10_000, 256),
            self.mode.size(4_000, 1_000, 32),
        );
        let (rt, keys) = (self.rt, &self.keys);
        // [client, redis-benchmark] per round: checks per second with 64 in
        // flight, ns per check with one.
        let mut per_sec: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut ns: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        #[allow(clippy::cast_precision_loss)]
        for round in 0..rounds {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                per_sec[side].push(if side == 0 {
                    let took = rt.block_on(concurrent(limiter, keys, many as u64));
                    many as f64 / took.as_secs_f64()
                } else {
                    redis_benchmark_pipelined(port, 1, TASKS, many, KEYSPACE, &command)
                        .unwrap_or_else(|e| panic!("{name}: {e}"))
                        .rps
                });
            }
            for side in order {
                ns[side].push(if side == 0 {
                    let took = rt.block_on(async {
                        let started = Instant::now();
                        for i in 0..one {
                            let key = &keys[i % keys.len()];
                            black_box(limiter.check(key, 1).await.expect("a Redis check"));
                        }
                        started.elapsed()
                    });
                    took.as_secs_f64() * 1e9 / one as f64
                } else {
                    1e9 / redis_benchmark(port, 1, one, KEYSPACE, &command)
                        .unwrap_or_else(|e| panic!("{name}: {e}"))
                        .rps
                });
            }
        }
        let [client, benchmark] = per_sec.map(|mut v| median(&mut v));
        let [client_ns, benchmark_ns] = ns.map(|mut v| median(&mut v));
        eprintln!(
            "redis-paired/{name}: medians of {rounds} rounds: 64 in flight {client:.0} against \
             {benchmark:.0} checks/s ({:.3}); one in flight {client_ns:.0} against {benchmark_ns:.0} ns \
             ({:.3})",
            client / benchmark,
            benchmark_ns / client_ns
        );
        for (group, backend, metric, value) in [
            (
                "redis-paired-throughput-64",
                "redis",
                Metric::ChecksPerSec,
                client,
            ),
            (
                "redis-paired-throughput-64",
                "redis-benchmark-pipelined",
                Metric::ChecksPerSec,
                benchmark,
            ),
            (
                "redis-paired-latency",
                "redis",
                Metric::NsPerCheck,
                client_ns,
            ),
            (
                "redis-paired-latency",
                "redis-benchmark",
                Metric::NsPerCheck,
                benchmark_ns,
            ),
        ] {
            self.rec.push(Row::new(group, name, backend, metric, value));
        }
    }

    /// `MEMORY USAGE` of fresh keys after one check each.
    fn memory<A: RemoteForm>(&mut self, limiter: &RedisLimiter<A>) {
        let name = limiter.algorithm().name();
        let n: u32 = self.mode.size(100, 100, 5);
        let mut total = 0.0;
        for i in 0..n {
            let key = format!("memory:{i}");
            let decision = self
                .rt
                .block_on(limiter.check(key.as_bytes(), 1))
                .expect("a Redis check");
            assert!(decision.allowed, "{name}: a fresh key is admitted");
            let redis_key =
                String::from_utf8(limiter.store().redis_key(key.as_bytes())).expect("ASCII");
            let bytes = self
                .server
                .command(&["MEMORY", "USAGE", &redis_key])
                .expect("MEMORY USAGE");
            total += bytes
                .parse::<f64>()
                .unwrap_or_else(|_| panic!("MEMORY USAGE {redis_key}: {bytes:?}"));
        }
        self.rec.push(Row::new(
            "redis-memory",
            name,
            "redis",
            Metric::BytesPerKey,
            total / f64::from(n),
        ));
    }
}

impl Visit for Bench<'_> {
    fn visit<A: KnownAlgorithm>(&mut self, algorithm: A) {
        let name = algorithm.name();
        let build = |connection: &Connection| {
            RedisStore::builder(connection.clone(), algorithm.clone())
                .timeout(TIMEOUT)
                // One command per check, as every peer sends: the quota
                // registry's extra `SET` (one check in 100) is left out.
                .quota_check_every(None)
                .build()
        };
        let single = build(&self.single);
        let cluster = build(&self.clustered);
        // One check on every key, on both: the scripts get cached on every
        // node (a NOSCRIPT retry is a one-off, not the steady state), and
        // the quota is seen to admit.
        for limiter in [&single, &cluster] {
            let mut keys = self.keys.iter();
            let share = admitted_share(u32::try_from(KEYSPACE).unwrap_or(u32::MAX), || {
                let key = keys.next()?;
                self.rt
                    .block_on(limiter.check(key, 1))
                    .ok()
                    .map(|d| d.allowed)
            });
            assert_mostly_admits(
                &format!("{name} on {}", limiter.store().connection().kind()),
                share,
            );
        }

        if self.wants("redis-round-trips", name) {
            let single_port = [self.server.port()];
            let cluster_ports: Vec<u16> =
                self.cluster.nodes().iter().map(RedisServer::port).collect();
            for (limiter, ports, backend) in [
                (&single, &single_port[..], "redis"),
                (&cluster, &cluster_ports[..], "redis-cluster"),
            ] {
                let per_check = self.round_trips(limiter, ports);
                self.rec.push(Row::new(
                    "redis-round-trips",
                    name,
                    backend,
                    Metric::RoundTripsPerCheck,
                    per_check,
                ));
            }
        }
        // The server's cost per call counts from here (MONITOR slows it).
        self.server
            .command(&["CONFIG", "RESETSTAT"])
            .expect("CONFIG RESETSTAT");

        self.client(&single, ("redis-latency", "redis-throughput-64"), "redis");
        self.client(
            &cluster,
            ("redis-cluster-latency", "redis-cluster-throughput-64"),
            "redis-cluster",
        );
        self.raw(&algorithm);
        if self.wants("redis-benchmark", name)
            || self.wants("redis-throughput-64", name)
            || self.wants("redis-latency", name)
        {
            self.ceiling(&algorithm);
        }
        if self.wants("redis-paired-throughput-64", name)
            || self.wants("redis-paired-latency", name)
        {
            self.paired(&single);
        }
        if self.wants("redis-server", name) {
            let info = self
                .server
                .command(&["INFO", "commandstats"])
                .expect("INFO commandstats");
            let stats = parse_commandstats(&info);
            for (command, group) in [
                ("evalsha", "redis-server-evalsha"),
                ("eval", "redis-server-eval"),
            ] {
                if let Some(stat) = stats.get(command).filter(|s| s.calls > 0) {
                    self.rec.push(Row::new(
                        group,
                        name,
                        "redis",
                        Metric::UsecPerCall,
                        stat.usec_per_call,
                    ));
                }
            }
        }
        if self.wants("redis-memory", name) {
            self.memory(&single);
        }
    }
}

/// `redis-benchmark`'s command for the limiter's exact call: EVALSHA of
/// the script on `bench:<random key>`, with the limiter's own arguments
/// (Redis TIME, cost 1, no slack, no deadline, a check).
fn benchmark_command<A: RemoteForm>(algorithm: &A) -> Vec<String> {
    let key = redis_key(
        DEFAULT_PREFIX,
        b"bench:__rand_int__",
        algorithm.key_suffix(),
    );
    let mut command = vec![
        "EVALSHA".to_owned(),
        Script::new(&A::script()).sha().to_owned(),
        "1".to_owned(),
        String::from_utf8(key).expect("an ASCII key"),
    ];
    let args = ScriptArgs::call(None, 1, 0, None, Op::Check, &algorithm.params());
    command.extend(
        args.iter()
            .map(|arg| String::from_utf8(arg.to_vec()).expect("ASCII arguments")),
    );
    command
}
