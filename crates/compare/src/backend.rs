//! Where the Redis scenarios get their Redis: `--redis-url`, else
//! `$REDIS_URL`, else a throwaway `redis-server` started here when one is on
//! `PATH`, else none (the in-memory scenarios still run, and the report says
//! what was skipped and how to enable it). What runs on that server is
//! [`crate::atomic`]'s and [`crate::flawed`]'s business.

use std::time::Duration;

use ratelab_testkit::redis::{RedisServer, StartError};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use crate::CompareError;

/// How long connecting to Redis may take before the run gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one Redis command may take.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How to get Redis, for the messages that say what was skipped.
pub const HOW_TO_ENABLE: &str = "install Redis so that `redis-server` is on PATH \
(Debian/Ubuntu: `sudo apt-get install redis-server`; macOS: `brew install redis`) and run \
`just compare` again, or point it at a running server with `REDIS_URL=redis://host:6379/ just compare` \
(or `--redis-url`)";

/// A Redis server the run may use.
#[derive(Debug)]
pub struct RedisEnv {
    url: String,
    version: String,
    origin: String,
    client: redis::Client,
    /// Prefixes the keys of this run's atomic limiters: runs never share
    /// state, even on a long-lived server.
    prefix: String,
    /// Whether redis-cell (`CL.THROTTLE`) answers on this server, and if
    /// not, why.
    redis_cell: Result<(), String>,
    /// Which redis-cell the server loaded, as far as this run knows.
    redis_cell_version: String,
    /// Kept alive for the run when we started it; killed on drop.
    _server: Option<RedisServer>,
}

/// Whether the run has Redis, and if not, why.
#[derive(Debug)]
pub enum RedisChoice {
    /// Redis is there.
    Available(Box<RedisEnv>),
    /// No Redis: the Redis scenarios are skipped.
    Skipped {
        /// Why, in a sentence.
        reason: String,
    },
}

/// Chooses the run's Redis. An explicit URL that does not answer is an
/// error (the user asked for it); a missing `redis-server` is not.
pub async fn resolve(url: Option<String>, no_redis: bool) -> Result<RedisChoice, CompareError> {
    if no_redis {
        return Ok(RedisChoice::Skipped {
            reason: "`--no-redis` was given".into(),
        });
    }
    if let Some(url) = url {
        let env = RedisEnv::connect(url, "given with --redis-url".into(), None).await?;
        return Ok(RedisChoice::Available(Box::new(env)));
    }
    if let Some(url) = std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty()) {
        let env = RedisEnv::connect(url, "given in $REDIS_URL".into(), None).await?;
        return Ok(RedisChoice::Available(Box::new(env)));
    }
    // redis-cell, the outside anchor on Redis, is loaded when it builds.
    let cell = ratelab_testkit::redis_cell::library();
    let started = match &cell {
        Ok(path) => {
            let path = path.to_string_lossy();
            RedisServer::try_start_with(&["--loadmodule", &path])
                .map_err(|e| format!("redis-server did not start with redis-cell loaded: {e}"))
        }
        Err(why) => Err(format!("redis-cell could not be built: {why}")),
    };
    let (started, cell_error) = match started {
        Ok(server) => (Ok(server), None),
        Err(why) => (RedisServer::try_start(), Some(why)),
    };
    let server = match started {
        Ok(server) => server,
        Err(StartError::NotFound { .. }) => {
            return Ok(RedisChoice::Skipped {
                reason: "no `--redis-url`, no `$REDIS_URL`, and no `redis-server` on PATH".into(),
            });
        }
        Err(e) => {
            return Err(CompareError::Unavailable(format!(
                "`redis-server` was found but did not start: {e}"
            )));
        }
    };
    let origin = format!(
        "a throwaway `{}` started for this run (no persistence, killed at the end)",
        server.binary().display()
    );
    let mut env = RedisEnv::connect(server.url(), origin, Some(server)).await?;
    if let Some(why) = cell_error {
        env.redis_cell = Err(why);
    } else {
        env.redis_cell_version = ratelab_testkit::redis_cell::version();
    }
    Ok(RedisChoice::Available(Box::new(env)))
}

impl RedisEnv {
    /// Connects to `url`, checks that it answers, and reads its version.
    pub async fn connect(
        url: String,
        origin: String,
        server: Option<RedisServer>,
    ) -> Result<Self, CompareError> {
        let unreachable = |source: redis::RedisError| CompareError::RedisUnreachable {
            url: url.clone(),
            source,
        };
        let client = redis::Client::open(url.as_str()).map_err(unreachable)?;
        let mut env = RedisEnv {
            url: url.clone(),
            version: String::new(),
            origin,
            client,
            prefix: format!(
                "ratelab-compare-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros())
            ),
            redis_cell: Ok(()),
            redis_cell_version: format!(
                "redis-cell of a version this run cannot tell (loaded by the server at {url}; `MODULE LIST` says `ver 1` for every release)"
            ),
            _server: server,
        };
        let mut conn = env.connection().await.map_err(|e| match e {
            CompareError::Redis(source) => unreachable(source),
            other => other,
        })?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await
            .map_err(unreachable)?;
        env.version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim()
            .to_owned();
        // A peek (quantity 0) on a key of this run: charges nothing.
        let probe = format!("{}:redis-cell-probe", env.prefix);
        let answer: Result<Vec<i64>, _> = redis::cmd("CL.THROTTLE")
            .arg(&probe)
            .arg(1)
            .arg(1)
            .arg(1)
            .arg(0)
            .query_async(&mut conn)
            .await;
        env.redis_cell = answer.map(|_| ()).map_err(|e| {
            format!("the server at {url} does not answer CL.THROTTLE (redis-cell not loaded): {e}")
        });
        Ok(env)
    }

    /// Whether redis-cell's `CL.THROTTLE` answers on this server (`Err`
    /// says why not).
    pub fn redis_cell(&self) -> Result<(), &str> {
        self.redis_cell.as_ref().map(|_| ()).map_err(String::as_str)
    }

    /// Which redis-cell answers `CL.THROTTLE`: its version and where it
    /// was built from, when this run loaded it.
    pub fn redis_cell_version(&self) -> &str {
        &self.redis_cell_version
    }

    /// A new connection of its own (one per simulated app instance).
    pub async fn connection(&self) -> Result<MultiplexedConnection, CompareError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let connect = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(result) => Ok(result?),
            Err(_) => Err(CompareError::Redis(redis::RedisError::from((
                redis::ErrorKind::Io,
                "connection timed out",
            )))),
        }
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The key prefix of this run's atomic limiters.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The server's version (`INFO server`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Where this server came from, in a phrase.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Runs one command on a fresh connection (for `INFO`, `MEMORY USAGE`).
    pub async fn command<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, CompareError> {
        let mut conn = self.connection().await?;
        Ok(cmd.query_async(&mut conn).await?)
    }
}
