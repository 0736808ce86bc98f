//! [`SentinelMaster`]: the master Redis Sentinel names for a service, found
//! again after a failover.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, RedisResult, ServerErrorKind};

use crate::connection::RESPONSE_TIMEOUT;

/// The master of a service that Redis Sentinel watches, as
/// [`Connection::Sentinel`](crate::Connection::Sentinel) holds it: one
/// multiplexed connection to the master the sentinels named last. A call
/// that finds the master gone (the connection lost, refused or timed out,
/// or the node answering `READONLY` or `MASTERDOWN` because it is a replica
/// now) fails, as any outage does, and drops the connection: the next call
/// asks the sentinels again, and reaches the master they promoted. Cloning
/// shares it.
#[derive(Clone)]
pub struct SentinelMaster {
    shared: Arc<Shared>,
}

struct Shared {
    sentinels: Vec<String>,
    service: String,
    config: AsyncConnectionConfig,
    current: Mutex<Option<MultiplexedConnection>>,
}

impl SentinelMaster {
    /// Asks `sentinels` (`redis://host:port` URLs of Sentinel nodes) for
    /// the master of `service`, and connects to it now.
    pub(crate) async fn connect(
        sentinels: Vec<String>,
        service: String,
        connect_timeout: Duration,
    ) -> RedisResult<Self> {
        if sentinels.is_empty() {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "Connection::sentinel needs the URL of at least one Sentinel",
            )));
        }
        let master = SentinelMaster {
            shared: Arc::new(Shared {
                sentinels,
                service,
                config: AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connect_timeout))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT)),
                current: Mutex::new(None),
            }),
        };
        master.connection().await?;
        Ok(master)
    }

    /// The service's name.
    pub fn service(&self) -> &str {
        &self.shared.service
    }

    /// The connection to the master, asking the sentinels for it first
    /// when there is none.
    pub(crate) async fn connection(&self) -> RedisResult<MultiplexedConnection> {
        if let Some(connection) = self.shared.current.lock().clone() {
            return Ok(connection);
        }
        // Boxed: the sentinels' futures are deep, and every call's future
        // would otherwise hold them.
        Box::pin(self.resolve()).await
    }

    /// Asks the sentinels for the master, and connects to it.
    async fn resolve(&self) -> RedisResult<MultiplexedConnection> {
        let shared = &*self.shared;
        let mut sentinels = SentinelClient::build(
            shared.sentinels.clone(),
            shared.service.clone(),
            None,
            SentinelServerType::Master,
        )?;
        let connection = sentinels
            .async_get_client()
            .await?
            .get_multiplexed_async_connection_with_config(&shared.config)
            .await?;
        *shared.current.lock() = Some(connection.clone());
        Ok(connection)
    }

    /// `result`, after dropping the connection if it says the master is
    /// gone or is a master no more.
    pub(crate) fn after<T>(&self, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(error) = &result
            && master_is_gone(error)
        {
            *self.shared.current.lock() = None;
        }
        result
    }
}

/// Whether `error` says the connection no longer reaches the master.
fn master_is_gone(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
}

impl fmt::Debug for SentinelMaster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelMaster")
            .field("sentinels", &self.shared.sentinels)
            .field("service", &self.shared.service)
            .finish_non_exhaustive()
    }
}
