//! A server that drives the core without tower ([`bare`]), and a client.

#![allow(dead_code, unreachable_pub)]

pub mod bare;

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Sends `method path` with `headers` over a fresh connection, and reads the
/// whole response.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Response<Bytes> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Empty::<Bytes>::new()).unwrap();
    let (head, body) = sender.send_request(request).await.unwrap().into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Response::from_parts(head, body)
}
