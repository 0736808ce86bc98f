//! The reference article's load-balancer table, with the example server:
//! two instances (separate processes), 30 requests sent round-robin, a limit
//! of 10. In memory each instance counts on its own and 20 pass; sharing one
//! Redis, 10 pass. Plus what the README shows with `curl -i`.
//!
//! The binary is the `server` example, which `cargo test` builds before it
//! runs the tests (next to this test's binary, in `<target>/<profile>/examples/`).

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::SystemTime;

use common::{get, localhost, other_peer, send};
use ratelab_testkit::redis::RedisServer;

/// The example binary, checked to be newer than the sources it is built from.
fn example_binary() -> PathBuf {
    let test_binary = std::env::current_exe().unwrap();
    let profile_dir = test_binary.parent().unwrap().parent().unwrap();
    let binary = profile_dir
        .join("examples")
        .join(format!("server{}", std::env::consts::EXE_SUFFIX));
    let built = std::fs::metadata(&binary)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "the example server is not built at {}: `cargo test -p ratelab-http` builds it \
                 before running the tests; with a target filter (`--test ...`), run \
                 `cargo build -p ratelab-http --example server` first",
                binary.display()
            )
        });
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let newest_source = ["src", "examples"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(crate_dir.join(dir)).unwrap())
        .filter_map(|entry| entry.ok()?.metadata().ok()?.modified().ok())
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH);
    assert!(
        built >= newest_source,
        "{} is older than the sources: run `cargo build -p ratelab-http --example server`",
        binary.display()
    );
    binary
}

/// One running instance of the example server, killed on drop.
struct Instance {
    child: Child,
    addr: SocketAddr,
}

impl Instance {
    /// Starts the example on a free port and waits for its "listening on"
    /// line (printed once the socket is bound).
    fn start(redis_url: Option<&str>, extra: &[&str]) -> Instance {
        let mut command = Command::new(example_binary());
        command
            .arg("127.0.0.1:0")
            .args(extra)
            .env_remove("REDIS_URL")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(url) = redis_url {
            command.env("REDIS_URL", url);
        }
        let mut child = command.spawn().expect("cannot start the example server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .strip_prefix("listening on http://")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|addr| addr.parse().ok())
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!("the example server did not start: {line:?}")
            });
        Instance { child, addr }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// 30 requests, alternating between the two instances (the balancer), from
/// one anonymous client: how many pass.
async fn round_robin(instances: &[Instance; 2]) -> usize {
    let mut admitted = 0;
    for i in 0..30 {
        let reply = get(instances[i % 2].addr, "/").await;
        match reply.status {
            200 => admitted += 1,
            429 => assert!(reply.has("retry-after")),
            other => panic!("instance answered {other}: {reply:?}"),
        }
    }
    admitted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_table_memory_admits_20_redis_admits_10() {
    // 10 per hour, so that nothing refills while the test runs.
    let quota = ["--anonymous", "10/h"];

    let in_memory = [Instance::start(None, &quota), Instance::start(None, &quota)];
    let memory = round_robin(&in_memory).await;
    drop(in_memory);

    let redis = RedisServer::start();
    let url = redis.url();
    let on_redis = [
        Instance::start(Some(&url), &quota),
        Instance::start(Some(&url), &quota),
    ];
    let shared = round_robin(&on_redis).await;

    println!(
        "| 30 requests through 2 instances, limit 10 | memory: {memory} admitted | Redis: {shared} admitted |"
    );
    assert_eq!((memory, shared), (20, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_readme_shows() {
    // The README runs the default 10/min; 10/h here, so that no unit comes
    // back while the test runs, however slow the machine.
    let server = Instance::start(None, &["--anonymous", "10/h"]);
    let addr = server.addr;

    let first = get(addr, "/").await;
    assert_eq!(first.status_line, "HTTP/1.1 200 OK");
    assert_eq!(
        first.header("ratelimit-policy"),
        r#""anonymous";q=10;w=3600"#
    );
    assert_eq!(first.header("ratelimit"), r#""anonymous";r=9;t=360"#);
    assert_eq!(
        first.json(),
        serde_json::json!({"client": "ip:127.0.0.1", "message": "hello", "plan": "anonymous"})
    );
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(get(addr, "/").await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 200, 200, 200, 429]);
    let refused = get(addr, "/").await;
    assert_eq!(refused.status_line, "HTTP/1.1 429 Too Many Requests");
    assert_eq!(refused.header("content-type"), "application/problem+json");
    let retry_after: u64 = refused.header("retry-after").parse().unwrap();
    assert!((1..=360).contains(&retry_after), "{retry_after}");
    assert_eq!(
        refused.header("ratelimit"),
        format!("\"anonymous\";r=0;t={retry_after}")
    );
    assert_eq!(
        refused.json()["violated-policies"],
        serde_json::json!(["anonymous"])
    );

    // Logins: 5 failures per account and address; with an API key, the
    // plan's quota applies instead of the anonymous one.
    let key: (&str, &[u8]) = ("x-api-key", b"demo-free");
    let wrong: (&str, &[u8]) = ("authorization", b"Basic YWxpY2U6b29wcw=="); // alice:oops
    let mut logins = Vec::new();
    for _ in 0..6 {
        logins.push(send(addr, localhost(), "POST", "/login", &[key, wrong]).await);
    }
    let statuses: Vec<u16> = logins.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429]);
    assert_eq!(
        logins[5].json()["violated-policies"],
        serde_json::json!(["login"])
    );
    assert_eq!(
        logins[0].header("ratelimit-policy"),
        r#""free";q=60;w=60, "login";q=5;w=900, "login-account";q=50;w=3600"#
    );
    // The right password from the address that failed 5 times: refused too,
    // and nothing consumed from "free".
    let right: (&str, &[u8]) = ("authorization", b"Basic YWxpY2U6d29uZGVybGFuZA=="); // alice:wonderland
    let refused = send(addr, localhost(), "POST", "/login", &[key, right]).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("retry-after"), "180");
    assert_eq!(
        refused.header("ratelimit"),
        r#""free";r=55;t=1, "login";r=0;t=180, "login-account";r=45;t=72"#
    );

    // SMS: one unit per recipient.
    let sms = send(
        addr,
        localhost(),
        "POST",
        "/sms?to=5550001,5550002,5550003",
        &[key],
    )
    .await;
    assert_eq!(sms.status, 200);
    assert!(
        sms.header("ratelimit").ends_with(r#""sms";r=7;t=360"#),
        "{sms:?}"
    );
    assert_eq!(sms.json()["sent"], 3);
}

/// The attack of the issue this protection answers: a stranger at 6.6.6.6
/// (behind the trusted proxy 127.0.0.1) sends 5 wrong passwords for alice.
/// Alice, from her own address with the right password, still logs in; the
/// stranger is refused, even with the right password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_lock_the_owner_out() {
    let server = Instance::start(
        None,
        &["--anonymous", "100/h", "--trusted-proxy", "127.0.0.1"],
    );
    let addr = server.addr;
    let stranger: (&str, &[u8]) = ("x-forwarded-for", b"6.6.6.6");
    let wrong: (&str, &[u8]) = ("authorization", b"Basic YWxpY2U6b29wcw=="); // alice:oops
    let right: (&str, &[u8]) = ("authorization", b"Basic YWxpY2U6d29uZGVybGFuZA=="); // alice:wonderland

    let mut attack = Vec::new();
    for _ in 0..5 {
        attack.push(
            send(addr, localhost(), "POST", "/login", &[stranger, wrong])
                .await
                .status,
        );
    }
    assert_eq!(attack, [401; 5]);

    // Alice, from 127.0.0.2 (not a proxy: her own address), logs in, twice;
    // a success is given back. Its fields show the key after the refund:
    // all but what the refund could not be sure of (the layer's 1 ms
    // margin), which holds one unit back for that millisecond.
    for _ in 0..2 {
        let alice = send(addr, other_peer(), "POST", "/login", &[right]).await;
        assert_eq!(alice.status, 200, "{alice:?}");
        assert!(
            alice.header("ratelimit").contains(r#""login";r=4;"#),
            "{alice:?}"
        );
    }

    // The stranger is slowed down: refused for 3 minutes, password or not.
    for auth in [wrong, right] {
        let refused = send(addr, localhost(), "POST", "/login", &[stranger, auth]).await;
        assert_eq!(refused.status, 429);
        assert_eq!(refused.header("retry-after"), "180");
        assert_eq!(
            refused.json()["violated-policies"],
            serde_json::json!(["login"])
        );
    }
    // Another account from the stranger's address is its own allowance.
    let bob: (&str, &[u8]) = ("authorization", b"Basic Ym9iOm9vcHM="); // bob:oops
    let other = send(addr, localhost(), "POST", "/login", &[stranger, bob]).await;
    assert_eq!(other.status, 401);
}

/// `/metrics` is Prometheus text, not limited, with the layer's counters by
/// policy and outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_scraped() {
    let server = Instance::start(None, &["--anonymous", "2/h"]);
    let addr = server.addr;
    let statuses: Vec<u16> = {
        let mut out = Vec::new();
        for _ in 0..3 {
            out.push(get(addr, "/").await.status);
        }
        out
    };
    assert_eq!(statuses, [200, 200, 429]);
    let mut scrapes = Vec::new();
    for _ in 0..3 {
        scrapes.push(get(addr, "/metrics").await);
    }
    let scrape = &scrapes[2];
    assert_eq!(scrape.status, 200);
    assert!(!scrape.has("ratelimit"));
    let text = scrape.text();
    for line in [
        r#"ratelab_http_decisions_total{policy="anonymous",outcome="allowed"} 2"#,
        r#"ratelab_http_decisions_total{policy="anonymous",outcome="refused"} 1"#,
        r#"ratelab_http_requests_total{outcome="allowed"} 2"#,
        r#"ratelab_http_requests_total{outcome="refused"} 1"#,
        // The scrapes themselves, this one included (counted before the
        // handler renders).
        r#"ratelab_http_requests_total{outcome="skipped"} 3"#,
        r#"ratelab_http_keys_tracked{policy="anonymous"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
    }
    assert!(
        text.contains(r#"ratelab_http_limiter_call_seconds_count{policy="anonymous"} 3"#),
        "{text}"
    );
}

/// Mistakes on the command line and in the config file are sentences that
/// say where.
#[test]
fn readable_errors() {
    let run = |args: &[&str]| {
        let output = Command::new(example_binary())
            .args(args)
            .env_remove("REDIS_URL")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["127.0.0.1:0", "--trusted-proxy", "proxy.local"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains(r#""proxy.local" is neither an IP address nor a network in CIDR notation"#),
        "{stderr}"
    );
    assert!(!stderr.contains("InvalidNetwork"), "{stderr}");

    let path = std::env::temp_dir().join(format!("ratelab-http-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "[plans]\nanonymous = \"10/min\"\nfree = \"60/fortnight\"\npro = \"600/min\"\n",
    )
    .unwrap();
    let (code, stderr) = run(&["127.0.0.1:0", "--config", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(code, Some(2));
    assert!(stderr.contains("line 3, column 8"), "{stderr}");
    assert!(
        stderr.contains(r#""60/fortnight" is not a quota"#),
        "{stderr}"
    );
}

/// A config file sets the quotas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_from_a_config_file() {
    let path = std::env::temp_dir().join(format!("ratelab-http-ok-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "[plans]\nanonymous = \"3/h\"\nfree = \"60/min\"\npro = \"600/min\"\n\n\
         [login]\nper_account_and_address = \"2/15min\"\nper_account = \"10/h\"\n\n\
         [sms]\nper_client = \"4/h\"\n",
    )
    .unwrap();
    let server = Instance::start(None, &["--config", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    let first = get(server.addr, "/").await;
    assert_eq!(
        first.header("ratelimit-policy"),
        r#""anonymous";q=3;w=3600"#
    );
}
