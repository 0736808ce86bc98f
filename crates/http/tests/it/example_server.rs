//! The example server as a real process, through real HTTP: what the README
//! shows with `curl -i`, the login guard, the client network, completions
//! settled from the response, and the in-memory half of the reference
//! article's load-balancer table (the Redis half, and the same scenarios on
//! Redis, are in `example_server_redis.rs`).
//!
//! The binary is the `server` example, which `cargo test` builds before it
//! runs the tests (next to this test's binary, in `<target>/<profile>/examples/`).

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::example::{
    ConfigFile, Instance, RIGHT, WRONG, burst_of_wrong_passwords, example_binary, one_ipv6_network,
    round_robin,
};
use common::{Reply, get, localhost, localhost_v6, other_peer, send};
/// In memory each instance counts on its own: 20 of 30 pass a limit of 10
/// (on Redis, 10: `example_server_redis.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_table_in_memory_admits_20() {
    // 10 per hour, so that nothing refills while the test runs.
    let quota = ["--anonymous", "10/h"];
    let in_memory = [Instance::start(None, &quota), Instance::start(None, &quota)];
    assert_eq!(round_robin(&in_memory).await, 20);
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

    // Logins, with an API key (the plan's quota applies instead of the
    // anonymous one): alice logs in and gets a device cookie.
    let key: (&str, &[u8]) = ("x-api-key", b"demo-free");
    let free_since = Instant::now();
    let alice = send(addr, localhost(), "POST", "/login", &[key, RIGHT]).await;
    assert_eq!(alice.status, 200);
    assert_eq!(alice.json()["device"], "new");
    assert_eq!(
        alice.header("ratelimit"),
        r#""free";r=59;t=1, "login";r=5;t=0, "login-account";r=50;t=0"#
    );
    let cookie = alice.cookie().unwrap();
    // 5 failures per account and client network without a device cookie.
    let failures_since = Instant::now();
    let mut logins = Vec::new();
    for _ in 0..6 {
        logins.push(send(addr, localhost(), "POST", "/login", &[key, WRONG]).await);
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
    // The right password from the network that failed 5 times: refused
    // too, and the refused attempts took nothing from "free" or
    // "login-account" (what they took was given back).
    // On an idle machine `"free";r=54;t=1, "login";r=0;t=180,
    // "login-account";r=45;t=72`; a loaded one gets units back and waits
    // shortened by the time the exchanges took (`as_idle`).
    let refused = send(addr, localhost(), "POST", "/login", &[key, RIGHT]).await;
    assert_eq!(refused.status, 429);
    let retry_after: u64 = refused.header("retry-after").parse().unwrap();
    assert!(
        countdown(180, failures_since).contains(&retry_after),
        "{refused:?}"
    );
    as_idle(
        &refused,
        "free",
        (54, 1),
        Duration::from_secs(1),
        free_since,
    );
    as_idle(
        &refused,
        "login",
        (0, 180),
        Duration::from_secs(180),
        failures_since,
    );
    as_idle(
        &refused,
        "login-account",
        (45, 72),
        Duration::from_secs(72),
        failures_since,
    );
    // Alice's browser, with its cookie: a known device.
    let device: (&str, &[u8]) = ("cookie", cookie.as_bytes());
    let known = send(addr, localhost(), "POST", "/login", &[key, RIGHT, device]).await;
    assert_eq!(known.status, 200);
    assert_eq!(known.json()["device"], "known");
    assert_eq!(
        known.header("ratelimit-policy"),
        r#""free";q=60;w=60, "login-device";q=10;w=900"#
    );
    as_idle(&known, "free", (53, 1), Duration::from_secs(1), free_since);
    as_idle(
        &known,
        "login-device",
        (10, 0),
        Duration::from_secs(90),
        free_since,
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

    // A completion reserves max_tokens and is settled with what it used.
    let tokens_since = Instant::now();
    let completion = send(
        addr,
        other_peer(),
        "POST",
        "/complete?max_tokens=100&prompt=tell+me+a+story",
        &[],
    )
    .await;
    assert_eq!(completion.status, 200);
    assert_eq!(completion.header("x-tokens-used"), "8");
    // 10,000 a minute: a token back every 6 ms, which a loaded machine
    // may take between the reservation and the settlement.
    as_idle(
        &completion,
        "anonymous",
        (9, 360),
        Duration::from_secs(360),
        tokens_since,
    );
    as_idle(
        &completion,
        "tokens",
        (9992, 1),
        Duration::from_millis(6),
        tokens_since,
    );
    assert_eq!(
        completion.json()["usage"],
        serde_json::json!({"completion_tokens": 4, "prompt_tokens": 4, "total_tokens": 8})
    );
}

/// The owner's known device against attackers on ten networks (behind the
/// trusted proxy 127.0.0.1), each sending ten wrong passwords: at most 5 per
/// network and 50 in all are evaluated, and alice, on the device she logged
/// in from before, still logs in. A new device of hers is untrusted: it
/// waits with the attackers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_lock_the_owner_out() {
    let server = Instance::start(
        None,
        &["--anonymous", "1000/h", "--trusted-proxy", "127.0.0.1"],
    );
    let addr = server.addr;

    // Alice logs in from her own address (127.0.0.2): a device cookie.
    let first = send(addr, other_peer(), "POST", "/login", &[RIGHT]).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.json()["device"], "new");
    let set = first.header("set-cookie");
    for attribute in [
        "HttpOnly",
        "Secure",
        "SameSite=Strict",
        "Path=/",
        "Max-Age=2592000",
    ] {
        assert!(set.contains(attribute), "{set}");
    }
    let cookie = first.cookie().unwrap();
    let device: (&str, &[u8]) = ("cookie", cookie.as_bytes());

    let attacks: Vec<_> = (1..=10)
        .map(|n| {
            tokio::spawn(async move {
                let forwarded = format!("6.6.6.{n}");
                let mut evaluated = 0;
                for _ in 0..10 {
                    let header: (&str, &[u8]) = ("x-forwarded-for", forwarded.as_bytes());
                    let reply = send(addr, localhost(), "POST", "/login", &[header, WRONG]).await;
                    match reply.status {
                        401 => evaluated += 1,
                        429 => {}
                        other => panic!("{other}: {reply:?}"),
                    }
                }
                evaluated
            })
        })
        .collect();
    let mut evaluated = Vec::new();
    for attack in attacks {
        evaluated.push(attack.await.unwrap());
    }
    assert!(evaluated.iter().all(|&n| n <= 5), "{evaluated:?}");
    assert!(evaluated.iter().sum::<u32>() <= 50, "{evaluated:?}");

    // Her known device: only her own failures could refuse it.
    let known = send(addr, other_peer(), "POST", "/login", &[RIGHT, device]).await;
    assert_eq!(known.status, 200, "{known:?}");
    assert_eq!(known.json()["device"], "known");
    assert!(known.has("set-cookie"), "the token's expiry is renewed");
    assert_eq!(
        known.header("ratelimit-policy"),
        r#""anonymous";q=1000;w=3600, "login-device";q=10;w=900"#
    );
    // The attackers used up the account's untrusted quota (5 on each of 10
    // networks): her new device waits with them.
    if evaluated.iter().sum::<u32>() == 50 {
        let new_device = send(
            addr,
            "127.0.0.3".parse().unwrap(),
            "POST",
            "/login",
            &[RIGHT],
        )
        .await;
        assert_eq!(new_device.status, 429, "{new_device:?}");
        assert_eq!(
            new_device.json()["violated-policies"],
            serde_json::json!(["login-account"])
        );
    }
}

/// The issue's burst: 60 wrong passwords at once from one address leave
/// the per-account policy holding only the guesses evaluated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_wrong_passwords_leaves_the_wider_policy_untouched() {
    let server = Instance::start(
        None,
        &["--anonymous", "1000/h", "--trusted-proxy", "127.0.0.1"],
    );
    burst_of_wrong_passwords(server.addr).await;
}

/// One IPv6 /64 is one client network for the login policies, over IPv4
/// loopback and over IPv6 loopback (the proxy `::1`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ipv6_network_gets_one_networks_guesses() {
    let v4 = Instance::start(
        None,
        &["--anonymous", "1000/h", "--trusted-proxy", "127.0.0.1"],
    );
    one_ipv6_network(v4.addr, localhost()).await;
    let v6 = Instance::start_on(
        "[::1]:0",
        None,
        &["--anonymous", "1000/h", "--trusted-proxy", "::1"],
    );
    assert!(v6.addr.is_ipv6());
    one_ipv6_network(v6.addr, localhost_v6()).await;
}

/// `POST /complete?max_tokens=N` reserves N of the client's tokens and is
/// settled with what it reports in `x-tokens-used`. A client whose
/// completions use 10 of the 50 it reserves passes 6 times on 100 tokens,
/// where reservations alone would pass 2, and the tokens it used stay
/// within the 100. One whose completions use more than it reserved (long
/// prompts) runs into debt and waits it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_are_settled_with_the_tokens_used() {
    // 100 tokens an hour: nothing comes back while the test runs.
    let config = ConfigFile::new("tokens", ["10/15min", "5/15min", "50/h"], "100/h");
    let server = Instance::start(None, &["--config", config.arg()]);
    let (mut passed, mut used) = (0, 0);
    let since = Instant::now();
    loop {
        let reply = send(
            server.addr,
            localhost(),
            "POST",
            "/complete?max_tokens=50&prompt=one+two+three+four+five",
            &[],
        )
        .await;
        if reply.status == 429 {
            // 60 held, 40 left: 10 more must come back, 36 s each (360 s
            // on an idle machine, less the time the completions took).
            let retry_after: u64 = reply.header("retry-after").parse().unwrap();
            assert!(countdown(360, since).contains(&retry_after), "{reply:?}");
            break;
        }
        assert_eq!(reply.status, 200, "{reply:?}");
        let tokens: u64 = reply.header("x-tokens-used").parse().unwrap();
        assert_eq!(tokens, 10);
        passed += 1;
        used += tokens;
        // The fields show the key as the settlement left it.
        assert_eq!(reply.remaining("tokens"), Some(100 - used), "{reply:?}");
    }
    // Reservations alone would have passed 2; the tokens used stay within
    // the 100.
    assert_eq!((passed, used), (6, 60));

    // 100 tokens per 10 s: a unit every 100 ms. 60-word prompts use 70
    // tokens on a reservation of 10.
    let config = ConfigFile::new("debt", ["10/15min", "5/15min", "50/h"], "100/10s");
    let server = Instance::start(None, &["--config", config.arg()]);
    let prompt = vec!["word"; 60].join("+");
    let path = format!("/complete?max_tokens=10&prompt={prompt}");
    let long = || send(server.addr, localhost(), "POST", &path, &[]);
    let started = Instant::now();
    let first = long().await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-tokens-used"), "70");
    assert!(
        long().await.status == 200,
        "80 of 100 held before the second settles"
    );
    // 140 held: the debt is waited out, until 10 fit again (5 s, less what
    // came back since the first settled: at most the time this took).
    let refused = long().await;
    assert_eq!(refused.status, 429, "{refused:?}");
    let wait: u64 = refused.header("retry-after").parse().unwrap();
    let least = 5u64.saturating_sub(started.elapsed().as_secs() + 1).max(1);
    assert!((least..=5).contains(&wait), "{refused:?}");
    tokio::time::sleep(Duration::from_secs(wait)).await;
    assert_eq!(long().await.status, 200);
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

    let output = Command::new(example_binary())
        .arg("127.0.0.1:0")
        .env_remove("REDIS_URL")
        .env("LOGIN_SECRET", "short")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("LOGIN_SECRET is 5 bytes: it needs at least 32"),
        "{stderr}"
    );

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

/// `policy`'s fields in `reply`'s `RateLimit` header as an idle machine
/// answers them, `(r, t)`, give or take what the time since `since` (before
/// the first request that spent the units) allows on a loaded one: a unit
/// back every `every` (up to that many more in `r`), and the wait `t`
/// shortened by that time (rounded up, as the header rounds it). Exact when
/// the exchanges took less than a second.
fn as_idle(reply: &Reply, policy: &str, (r, t): (u64, u64), every: Duration, since: Instant) {
    let passed = since.elapsed();
    let back = u64::try_from(passed.as_micros() / every.as_micros()).unwrap();
    let got = (
        reply.remaining(policy).expect("the policy's r"),
        reply.next_after(policy).expect("the policy's t"),
    );
    let as_said = (r..=r + back).contains(&got.0)
        && if got.0 == r {
            countdown(t, since).contains(&got.1)
        } else {
            got.1 <= u64::try_from(every.as_micros().div_ceil(1_000_000)).unwrap()
        };
    assert!(
        as_said,
        "{policy}: r={} t={}, where an idle machine says r={r} t={t} ({passed:?} later): {reply:?}",
        got.0, got.1
    );
}

/// A wait of `t` s on an idle machine, as a header rounds it up once the
/// time since `since` has passed: from `t` less that time to `t`.
fn countdown(t: u64, since: Instant) -> std::ops::RangeInclusive<u64> {
    let left = Duration::from_secs(t).saturating_sub(since.elapsed());
    // Whole seconds, rounded up; exact below a microsecond's noise.
    let shortest = u64::try_from(left.as_micros().div_ceil(1_000_000)).unwrap();
    shortest..=t
}
