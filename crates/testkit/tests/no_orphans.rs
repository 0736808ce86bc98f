//! No Redis server outlives the test process that started it: not when the
//! guard sits in a `static` (never dropped), nor when the process exits
//! without destructors, panics, aborts or is killed with SIGKILL.
//!
//! Each case runs this test binary again as a child process
//! ([`child_holds_a_server_then_dies`] does nothing unless
//! `$RATELAB_ORPHAN_ROLE` is set), which starts a server, writes its pid and
//! port to a file, and dies in its own way; this process then waits for the
//! server to be gone.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ratelab_testkit::redis::{RedisServer, command};

const ROLE: &str = "RATELAB_ORPHAN_ROLE";
const FILE: &str = "RATELAB_ORPHAN_FILE";

/// The child's body; a no-op in a normal run.
#[test]
fn child_holds_a_server_then_dies() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    // As the shared servers of the integration tests are held: never dropped.
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    let server = SERVER.get_or_init(RedisServer::start);
    let file = std::env::var(FILE).expect("the parent names the file");
    let mut out = std::fs::File::create(format!("{file}.tmp")).unwrap();
    writeln!(out, "{} {}", server.pid().unwrap(), server.port()).unwrap();
    drop(out);
    std::fs::rename(format!("{file}.tmp"), &file).unwrap();
    match role.as_str() {
        "exit" => std::process::exit(0),
        "panic" => panic!("a failing test, its server in a static"),
        "abort" => std::process::abort(),
        // The parent kills us with SIGKILL.
        _ => loop {
            std::thread::sleep(Duration::from_secs(1));
        },
    }
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    let out = Command::new("ps")
        .args(["-o", "stat=", "-p", &pid.to_string()])
        .output()
        .expect("ps runs");
    let stat = String::from_utf8_lossy(&out.stdout);
    let stat = stat.trim();
    !stat.is_empty() && !stat.starts_with('Z')
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run_child(role: &str, dir: &Path) {
    let file = dir.join(role);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holds_a_server_then_dies", "--nocapture"])
        .env(ROLE, role)
        .env(FILE, &file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(
        &format!("the {role} child's server"),
        Duration::from_secs(60),
        || file.exists(),
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let (pid, port) = text.trim().split_once(' ').unwrap();
    let (pid, port): (u32, u16) = (pid.parse().unwrap(), port.parse().unwrap());
    assert!(alive(pid), "{role}: the server runs while its process does");
    if role == "kill" {
        child.kill().unwrap();
    }
    let status = child.wait().unwrap();
    if role != "exit" {
        assert!(!status.success(), "{role}: {status}");
    }
    wait_for(
        &format!("the {role} child's server (pid {pid}) to die"),
        Duration::from_secs(10),
        || !alive(pid),
    );
    assert!(command(port, &["PING"]).is_err(), "{role}: nothing answers");
}

#[test]
fn a_server_dies_with_its_process_however_it_ends() {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for role in ["exit", "panic", "abort", "kill"] {
        run_child(role, dir.path());
    }
}

#[test]
fn a_dropped_server_takes_its_watchdog_along() {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let mut server = RedisServer::try_start().expect("redis-server is installed");
    let pid = server.pid().unwrap();
    server.restart();
    let restarted = server.pid().unwrap();
    assert!(!alive(pid), "restart killed the old server");
    drop(server);
    assert!(!alive(restarted), "drop kills the server at once");
    let watchdogs = Command::new("ps")
        .args(["-o", "args=", "--ppid", &std::process::id().to_string()])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(
        !watchdogs.contains(&format!(
            "ratelab-redis-watchdog {} {pid}",
            std::process::id()
        )) && !watchdogs.contains(&format!(" {restarted} ")),
        "no watchdog left: {watchdogs}"
    );
}
