//! Real HTTP on loopback: an axum server on 127.0.0.1:0 with connect info, and
//! a raw HTTP/1.1 client over a TCP socket that can choose its source address
//! (127.0.0.2 is another peer) and sends header bytes exactly as given.

#![allow(dead_code, unreachable_pub)]

pub mod example;
pub mod login;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket};

/// Liveness bound for one exchange: a hung server fails the test instead of
/// hanging it. Not a speed assertion: a healthy exchange takes milliseconds.
pub const EXCHANGE_BOUND: Duration = Duration::from_secs(20);

/// Serves `app` on a fresh loopback port, with the peer address available to
/// the layer. The listener is bound before this returns, so the server is
/// ready: connections wait in the backlog until it accepts them.
pub async fn serve(app: Router) -> SocketAddr {
    serve_on(app, IpAddr::V4(Ipv4Addr::LOCALHOST)).await
}

/// [`serve`] on `ip` (`::1` for IPv6 loopback).
pub async fn serve_on(app: Router, ip: IpAddr) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
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

/// One response, as received.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status line, e.g. `HTTP/1.1 429 Too Many Requests`.
    pub status_line: String,
    pub status: u16,
    /// Header lines in order, names as sent (hyper sends them lowercase).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// Every value of `name`, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The only value of `name`; panics if absent or repeated.
    pub fn header(&self, name: &str) -> &str {
        match self.all(name)[..] {
            [one] => one,
            ref other => panic!("expected one {name} header, got {other:?} in {self:#?}"),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        !self.all(name).is_empty()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.text()))
    }
}

/// Sends `method path` from `from` (a loopback address) with `headers` given
/// as raw bytes, and reads the whole response.
pub async fn send(
    addr: SocketAddr,
    from: IpAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
) -> Reply {
    let mut raw =
        format!("{method} {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n").into_bytes();
    for (name, value) in headers {
        raw.extend_from_slice(name.as_bytes());
        raw.extend_from_slice(b": ");
        raw.extend_from_slice(value);
        raw.extend_from_slice(b"\r\n");
    }
    if method != "GET" && method != "HEAD" {
        raw.extend_from_slice(b"content-length: 0\r\n");
    }
    raw.extend_from_slice(b"\r\n");
    tokio::time::timeout(EXCHANGE_BOUND, exchange(addr, from, &raw, method == "HEAD"))
        .await
        .unwrap_or_else(|_| panic!("no response to {method} {path} within {EXCHANGE_BOUND:?}"))
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    send(addr, localhost(), "GET", path, &[]).await
}

pub fn localhost() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

/// Another loopback address: a second peer on the same machine.
pub fn other_peer() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))
}

/// The IPv6 loopback address.
pub fn localhost_v6() -> IpAddr {
    IpAddr::V6(Ipv6Addr::LOCALHOST)
}

impl Reply {
    /// The `name=value` of the cookie this response sets, as a browser
    /// would send it back.
    pub fn cookie(&self) -> Option<String> {
        let set = self.all("set-cookie").into_iter().next()?;
        Some(set.split(';').next()?.trim().to_owned())
    }

    /// The `r` of `policy` in the `RateLimit` field.
    pub fn remaining(&self, policy: &str) -> Option<u64> {
        self.limit_param(policy, "r")
    }

    /// The `t` of `policy` in the `RateLimit` field.
    pub fn next_after(&self, policy: &str) -> Option<u64> {
        self.limit_param(policy, "t")
    }

    fn limit_param(&self, policy: &str, param: &str) -> Option<u64> {
        let quoted = format!("\"{policy}\"");
        self.all("ratelimit")
            .into_iter()
            .flat_map(|line| line.split(','))
            .map(str::trim)
            .find_map(|item| {
                let mut parts = item.split(';');
                if parts.next()? != quoted {
                    return None;
                }
                parts.find_map(|p| p.strip_prefix(param)?.strip_prefix('=')?.parse().ok())
            })
    }
}

async fn exchange(addr: SocketAddr, from: IpAddr, raw: &[u8], head_only: bool) -> Reply {
    let socket = match from {
        IpAddr::V4(_) => TcpSocket::new_v4(),
        IpAddr::V6(_) => TcpSocket::new_v6(),
    }
    .unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    let mut stream = socket.connect(addr).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await.unwrap();
    parse(&bytes, head_only)
}

fn parse(bytes: &[u8], head_only: bool) -> Reply {
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {:?}", String::from_utf8_lossy(bytes)));
    let head = std::str::from_utf8(&bytes[..split]).expect("head is text");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap().to_owned();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|line| {
            let (name, value) = line.split_once(':').expect("header line");
            (name.to_owned(), value.trim_start().to_owned())
        })
        .collect();
    let rest = &bytes[split + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let body = if head_only {
        Vec::new()
    } else if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Reply {
        status_line,
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..end]).unwrap().trim(), 16).unwrap();
        rest = &rest[end + 2..];
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}
