//! A ratelab limiter counts only failures through its own refund: the
//! in-memory keyed limiter and single bucket as they are, a Redis limiter
//! through `Refundable`.

mod common;

use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use common::{get as fetch, serve};
use http::StatusCode;
use ratelab_core::{Direct, Keyed, ManualClock, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{Count, Policy, RateLimitLayer, Refundable};
use ratelab_redis::{Connection, RedisLimiter};
use ratelab_testkit::redis::RedisServer;

/// `/ok` answers 200, `/fail` 401.
fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route(
            "/{outcome}",
            get(|Path(outcome): Path<String>| async move {
                if outcome == "ok" {
                    StatusCode::OK
                } else {
                    StatusCode::UNAUTHORIZED
                }
            }),
        )
        .layer(layer)
}

/// Three failures an hour: successes are given back, failures count.
async fn failures_only(policy: Policy) {
    let layer = RateLimitLayer::builder()
        .policy(policy.count(Count::Failures))
        .build()
        .unwrap();
    let addr = serve(app(layer)).await;
    let mut statuses = Vec::new();
    for path in [
        "/ok", "/ok", "/ok", "/ok", "/fail", "/fail", "/fail", "/fail",
    ] {
        statuses.push(fetch(addr, path).await.status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 401, 401, 401, 429]);
}

fn quota() -> Quota {
    Quota::per_hour(3).unwrap()
}

#[tokio::test]
async fn memory_limiters_refund_as_they_are() {
    let clock = ManualClock::new();
    failures_only(Policy::refundable(
        "login",
        Keyed::with_clock(Gcra::new(quota()), clock.clone()),
    ))
    .await;
    failures_only(Policy::refundable(
        "login",
        Direct::with_clock(Gcra::new(quota()), clock),
    ))
    .await;
}

#[tokio::test]
async fn a_redis_limiter_refunds_through_refundable() {
    let server = RedisServer::start();
    let connection = Connection::single(&server.url()).await.unwrap();
    let limiter = RedisLimiter::builder(connection, Gcra::new(quota()))
        .timeout(Duration::from_secs(2))
        .build();
    failures_only(Policy::refundable("login", Refundable(limiter))).await;
}
