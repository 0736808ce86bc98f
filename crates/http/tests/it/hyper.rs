//! The layer in front of a plain hyper server (no axum): the peer address
//! comes from `SetPeerAddr`, the body type is the service's own.

use crate::common;

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use ratelab_core::{Keyed, ManualClock, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{Identify, Policy, RateLimitLayer, SetPeerAddr, TrustedProxies};
use tokio::net::TcpListener;
use tower::{Layer, service_fn};

async fn hello(_request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
}

async fn serve_hyper(layer: RateLimitLayer) -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let service = SetPeerAddr::new(layer.layer(service_fn(hello)), peer);
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn plain_hyper_server() {
    let layer = RateLimitLayer::builder()
        .identify(Identify::new().trusted_proxies(TrustedProxies::parse(["127.0.0.1"]).unwrap()))
        .policy(Policy::new(
            "default",
            Keyed::with_clock(Gcra::new(Quota::per_minute(1).unwrap()), ManualClock::new()),
        ))
        .build()
        .unwrap();
    let addr = serve_hyper(layer).await;
    let behind_proxy = |client: &'static str| async move {
        common::send(
            addr,
            common::localhost(),
            "GET",
            "/",
            &[("x-forwarded-for", client.as_bytes())],
        )
        .await
    };

    let ok = behind_proxy("203.0.113.1").await;
    assert_eq!(ok.status_line, "HTTP/1.1 200 OK");
    assert_eq!(ok.text(), "hello");
    assert_eq!(ok.header("ratelimit-policy"), r#""default";q=1;w=60"#);
    assert_eq!(ok.header("ratelimit"), r#""default";r=0;t=60"#);

    let refused = behind_proxy("203.0.113.1").await;
    assert_eq!(refused.status_line, "HTTP/1.1 429 Too Many Requests");
    assert_eq!(refused.header("retry-after"), "60");
    assert_eq!(refused.json()["violated-policies"][0], "default");

    // Another client behind the proxy; and the proxy itself, a third one.
    assert_eq!(behind_proxy("203.0.113.2").await.status, 200);
    assert_eq!(common::get(addr, "/").await.status, 200);
}
