//! The HTTP bench over loopback TCP: each app served by `axum::serve` on a
//! current-thread tokio runtime on one thread (pinned to one core), and a
//! load generator on another thread (pinned to the other core): a hyper
//! HTTP/1.1 client keeping a few connections to each app alive, each
//! connection one request at a time. Included by path by `benches/http.rs`
//! (it uses the bench's dev-dependencies, which the library cannot).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::serve::ListenerExt;
use http::header::{HOST, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

/// What one stack answered in one round.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Round {
    /// Responses `200 OK`.
    pub(crate) admitted: u64,
    /// Responses `429 Too Many Requests`.
    pub(crate) refused: u64,
    /// From the first request sent to the last response read.
    pub(crate) elapsed: Duration,
    /// The server thread's time on a CPU over the round (Linux; `None`
    /// elsewhere).
    pub(crate) server_cpu: Option<Duration>,
    /// The load generator's time on a CPU over the round.
    pub(crate) client_cpu: Option<Duration>,
}

impl Round {
    /// Admitted responses per second.
    pub(crate) fn admitted_per_sec(&self) -> f64 {
        per_sec(self.admitted, self.elapsed)
    }

    /// Refused responses per second.
    pub(crate) fn refused_per_sec(&self) -> f64 {
        per_sec(self.refused, self.elapsed)
    }

    /// The server thread's CPU time per response, ns.
    pub(crate) fn server_ns_per_request(&self) -> Option<f64> {
        let responses = self.admitted + self.refused;
        self.server_cpu
            .filter(|_| responses > 0)
            .map(|cpu| cpu.as_secs_f64() * 1e9 / count(responses))
    }

    /// The share of the round the server thread spent on a CPU (near 1: the
    /// server is the bottleneck, as it should be; well below 1: the load
    /// generator or the machine is).
    pub(crate) fn server_busy(&self) -> Option<f64> {
        self.server_cpu
            .map(|cpu| cpu.as_secs_f64() / self.elapsed.as_secs_f64())
    }

    /// The share of the round the load generator spent on a CPU.
    pub(crate) fn client_busy(&self) -> Option<f64> {
        self.client_cpu
            .map(|cpu| cpu.as_secs_f64() / self.elapsed.as_secs_f64())
    }
}

#[allow(clippy::cast_precision_loss)]
fn count(n: u64) -> f64 {
    n as f64
}

fn per_sec(n: u64, elapsed: Duration) -> f64 {
    count(n) / elapsed.as_secs_f64()
}

/// The load generator's side: its runtime, and its connections to each
/// app, in the order the apps were given.
pub(crate) struct Client {
    rt: Runtime,
    apps: Vec<Vec<SendRequest<Empty<Bytes>>>>,
    host: Vec<HeaderValue>,
    /// `/proc/<pid>/task/<tid>/schedstat` of the server thread.
    server_schedstat: Option<PathBuf>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("apps", &self.apps.len())
            .finish_non_exhaustive()
    }
}

fn request(host: &HeaderValue) -> Request<Empty<Bytes>> {
    let mut request = Request::get("/")
        .body(Empty::new())
        .expect("a valid request");
    request.headers_mut().insert(HOST, host.clone());
    request
}

impl Client {
    /// One exchange with app `app` on its first connection: the response's
    /// head and its whole body.
    pub(crate) fn exchange(&mut self, app: usize) -> (Response<()>, Bytes) {
        let sender = &mut self.apps[app][0];
        let request = request(&self.host[app]);
        self.rt.block_on(async {
            sender.ready().await.expect("the connection is open");
            let response = sender.send_request(request).await.expect("a response");
            let (parts, body) = response.into_parts();
            let body = body.collect().await.expect("a body").to_bytes();
            (Response::from_parts(parts, ()), body)
        })
    }

    /// Every connection to app `app` sends requests one after another, each
    /// after the last one's response was read to its end, until `duration`
    /// has passed.
    ///
    /// # Panics
    ///
    /// On a status other than 200 and 429, or a broken connection.
    pub(crate) fn round(&mut self, app: usize, duration: Duration) -> Round {
        let senders = std::mem::take(&mut self.apps[app]);
        let host = self.host[app].clone();
        let cpu_before = self.server_cpu();
        let client_before = thread_cpu("/proc/thread-self/schedstat");
        let (senders, admitted, refused, elapsed) = self.rt.block_on(async move {
            let started = Instant::now();
            let deadline = started + duration;
            let mut tasks = tokio::task::JoinSet::new();
            for mut sender in senders {
                let host = host.clone();
                tasks.spawn(async move {
                    let (mut admitted, mut refused) = (0u64, 0u64);
                    while Instant::now() < deadline {
                        sender.ready().await.expect("the connection is open");
                        let response = sender
                            .send_request(request(&host))
                            .await
                            .expect("a response");
                        match response.status() {
                            StatusCode::OK => admitted += 1,
                            StatusCode::TOO_MANY_REQUESTS => refused += 1,
                            other => panic!("unexpected status {other}"),
                        }
                        response.into_body().collect().await.expect("a body");
                    }
                    (sender, admitted, refused)
                });
            }
            let (mut back, mut admitted, mut refused) = (Vec::new(), 0, 0);
            while let Some(done) = tasks.join_next().await {
                let (sender, a, r) = done.expect("a connection's task");
                back.push(sender);
                admitted += a;
                refused += r;
            }
            (back, admitted, refused, started.elapsed())
        });
        self.apps[app] = senders;
        let client_cpu = client_before
            .zip(thread_cpu("/proc/thread-self/schedstat"))
            .map(|(before, after)| after.saturating_sub(before));
        let server_cpu = cpu_before
            .zip(self.server_cpu())
            .map(|(before, after)| after.saturating_sub(before));
        Round {
            admitted,
            refused,
            elapsed,
            server_cpu,
            client_cpu,
        }
    }

    /// The server thread's CPU time so far.
    fn server_cpu(&self) -> Option<Duration> {
        thread_cpu(self.server_schedstat.as_ref()?)
    }
}

/// A thread's time on a CPU so far, from its `schedstat` in `/proc`.
fn thread_cpu(schedstat: impl AsRef<std::path::Path>) -> Option<Duration> {
    let schedstat = std::fs::read_to_string(schedstat).ok()?;
    let ns = schedstat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// Serves each of `apps` on its own loopback port from one thread, opens
/// `connections` keep-alive connections to each from another thread, and
/// runs `job` there with them. The two threads are pinned to two distinct
/// cores when the process may run on two or more. When `job` returns (or
/// panics), the connections close and the server's runtime is dropped with
/// every task on it; both threads are joined before this returns.
///
/// # Panics
///
/// If a socket cannot be bound or connected, or if `job` panics.
pub(crate) fn with_sockets<R: Send + 'static>(
    apps: Vec<Router>,
    connections: usize,
    job: impl FnOnce(&mut Client) -> R + Send + 'static,
) -> R {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let (server_core, client_core) = match cores.as_slice() {
        [first, second, ..] => (Some(*first), Some(*second)),
        _ => (None, None),
    };
    let listeners: Vec<std::net::TcpListener> = apps
        .iter()
        .map(|_| {
            let listener =
                std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a loopback port");
            listener
                .set_nonblocking(true)
                .expect("a non-blocking socket");
            listener
        })
        .collect();
    let addrs: Vec<SocketAddr> = listeners
        .iter()
        .map(|l| l.local_addr().expect("a bound address"))
        .collect();
    let (stop, stopped) = oneshot::channel::<()>();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let server: JoinHandle<()> = std::thread::Builder::new()
        .name("http-server".into())
        .spawn(move || {
            if let Some(core) = server_core {
                core_affinity::set_for_current(core);
            }
            let _ = tid_tx.send(
                std::fs::read_link("/proc/thread-self")
                    .ok()
                    .map(|p| PathBuf::from("/proc").join(p).join("schedstat")),
            );
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                for (listener, app) in listeners.into_iter().zip(apps) {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .expect("a tokio listener")
                        .tap_io(|tcp| {
                            let _ = tcp.set_nodelay(true);
                        });
                    let service = app.into_make_service_with_connect_info::<SocketAddr>();
                    tokio::spawn(axum::serve(listener, service).into_future());
                }
                // Until the client is done; then the runtime drops every
                // server and connection.
                let _ = stopped.await;
            });
        })
        .expect("a server thread");
    let server_schedstat = tid_rx.recv().ok().flatten();
    let client = std::thread::Builder::new()
        .name("http-load".into())
        .spawn(move || {
            if let Some(core) = client_core {
                core_affinity::set_for_current(core);
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let apps = rt.block_on(async {
                let mut apps = Vec::with_capacity(addrs.len());
                for addr in &addrs {
                    let mut senders = Vec::with_capacity(connections);
                    for _ in 0..connections {
                        let stream = tokio::net::TcpStream::connect(addr)
                            .await
                            .expect("a connection to the server");
                        stream.set_nodelay(true).expect("TCP_NODELAY");
                        let (sender, connection) =
                            hyper::client::conn::http1::handshake(TokioIo::new(stream))
                                .await
                                .expect("an HTTP/1.1 connection");
                        tokio::spawn(connection);
                        senders.push(sender);
                    }
                    apps.push(senders);
                }
                apps
            });
            let host = addrs
                .iter()
                .map(|a| HeaderValue::from_str(&a.to_string()).expect("a host"))
                .collect();
            let mut client = Client {
                rt,
                apps,
                host,
                server_schedstat,
            };
            job(&mut client)
        })
        .expect("a client thread");
    let outcome = client.join();
    let _ = stop.send(());
    server.join().expect("the server thread ended cleanly");
    match outcome {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
