//! The silent pitfall, made loud: a server that gives the layer no peer
//! address (axum served without connect info) would limit every client as
//! one, `ip:unknown`. The layer says so once, at error level, on the first
//! such request; and without any tracing subscriber it writes the same line
//! to standard error.

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::Request;
use ratelab_core::{Keyed, ManualClock, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{Policy, RateLimitLayer};
use tower::ServiceExt;

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_layer_that_cannot_see_the_peer_says_so_once_at_error_level() {
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .init();

    let limiter = Keyed::with_clock(Gcra::new(Quota::per_minute(2).unwrap()), ManualClock::new());
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("anyone", limiter))
        .build()
        .unwrap();
    // No `into_make_service_with_connect_info`: requests carry no peer.
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let response = app
            .clone()
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    // Every request is the same client: the third is over the quota of 2.
    assert_eq!(statuses, [200, 200, 429]);

    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert_eq!(
        text.matches("carries no peer address").count(),
        1,
        "said once, not per request: {text}"
    );
    let line = text
        .lines()
        .find(|l| l.contains("carries no peer address"))
        .unwrap();
    assert!(line.contains("ERROR"), "at error level: {line}");
    assert!(
        line.contains("into_make_service_with_connect_info"),
        "says the fix: {line}"
    );
}
