//! Settling through `ratelab-http`: the same requests as the direct run,
//! each a real HTTP request to a server on a loopback socket behind
//! [`RateLimitLayer`], its estimate reserved from the request
//! ([`Policy::cost_with`]) and settled from the response's
//! `x-tokens-used` header ([`Policy::settle_from_header`]).
//!
//! The limiter decides on a clock the run moves to each event, and the
//! application answers a request only when the run reaches that request's
//! response time, so as many requests are in flight as in the direct run,
//! each an open connection. A queue slot's wait (the leaky queue) is slept
//! by the layer on tokio's paused clock, which moves on when nothing else
//! can run: the run never waits it out in real time, and the limiter's
//! clock is the run's alone.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use ratelab::http::{Policy, RateLimitLayer, SetPeerAddr};
use ratelab::{AlgorithmKind, AsyncRateLimiter, ManualClock, Quota};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::{Layer, service_fn};

use super::{Outcome, Request, Tally};
use crate::CompareError;
use crate::algorithms;

/// The response header the application reports its tokens in.
pub(super) const USED_HEADER: &str = "x-tokens-used";
/// The policy's name: the limiter's key is `tokens:api-key`.
const POLICY: &str = "tokens";
const KEY: &[u8] = b"tokens:api-key";

/// A request the application holds: it tells the run it was entered, then
/// waits for the tokens to answer with.
struct Held {
    entered: oneshot::Sender<()>,
    used: oneshot::Receiver<u32>,
}

type Holds = Arc<Mutex<HashMap<usize, Held>>>;

fn unavailable(what: &str, e: impl std::fmt::Display) -> CompareError {
    CompareError::Unavailable(format!("{what}: {e}"))
}

/// `kind` through the layer, the same requests as the direct run: its
/// outcome and, per request, whether it was admitted.
pub(super) async fn simulate(
    kind: AlgorithmKind,
    quota: Quota,
    reqs: &[Request],
    seconds: u64,
) -> Result<(Outcome, Vec<bool>), CompareError> {
    let clock = ManualClock::new();
    let limiter = algorithms::keyed_shared(kind, quota, clock.clone());
    let holds: Holds = Arc::default();
    let (address, server) = serve(Arc::clone(&limiter), Arc::clone(&holds)).await?;
    let result = drive(
        kind,
        &clock,
        limiter.as_ref(),
        &holds,
        address,
        reqs,
        seconds,
    )
    .await;
    server.abort();
    result
}

/// In flight: (response instant, request, where its tokens go, its
/// client's task).
type InFlight = Vec<(
    u64,
    usize,
    oneshot::Sender<u32>,
    JoinHandle<Result<u16, CompareError>>,
)>;

async fn drive(
    kind: AlgorithmKind,
    clock: &ManualClock,
    limiter: &dyn AsyncRateLimiter,
    holds: &Holds,
    address: SocketAddr,
    reqs: &[Request],
    seconds: u64,
) -> Result<(Outcome, Vec<bool>), CompareError> {
    let mut tally = Tally::new(kind);
    let mut admitted = vec![false; reqs.len()];
    let mut in_flight: InFlight = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        settle_until(r.at, clock, limiter, reqs, &mut in_flight, &mut tally).await?;
        clock.set(r.at);
        let (entered_tx, entered_rx) = oneshot::channel();
        let (used_tx, used_rx) = oneshot::channel();
        holds.lock().expect("not poisoned").insert(
            i,
            Held {
                entered: entered_tx,
                used: used_rx,
            },
        );
        let path = format!("/complete?id={i}&estimate={}", r.estimate);
        let mut client = tokio::spawn(get(address, path));
        tokio::select! {
            biased;
            Ok(()) = entered_rx => {
                admitted[i] = true;
                tally.admit(r, in_flight.len() + 1);
                in_flight.push((r.done, i, used_tx, client));
            }
            status = &mut client => {
                holds.lock().expect("not poisoned").remove(&i);
                let status = status.map_err(|e| unavailable("a request task failed", e))??;
                if status != 429 {
                    return Err(CompareError::Unavailable(format!(
                        "request {i} was answered {status} without reaching the application"
                    )));
                }
            }
        }
    }
    settle_until(u64::MAX, clock, limiter, reqs, &mut in_flight, &mut tally).await?;
    Ok((tally.finish(seconds), admitted))
}

/// Answers, in time order, the requests whose response is due by `until`,
/// each settled by the layer from its header before its client reads it.
async fn settle_until(
    until: u64,
    clock: &ManualClock,
    limiter: &dyn AsyncRateLimiter,
    reqs: &[Request],
    in_flight: &mut InFlight,
    tally: &mut Tally,
) -> Result<(), CompareError> {
    in_flight.sort_by_key(|f| (f.0, f.1));
    while in_flight.first().is_some_and(|f| f.0 <= until) {
        let (done, i, used, client) = in_flight.remove(0);
        clock.set(done);
        let before = limiter.peek_async(KEY, 0).await?.remaining;
        let r = reqs[i];
        let _ = used.send(r.actual);
        let status = client
            .await
            .map_err(|e| unavailable("a request task failed", e))??;
        let after = limiter.peek_async(KEY, 0).await?.remaining;
        if status == 200 {
            tally.settled(&r, before, after);
        } else {
            tally.out.settle_errors += 1;
        }
    }
    Ok(())
}

/// The application behind the layer on a loopback port: each request is
/// held until the run gives its tokens.
async fn serve(
    limiter: Arc<dyn AsyncRateLimiter>,
    holds: Holds,
) -> Result<(SocketAddr, JoinHandle<()>), CompareError> {
    let policy = Policy::shared(POLICY, limiter)
        .key(|_, _| Some("api-key".into()))
        .cost_with(|request, _| {
            query_param(request.uri.query().unwrap_or(""), "estimate")
                .and_then(|n| n.parse().ok())
                .unwrap_or(1)
        })
        .settle_from_header(HeaderName::from_static(USED_HEADER));
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .build()
        .map_err(|e| unavailable("rate-limit layer", e))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| unavailable("bind a loopback port", e))?;
    let address = listener
        .local_addr()
        .map_err(|e| unavailable("read the bound port", e))?;
    let server = tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let holds = Arc::clone(&holds);
            let app = service_fn(move |request| complete(Arc::clone(&holds), request));
            let service = SetPeerAddr::new(layer.layer(app), peer);
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                    .await;
            });
        }
    });
    Ok((address, server))
}

/// The application: says it was entered, waits for its tokens, answers
/// them in the header.
async fn complete<B>(
    holds: Holds,
    request: http::Request<B>,
) -> Result<http::Response<Full<Bytes>>, Infallible> {
    let id = query_param(request.uri().query().unwrap_or(""), "id").and_then(|n| n.parse().ok());
    let held = id.and_then(|id: usize| holds.lock().expect("not poisoned").remove(&id));
    let mut response = http::Response::new(Full::new(Bytes::from_static(b"done")));
    if let Some(held) = held {
        let _ = held.entered.send(());
        if let Ok(used) = held.used.await {
            response
                .headers_mut()
                .insert(USED_HEADER, HeaderValue::from(used));
        }
    }
    Ok(response)
}

fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

/// The status code of `GET path` on `address`, on a connection of its own.
async fn get(address: SocketAddr, path: String) -> Result<u16, CompareError> {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| unavailable("connect to the test server", e))?;
    let _ = stream.set_nodelay(true);
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: compare\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .map_err(|e| unavailable("send a request", e))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .await
        .map_err(|e| unavailable("read a response", e))?;
    let head = String::from_utf8_lossy(&response[..response.len().min(32)]).into_owned();
    head.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| CompareError::Unavailable(format!("not an HTTP response: {head:?}")))
}
