//! Throwaway Redis servers for tests: a [`RedisServer`] guard and a
//! three-master [`RedisCluster`] guard, each on free loopback ports, without
//! persistence, logging to a file, killed on drop.
//!
//! The binaries come from `$RATELAB_REDIS_SERVER` / `$RATELAB_REDIS_CLI`, else
//! from `PATH`. A missing binary fails the test with a message that says how
//! to install it: a test that needs Redis never skips silently
//! ([`RedisServer::try_start`] is for callers that choose what to do).
//!
//! **No server outlives the process that started it.** A guard held in a
//! `static` is never dropped, and a process that panics, calls
//! `std::process::exit` or is killed runs no destructor. So beside each
//! server runs a watchdog: a `sh` loop that polls the test process and the
//! server every 200 ms and kills the server (SIGKILL) as soon as the test
//! process is gone. It needs no signal handler, no `unsafe`, and works
//! whatever thread started the server (`PR_SET_PDEATHSIG` fires when the
//! spawning *thread* exits, which would kill a shared server when the first
//! test that used it ends). `tests/no_orphans.rs` proves it.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How to get Redis, for the error messages.
const INSTALL_HINT: &str = "install Redis (Debian/Ubuntu: `sudo apt-get install redis-server redis-tools`; \
     macOS: `brew install redis`), or point $RATELAB_REDIS_SERVER and $RATELAB_REDIS_CLI at the binaries";

/// How long a server may take to answer PING after it starts.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a watchdog looks whether the test process is still there.
const WATCHDOG_POLL: &str = "0.2";

/// Kills the server (`$2`) once the test process (`$1`) is gone; ends on its
/// own when the server is gone first.
const WATCHDOG: &str = r#"while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep "$3"; done; kill -9 "$2" 2>/dev/null; exit 0"#;

/// Why a Redis server (or cluster) did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartError {
    /// The binary is not installed (or `$RATELAB_REDIS_*` points nowhere).
    NotFound {
        /// `redis-server` or `redis-cli`.
        binary: &'static str,
        /// Where it was looked for.
        looked: String,
    },
    /// The binary ran, but the server did not come up.
    Failed(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::NotFound { binary, looked } => {
                write!(f, "`{binary}` was not found ({looked}); {INSTALL_HINT}")
            }
            StartError::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for StartError {}

/// Finds a binary: `$env_var`, else `name` on `PATH`.
fn find_binary(env_var: &str, name: &'static str) -> Result<PathBuf, StartError> {
    if let Some(path) = std::env::var_os(env_var) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(StartError::NotFound {
                binary: name,
                looked: format!("${env_var} is {} but no such file exists", path.display()),
            })
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| StartError::NotFound {
            binary: name,
            looked: format!("not on PATH, and ${env_var} is not set"),
        })
}

/// The `redis-server` binary the tests use, or a panic that says how to
/// install it.
pub fn redis_server_binary() -> PathBuf {
    find_binary("RATELAB_REDIS_SERVER", "redis-server").unwrap_or_else(|e| panic!("{e}"))
}

/// The `redis-cli` binary the tests use, or a panic that says how to install
/// it.
pub fn redis_cli_binary() -> PathBuf {
    find_binary("RATELAB_REDIS_CLI", "redis-cli").unwrap_or_else(|e| panic!("{e}"))
}

/// A port that was free a moment ago (the OS picked it).
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cannot bind a loopback port")
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// One RESP reply, as text: simple strings and bulk strings as they are,
/// integers in decimal, arrays as their elements joined by newlines, errors
/// as `Err`.
fn read_reply(reader: &mut impl BufRead) -> Result<String, String> {
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("read: {e}"))?;
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(line.len().min(1));
    match kind {
        "+" | ":" => Ok(rest.to_owned()),
        "-" => Err(rest.to_owned()),
        "$" => {
            let len: i64 = rest.parse().map_err(|_| format!("bad length {rest}"))?;
            if len < 0 {
                return Ok(String::new());
            }
            let mut buf = vec![0; usize::try_from(len).unwrap_or(0) + 2];
            std::io::Read::read_exact(reader, &mut buf).map_err(|e| format!("read: {e}"))?;
            buf.truncate(buf.len() - 2);
            Ok(String::from_utf8_lossy(&buf).into_owned())
        }
        "*" => {
            let len: i64 = rest.parse().map_err(|_| format!("bad length {rest}"))?;
            let items: Result<Vec<String>, String> =
                (0..len.max(0)).map(|_| read_reply(reader)).collect();
            Ok(items?.join("\n"))
        }
        _ => Err(format!("unexpected reply line {line:?}")),
    }
}

/// Sends one command to the server at `port` and returns its reply as text:
/// simple and bulk strings as they are, integers in decimal, arrays as their
/// elements joined by newlines, errors as `Err`. A small, dependency-free
/// client for the guards and for tests that poke at the server (`SCRIPT
/// FLUSH`, `TTL`, `CLIENT PAUSE`).
pub fn command(port: u16, args: &[&str]) -> Result<String, String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))
        .map_err(|e| format!("connect to {address}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    read_reply(&mut BufReader::new(stream))
}

/// One field of `INFO replication` on the server at `port`.
pub fn replication_field(port: u16, field: &str) -> Option<String> {
    let info = command(port, &["INFO", "replication"]).ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
}

/// A `redis-server` process on a free loopback port, killed on drop.
///
/// ```no_run
/// let server = ratelab_testkit::redis::RedisServer::start();
/// assert_eq!(server.command(&["PING"]).unwrap(), "PONG");
/// println!("{}", server.url());
/// ```
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    /// Kills `child` if this process dies without dropping the guard.
    watchdog: Option<Child>,
    binary: PathBuf,
    port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    /// A Sentinel's configuration (`redis-server <file> --sentinel`).
    sentinel: Option<String>,
}

impl RedisServer {
    /// Starts a server, or panics saying why (and how to install Redis).
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server, or says why it did not start
    /// ([`StartError::NotFound`] when Redis is not installed).
    pub fn try_start() -> Result<Self, StartError> {
        Self::try_start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments
    /// (e.g. `["--cluster-enabled", "yes"]`), or panics saying why.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::try_start_with(extra).unwrap_or_else(|e| panic!("{}", start_panic(&e)))
    }

    /// Starts a server with extra `redis-server` arguments, or says why it
    /// did not start.
    pub fn try_start_with(extra: &[&str]) -> Result<Self, StartError> {
        let binary = find_binary("RATELAB_REDIS_SERVER", "redis-server")?;
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        // Retry: the free port may be taken between the probe and the bind.
        let mut last_error = String::new();
        for _ in 0..10 {
            let mut server = RedisServer {
                child: None,
                watchdog: None,
                binary: binary.clone(),
                port: free_port(),
                dir: tempfile::tempdir()
                    .map_err(|e| StartError::Failed(format!("no temporary directory: {e}")))?,
                extra: extra.clone(),
                sentinel: None,
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(StartError::Failed(format!(
            "redis-server did not start after 10 tries: {last_error}"
        )))
    }

    /// Starts on a given port (for the cluster, whose bus ports must be free
    /// too).
    fn start_on(port: u16, dir: &Path, extra: &[&str]) -> Result<Self, StartError> {
        let mut server = RedisServer {
            child: None,
            watchdog: None,
            binary: find_binary("RATELAB_REDIS_SERVER", "redis-server")?,
            port,
            dir: tempfile::tempdir_in(dir).map_err(|e| StartError::Failed(e.to_string()))?,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            sentinel: None,
        };
        server.spawn().map_err(StartError::Failed)?;
        Ok(server)
    }

    /// Starts a Redis Sentinel (`redis-server <config> --sentinel`) on a
    /// free port, watching the master on `master_port` as `service`: it
    /// takes the master for down after `down_after_ms` without an answer,
    /// and fails over when `quorum` sentinels agree. Or says why it did not
    /// start.
    pub fn try_start_sentinel(
        master_port: u16,
        service: &str,
        quorum: u32,
        down_after_ms: u64,
    ) -> Result<Self, StartError> {
        let binary = find_binary("RATELAB_REDIS_SERVER", "redis-server")?;
        let config = format!(
            "sentinel monitor {service} 127.0.0.1 {master_port} {quorum}\n\
             sentinel down-after-milliseconds {service} {down_after_ms}\n\
             sentinel failover-timeout {service} {}\n\
             sentinel parallel-syncs {service} 1\n",
            down_after_ms * 4
        );
        let mut last_error = String::new();
        for _ in 0..10 {
            let mut server = RedisServer {
                child: None,
                watchdog: None,
                binary: binary.clone(),
                port: free_port(),
                dir: tempfile::tempdir()
                    .map_err(|e| StartError::Failed(format!("no temporary directory: {e}")))?,
                extra: Vec::new(),
                sentinel: Some(config.clone()),
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(StartError::Failed(format!(
            "redis-server --sentinel did not start after 10 tries: {last_error}"
        )))
    }

    /// [`RedisServer::try_start_sentinel`], or a panic saying why.
    pub fn start_sentinel(
        master_port: u16,
        service: &str,
        quorum: u32,
        down_after_ms: u64,
    ) -> Self {
        Self::try_start_sentinel(master_port, service, quorum, down_after_ms)
            .unwrap_or_else(|e| panic!("{}", start_panic(&e)))
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = self.log_path();
        let mut server = Command::new(&self.binary);
        if let Some(config) = &self.sentinel {
            // A sentinel rewrites its configuration: a file of its own, every
            // time it starts.
            let path = self.dir.path().join("sentinel.conf");
            std::fs::write(&path, config)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            server.arg(&path).arg("--sentinel");
        }
        server
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"]);
        if self.sentinel.is_none() {
            // No persistence; and a replica's full sync starts at once
            // (Redis waits 5 s by default for more replicas to share it).
            server.args(["--save", "", "--appendonly", "no"]);
            server.args(["--repl-diskless-sync-delay", "0"]);
        }
        let child = server
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}; {INSTALL_HINT}", self.binary.display()))?;
        let server_pid = child.id();
        self.child = Some(child);
        // Without its watchdog a server could outlive us: no watchdog, no
        // server.
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("ratelab-redis-watchdog")
            .arg(std::process::id().to_string())
            .arg(server_pid.to_string())
            .arg(WATCHDOG_POLL)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match watchdog {
            Ok(watchdog) => self.watchdog = Some(watchdog),
            Err(e) => {
                self.kill();
                return Err(format!("cannot run the watchdog (`sh`): {e}"));
            }
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(reply) = command(self.port, &["PING"])
                && reply == "PONG"
            {
                return Ok(());
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                self.kill();
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!(
                    "redis-server on port {} did not answer PING; its log:\n{log}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The `redis-server` binary this server runs.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Sends one command (see [`command`]).
    pub fn command(&self, args: &[&str]) -> Result<String, String> {
        command(self.port, args)
    }

    /// Kills the server (SIGKILL) and waits for it to exit. Idempotent.
    pub fn kill(&mut self) {
        // The watchdog goes first: once the server is reaped its pid may be
        // reused, and the watchdog must never kill a stranger.
        self.stop_watchdog();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn stop_watchdog(&mut self) {
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }

    /// Starts the server again on the same port, empty (after [`kill`]).
    ///
    /// [`kill`]: RedisServer::kill
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + START_TIMEOUT;
        // The old socket may linger a moment.
        while !port_is_free(self.port) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Err(e) = self.spawn() {
            panic!("redis-server did not restart on port {}: {e}", self.port);
        }
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a paused process (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the server is not running");
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .expect("cannot run kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// Whether the process is running.
    pub fn is_running(&mut self) -> bool {
        let running = self
            .child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none());
        if !running {
            // Reaped: see `kill`.
            self.stop_watchdog();
        }
        running
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A paused process still dies of SIGKILL.
        self.kill();
    }
}

/// The message `start` panics with: why, and how to install Redis.
fn start_panic(e: &StartError) -> String {
    match e {
        StartError::NotFound { .. } => e.to_string(),
        StartError::Failed(_) => format!("{e}\n(is Redis installed? {INSTALL_HINT})"),
    }
}

/// The native module's shared library (`ratelab-redis-module`): `$RATELAB_MODULE_PATH` if set, else the one
/// in the target directory this test binary was built in
/// (`<target>/<profile>/deps/<test>` -> `<target>/<profile>/`), built there
/// first with `cargo build -p ratelab-redis-module` (a no-op when fresh), so
/// that `cargo test` finds it whatever the target directory or profile.
/// `just test` sets `$RATELAB_MODULE_PATH` to the library its `cargo test
/// --workspace` built, so that the module is not built a second time with
/// its own features.
pub fn module_path() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("RATELAB_MODULE_PATH") {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "$RATELAB_MODULE_PATH is {}, no such file",
                path.display()
            );
            return path;
        }
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test binary lives in <target>/<profile>/deps");
        let target_dir = profile_dir.parent().expect("<target>/<profile>");
        let profile = profile_dir
            .file_name()
            .and_then(|p| p.to_str())
            .unwrap_or("debug");
        let library = profile_dir.join(format!(
            "{}ratelab_redis_module{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        ));
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args(["build", "--quiet", "-p", "ratelab-redis-module", "--lib"])
            .env("CARGO_TARGET_DIR", target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        match profile {
            "debug" => {}
            "release" => {
                build.arg("--release");
            }
            other => {
                build.args(["--profile", other]);
            }
        }
        let status = build
            .status()
            .expect("cannot run cargo to build the module");
        assert!(
            status.success(),
            "cargo build -p ratelab-redis-module failed"
        );
        assert!(
            library.is_file(),
            "the module was built but {} is missing",
            library.display()
        );
        library
    })
}

/// Three Redis masters on loopback, joined into a cluster with
/// `redis-cli --cluster create`; ready when every node reports
/// `cluster_state:ok`. Killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    _dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts the cluster, or panics saying why (and how to install Redis).
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|e| panic!("{}", start_panic(&e)))
    }

    /// Starts the cluster with `extra` arguments for every node (say
    /// `--loadmodule <path>`), or panics saying why.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::try_start_with(extra).unwrap_or_else(|e| panic!("{}", start_panic(&e)))
    }

    /// Starts the cluster, or says why it did not start.
    pub fn try_start() -> Result<Self, StartError> {
        Self::try_start_with(&[])
    }

    /// Starts the cluster with `extra` arguments for every node, or says
    /// why it did not start.
    pub fn try_start_with(extra: &[&str]) -> Result<Self, StartError> {
        Self::try_start_shaped(0, extra)
    }

    /// Starts the cluster with one replica for each of its three masters
    /// (six nodes; `redis-cli --cluster create --cluster-replicas 1`), ready
    /// when every node reports `cluster_state:ok` and every replica's link
    /// is up; or panics saying why. A master killed is failed over to its
    /// replica by the cluster itself (node timeout 2 s).
    pub fn start_with_replicas(extra: &[&str]) -> Self {
        Self::try_start_shaped(1, extra).unwrap_or_else(|e| panic!("{}", start_panic(&e)))
    }

    fn try_start_shaped(replicas: usize, extra: &[&str]) -> Result<Self, StartError> {
        let mut last_error = String::new();
        for _ in 0..10 {
            match Self::start_once(replicas, extra) {
                Ok(cluster) => return Ok(cluster),
                Err(e @ StartError::NotFound { .. }) => return Err(e),
                Err(e) => last_error = e.to_string(),
            }
        }
        Err(StartError::Failed(format!(
            "the Redis cluster did not start after 10 tries: {last_error}"
        )))
    }

    fn start_once(replicas: usize, extra: &[&str]) -> Result<Self, StartError> {
        let failed = StartError::Failed;
        let dir = tempfile::tempdir().map_err(|e| failed(e.to_string()))?;
        // Each node needs its port and its bus port (port + 10000) free.
        let mut ports = Vec::new();
        while ports.len() < 3 * (1 + replicas) {
            let port = free_port();
            if port < 55_535 && port_is_free(port + 10_000) && !ports.contains(&port) {
                ports.push(port);
            }
        }
        let mut nodes = Vec::new();
        for &port in &ports {
            let config = format!("nodes-{port}.conf");
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &config,
                "--cluster-node-timeout",
                "2000",
            ];
            args.extend_from_slice(extra);
            nodes.push(RedisServer::start_on(port, dir.path(), &args)?);
        }
        let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let output = Command::new(find_binary("RATELAB_REDIS_CLI", "redis-cli")?)
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| failed(format!("cannot run redis-cli: {e}; {INSTALL_HINT}")))?;
        if !output.status.success() {
            return Err(failed(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &nodes {
            loop {
                let info = node.command(&["CLUSTER", "INFO"]).unwrap_or_default();
                let replication = node.command(&["INFO", "replication"]).unwrap_or_default();
                let linked = !replication.contains("role:slave")
                    || replication.contains("master_link_status:up");
                if info.contains("cluster_state:ok") && linked {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(failed(format!(
                        "node {} never reported cluster_state:ok: {info}",
                        node.port
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // After a full sync a master holds its stream back until the
        // replica's first acknowledgement (up to a second): until then
        // `WAIT` counts nothing. Each replica counts as ready once a write
        // on the empty cluster (FLUSHALL, which its master propagates) has
        // reached it: its offset equals its master's, past 0.
        for replica in &nodes {
            let Some(master) = replication_field(replica.port, "master_port")
                .and_then(|port| port.parse::<u16>().ok())
            else {
                continue;
            };
            'flowing: loop {
                command(master, &["FLUSHALL"]).map_err(failed)?;
                for _ in 0..10 {
                    let here = replication_field(replica.port, "slave_repl_offset");
                    let there = replication_field(master, "master_repl_offset");
                    if here.is_some() && here == there && there.as_deref() != Some("0") {
                        break 'flowing;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                if Instant::now() > deadline {
                    return Err(failed(format!(
                        "the replica on port {} never received its master's ({master}) stream",
                        replica.port
                    )));
                }
            }
        }
        Ok(RedisCluster { nodes, _dir: dir })
    }

    /// `redis://127.0.0.1:<port>/` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes, to poke at or kill one.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes, mutably (to kill or restart one).
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }
}
