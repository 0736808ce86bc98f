//! The core served over real HTTP without tower: each connection is a
//! plain hyper `service_fn` that drives the [`Limits`]' four steps around a
//! handler, as any server would. (`ratelab-http`'s shared cases test serves
//! its suites through this driver too, beside its tower layer.)

// A test helper, included by two test crates.
#![allow(unreachable_pub)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use ratelab_http_core::{Conclusion, Limits};
use tokio::net::TcpListener;

/// Serves `handler` behind `limits` on `listener`, until the runtime ends.
pub fn serve<H, F>(listener: TcpListener, limits: Arc<Limits>, handler: H)
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                return;
            };
            let (limits, handler) = (limits.clone(), handler.clone());
            let service = service_fn(move |request| {
                let (limits, handler) = (limits.clone(), handler.clone());
                async move { Ok::<_, Infallible>(limited(&limits, peer, request, handler).await) }
            });
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

/// One request from `peer`, through the four steps.
async fn limited<H, F>(
    limits: &Limits,
    peer: SocketAddr,
    request: Request<Incoming>,
    handler: H,
) -> Response<Full<Bytes>>
where
    H: Fn(Request<Incoming>) -> F,
    F: Future<Output = Response<Full<Bytes>>>,
{
    let (mut parts, body) = request.into_parts();
    // 1. The head, and the peer address the server knows.
    let Some(mut pending) = limits.start(&mut parts, |_| Some(peer.ip())) else {
        return handler(Request::from_parts(parts, body)).await;
    };
    // 2. The decision: at once in memory, awaited on Redis.
    let ruling = pending.decide().await;
    let delay = ruling.delay();
    // 3. Refused now, or served.
    match limits.conclude(ruling, &mut parts) {
        Conclusion::Refuse(refused) => {
            let mut response = refused.info().problem_response().map(Full::new);
            refused.finish(limits, response.headers_mut());
            response
        }
        Conclusion::Pass(admitted) => {
            tokio::time::sleep(delay).await;
            let response = handler(Request::from_parts(parts, body)).await;
            // 4. Settled with the response head, which gets the fields.
            let (mut head, body) = response.into_parts();
            admitted.settle(limits, &mut head).await;
            Response::from_parts(head, body)
        }
    }
}
