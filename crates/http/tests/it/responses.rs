//! What responses look like when the application chooses: custom refusal and
//! unavailability responses, header styles, the decision in the request's
//! extensions, the global skip, and `Retry-After` on every `503`.

use crate::common;

use std::time::{Duration, UNIX_EPOCH};

use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use bytes::Bytes;
use common::{get as fetch, localhost, send, serve};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::Full;
use ratelab_core::{AsyncRateLimiter, CheckFuture, Error, Keyed, Limiter, ManualClock, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{HeaderStyle, LegacyReset, LimitOutcome, Policy, RateLimitInfo, RateLimitLayer};

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { "hello" }).options(|| async { "preflight" }),
        )
        .route("/health", get(|| async { "ok" }))
        .route(
            "/me",
            get(|Extension(info): Extension<RateLimitInfo>| async move {
                let policy = info.policy("default").unwrap();
                format!(
                    "{:?} remaining={} limit={} t={:?}",
                    info.outcome,
                    info.remaining().unwrap(),
                    policy.limit,
                    policy.next_after.unwrap()
                )
            }),
        )
        .layer(layer)
}

fn two_per_minute(clock: &ManualClock) -> Keyed<Gcra, ManualClock> {
    Keyed::with_clock(Gcra::new(Quota::per_minute(2).unwrap()), clock.clone())
}

#[tokio::test]
async fn a_custom_refusal_keeps_retry_after_and_the_fields() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("default", two_per_minute(&clock)))
        .refusal_response(|info| {
            assert_eq!(info.outcome, LimitOutcome::Refused);
            let mut response = Response::new(Full::new(Bytes::from(format!(
                "slow down, {}: {} s",
                info.client,
                info.retry_after_secs().unwrap()
            ))));
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            response
                .headers_mut()
                .insert("x-why", HeaderValue::from_static("quota"));
            response
        })
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    fetch(addr, "/").await;
    fetch(addr, "/").await;
    let refused = fetch(addr, "/").await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.text(), "slow down, ip:127.0.0.1: 30 s");
    assert_eq!(refused.header("x-why"), "quota");
    // Added by the layer: the response had none.
    assert_eq!(refused.header("retry-after"), "30");
    assert_eq!(refused.header("ratelimit"), r#""default";r=0;t=30"#);
}

#[tokio::test]
async fn header_styles() {
    let clock = ManualClock::new();
    // None: no rate limit field, but a refusal still says when to retry.
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("default", two_per_minute(&clock)))
        .headers(HeaderStyle::None)
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let ok = fetch(addr, "/").await;
    assert_eq!(ok.status, 200);
    for name in [
        "ratelimit",
        "ratelimit-policy",
        "x-ratelimit-limit",
        "x-ratelimit-reset",
    ] {
        assert!(!ok.has(name), "{name} in {ok:?}");
    }
    fetch(addr, "/").await;
    let refused = fetch(addr, "/").await;
    assert_eq!((refused.status, refused.header("retry-after")), (429, "30"));
    assert!(!refused.has("ratelimit"));

    // Legacy only, reset as a Unix time from the layer's wall clock.
    let wall = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("default", two_per_minute(&clock)))
        .headers(HeaderStyle::Legacy)
        .legacy_reset(LegacyReset::Epoch)
        .wall_clock(move || wall)
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let first = fetch(addr, "/").await;
    assert!(!first.has("ratelimit") && !first.has("ratelimit-policy"));
    assert_eq!(first.header("x-ratelimit-limit"), "2");
    assert_eq!(first.header("x-ratelimit-remaining"), "1");
    assert_eq!(first.header("x-ratelimit-reset"), "1800000030");
    fetch(addr, "/").await;
    // The same meaning on a refusal: when the key is full again (60 s), not
    // the wait for a retry (30 s, in Retry-After).
    let refused = fetch(addr, "/").await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("x-ratelimit-reset"), "1800000060");
    assert_eq!(refused.header("retry-after"), "30");
    let epoch: u64 = refused.header("x-ratelimit-reset").parse().unwrap();
    let delta = epoch - wall.duration_since(UNIX_EPOCH).unwrap().as_secs();
    assert_eq!(delta, 60);
}

#[tokio::test]
async fn handlers_read_the_decision_and_skipped_requests_pass_untouched() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("default", two_per_minute(&clock)))
        .skip(|request| request.uri.path() == "/health" || request.method == http::Method::OPTIONS)
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;

    let me = fetch(addr, "/me").await;
    assert_eq!(me.text(), "Allowed remaining=1 limit=2 t=30s");

    // Health checks and preflights: no limiter, no field, never refused.
    for _ in 0..5 {
        let health = fetch(addr, "/health").await;
        assert_eq!(health.status, 200);
        assert!(!health.has("ratelimit-policy"));
        let preflight = send(addr, localhost(), "OPTIONS", "/", &[]).await;
        assert_eq!(preflight.status, 200);
        assert!(!preflight.has("ratelimit"));
    }
    // Nothing was consumed by them.
    assert_eq!(
        fetch(addr, "/").await.header("ratelimit"),
        r#""default";r=0;t=30"#
    );
}

#[tokio::test]
async fn without_request_extensions_handlers_find_none_and_limits_hold() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("default", two_per_minute(&clock)))
        .request_extensions(false)
        .refusal_response(|info| {
            // A custom refusal still gets what was decided.
            let mut response = Response::new(Full::new(Bytes::from(format!(
                "{:?} {}",
                info.outcome,
                info.retry_after_secs().unwrap()
            ))));
            *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            response
        })
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/",
            get(
                |info: Option<Extension<RateLimitInfo>>,
                 client: Option<Extension<ratelab_http::Client>>| async move {
                    format!("info={} client={}", info.is_some(), client.is_some())
                },
            ),
        )
        .layer(layer);
    let addr = serve(app).await;
    for remaining in ["1", "0"] {
        let ok = fetch(addr, "/").await;
        assert_eq!(ok.status, 200);
        assert_eq!(ok.text(), "info=false client=false");
        // The fields are still sent: only the extensions are off.
        assert_eq!(
            ok.header("ratelimit"),
            format!(r#""default";r={remaining};t=30"#)
        );
    }
    let refused = fetch(addr, "/").await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.text(), "Refused 30");
    assert_eq!(refused.header("retry-after"), "30");
}

/// A limiter whose backend answers `error()`.
struct Down(fn() -> Error);

impl std::fmt::Debug for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Down")
    }
}

impl Limiter for Down {
    fn quota(&self) -> Quota {
        Quota::per_minute(10).unwrap()
    }
    fn algorithm_name(&self) -> &'static str {
        "gcra"
    }
    fn backend(&self) -> &'static str {
        "down"
    }
    fn bound(&self) -> ratelab_core::Bound {
        ratelab_core::Bound::rate(&self.quota())
    }
}

impl AsyncRateLimiter for Down {
    fn check_async<'a>(&'a self, _key: &'a [u8], _cost: u32) -> CheckFuture<'a> {
        Box::pin(std::future::ready(Err((self.0)())))
    }
}

#[tokio::test]
async fn every_503_says_when_to_retry() {
    // No hint from the limiter: 1 s.
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("sms", Down(|| Error::backend("connection refused"))).fail_closed())
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let down = fetch(addr, "/").await;
    assert_eq!(down.status, 503);
    assert_eq!(down.header("retry-after"), "1");
    assert_eq!(
        down.json()["unavailable-policies"],
        serde_json::json!(["sms"])
    );

    // An open breaker says when it tries again: rounded up.
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new(
                "sms",
                Down(|| Error::CircuitOpen(Duration::from_millis(4200))),
            )
            .fail_closed(),
        )
        .unavailable_response(|info| {
            assert_eq!(info.outcome, LimitOutcome::Unavailable);
            let mut response = Response::new(Full::new(Bytes::from_static(b"try later")));
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            response
        })
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let down = fetch(addr, "/").await;
    assert_eq!((down.status, down.text().as_str()), (503, "try later"));
    assert_eq!(down.header("retry-after"), "5");
}

/// The routes of [`app`], without its layer.
fn routes() -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/admin", get(|| async { "admin" }))
}

/// What a server sends for a request, without its `date`.
fn seen(reply: &common::Reply) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let headers = reply
        .headers
        .iter()
        .filter(|(name, _)| name != "date")
        .cloned()
        .collect();
    (reply.status, headers, reply.body.clone())
}

#[tokio::test]
async fn responses_in_the_service_body_are_the_default_ones() {
    type Build = fn(&ManualClock) -> ratelab_http::RateLimitLayerBuilder;
    let settings: [(&str, Build); 4] = [
        ("the default problem", |clock| {
            RateLimitLayer::builder().policy(Policy::new("default", two_per_minute(clock)))
        }),
        ("a custom refusal", |clock| {
            RateLimitLayer::builder()
                .policy(Policy::new("default", two_per_minute(clock)))
                .refusal_response(|info| {
                    let mut response = Response::new(Full::new(Bytes::from(format!(
                        "slow down, {}",
                        info.client
                    ))));
                    *response.status_mut() = StatusCode::IM_A_TEAPOT;
                    response
                })
        }),
        ("a policy on a route (the request taken apart)", |clock| {
            RateLimitLayer::builder()
                .policy(Policy::new("admin", two_per_minute(clock)).path("/admin"))
                .headers(HeaderStyle::DraftAndLegacy)
        }),
        ("no fields", |clock| {
            RateLimitLayer::builder()
                .policy(Policy::new("default", two_per_minute(clock)))
                .headers(HeaderStyle::None)
                .request_extensions(false)
        }),
    ];
    for (setting, build) in settings {
        let wrapped = serve(routes().layer(build(&ManualClock::new()).build().unwrap())).await;
        let own = build(&ManualClock::new())
            .build()
            .unwrap()
            .with_service_body();
        let own = serve(routes().layer(own)).await;
        let mut refused = 0;
        for path in ["/", "/admin", "/admin", "/admin", "/"] {
            let want = fetch(wrapped, path).await;
            let got = fetch(own, path).await;
            assert_eq!(seen(&got), seen(&want), "{setting}: {path}");
            refused += usize::from(want.status != 200);
        }
        assert!(refused > 0, "{setting}: nothing refused, nothing compared");
    }
}
