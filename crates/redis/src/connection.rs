//! [`Connection`]: a single Redis node or a Redis Cluster, behind one type.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, RedisResult};

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
