//! Bounded connections: a connection that does not finish its handshake in
//! time, or stays silent for too long, is closed; and past a maximum, the
//! connection silent the longest makes room for the new one.
//!
//! Without these, clients that open connections and send nothing (or the
//! HTTP/2 preface and nothing more) hold a file descriptor each for ever:
//! a thousand of them exhaust a process limited to 1,024, and the server
//! can then neither accept a real call nor open its own configuration
//! files to reload them. The maximum defaults to the process's file limit
//! less a reserve for everything else the server opens.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// File descriptors kept for everything but client connections: Redis,
/// the configuration files, the other listeners, the logs.
const RESERVED_FDS: u64 = 128;

/// How long a connection must have been silent before it may be closed to
/// make room for a new one.
const EVICTABLE_AFTER_MS: u64 = 1000;

/// The bounds on a listener's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once, at most (0: the default, from the
    /// process's file limit).
    pub max_connections: usize,
    /// A connection that has not sent `handshake_bytes` within this is
    /// closed.
    pub handshake_timeout: Duration,
    /// What counts as a handshake: the HTTP/2 preface's 24 bytes for gRPC,
    /// 1 for HTTP/1.
    pub handshake_bytes: u64,
    /// A connection with no byte in either direction for this long is
    /// closed (zero: never).
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 0,
            handshake_timeout: Duration::from_secs(10),
            handshake_bytes: 24,
            idle_timeout: Duration::from_secs(300),
        }
    }
}

impl ConnectionLimits {
    /// The maximum in force: `max_connections`, or the process's soft
    /// file limit less a reserve (at least 16).
    pub fn effective_max(&self) -> usize {
        if self.max_connections > 0 {
            return self.max_connections;
        }
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(1 << 20);
        usize::try_from(limit.saturating_sub(RESERVED_FDS).max(16)).unwrap_or(usize::MAX)
    }
}

/// What the listener knows of one open connection.
#[derive(Debug)]
struct Tracked {
    /// Milliseconds since the registry started, of its last byte.
    last_active: AtomicU64,
    kill: AtomicBool,
    waker: AtomicWaker,
}

#[derive(Debug)]
struct Registry {
    start: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Tracked>>>,
    closed_idle: AtomicU64,
    evicted: AtomicU64,
    refused: AtomicU64,
}

impl Registry {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Something that accepts connections: a TCP or a Unix listener.
pub trait Accept: Send + Unpin + 'static {
    /// A connection.
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// Its peer's address.
    type Addr: Send;
    /// Polls for the next connection.
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<(Self::Io, Self::Addr)>>;
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<(Self::Io, Self::Addr)>> {
        match tokio::net::TcpListener::poll_accept(self, cx) {
            Poll::Ready(Ok((stream, addr))) => {
                // No Nagle: answers to calls multiplexed on one connection
                // are not held back waiting for an ACK.
                let _ = stream.set_nodelay(true);
                Poll::Ready(Ok((stream, addr)))
            }
            other => other,
        }
    }
}

#[cfg(unix)]
impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    type Addr = tokio::net::unix::SocketAddr;
    fn poll_accept(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<(Self::Io, Self::Addr)>> {
        tokio::net::UnixListener::poll_accept(self, cx)
    }
}

/// A listener's connections, each bounded by [`ConnectionLimits`]: a
/// stream of them for tonic, and an axum listener.
#[derive(Debug)]
pub struct Connections<L = tokio::net::TcpListener> {
    listener: L,
    limits: ConnectionLimits,
    max: usize,
    registry: Arc<Registry>,
    /// After an accept error (out of file descriptors), the next try.
    pause: Option<Pin<Box<Sleep>>>,
}

impl<L: Accept> Connections<L> {
    /// `listener`'s connections under `limits`.
    pub fn new(listener: L, limits: ConnectionLimits) -> Self {
        Connections {
            listener,
            max: limits.effective_max(),
            limits,
            registry: Arc::new(Registry {
                start: Instant::now(),
                next_id: AtomicU64::new(0),
                open: Mutex::new(HashMap::new()),
                closed_idle: AtomicU64::new(0),
                evicted: AtomicU64::new(0),
                refused: AtomicU64::new(0),
            }),
            pause: None,
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.registry.open.lock().len()
    }

    /// Makes room for one more: closes the connection silent the longest
    /// (for a second at least); false when none is.
    fn make_room(&self) -> bool {
        let now = self.registry.now_ms();
        let open = self.registry.open.lock();
        let oldest = open
            .values()
            .filter(|t| !t.kill.load(Ordering::Relaxed))
            .min_by_key(|t| t.last_active.load(Ordering::Relaxed));
        match oldest {
            Some(t)
                if now.saturating_sub(t.last_active.load(Ordering::Relaxed))
                    >= EVICTABLE_AFTER_MS =>
            {
                t.kill.store(true, Ordering::Relaxed);
                t.waker.wake();
                self.registry.evicted.fetch_add(1, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    fn poll_next_connection(&mut self, cx: &mut Context<'_>) -> Poll<Bounded<L::Io>> {
        loop {
            if let Some(pause) = &mut self.pause {
                if pause.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.pause = None;
            }
            let (io, _) = match self.listener.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(accepted)) => accepted,
                Poll::Ready(Err(error)) => {
                    // Out of file descriptors, most likely: the queue
                    // waits in the kernel meanwhile.
                    tracing::warn!(%error, open = self.open(), "cannot accept a connection: trying again in 50 ms");
                    self.pause = Some(Box::pin(tokio::time::sleep(Duration::from_millis(50))));
                    continue;
                }
            };
            if self.open() >= self.max && !self.make_room() {
                self.registry.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    max = self.max,
                    "too many connections, none idle: a new one is closed"
                );
                drop(io);
                continue;
            }
            let id = self.registry.next_id.fetch_add(1, Ordering::Relaxed);
            let tracked = Arc::new(Tracked {
                last_active: AtomicU64::new(self.registry.now_ms()),
                kill: AtomicBool::new(false),
                waker: AtomicWaker::new(),
            });
            self.registry.open.lock().insert(id, tracked.clone());
            return Poll::Ready(Bounded {
                io,
                id,
                tracked,
                registry: self.registry.clone(),
                limits: self.limits,
                read: 0,
                deadline: Box::pin(tokio::time::sleep(self.limits.handshake_timeout)),
            });
        }
    }
}

impl<L: Accept> futures::Stream for Connections<L> {
    type Item = io::Result<Bounded<L::Io>>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.poll_next_connection(cx).map(|c| Some(Ok(c)))
    }
}

#[cfg(feature = "cli")]
impl axum::serve::Listener for Connections<tokio::net::TcpListener> {
    type Io = Bounded<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let io = std::future::poll_fn(|cx| self.poll_next_connection(cx)).await;
        let addr = io
            .io
            .peer_addr()
            .unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
        (io, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// One connection under its listener's bounds.
#[derive(Debug)]
pub struct Bounded<Io> {
    io: Io,
    id: u64,
    tracked: Arc<Tracked>,
    registry: Arc<Registry>,
    limits: ConnectionLimits,
    read: u64,
    deadline: Pin<Box<Sleep>>,
}

impl<Io> Drop for Bounded<Io> {
    fn drop(&mut self) {
        self.registry.open.lock().remove(&self.id);
    }
}

impl<Io> Bounded<Io> {
    fn touch(&mut self) {
        self.tracked
            .last_active
            .store(self.registry.now_ms(), Ordering::Relaxed);
    }

    /// Whether the connection is to be closed now: evicted, or its
    /// handshake or idle time is over.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        self.tracked.waker.register(cx.waker());
        if self.tracked.kill.load(Ordering::Relaxed) {
            return true;
        }
        loop {
            if self.deadline.as_mut().poll(cx).is_pending() {
                return false;
            }
            if self.read < self.limits.handshake_bytes {
                tracing::debug!("a connection did not finish its handshake in time: closed");
                self.registry.closed_idle.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            if self.limits.idle_timeout.is_zero() {
                // Handshake done, no idle bound: never again.
                self.deadline
                    .as_mut()
                    .reset(Instant::now() + Duration::from_secs(86_400 * 365));
                continue;
            }
            let idle_ms = self
                .registry
                .now_ms()
                .saturating_sub(self.tracked.last_active.load(Ordering::Relaxed));
            let idle = Duration::from_millis(idle_ms);
            if idle >= self.limits.idle_timeout {
                tracing::debug!(?idle, "an idle connection is closed");
                self.registry.closed_idle.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            // Active since: wait for the rest of the idle time.
            self.deadline
                .as_mut()
                .reset(Instant::now() + (self.limits.idle_timeout - idle));
        }
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Bounded<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let n = (buf.filled().len() - before) as u64;
                if n > 0 {
                    let handshaking = self.read < self.limits.handshake_bytes;
                    self.read += n;
                    self.touch();
                    if handshaking && self.read >= self.limits.handshake_bytes {
                        let idle = if self.limits.idle_timeout.is_zero() {
                            Duration::from_secs(86_400 * 365)
                        } else {
                            self.limits.idle_timeout
                        };
                        self.deadline.as_mut().reset(Instant::now() + idle);
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            // Nothing to read: closed (as at its end) when its time is up.
            Poll::Pending if self.expired(cx) => Poll::Ready(Ok(())),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Bounded<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.tracked.kill.load(Ordering::Relaxed) {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.tracked.kill.load(Ordering::Relaxed) {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let written = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl<Io: tonic::transport::server::Connected> tonic::transport::server::Connected for Bounded<Io> {
    type ConnectInfo = Io::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn listener(limits: ConnectionLimits) -> (Connections, std::net::SocketAddr) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        (Connections::new(listener, limits), addr)
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_closed_after_the_handshake_timeout() {
        let (mut connections, addr) = listener(ConnectionLimits {
            max_connections: 10,
            handshake_timeout: Duration::from_secs(10),
            handshake_bytes: 24,
            idle_timeout: Duration::from_secs(60),
        })
        .await;
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut server = connections.next().await.unwrap().unwrap();
        let mut buf = [0u8; 64];
        // Nothing sent: at 10 s (on the paused clock), the server side ends.
        let read = server.read(&mut buf).await.unwrap();
        assert_eq!(read, 0);
        drop(server);
        assert_eq!(connections.open(), 0);
        client.write_all(b"late").await.ok();
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_is_closed_and_an_active_one_is_not() {
        let (mut connections, addr) = listener(ConnectionLimits {
            max_connections: 10,
            handshake_timeout: Duration::from_secs(10),
            handshake_bytes: 4,
            idle_timeout: Duration::from_secs(60),
        })
        .await;
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut server = connections.next().await.unwrap().unwrap();
        client.write_all(b"preface!").await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(server.read(&mut buf).await.unwrap(), 8);
        // Active every 30 s for five minutes: kept.
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(30)).await;
            client.write_all(b"x").await.unwrap();
            assert_eq!(server.read(&mut buf).await.unwrap(), 1);
        }
        // Then silent: closed 60 s later.
        let before = Instant::now();
        assert_eq!(server.read(&mut buf).await.unwrap(), 0);
        assert!(
            before.elapsed() >= Duration::from_secs(59),
            "{:?}",
            before.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_maximum_the_longest_silent_connection_makes_room() {
        let (mut connections, addr) = listener(ConnectionLimits {
            max_connections: 2,
            handshake_timeout: Duration::from_secs(600),
            handshake_bytes: 1,
            idle_timeout: Duration::ZERO,
        })
        .await;
        let _a = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut first = connections.next().await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let _b = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _second = connections.next().await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let _c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _third = connections.next().await.unwrap().unwrap();
        // The first, silent the longest, was told to close.
        let mut buf = [0u8; 8];
        assert_eq!(first.read(&mut buf).await.unwrap(), 0);
        assert_eq!(connections.registry.evicted.load(Ordering::Relaxed), 1);
    }
}
