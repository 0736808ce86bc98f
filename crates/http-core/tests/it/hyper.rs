//! The core alone, behind a plain hyper server (no tower anywhere): a
//! refusal, a policy that counts only failures, and a login guard's device
//! cookie work through its four steps over real HTTP.

use crate::common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{bare, send};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use ratelab_core::{Keyed, ManualClock, Quota};
use ratelab_gcra::Gcra;
use ratelab_http_core::{Client, Count, Limits, LoginGuard, Policy};
use tokio::net::TcpListener;

/// The app: the client's key (which the core put in the extensions), with
/// the status the request asks for in `x-respond-status`.
async fn app(request: Request<Incoming>) -> Response<Full<Bytes>> {
    let client = request
        .extensions()
        .get::<Client>()
        .unwrap()
        .key()
        .to_owned();
    let status = request
        .headers()
        .get("x-respond-status")
        .and_then(|v| v.to_str().ok()?.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let mut response = Response::new(Full::new(Bytes::from(client)));
    *response.status_mut() = status;
    response
}

async fn serve(limits: Limits) -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    bare::serve(listener, Arc::new(limits), app);
    addr
}

fn per_minute(n: u32, clock: &ManualClock) -> Keyed<Gcra, ManualClock> {
    Keyed::with_clock(Gcra::new(Quota::per_minute(n).unwrap()), clock.clone())
}

#[tokio::test]
async fn admitted_then_refused_with_the_fields_and_the_problem() {
    let clock = ManualClock::new();
    let limits = Limits::builder()
        .policy(Policy::new("default", per_minute(2, &clock)))
        .build()
        .unwrap();
    let addr = serve(limits).await;

    let ok = send(addr, "GET", "/", &[]).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.body(), "ip:127.0.0.1");
    assert_eq!(ok.headers()["ratelimit-policy"], r#""default";q=2;w=60"#);
    assert_eq!(ok.headers()["ratelimit"], r#""default";r=1;t=30"#);

    send(addr, "GET", "/", &[]).await;
    let refused = send(addr, "GET", "/", &[]).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "30");
    assert_eq!(refused.headers()["ratelimit"], r#""default";r=0;t=30"#);
    assert_eq!(
        refused.headers()["content-type"],
        "application/problem+json"
    );
    let problem: serde_json::Value = serde_json::from_slice(refused.body()).unwrap();
    assert_eq!(problem["violated-policies"], serde_json::json!(["default"]));
}

#[tokio::test]
async fn only_failures_count_once_the_response_is_settled() {
    let clock = ManualClock::new();
    let limits = Limits::builder()
        .policy(Policy::new("attempts", per_minute(2, &clock)).count(Count::Failures))
        .build()
        .unwrap();
    let addr = serve(limits).await;
    let with = |status: &'static str| async move {
        send(addr, "POST", "/", &[("x-respond-status", status)]).await
    };

    // A success is given back; the fields show the key as settled.
    let success = with("200").await;
    assert_eq!(success.headers()["ratelimit"], r#""attempts";r=2;t=0"#);
    let failure = with("401").await;
    assert_eq!(failure.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(failure.headers()["ratelimit"], r#""attempts";r=1;t=30"#);
    with("401").await;
    let refused = with("200").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_successful_login_gets_a_device_cookie_that_makes_the_device_known() {
    let clock = ManualClock::new();
    let guard = LoginGuard::builder([7; 32])
        .route(Method::POST, "/login")
        .account(|request| Some(request.headers.get("x-user")?.to_str().ok()?.to_owned()))
        .per_device(Policy::new("login-device", per_minute(10, &clock)))
        .per_network(Policy::new("login-network", per_minute(5, &clock)))
        .per_account(Policy::new("login-account", per_minute(50, &clock)))
        .token_lifetime(Duration::from_secs(3600))
        .build()
        .unwrap();
    let limits = Limits::builder().login_guard(guard).build().unwrap();
    let addr = serve(limits).await;

    let first = send(addr, "POST", "/login", &[("x-user", "alice")]).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        first.headers()["ratelimit-policy"],
        r#""login-network";q=5;w=60, "login-account";q=50;w=60"#
    );
    let set_cookie = first.headers()["set-cookie"].to_str().unwrap();
    assert!(
        set_cookie.starts_with("__Host-ratelab_device=v1."),
        "{set_cookie}"
    );
    let cookie = set_cookie.split(';').next().unwrap();

    let known = send(
        addr,
        "POST",
        "/login",
        &[("x-user", "alice"), ("cookie", cookie)],
    )
    .await;
    assert_eq!(known.status(), StatusCode::OK);
    assert_eq!(
        known.headers()["ratelimit-policy"],
        r#""login-device";q=10;w=60"#
    );
}
