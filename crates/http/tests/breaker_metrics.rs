//! The breaker's state reaches the metrics: a policy on a Redis limiter
//! whose breaker opened exports `ratelab_http_breaker_open{policy} 1`; one on
//! a healthy Redis exports 0.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::Request;
use metrics_exporter_prometheus::PrometheusBuilder;
use ratelab_core::{AsyncRateLimiter, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{Policy, RateLimitLayer};
use ratelab_redis::{Connection, RedisStore};
use ratelab_testkit::redis::RedisServer;
use tower::ServiceExt;

fn policy(name: &str, connection: Connection) -> Policy {
    let limiter = Arc::new(
        // The healthy one never times out, however loaded the machine (one
        // failure opens the breaker); the dead one fails at once.
        RedisStore::builder(connection, Gcra::new(Quota::per_minute(50).unwrap()))
            .timeout(Duration::from_secs(30))
            .breaker(1, Duration::from_secs(60))
            .build(),
    );
    let breaker = limiter.clone();
    Policy::shared(name, limiter as Arc<dyn AsyncRateLimiter>)
        .timeout(Duration::from_secs(30))
        .breaker_open(move || breaker.stats().breaker_open)
        .fail_open()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_state_is_exported_per_policy() {
    let metrics = PrometheusBuilder::new().install_recorder().unwrap();
    let server = RedisServer::start();
    let healthy = Connection::single(&server.url()).await.unwrap();
    // Nothing listens on port 1: the first call fails and opens the breaker.
    let dead = Connection::single_lazy("redis://127.0.0.1:1/").unwrap();
    let layer = RateLimitLayer::builder()
        .policy(policy("down", dead))
        .policy(policy("up", healthy))
        .build()
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    for _ in 0..3 {
        let response = app
            .clone()
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        // Both fail open or pass: the request goes through.
        assert_eq!(response.status(), 200);
    }
    let text = metrics.render();
    assert!(
        text.contains("ratelab_http_breaker_open{policy=\"down\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("ratelab_http_breaker_open{policy=\"up\"} 0"),
        "{text}"
    );
}
