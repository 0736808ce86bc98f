//! [`Connection`]: a single Redis node or a Redis Cluster, behind one type.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, RedisResult, Value};

/// A connection to Redis: either one node (multiplexed, reconnecting on its
/// own after a failure) or a Redis Cluster (routing each key to its slot's
/// master, following MOVED/ASK). Cloning is cheap and shares the connection:
/// many tasks pipeline their commands over it.
#[derive(Clone)]
pub enum Connection {
    /// One node, through a reconnecting multiplexed connection.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

/// How long to wait for a TCP connection to Redis, when (re)connecting.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

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
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(500))
            .set_number_of_retries(3)
    }

    /// Connects to a Redis Cluster through any of its nodes' URLs.
    pub async fn cluster<S: AsRef<str>>(urls: &[S]) -> RedisResult<Self> {
        let client = ClusterClient::builder(urls.iter().map(|u| u.as_ref().to_owned()))
            .connection_timeout(CONNECT_TIMEOUT)
            .retries(2)
            .build()?;
        Ok(Connection::Cluster(client.get_async_connection().await?))
    }

    /// Runs one command.
    pub async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Connection::Single(manager) => cmd.query_async(&mut manager.clone()).await,
            Connection::Cluster(cluster) => cmd.query_async(&mut cluster.clone()).await,
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
        };
        let mut replies = replies.into_iter();
        let (Some(reply), Some(acknowledged)) = (replies.next(), replies.next()) else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "a pipeline of two commands did not answer two replies",
            )));
        };
        let reply = reply.extract_error()?;
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
        }
    }

    /// `"single"` or `"cluster"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Connection::Single(_) => "single",
            Connection::Cluster(_) => "cluster",
        }
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Connection::{}", self.kind())
    }
}
