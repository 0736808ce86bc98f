//! A policy on a route counts every request axum runs that route's handler
//! for, however its path is spelled, and only those: the handler that
//! answered is the oracle. The list says which spellings are expected to
//! reach it (axum routes on the path as sent: no decoding, no case folding,
//! a trailing slash a different path), so that a change in axum's routing
//! shows here, not as a silent bypass.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::Router;
use axum::routing::post;
use common::{Reply, localhost, send, serve};
use http::Method;
use ratelab_core::{Keyed, ManualClock, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{Policy, RateLimitLayer};

/// (path after the mount, the handler axum runs for `POST` of it; "" for
/// none: the fallback or a refusal).
const SPELLINGS: &[(&str, &str)] = &[
    ("/login", "login"),
    ("/login?next=/x", "login"),
    ("/log%69n", ""),
    ("/%6C%6F%67%69%6E", ""),
    ("/LOGIN", ""),
    ("/login/", ""),
    ("/login;x=1", ""),
    ("//login", ""),
    ("/a/../login", ""),
    ("/./login", ""),
    ("/login%2F", ""),
    ("/users/7/reset", "reset"),
    ("/users/a%2Fb/reset", "reset"),
    ("/users/%2F/reset", "reset"),
    ("/users/%FF/reset", "reset"),
    ("/%75sers/7/reset", ""),
    ("/users/7/res%65t", ""),
    ("/USERS/7/reset", ""),
    ("/users/7/reset/", ""),
    ("/users//reset", "reset"),
    ("//7/reset", ""),
];

const QUOTA: u32 = 1000;

fn layer(prefix: &str) -> RateLimitLayer {
    let clock = ManualClock::new();
    let policy = |name: &str, pattern: &str| {
        let quota = Quota::per_hour(QUOTA).unwrap();
        Policy::new(name, Keyed::with_clock(Gcra::new(quota), clock.clone()))
            .route(Method::POST, &format!("{prefix}{pattern}"))
    };
    RateLimitLayer::builder()
        .policy(policy("login", "/login"))
        .policy(policy("reset", "/users/{id}/reset"))
        .build()
        .unwrap()
}

fn handlers() -> Router {
    Router::new()
        .route("/login", post(|| async { [("x-handler", "login")] }))
        .route(
            "/users/{id}/reset",
            post(|| async { [("x-handler", "reset")] }),
        )
}

async fn check(addr: SocketAddr, mount: &str) {
    let mut counted = BTreeMap::from([("login", 0), ("reset", 0)]);
    let mut reached = counted.clone();
    let mut sent = Vec::new();
    for (spelling, handler) in SPELLINGS {
        sent.push((format!("{mount}{spelling}"), *handler));
    }
    // The absolute form: axum routes by its path.
    sent.push((format!("http://test{mount}/login"), "login"));
    for (target, handler) in sent {
        let reply: Reply = send(addr, localhost(), "POST", &target, &[]).await;
        let got = reply.all("x-handler").first().copied().unwrap_or("");
        assert_eq!(got, handler, "POST {target}: {}", reply.status_line);
        let fields = reply.all("ratelimit-policy").join(", ");
        for name in ["login", "reset"] {
            let applied = fields.contains(&format!("\"{name}\""));
            assert_eq!(
                applied,
                got == name,
                "POST {target}: reached {got:?}; counted on {name}: {applied}"
            );
            if got == name {
                *reached.get_mut(name).unwrap() += 1;
            }
            if applied {
                // One unit more taken on the policy's one key.
                let n = counted.get_mut(name).unwrap();
                *n += 1;
                let left = reply.header("ratelimit");
                assert!(
                    left.starts_with(&format!("\"{name}\";r={};", QUOTA - *n)),
                    "POST {target}: RateLimit {left}"
                );
            }
        }
    }
    assert_eq!(counted, reached);
    assert!(
        reached["login"] >= 3 && reached["reset"] >= 4,
        "{reached:?}"
    );
}

#[tokio::test]
async fn a_routes_policy_counts_every_spelling_axum_routes_to_its_handler() {
    let app = handlers().fallback(|| async { "other" }).layer(layer(""));
    check(serve(app).await, "").await;
}

#[tokio::test]
async fn under_a_nested_router_the_layer_sees_the_path_within_it() {
    // A layer on the nested router: its routes are the nested router's own.
    let app = Router::new()
        .nest("/api", handlers().layer(layer("")))
        .fallback(|| async { "other" });
    check(serve(app).await, "/api").await;
}
