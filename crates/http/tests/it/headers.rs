//! The fields and bodies on the wire: allowed and refused responses byte for
//! byte, the problem body, and `Retry-After` against the limiter itself.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use common::{get as fetch, localhost, send, serve};
use ratelab_core::{AsyncRateLimiter, Keyed, ManualClock, Quota, RateLimiter};
use ratelab_gcra::Gcra;
use ratelab_http::{HeaderStyle, Policy, RateLimitLayer};
use serde_json::json;
use sfv::{BareItem, List, ListEntry, Parser};

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/login", post(|| async { "welcome" }))
        .layer(layer)
}

/// The head without `date` (the only line that changes from run to run).
fn head(reply: &common::Reply) -> Vec<String> {
    std::iter::once(reply.status_line.clone())
        .chain(
            reply
                .headers
                .iter()
                .filter(|(n, _)| n != "date")
                .map(|(n, v)| format!("{n}: {v}")),
        )
        .collect()
}

#[tokio::test]
async fn allowed_and_refused_responses_byte_for_byte() {
    let clock = ManualClock::new();
    let limiter = Keyed::with_clock(Gcra::new(Quota::per_minute(2).unwrap()), clock.clone());
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("default", limiter))
        .headers(HeaderStyle::DraftAndLegacy)
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;

    let first = fetch(addr, "/").await;
    assert_eq!(
        head(&first),
        [
            "HTTP/1.1 200 OK",
            "content-type: text/plain; charset=utf-8",
            r#"ratelimit-policy: "default";q=2;w=60"#,
            r#"ratelimit: "default";r=1;t=30"#,
            "x-ratelimit-limit: 2",
            "x-ratelimit-remaining: 1",
            "x-ratelimit-reset: 30",
            "content-length: 5",
            "connection: close",
        ]
    );
    assert_eq!(first.text(), "hello");

    let second = fetch(addr, "/").await;
    assert_eq!(second.status, 200);
    assert_eq!(second.header("ratelimit"), r#""default";r=0;t=30"#);

    let refused = fetch(addr, "/").await;
    let body = refused.json();
    assert_eq!(
        head(&refused),
        [
            "HTTP/1.1 429 Too Many Requests".to_owned(),
            "content-type: application/problem+json".to_owned(),
            "retry-after: 30".to_owned(),
            r#"ratelimit-policy: "default";q=2;w=60"#.to_owned(),
            r#"ratelimit: "default";r=0;t=30"#.to_owned(),
            "x-ratelimit-limit: 2".to_owned(),
            "x-ratelimit-remaining: 0".to_owned(),
            // Until the key is full again, as on every response; the wait
            // for a retry is Retry-After.
            "x-ratelimit-reset: 60".to_owned(),
            format!("content-length: {}", refused.body.len()),
            "connection: close".to_owned(),
        ]
    );
    assert_eq!(
        body,
        json!({
            "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
            "title": "Request cannot be satisfied as assigned quota has been exceeded",
            "status": 429,
            "detail": "policy \"default\" allows 2 per 60 s; retry in 30 s.",
            "violated-policies": ["default"],
        })
    );
    // The members in RFC 9457's order, `type` first.
    assert!(refused.text().starts_with(r#"{"type":"https://iana.org/"#));

    // 30 s later exactly, one unit is back.
    clock.advance(Duration::from_secs(30));
    let again = fetch(addr, "/").await;
    assert_eq!(again.status, 200);
    assert_eq!(again.header("ratelimit"), r#""default";r=0;t=30"#);
}

/// Reads `RateLimit` with a structured-field parser: `(name, r, t)` per item.
fn parse_limits(value: &str) -> Vec<(String, i64, i64)> {
    let list: List = Parser::new(value).parse().expect("RateLimit is an sf-list");
    list.iter()
        .map(|entry| {
            let ListEntry::Item(item) = entry else {
                panic!("inner list in {value}")
            };
            let BareItem::String(name) = &item.bare_item else {
                panic!("policy name is not a string in {value}")
            };
            let int = |key: &str| match item.params.get(key) {
                Some(BareItem::Integer(n)) => i64::from(*n),
                other => panic!("{key} is {other:?} in {value}"),
            };
            (name.as_str().to_owned(), int("r"), int("t"))
        })
        .collect()
}

#[tokio::test]
async fn retry_after_agrees_with_the_limiter() {
    let clock = ManualClock::new();
    // 3 per 10 s: one unit every 3.333334 s, a wait that is not whole seconds.
    let limiter = Arc::new(Keyed::with_clock(
        Gcra::new(Quota::new(3, Duration::from_secs(10)).unwrap()),
        clock.clone(),
    ));
    let shared: Arc<dyn AsyncRateLimiter> = limiter.clone();
    let layer = RateLimitLayer::builder()
        .policy(Policy::shared("burst", shared))
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;

    for expected_r in [2, 1, 0] {
        let reply = fetch(addr, "/").await;
        assert_eq!(reply.status, 200);
        assert_eq!(parse_limits(reply.header("ratelimit"))[0].1, expected_r);
    }
    let refused = fetch(addr, "/").await;
    assert_eq!(refused.status, 429);
    let retry_after: u64 = refused.header("retry-after").parse().unwrap();

    // The limiter's own answer for the same key (a refusal consumes nothing).
    let decision = limiter.check(b"burst:ip:127.0.0.1", 1).unwrap();
    assert!(!decision.allowed);
    assert_eq!(decision.retry_after(), Duration::from_micros(3_333_334));
    assert_eq!(retry_after, decision.retry_after_secs());
    assert_eq!(retry_after, 4);

    // Retry-After is never earlier than the `t` advertised.
    let limits = parse_limits(refused.header("ratelimit"));
    assert_eq!(limits, [("burst".to_owned(), 0, 4)]);
    assert!(u64::try_from(limits[0].2).unwrap() <= retry_after);

    // One microsecond before the limiter's retry_after: still refused; at it,
    // admitted. A client waiting the advertised whole seconds is never early.
    clock.advance(decision.retry_after() - Duration::from_micros(1));
    assert_eq!(fetch(addr, "/").await.status, 429);
    clock.advance(Duration::from_micros(1));
    assert_eq!(fetch(addr, "/").await.status, 200);
}

#[tokio::test]
async fn every_response_carries_the_fields_and_parses() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::builder()
        .policy(Policy::new(
            "default",
            Keyed::with_clock(Gcra::new(Quota::per_minute(100).unwrap()), clock.clone()),
        ))
        .policy(
            Policy::new(
                "login",
                Keyed::with_clock(
                    Gcra::new(Quota::new(5, Duration::from_secs(900)).unwrap()),
                    clock.clone(),
                ),
            )
            .route(http::Method::POST, "/login"),
        )
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;

    // An unknown path (the router's 404) and a wrong method (405) are
    // responses too.
    let missing = fetch(addr, "/missing").await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.header("ratelimit-policy"),
        r#""default";q=100;w=60"#
    );
    let wrong_method = send(addr, localhost(), "GET", "/login", &[]).await;
    assert_eq!(wrong_method.status, 405);
    assert!(wrong_method.has("ratelimit"));

    let login = send(addr, localhost(), "POST", "/login", &[]).await;
    assert_eq!(login.status, 200);
    let policies: List = Parser::new(login.header("ratelimit-policy"))
        .parse()
        .unwrap();
    assert_eq!(policies.len(), 2);
    assert_eq!(
        login.header("ratelimit-policy"),
        r#""default";q=100;w=60, "login";q=5;w=900"#
    );
    assert_eq!(
        parse_limits(login.header("ratelimit")),
        [
            // 3 requests so far, 0.6 s each to come back: the next is back
            // in 0.6 s.
            ("default".to_owned(), 97, 1),
            ("login".to_owned(), 4, 180),
        ]
    );

    // HEAD is answered by the GET handler, so it is limited like GET.
    let head = send(addr, localhost(), "HEAD", "/", &[]).await;
    assert_eq!(head.status, 200);
    assert_eq!(parse_limits(head.header("ratelimit"))[0].1, 96);
}

/// One policy on `algorithm` (5 per minute: one unit every 12 s) on `clock`.
fn five_per_minute(algorithm: &str, clock: &ManualClock) -> Arc<dyn AsyncRateLimiter> {
    use ratelab_fixed_window::FixedWindow;
    use ratelab_leaky_bucket::LeakyMeter;
    use ratelab_sliding_window::SlidingLog;
    use ratelab_token_bucket::TokenBucket;
    let quota = Quota::per_minute(5).unwrap();
    let clock = clock.clone();
    match algorithm {
        "gcra" => Arc::new(Keyed::with_clock(Gcra::new(quota), clock)),
        "token-bucket" => Arc::new(Keyed::with_clock(TokenBucket::new(quota), clock)),
        "leaky-meter" => Arc::new(Keyed::with_clock(LeakyMeter::new(quota), clock)),
        "fixed-window" => Arc::new(Keyed::with_clock(FixedWindow::new(quota), clock)),
        "sliding-log" => Arc::new(Keyed::with_clock(SlidingLog::new(quota), clock)),
        other => panic!("no algorithm {other}"),
    }
}

/// `t` as the current draft (-11) defines it: the seconds until more quota
/// is available than `r`. Read back with a structured-field parser, then
/// checked against what the limiter really admits on a manual clock: after
/// `r=0;t=N`, a request at N s passes and one a second earlier does not.
#[tokio::test]
async fn t_is_the_wait_until_more_quota_is_available() {
    for algorithm in [
        "gcra",
        "token-bucket",
        "leaky-meter",
        "fixed-window",
        "sliding-log",
    ] {
        let clock = ManualClock::new();
        // Not at a window edge, so that the fixed window's reset is not the
        // whole minute.
        clock.advance(Duration::from_secs(7));
        let layer = RateLimitLayer::builder()
            .policy(Policy::shared("p", five_per_minute(algorithm, &clock)))
            .build()
            .unwrap();
        let addr = serve(app(layer)).await;
        let limits = |reply: &common::Reply| {
            let [(name, r, t)] = &parse_limits(reply.header("ratelimit"))[..] else {
                panic!("{algorithm}: one item expected in {reply:?}")
            };
            assert_eq!(name, "p");
            (*r, u64::try_from(*t).unwrap())
        };

        // Spend 2 of 5, 3 s apart: r=3, and more is available after t.
        assert_eq!(fetch(addr, "/").await.status, 200, "{algorithm}");
        clock.advance(Duration::from_secs(3));
        let partial = fetch(addr, "/").await;
        let (r, t) = limits(&partial);
        assert_eq!(r, 3, "{algorithm}");
        if matches!(algorithm, "gcra" | "token-bucket" | "leaky-meter") {
            // Steady refill: the first unit is back 12 s after it was spent,
            // 9 s from now.
            assert_eq!(t, 9, "{algorithm}");
        }

        // Spend the rest; the refusal's `t` is the wait for a unit request.
        for _ in 0..3 {
            assert_eq!(fetch(addr, "/").await.status, 200, "{algorithm}");
        }
        let refused = fetch(addr, "/").await;
        assert_eq!(refused.status, 429, "{algorithm}");
        let (r, t) = limits(&refused);
        assert_eq!(r, 0, "{algorithm}");
        assert!(t >= 1, "{algorithm}: t={t}");
        let retry_after: u64 = refused.header("retry-after").parse().unwrap();
        assert_eq!(retry_after, t, "{algorithm}");

        // A second early: still refused. At t: admitted.
        clock.advance(Duration::from_secs(t - 1));
        assert_eq!(fetch(addr, "/").await.status, 429, "{algorithm}, t={t}");
        clock.advance(Duration::from_secs(1));
        let admitted = fetch(addr, "/").await;
        assert_eq!(admitted.status, 200, "{algorithm}, t={t}");

        if matches!(algorithm, "gcra" | "token-bucket" | "leaky-meter") {
            // An admitted request that leaves nothing: `t` is exact too.
            let (r, t) = limits(&admitted);
            assert_eq!(r, 0, "{algorithm}");
            clock.advance(Duration::from_secs(t - 1));
            assert_eq!(fetch(addr, "/").await.status, 429, "{algorithm}, t={t}");
            clock.advance(Duration::from_secs(1));
            assert_eq!(fetch(addr, "/").await.status, 200, "{algorithm}, t={t}");
        }
    }
}
