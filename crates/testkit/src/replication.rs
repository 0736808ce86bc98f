//! Replication for failover tests: a [`RedisServer`] started as a replica,
//! its catching up awaited, its promotion, and a [`Relay`] between a master
//! and a replica whose link can be cut, so that the replica lags by exactly
//! what the master wrote after the cut.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::redis::{RedisServer, StartError, command, replication_field};

/// How long a replica may take to catch up with its master: an event
/// waited for, generous for a machine loaded by other work.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// How often the replica's progress is asked for. Through a [`Relay`]
/// each question is a connection of its own (two threads): asked every
/// 10 ms, they crowd the relay that the replica's own link goes through.
const SYNC_POLL: Duration = Duration::from_millis(50);

impl RedisServer {
    /// Starts a server replicating the one on `master_port` (a
    /// [`Relay`]'s port, say), with extra arguments, and waits until it has
    /// caught up ([`RedisServer::wait_caught_up`]); or panics saying why.
    pub fn start_replica_of(master_port: u16, extra: &[&str]) -> Self {
        Self::try_start_replica_of(master_port, extra)
            .unwrap_or_else(|e| panic!("the replica did not start: {e}"))
    }

    /// [`RedisServer::start_replica_of`], or why it did not start.
    pub fn try_start_replica_of(master_port: u16, extra: &[&str]) -> Result<Self, StartError> {
        let port = master_port.to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", port.as_str()];
        args.extend_from_slice(extra);
        let replica = Self::try_start_with(&args)?;
        replica
            .try_wait_caught_up(master_port)
            .map_err(StartError::Failed)?;
        Ok(replica)
    }

    /// Waits until this replica's link to the server at `master_port` is
    /// up and it has processed every byte of the replication stream that
    /// server has produced (`slave_repl_offset` here equals
    /// `master_repl_offset` there), or panics after 60 s.
    pub fn wait_caught_up(&self, master_port: u16) {
        if let Err(e) = self.try_wait_caught_up(master_port) {
            panic!("{e}");
        }
    }

    fn try_wait_caught_up(&self, master_port: u16) -> Result<(), String> {
        let deadline = Instant::now() + SYNC_TIMEOUT;
        // After a full sync the master holds the stream back until the
        // replica's first acknowledgement (up to a second): a `PUBLISH`,
        // which the master propagates, proves the stream flows once the
        // replica's offset has reached the master's.
        let mut published = false;
        let mut tick = 0u32;
        loop {
            let up = replication_field(self.port(), "master_link_status").as_deref() == Some("up");
            // The master counts this replica (for `WAIT`) only once it holds
            // it online, which it does a moment after the replica's side is.
            let online = command(master_port, &["INFO", "replication"]).is_ok_and(|info| {
                info.lines().any(|line| {
                    line.starts_with("slave")
                        && line.contains(&format!(",port={},", self.port()))
                        && line.contains("state=online")
                })
            });
            // Again every 200 ms, until one is seen to arrive.
            if up && online && (!published || tick.is_multiple_of(4)) {
                published = command(master_port, &["PUBLISH", "ratelab-testkit:sync", "1"]).is_ok();
            }
            tick += 1;
            let here = replication_field(self.port(), "slave_repl_offset");
            let there = replication_field(master_port, "master_repl_offset");
            if published && here.is_some() && here == there && there.as_deref() != Some("0") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the replica on port {} did not catch up with port {master_port} \
                     (link up: {up}, online there: {online}, offsets {here:?} and {there:?})",
                    self.port()
                ));
            }
            thread::sleep(SYNC_POLL);
        }
    }

    /// `REPLICAOF NO ONE`: this replica becomes a master, with what it had
    /// received; its own replicas follow it.
    pub fn promote(&self) {
        let reply = self.command(&["REPLICAOF", "NO", "ONE"]);
        assert_eq!(reply.as_deref(), Ok("OK"), "REPLICAOF NO ONE: {reply:?}");
    }
}

/// A TCP relay on a free loopback port to the server on another port, for a
/// replica to replicate through, or a client to call through:
/// [`Relay::cut`] stops the server's stream from reaching the other side
/// (what it sends afterwards is dropped), while what that side sends still
/// reaches the server (a replica's acknowledgements: the master then sees a
/// replica stuck at the offset of the cut); [`Relay::hold`] keeps what the
/// server sends (a client's replies, the server having run its commands)
/// until [`Relay::release`]. The server's own death closes the relayed
/// connections; new ones are refused while it is away.
#[derive(Debug)]
pub struct Relay {
    port: u16,
    cut: Arc<AtomicBool>,
    held: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
}

impl Relay {
    /// Starts relaying connections on a free port to `upstream_port`.
    pub fn start(upstream_port: u16) -> Self {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("cannot bind a loopback port");
        let port = listener.local_addr().expect("a bound address").port();
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let relay = Relay {
            port,
            cut: Arc::new(AtomicBool::new(false)),
            held: Arc::new(AtomicBool::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
            dropped: Arc::new(AtomicU64::new(0)),
        };
        let gate = Gate {
            cut: relay.cut.clone(),
            held: relay.held.clone(),
            dropped: relay.dropped.clone(),
        };
        let stop = relay.stop.clone();
        thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((downstream, _)) => {
                        let _ = downstream.set_nonblocking(false);
                        let Ok(upstream) = TcpStream::connect((Ipv4Addr::LOCALHOST, upstream_port))
                        else {
                            continue;
                        };
                        relay_pair(upstream, downstream, gate.clone());
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        relay
    }

    /// The port to replicate from.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on, what the master sends is dropped, not relayed.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Bytes of the master's stream dropped since the cut.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }

    /// From now on, what the server sends is held, not relayed, until
    /// [`Relay::release`]: the server runs what it is sent, and its replies
    /// wait.
    pub fn hold(&self) {
        self.held.store(true, Ordering::SeqCst);
    }

    /// Relays what was held, and what comes after.
    pub fn release(&self) {
        self.held.store(false, Ordering::SeqCst);
    }
}

/// What a relay does with the server's stream.
#[derive(Debug, Clone)]
struct Gate {
    cut: Arc<AtomicBool>,
    held: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Copies both ways between a server (`upstream`) and its replica or
/// client, the server's side through `gate`; either side closing closes
/// both.
fn relay_pair(upstream: TcpStream, downstream: TcpStream, gate: Gate) {
    let (Ok(up_reader), Ok(down_writer)) = (upstream.try_clone(), downstream.try_clone()) else {
        return;
    };
    let (up, down) = (upstream, downstream);
    thread::spawn(move || {
        copy(up_reader, down_writer, Some(gate));
    });
    thread::spawn(move || {
        let (Ok(reader), writer) = (down.try_clone(), up) else {
            return;
        };
        copy(reader, writer, None);
        let _ = down.shutdown(Shutdown::Both);
    });
}

fn copy(mut from: TcpStream, mut to: TcpStream, gate: Option<Gate>) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(gate) = &gate {
            if gate.cut.load(Ordering::SeqCst) {
                gate.dropped.fetch_add(n as u64, Ordering::SeqCst);
                continue;
            }
            while gate.held.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(1));
            }
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
