//! A login route behind a [`LoginGuard`], served on loopback behind the
//! trusted proxy 127.0.0.1 (attackers and owner come in `X-Forwarded-For`),
//! and the attack scenarios the memory and Redis tests share.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::routing::post;
use http::{HeaderMap, Method, StatusCode};
use ratelab_core::toolkit::MAX_RECENT_SHIFTS;
use ratelab_core::{AsyncRateLimiter, Quota};
use ratelab_http::{Identify, LoginGuard, Policy, RateLimitLayer, TrustedProxies};

use super::{Reply, localhost, send};

pub const SECRET: &[u8] = b"a test secret of at least 32 bytes, not a real one";

/// The quotas: per device 10, per account and network 5, per account 50.
pub fn per_device() -> Quota {
    Quota::new(10, Duration::from_secs(900)).unwrap()
}
pub fn per_network() -> Quota {
    Quota::new(5, Duration::from_secs(900)).unwrap()
}
pub fn per_account() -> Quota {
    Quota::per_hour(50).unwrap()
}

/// Makes a policy named `name` on a fresh limiter for `quota`, and hands
/// back the limiter too (to read what its keys hold).
pub type Factory<'a> = &'a dyn Fn(&str, Quota) -> (Policy, Arc<dyn AsyncRateLimiter>);

/// A settable wall clock, Unix seconds.
#[derive(Clone)]
pub struct Wall(pub Arc<AtomicU64>);

impl Wall {
    pub fn new() -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        Wall(Arc::new(AtomicU64::new(now)))
    }

    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_secs(), Ordering::Relaxed);
    }

    fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.0.load(Ordering::Relaxed))
    }
}

/// A login server: `POST /login` with `x-user` and `x-password` (alice's
/// is `wonderland`, bob's `builder`), answered 200 or 401.
pub struct LoginServer {
    pub addr: SocketAddr,
    pub per_account: Arc<dyn AsyncRateLimiter>,
}

pub async fn login_server(policies: Factory<'_>, secret: &[u8], wall: &Wall) -> LoginServer {
    let (device, _) = policies("login-device", per_device());
    let (network, _) = policies("login-network", per_network());
    let (account, per_account) = policies("login-account", per_account());
    let wall = wall.clone();
    let guard = LoginGuard::builder(secret)
        .route(Method::POST, "/login")
        .account(|request| {
            let user = request.headers.get("x-user")?.to_str().ok()?;
            Some(user.to_lowercase())
        })
        .per_device(device)
        .per_network(network)
        .per_account(account)
        .wall_clock(move || wall.now())
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder()
        .identify(Identify::new().trusted_proxies(TrustedProxies::parse(["127.0.0.1"]).unwrap()))
        .login_guard(guard)
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/login",
            post(|headers: HeaderMap| async move {
                let get = |name| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                };
                match (get("x-user").to_lowercase().as_str(), get("x-password")) {
                    ("alice", "wonderland") | ("bob", "builder") => StatusCode::OK,
                    _ => StatusCode::UNAUTHORIZED,
                }
            }),
        )
        .layer(layer);
    LoginServer {
        addr: super::serve(app).await,
        per_account,
    }
}

/// One login attempt from `from` (forwarded by the proxy), with `cookie`
/// if given.
pub async fn attempt(
    addr: SocketAddr,
    from: IpAddr,
    user: &str,
    password: &str,
    cookie: Option<&str>,
) -> Reply {
    let from = from.to_string();
    let mut headers: Vec<(&str, &[u8])> = vec![
        ("x-forwarded-for", from.as_bytes()),
        ("x-user", user.as_bytes()),
        ("x-password", password.as_bytes()),
    ];
    if let Some(cookie) = cookie {
        headers.push(("cookie", cookie.as_bytes()));
    }
    send(addr, localhost(), "POST", "/login", &headers).await
}

/// The owner's address.
pub fn owner() -> IpAddr {
    "198.51.100.7".parse().unwrap()
}

/// `n` attacker addresses: IPv4, or IPv6 each in its own /64, or IPv6 all
/// in one /64.
pub fn attackers(n: u16, kind: &str) -> Vec<IpAddr> {
    (1..=n)
        .map(|i| {
            let text = match kind {
                "v4" => format!("10.66.{}.{}", i / 200, i % 200 + 1),
                "v6" => format!("2001:db8:{i:x}::1"),
                _ => format!("2001:db8:66:1:{i:x}::1"),
            };
            text.parse().unwrap()
        })
        .collect()
}

/// Alice logs in from her address and keeps her device cookie; then the
/// `attackers` each send 6 wrong passwords for alice, all at once, while
/// alice logs in 20 times from her known device. Every one of hers gets its
/// 200; the attackers' evaluated guesses (401) stay within 5 per network and
/// 50 in all, and the per-account key holds exactly them. Returns how many
/// were evaluated.
pub async fn owner_against_attackers(
    server: &LoginServer,
    attackers: Vec<IpAddr>,
    networks: u64,
) -> u64 {
    let addr = server.addr;
    let first = attempt(addr, owner(), "alice", "wonderland", None).await;
    assert_eq!(first.status, 200, "{first:?}");
    let cookie = first.cookie().expect("a device cookie");

    let attacks: Vec<_> = attackers
        .into_iter()
        .map(|from| {
            tokio::spawn(async move {
                let (mut evaluated, mut refused) = (0u64, 0u64);
                for _ in 0..6 {
                    let reply = attempt(addr, from, "alice", "guess", None).await;
                    match reply.status {
                        401 => evaluated += 1,
                        429 => {
                            assert!(reply.has("retry-after"), "{reply:?}");
                            refused += 1;
                        }
                        other => panic!("an attacker got {other}: {reply:?}"),
                    }
                }
                (evaluated, refused)
            })
        })
        .collect();
    let owner_cookie = cookie.clone();
    let owner_logins = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for _ in 0..20 {
            let reply = attempt(addr, owner(), "alice", "wonderland", Some(&owner_cookie)).await;
            assert_eq!(
                reply.header("ratelimit-policy"),
                r#""login-device";q=10;w=900"#,
                "{reply:?}"
            );
            statuses.push(reply.status);
        }
        statuses
    });
    let (mut per_attacker, mut refused) = (Vec::new(), 0);
    for attack in attacks {
        let (evaluated, refusals) = attack.await.unwrap();
        per_attacker.push(evaluated);
        refused += refusals;
    }
    assert_eq!(
        owner_logins.await.unwrap(),
        [200; 20],
        "the owner on her known device"
    );
    let evaluated: u64 = per_attacker.iter().sum();
    assert!(per_attacker.iter().all(|&n| n <= 5), "{per_attacker:?}");
    assert!(
        evaluated <= 50.min(5 * networks),
        "{evaluated} evaluated: {per_attacker:?}"
    );
    // The per-account key holds every evaluated guess, and of the attempts
    // refused only what their give-backs could not prove: a debt's ledger
    // keeps its 64 most recent give-backs one by one and counts older ones
    // against every receipt issued before them, so once more than 64
    // attempts are given back at one instant, a later give-back may return
    // less than it took, never more. With fewer refusals than that (10
    // networks), exactly the evaluated guesses.
    let held = server
        .per_account
        .check_async(b"login-account:alice", 0)
        .await
        .unwrap();
    let kept_beyond = (50 - evaluated).checked_sub(held.remaining);
    let unproven = refused.saturating_sub(MAX_RECENT_SHIFTS as u64);
    assert!(
        kept_beyond.is_some_and(|kept| kept <= unproven),
        "{} left after {evaluated} evaluated and {refused} refused: {per_attacker:?}",
        held.remaining
    );

    // After the attack, still.
    let after = attempt(addr, owner(), "alice", "wonderland", Some(&cookie)).await;
    assert_eq!(after.status, 200, "{after:?}");
    evaluated
}

/// A token for another account, an altered or forged one, one another
/// secret signed, or an expired one: the attempt is untrusted (limited by
/// the network and account policies), never an error; and once the
/// account's untrusted quota is spent, it is refused like any stranger.
pub async fn tokens_that_give_nothing(
    server: &LoginServer,
    wall: &Wall,
    other_secret_cookie: &str,
) {
    let addr = server.addr;
    let untrusted = r#""login-network";q=5;w=900, "login-account";q=50;w=3600"#;
    let bob = attempt(addr, owner(), "bob", "builder", None).await;
    let bob_cookie = bob.cookie().unwrap();
    let alice = attempt(addr, owner(), "alice", "wonderland", None).await;
    let alice_cookie = alice.cookie().unwrap();
    let (name, token) = alice_cookie.split_once('=').unwrap();
    let mut altered = token.to_owned().into_bytes();
    let last = altered.len() - 1;
    altered[last] = if altered[last] == b'0' { b'1' } else { b'0' };
    let altered = format!("{name}={}", String::from_utf8(altered).unwrap());
    let forged = format!(
        "{name}=v1.{}.{}.{}",
        "ab".repeat(16),
        u64::MAX / 2,
        "cd".repeat(32)
    );
    for cookie in [
        bob_cookie.as_str(),
        altered.as_str(),
        forged.as_str(),
        other_secret_cookie,
        "ratelab_device=garbage; ratelab_device=v1.;;;",
    ] {
        let reply = attempt(addr, owner(), "alice", "wonderland", Some(cookie)).await;
        assert_eq!(reply.status, 200, "{cookie}: {reply:?}");
        assert_eq!(reply.header("ratelimit-policy"), untrusted, "{cookie}");
    }
    // Alice's own is a known device.
    let known = attempt(addr, owner(), "alice", "wonderland", Some(&alice_cookie)).await;
    assert_eq!(
        known.header("ratelimit-policy"),
        r#""login-device";q=10;w=900"#
    );
    // Expired (30 days by default): untrusted again, and the success hands
    // out a new device.
    wall.advance(Duration::from_secs(30 * 24 * 3600));
    let expired = attempt(addr, owner(), "alice", "wonderland", Some(&alice_cookie)).await;
    assert_eq!(expired.header("ratelimit-policy"), untrusted);
    assert_ne!(expired.cookie().unwrap(), alice_cookie);

    // Spend the account's untrusted quota from 10 networks; the forged and
    // foreign tokens are refused with the strangers.
    for n in 1..=10u8 {
        let from: IpAddr = format!("10.77.0.{n}").parse().unwrap();
        for _ in 0..5 {
            assert_eq!(
                attempt(addr, from, "alice", "guess", None).await.status,
                401
            );
        }
    }
    for cookie in [bob_cookie.as_str(), forged.as_str(), other_secret_cookie] {
        let reply = attempt(addr, owner(), "alice", "wonderland", Some(cookie)).await;
        assert_eq!(reply.status, 429, "{cookie}: {reply:?}");
        assert_eq!(
            reply.json()["violated-policies"],
            serde_json::json!(["login-account"])
        );
    }
}

/// Cookie tossing: alice's account is locked for devices it does not know
/// (10 networks spent its 50 untrusted attempts), and cookies of the
/// device cookie's names are planted in front of her own (what a sibling
/// subdomain can set): garbage, well-formed forgeries, bob's valid token, a
/// hundred of them. Her real cookie behind them still makes her a known
/// device: 200, limited per device only. Without it she waits with the
/// attackers.
pub async fn tossed_cookies_hide_nothing(server: &LoginServer) {
    let addr = server.addr;
    let alice = attempt(addr, owner(), "alice", "wonderland", None).await;
    let alice_cookie = alice.cookie().unwrap();
    let (name, _) = alice_cookie.split_once('=').unwrap();
    assert_eq!(name, "__Host-ratelab_device", "the default name");
    let bob = attempt(addr, owner(), "bob", "builder", None).await;
    let bob_token = bob.cookie().unwrap();
    let bob_token = bob_token.split_once('=').unwrap().1;
    for n in 1..=10u8 {
        let from: IpAddr = format!("10.78.0.{n}").parse().unwrap();
        for _ in 0..5 {
            assert_eq!(
                attempt(addr, from, "alice", "guess", None).await.status,
                401
            );
        }
    }
    let locked = attempt(addr, owner(), "alice", "wonderland", None).await;
    assert_eq!(locked.status, 429, "{locked:?}");
    let forged = |i: usize| format!("v1.{:032x}.{}.{}", i, u64::MAX / 2, "cd".repeat(32));
    for planted in [8, 100] {
        let mut junk = Vec::new();
        for i in 0..planted {
            let value = match i % 4 {
                0 => "garbage".to_owned(),
                1 => forged(i),
                2 => bob_token.to_owned(),
                _ => format!("v1.{i}"),
            };
            let name = if i % 2 == 0 {
                "ratelab_device"
            } else {
                "__Host-ratelab_device"
            };
            junk.push(format!("{name}={value}"));
        }
        junk.push(alice_cookie.clone());
        let cookie = junk.join("; ");
        let reply = attempt(addr, owner(), "alice", "wonderland", Some(&cookie)).await;
        assert_eq!(reply.status, 200, "{planted} planted: {reply:?}");
        assert_eq!(
            reply.header("ratelimit-policy"),
            r#""login-device";q=10;w=900"#,
            "{planted} planted"
        );
    }
    // A cookie of the name before the prefix still names her device.
    let legacy = alice_cookie.replacen("__Host-", "", 1);
    let reply = attempt(addr, owner(), "alice", "wonderland", Some(&legacy)).await;
    assert_eq!(reply.status, 200, "{reply:?}");
}
