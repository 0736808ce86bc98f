//! The login guard through real HTTP, in memory: the owner on her known
//! device always logs in while attackers guess from 10 and from 100
//! networks, IPv4 and IPv6; their evaluated guesses stay within the quotas;
//! addresses of one IPv6 /64 are one network; a forged or foreign token
//! gives nothing; cookies planted in front of the owner's own hide nothing;
//! the owner's new device waits with the attackers; and the
//! configurations the guard refuses.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::login::{
    Factory, SECRET, Wall, attackers, attempt, login_server, owner, owner_against_attackers,
    tokens_that_give_nothing, tossed_cookies_hide_nothing,
};
use http::Method;
use ratelab_core::{
    AsyncRateLimiter, Decision, Error, Keyed, Limiter, ManualClock, Quota, RateLimiter,
};
use ratelab_gcra::Gcra;
use ratelab_http::{LoginGuard, LoginGuardError, Policy, SameSite};

/// A policy in memory, on a clock that stands still: what the attempts
/// took is still held when the test reads it (one unit of 50 an hour comes
/// back every 72 s of real time), however long a loaded machine takes.
fn memory(name: &str, quota: Quota) -> (Policy, Arc<dyn AsyncRateLimiter>) {
    let clock = ManualClock::starting_at(1_700_000_000_000_000);
    let limiter: Arc<dyn AsyncRateLimiter> = Arc::new(Keyed::with_clock(Gcra::new(quota), clock));
    (Policy::shared(name, limiter.clone()), limiter)
}

const MEMORY: Factory<'static> = &memory;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_owner_keeps_logging_in_while_10_networks_guess() {
    for kind in ["v4", "v6"] {
        let server = login_server(MEMORY, SECRET, &Wall::new()).await;
        let evaluated = owner_against_attackers(&server, attackers(10, kind), 10).await;
        // 10 networks of 5: exactly the account's 50, unless some were
        // refused while another's units were held for a moment.
        assert!(evaluated > 0, "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_owner_keeps_logging_in_while_100_networks_guess() {
    for kind in ["v4", "v6"] {
        let server = login_server(MEMORY, SECRET, &Wall::new()).await;
        owner_against_attackers(&server, attackers(100, kind), 100).await;
    }
}

/// 100 addresses of one IPv6 /64 are one network: 5 guesses, not 100 × 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_ipv6_network_is_one_network() {
    let server = login_server(MEMORY, SECRET, &Wall::new()).await;
    let evaluated = owner_against_attackers(&server, attackers(100, "one-64"), 1).await;
    assert!(evaluated <= 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_foreign_and_expired_tokens_give_nothing() {
    // A token another secret signed, for alice.
    let elsewhere = login_server(
        MEMORY,
        b"another secret of at least 32 bytes.....",
        &Wall::new(),
    )
    .await;
    let foreign = attempt(elsewhere.addr, owner(), "alice", "wonderland", None)
        .await
        .cookie()
        .unwrap();
    let wall = Wall::new();
    let server = login_server(MEMORY, SECRET, &wall).await;
    tokens_that_give_nothing(&server, &wall, &foreign).await;
}

/// Cookies planted in front of the owner's own (cookie tossing from a
/// sibling subdomain) do not make her an unknown device.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tossed_cookies_do_not_hide_the_owners_device() {
    let server = login_server(MEMORY, SECRET, &Wall::new()).await;
    tossed_cookies_hide_nothing(&server).await;
}

/// The trade-off: a device that never logged in is untrusted, so once the
/// attackers spent the account's untrusted quota it waits with them (told
/// when to come back); the known device is not affected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owners_new_device_waits_with_the_attackers() {
    let server = login_server(MEMORY, SECRET, &Wall::new()).await;
    let known = attempt(server.addr, owner(), "alice", "wonderland", None)
        .await
        .cookie()
        .unwrap();
    for from in attackers(10, "v4") {
        for _ in 0..5 {
            assert_eq!(
                attempt(server.addr, from, "alice", "guess", None)
                    .await
                    .status,
                401
            );
        }
    }
    let new = attempt(
        server.addr,
        "192.0.2.1".parse().unwrap(),
        "alice",
        "wonderland",
        None,
    )
    .await;
    assert_eq!(new.status, 429, "{new:?}");
    // One unit of 50 per hour: back in 72 s.
    assert_eq!(new.header("retry-after"), "72");
    let again = attempt(server.addr, owner(), "alice", "wonderland", Some(&known)).await;
    assert_eq!(again.status, 200);
}

/// The owner's own mistakes on her device count against that device only:
/// 10 of them lock the device, not the account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_on_a_known_device_lock_that_device_only() {
    let server = login_server(MEMORY, SECRET, &Wall::new()).await;
    let device = attempt(server.addr, owner(), "alice", "wonderland", None)
        .await
        .cookie()
        .unwrap();
    for _ in 0..10 {
        let reply = attempt(server.addr, owner(), "alice", "typo", Some(&device)).await;
        assert_eq!(reply.status, 401);
    }
    let locked = attempt(server.addr, owner(), "alice", "wonderland", Some(&device)).await;
    assert_eq!(locked.status, 429);
    assert_eq!(
        locked.json()["violated-policies"],
        serde_json::json!(["login-device"])
    );
    // Without the cookie, from her network: untrusted, whose quotas she
    // did not touch.
    assert_eq!(
        attempt(server.addr, owner(), "alice", "wonderland", None)
            .await
            .status,
        200
    );
}

/// An attempt whose account cannot be read is limited as untrusted
/// attempts for the empty account, never let through unlimited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_without_an_account_is_still_limited() {
    let server = login_server(MEMORY, SECRET, &Wall::new()).await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let reply = common::send(
            server.addr,
            common::localhost(),
            "POST",
            "/login",
            &[("x-forwarded-for", b"10.9.9.9"), ("x-password", b"guess")],
        )
        .await;
        statuses.push(reply.status);
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429]);
}

/// A limiter without receipts.
struct NoReceipts(Keyed<Gcra>);

impl Limiter for NoReceipts {
    fn quota(&self) -> Quota {
        self.0.quota()
    }
    fn algorithm_name(&self) -> &'static str {
        "gcra"
    }
    fn backend(&self) -> &'static str {
        "memory"
    }
    fn bound(&self) -> ratelab_core::Bound {
        self.0.bound()
    }
}

impl RateLimiter for NoReceipts {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.0.check(key, cost)
    }
}

#[test]
fn what_the_guard_refuses_to_run_with() {
    let policy =
        |name: &str| Policy::new(name, Keyed::new(Gcra::new(common::login::per_network())));
    let complete = || {
        LoginGuard::builder(SECRET)
            .route(Method::POST, "/login")
            .account(|_| Some("alice".into()))
            .per_device(policy("d"))
            .per_network(policy("n"))
            .per_account(policy("a"))
    };
    assert!(complete().build().is_ok());
    let error = |builder: ratelab_http::LoginGuardBuilder| builder.build().unwrap_err();
    assert_eq!(
        error(LoginGuard::builder(b"short").route(Method::POST, "/login")),
        LoginGuardError::WeakSecret(5)
    );
    assert_eq!(error(LoginGuard::builder(SECRET)), LoginGuardError::NoRoute);
    assert_eq!(
        error(LoginGuard::builder(SECRET).route(Method::POST, "/login")),
        LoginGuardError::NoAccount
    );
    let no_device = LoginGuard::builder(SECRET)
        .route(Method::POST, "/login")
        .account(|_| None)
        .per_network(policy("n"))
        .per_account(policy("a"));
    assert_eq!(
        error(no_device),
        LoginGuardError::MissingPolicy("per_device")
    );
    let plain = Policy::new(
        "plain",
        NoReceipts(Keyed::new(Gcra::new(Quota::per_hour(5).unwrap()))),
    );
    assert_eq!(
        error(complete().per_account(plain)),
        LoginGuardError::NoReceipts("plain".into())
    );
    assert_eq!(
        error(complete().same_site(SameSite::None).secure_cookie(false)),
        LoginGuardError::SameSiteNoneWithoutSecure
    );
    assert!(complete().same_site(SameSite::None).build().is_ok());
    assert_eq!(
        error(complete().cookie_name("a b")),
        LoginGuardError::CookieName("a b".into())
    );
    assert_eq!(
        error(complete().cookie_path("login")),
        LoginGuardError::CookiePath("login".into())
    );
    assert_eq!(
        error(complete().token_lifetime(Duration::ZERO)),
        LoginGuardError::Lifetime(Duration::ZERO)
    );
    let long = Duration::from_secs(401 * 24 * 3600);
    assert_eq!(
        error(complete().token_lifetime(long)),
        LoginGuardError::Lifetime(long)
    );
    assert!(matches!(
        error(complete().route(Method::POST, "/{")),
        LoginGuardError::Route(_)
    ));
    // Messages are sentences.
    assert_eq!(
        LoginGuardError::WeakSecret(5).to_string(),
        "the login guard's secret is 5 bytes: it needs at least 32 random bytes"
    );
}
