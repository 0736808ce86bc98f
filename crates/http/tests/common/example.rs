//! The example server as a real process: built by `cargo test` (next to the
//! test binaries, in `<target>/<profile>/examples/`), started on a free
//! port, killed on drop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::SystemTime;

/// The example binary, checked to be newer than the sources it is built from.
pub fn example_binary() -> PathBuf {
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
    // The layer's sources, the example's, and the core's under them.
    let newest_source = ["src", "examples", "../http-core/src"]
        .iter()
        .map(|dir| newest_in(&crate_dir.join(dir)))
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH);
    assert!(
        built >= newest_source,
        "{} is older than the sources: run `cargo build -p ratelab-http --example server`",
        binary.display()
    );
    binary
}

/// When the newest file under `dir` (its folders included) was modified.
fn newest_in(dir: &Path) -> SystemTime {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let metadata = entry.metadata().ok()?;
            if metadata.is_dir() {
                Some(newest_in(&entry.path()))
            } else {
                metadata.modified().ok()
            }
        })
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// One running instance of the example server, killed on drop.
pub struct Instance {
    child: Child,
    pub addr: SocketAddr,
}

impl Instance {
    /// Starts the example on a free port of 127.0.0.1 and waits for its
    /// "listening on" line (printed once the socket is bound).
    pub fn start(redis_url: Option<&str>, extra: &[&str]) -> Instance {
        Self::start_on("127.0.0.1:0", redis_url, extra)
    }

    /// [`Instance::start`] listening on `listen` (`[::1]:0` for IPv6).
    pub fn start_on(listen: &str, redis_url: Option<&str>, extra: &[&str]) -> Instance {
        let mut command = Command::new(example_binary());
        command
            .arg(listen)
            .args(extra)
            .env_remove("REDIS_URL")
            .env(
                "LOGIN_SECRET",
                "a test secret of at least 32 bytes, not a real one",
            )
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(url) = redis_url {
            // A loaded test machine: slowness is not what these tests test.
            command
                .env("REDIS_URL", url)
                .args(["--redis-timeout-ms", "30000"]);
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

/// A config file for the example with these `[login]` and `[completions]`
/// quotas (the plans generous, so that only the login and token policies
/// refuse), removed on drop.
pub struct ConfigFile(pub PathBuf);

impl ConfigFile {
    pub fn new(tag: &str, login: [&str; 3], tokens: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "ratelab-http-{tag}-{}-{:?}.toml",
            std::process::id(),
            std::thread::current().id()
        ));
        let [per_device, per_network, per_account] = login;
        std::fs::write(
            &path,
            format!(
                "[plans]\nanonymous = \"100000/h\"\nfree = \"100000/h\"\npro = \"100000/h\"\n\n\
                 [login]\nper_device = \"{per_device}\"\nper_account_and_network = \"{per_network}\"\n\
                 per_account = \"{per_account}\"\n\n[sms]\nper_client = \"10/h\"\n\n\
                 [completions]\ntokens_per_client = \"{tokens}\"\n"
            ),
        )
        .unwrap();
        ConfigFile(path)
    }

    pub fn arg(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// 30 requests, alternating between the two instances (the balancer), from
/// one anonymous client: how many pass.
pub async fn round_robin(instances: &[Instance; 2]) -> usize {
    let mut admitted = 0;
    for i in 0..30 {
        let reply = super::get(instances[i % 2].addr, "/").await;
        match reply.status {
            200 => admitted += 1,
            429 => assert!(reply.has("retry-after")),
            other => panic!("instance answered {other}: {reply:?}"),
        }
    }
    admitted
}

/// `alice:oops`, HTTP Basic.
pub const WRONG: (&str, &[u8]) = ("authorization", b"Basic YWxpY2U6b29wcw==");
/// `alice:wonderland`, HTTP Basic.
pub const RIGHT: (&str, &[u8]) = ("authorization", b"Basic YWxpY2U6d29uZGVybGFuZA==");

/// The burst, on an example server behind the trusted proxy
/// 127.0.0.1 with the default login quotas: 60 wrong passwords for alice at
/// once from 6.6.6.6. At most 5 are evaluated (`login`, 5 per account and
/// network); the 55 that `login` refused leave `login-account` (50 per
/// account) as if they never came, so alice, from her own address with the
/// right password, logs in, and `login-account` shows only the evaluated
/// guesses. Returns how many were evaluated.
pub async fn burst_of_wrong_passwords(addr: SocketAddr) -> u64 {
    let attempts: Vec<_> = (0..60)
        .map(|_| {
            tokio::spawn(async move {
                let attacker: (&str, &[u8]) = ("x-forwarded-for", b"6.6.6.6");
                super::send(
                    addr,
                    super::localhost(),
                    "POST",
                    "/login",
                    &[attacker, WRONG],
                )
                .await
                .status
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for attempt in attempts {
        statuses.push(attempt.await.unwrap());
    }
    let evaluated = statuses.iter().filter(|&&s| s == 401).count() as u64;
    let refused = statuses.iter().filter(|&&s| s == 429).count() as u64;
    assert_eq!(evaluated + refused, 60, "{statuses:?}");
    assert!((1..=5).contains(&evaluated), "{statuses:?}");

    let owner = super::send(addr, super::other_peer(), "POST", "/login", &[RIGHT]).await;
    assert_eq!(owner.status, 200, "{owner:?}");
    assert_eq!(
        owner.remaining("login-account"),
        Some(50 - evaluated),
        "{owner:?}"
    );
    assert_eq!(owner.remaining("login"), Some(5), "{owner:?}");
    evaluated
}

/// 12 wrong passwords for alice from 12 addresses of one IPv6 /64, sent
/// from `from` (a trusted proxy of the server) in `X-Forwarded-For`: one
/// network, so 5 are evaluated, 7 refused; an address of the next /64 is
/// another network.
pub async fn one_ipv6_network(addr: SocketAddr, from: std::net::IpAddr) {
    let mut statuses = Vec::new();
    for n in 1..=12 {
        let forwarded = format!("2001:db8:1:2:{n:x}::{n:x}");
        let header: (&str, &[u8]) = ("x-forwarded-for", forwarded.as_bytes());
        statuses.push(
            super::send(addr, from, "POST", "/login", &[header, WRONG])
                .await
                .status,
        );
    }
    assert_eq!(
        statuses,
        [401, 401, 401, 401, 401, 429, 429, 429, 429, 429, 429, 429]
    );
    let next: (&str, &[u8]) = ("x-forwarded-for", b"2001:db8:1:3::1");
    assert_eq!(
        super::send(addr, from, "POST", "/login", &[next, WRONG])
            .await
            .status,
        401
    );
}
