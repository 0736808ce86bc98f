//! [`Connection`]: a single Redis node, a Redis Cluster, or the master
//! Redis Sentinel names, behind one type.

use std::fmt;
use std::time::Duration;

use ratelab_resilience::LATE_REPLY_WAIT;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, RedisResult, Value};

use crate::sentinel::SentinelMaster;

/// A connection to Redis: one node (multiplexed, reconnecting on its own
/// after a failure), a Redis Cluster (routing each key to its slot's
/// master, following MOVED/ASK), or the master of a service Redis Sentinel
/// watches (found again through the sentinels after a failover). Cloning is
/// cheap and shares the connection: many tasks pipeline their commands over
/// it.
#[derive(Clone)]
pub enum Connection {
    /// One node, through a reconnecting multiplexed connection.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
    /// The master Redis Sentinel names ([`Connection::sentinel`]).
    Sentinel(SentinelMaster),
}

/// How long to wait for a TCP connection to Redis, when (re)connecting.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the connection itself awaits a reply: as long as a limiter
/// awaits a late one ([`LATE_REPLY_WAIT`]). Each call is bounded by its
/// limiter's own timeout; a shorter bound here (redis-rs's default is
/// 500 ms) would fail every call at it whatever the limiter's timeout says,
/// and drop the late replies whose admissions are given back.
pub(crate) const RESPONSE_TIMEOUT: Duration = LATE_REPLY_WAIT;

impl Connection {
    /// Connects to one node (`redis://host:port/db`), now: an unreachable
    /// server is an error here. After that, a lost connection is re-made on
    /// its own.
    pub async fn single(url: &str) -> RedisResult<Self> {
        let client = redis::Client::open(url)?;
        Ok(Connection::Single(
            ConnectionManager::new_with_config(client, Self::manager_config()).await?,
        ))
    }

    /// Like [`Connection::single`], but connects on first use: a server that
    /// is down at startup is not an error until a command needs it.
    pub fn single_lazy(url: &str) -> RedisResult<Self> {
        let client = redis::Client::open(url)?;
        Ok(Connection::Single(ConnectionManager::new_lazy_with_config(
            client,
            Self::manager_config(),
        )?))
    }

    fn manager_config() -> ConnectionManagerConfig {
        // Reconnect fast and keep trying: the limiter's own per-call timeout
        // bounds how long any caller waits.
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(500))
            .set_number_of_retries(3)
    }

    /// Connects to a Redis Cluster through any of its nodes' URLs.
    pub async fn cluster<S: AsRef<str>>(urls: &[S]) -> RedisResult<Self> {
        let client = ClusterClient::builder(urls.iter().map(|u| u.as_ref().to_owned()))
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .retries(2)
            .build()?;
        Ok(Connection::Cluster(client.get_async_connection().await?))
    }

    /// Connects to the master of `service` (the name the sentinels'
    /// `sentinel monitor` gives it) as Redis Sentinel names it: `sentinels`
    /// are the URLs of Sentinel nodes (`redis://host:26379`), asked in
    /// turn. Now: no sentinel answering, or no master, is an error here.
    ///
    /// After a failover, the first call that finds the old master gone
    /// (the connection lost or refused, a timeout, or `READONLY` from a
    /// master demoted to a replica) fails as an outage (the limiter's
    /// failure policy answers it), and the next call asks the sentinels
    /// again and goes to the master they promoted. What the failover may
    /// have lost, and strict mode: [Replicas and
    /// failover](crate#replicas-and-failover).
    pub async fn sentinel<S: AsRef<str>>(sentinels: &[S], service: &str) -> RedisResult<Self> {
        let urls = sentinels.iter().map(|u| u.as_ref().to_owned()).collect();
        Ok(Connection::Sentinel(
            SentinelMaster::connect(urls, service.to_owned(), CONNECT_TIMEOUT).await?,
        ))
    }

    /// Runs one command (its reply awaited for up to [`LATE_REPLY_WAIT`]).
    pub async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Connection::Single(manager) => cmd.query_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => cmd.query_async(&mut cluster.clone()).await,
            Connection::Sentinel(master) => {
                let mut connection = master.connection().await?;
                master.after(cmd.query_async(&mut connection).await)
            }
        }
    }

    /// Runs `cmd`, a command on `key`, then `WAIT replicas timeout_ms` on
    /// the same connection, in one pipeline: the command's reply (an error
    /// reply as `Err`) and the number of replicas that acknowledged every
    /// write made on that connection so far, the command's included.
    ///
    /// One pipeline, because `WAIT` counts the writes of its own
    /// connection: sent on its own, it could reach a connection made again
    /// in between, which has written nothing, and confirm at once a write
    /// that was lost. On a cluster the pair goes to the master of `key`'s
    /// slot (`WAIT` has no key to be routed by).
    pub(crate) async fn query_then_wait(
        &self,
        cmd: &Cmd,
        key: &[u8],
        replicas: u32,
        timeout_ms: u64,
    ) -> RedisResult<(Value, i64)> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.add_command(cmd.clone());
        pipe.cmd("WAIT").arg(replicas).arg(timeout_ms);
        let replies: Vec<Value> = match self {
            Connection::Single(manager) => pipe.query_async(&mut manager.clone()).await?,
            Connection::Cluster(cluster) => {
                let node =
                    SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
                cluster.clone().route_pipeline(pipe, 0, 2, node).await?
            }
            Connection::Sentinel(master) => {
                let mut connection = master.connection().await?;
                master.after(pipe.query_async(&mut connection).await)?
            }
        };
        let mut replies = replies.into_iter();
        let (Some(reply), Some(acknowledged)) = (replies.next(), replies.next()) else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "a pipeline of two commands did not answer two replies",
            )));
        };
        // An error reply (`READONLY` from a demoted master) came as a value.
        let reply = self.after(reply.extract_error())?;
        let acknowledged = match acknowledged.extract_error()? {
            Value::Int(n) => n,
            other => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Parse,
                    "WAIT did not answer an integer",
                    format!("{other:?}"),
                )));
            }
        };
        Ok((reply, acknowledged))
    }

    /// Loads `script` (`SCRIPT LOAD`; on a cluster, on every master).
    pub async fn load_script(&self, script: &redis::Script) -> RedisResult<String> {
        match self {
            Connection::Single(manager) => script.load_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => script.load_async(&mut cluster.clone()).await,
            Connection::Sentinel(master) => {
                let mut connection = master.connection().await?;
                master.after(script.load_async(&mut connection).await)
            }
        }
    }

    /// `result`, after a Sentinel connection has dropped a master that it
    /// says is gone.
    fn after<T>(&self, result: RedisResult<T>) -> RedisResult<T> {
        match self {
            Connection::Sentinel(master) => master.after(result),
            _ => result,
        }
    }

    /// `"single"`, `"cluster"` or `"sentinel"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Connection::Single(_) => "single",
            Connection::Cluster(_) => "cluster",
            Connection::Sentinel(_) => "sentinel",
        }
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Connection::{}", self.kind())
    }
}
