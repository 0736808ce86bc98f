//! The client side: outgoing calls wait for their turn, give up at the
//! timeout without being sent, and a throttled client stays under a server's
//! quota where an unthrottled one is refused.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratelab_core::{Clock, Keyed, ManualClock, Quota, SystemClock, WaitError};
use ratelab_gcra::Gcra;
use ratelab_http::{Policy, RateLimitLayer};
use ratelab_throttle::{Throttle, ThrottleError, ThrottleLayer};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// Serves `app` on a fresh loopback port, with the peer address available to
/// the layer.
async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

#[tokio::test]
async fn throttle_waits_for_each_turn() {
    // 20 per second, no burst beyond one: a turn every 50 ms.
    let limiter = Arc::new(Keyed::new(Gcra::new(
        Quota::per_second(20).unwrap().with_burst(1).unwrap(),
    )));
    let throttle = Throttle::new(limiter, Duration::from_secs(10)).key("example.com");
    let started = Instant::now();
    let mut order = Vec::new();
    for call in 0..5 {
        order.push(throttle.run(async move { call }).await.unwrap());
    }
    assert_eq!(order, [0, 1, 2, 3, 4]);
    // A lower bound: four waits of 50 ms happened.
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn throttle_gives_up_at_once_when_the_turn_is_past_the_timeout() {
    let limiter = Arc::new(Keyed::new(Gcra::new(Quota::per_hour(1).unwrap())));
    let throttle = Throttle::new(limiter, Duration::from_secs(5));
    assert!(throttle.acquire().await.unwrap().allowed);
    let ran = AtomicUsize::new(0);
    let refused = throttle
        .run(async { ran.fetch_add(1, Ordering::Relaxed) })
        .await
        .unwrap_err();
    match refused {
        WaitError::TimedOut {
            waited,
            retry_after,
        } => {
            // It did not sleep toward a turn it could not reach.
            assert!(waited < Duration::from_secs(5), "{waited:?}");
            assert!(retry_after > Duration::from_secs(3500), "{retry_after:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(ran.load(Ordering::Relaxed), 0, "the call must not run");
}

/// A server allowing 20 per second with a burst of 2 on `clock`, counting
/// the requests that reach the handler.
async fn server_on<C: Clock + 'static>(clock: C) -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let layer = RateLimitLayer::builder()
        .policy(Policy::new(
            "default",
            Keyed::with_clock(
                Gcra::new(Quota::per_second(20).unwrap().with_burst(2).unwrap()),
                clock,
            ),
        ))
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/",
            get(move || async move {
                counter.fetch_add(1, Ordering::Relaxed);
                "ok"
            }),
        )
        .layer(layer);
    (serve(app).await, hits)
}

/// [`server_on`] the real clock.
async fn server() -> (SocketAddr, Arc<AtomicUsize>) {
    server_on(SystemClock).await
}

#[tokio::test]
async fn a_throttled_hyper_client_stays_under_the_server_quota() {
    // Unthrottled, 15 at once: the server refuses all but its burst. On a
    // server clock that stands still, so that however slowly the 15 arrive
    // nothing comes back between them.
    let (addr, _) = server_on(ManualClock::new()).await;
    let uri = format!("http://{addr}/");
    let request = || Request::get(&uri).body(Empty::<Bytes>::new()).unwrap();
    let plain = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let statuses: Vec<StatusCode> =
        futures::future::join_all((0..15).map(|_| plain.clone().oneshot(request())))
            .await
            .into_iter()
            .map(|response| response.unwrap().status())
            .collect();
    let refused = statuses
        .iter()
        .filter(|&&s| s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(refused, 13, "{statuses:?}");

    // Throttled on the client to the server's rate (with no burst, so that
    // network jitter stays within the server's burst of 2), both on the
    // real clock: never refused. One request after another: the server sees
    // request i no later than the client lets request i + 1 go, so any n in
    // a row arrive spread over n - 2 turns at least, which its burst of 2
    // covers, however slow the machine.
    let (addr, _) = server().await;
    let uri = format!("http://{addr}/");
    let request = || Request::get(&uri).body(Empty::<Bytes>::new()).unwrap();
    let limiter = Arc::new(Keyed::new(Gcra::new(
        Quota::per_second(20).unwrap().with_burst(1).unwrap(),
    )));
    let mut client = ThrottleLayer::new(limiter, Duration::from_secs(10))
        .key(|request: &Request<Empty<Bytes>>| {
            request
                .uri()
                .authority()
                .map_or_else(Vec::new, |a| a.as_str().as_bytes().to_vec())
        })
        .layer(plain);
    for i in 0..15 {
        let response = client.ready().await.unwrap().call(request()).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "request {i}");
    }
}

#[tokio::test]
async fn a_throttled_request_past_its_timeout_is_not_sent() {
    let (addr, hits) = server().await;
    let uri = format!("http://{addr}/");
    let request = || Request::get(&uri).body(Empty::<Bytes>::new()).unwrap();
    let limiter = Arc::new(Keyed::new(Gcra::new(Quota::per_hour(1).unwrap())));
    let client = ThrottleLayer::new(limiter, Duration::from_millis(100))
        .layer(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());

    assert_eq!(
        client.clone().oneshot(request()).await.unwrap().status(),
        200
    );
    let error = client.clone().oneshot(request()).await.unwrap_err();
    assert!(
        matches!(error, ThrottleError::Wait(WaitError::TimedOut { .. })),
        "{error:?}"
    );
    assert!(
        error.to_string().starts_with("not sent: timed out"),
        "{error}"
    );
    assert_eq!(hits.load(Ordering::Relaxed), 1);
}
