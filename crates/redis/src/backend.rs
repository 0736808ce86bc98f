//! [`ScriptBackend`]: whether a decision runs as a Lua script or as the
//! native ratelab module's command, and how a limiter tells whether a server
//! has the module.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{RedisError, Value};

use crate::connection::Connection;
use crate::script::PROTOCOL_VERSION;

/// What runs a limiter's decisions on Redis.
///
/// The native module (`crates/redis-module`, loaded with
/// `redis-server --loadmodule libratelab_redis_module.so`) runs each
/// algorithm's own `decide` as a command (`RATELAB.GCRA`, ...) that takes the
/// scripts' arguments, answers their replies and errors, and stores their
/// encodings: the two are interchangeable on the same keys, and a limiter
/// decides alike on either. The module only saves server time (no Lua
/// interpreter). A peek goes to the module's read-only twin
/// (`RATELAB.<ALGORITHM>_RO`), which a replica answers as it answers the
/// scripts; a module older than the twins gets it on its command, as
/// before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ScriptBackend {
    /// The module where the server has it, the scripts otherwise. The
    /// default.
    ///
    /// On one node, the limiter's first call asks `RATELAB.PROTOCOL` once
    /// and remembers the answer (the module when it speaks this protocol
    /// version, exactly: a module of another version refuses this one's
    /// calls, so the scripts run instead). On a Redis Cluster, where a keyless probe
    /// would reach one random node, the limiter sends the module's command
    /// (routed by its key, as `EVALSHA` is) and, on `ERR unknown command`,
    /// sends the same call as `EVALSHA` and remembers that the module is
    /// missing. Either way, "missing" is re-checked at most once every
    /// [`MODULE_RECHECK`] (a module loaded later, a failover to a node that
    /// has it), and a module that vanishes (a restart or failover onto a node
    /// without it) costs one `ERR unknown command` reply, then the call goes
    /// to the script. A cluster whose nodes disagree thus mostly runs the
    /// scripts, which every node can run. A module of another protocol
    /// version counts as missing: on one node its `RATELAB.PROTOCOL` says
    /// so, on a cluster its refusal of the call does (`ratelab: protocol
    /// version ...`, nothing decided), and the call goes to the script.
    /// The memory is per limiter.
    #[default]
    Auto,
    /// Always the module: a server without it answers every call with a
    /// data error saying so ([`Error::Data`](ratelab_core::Error::Data)).
    Module,
    /// Always the Lua scripts (`EVALSHA`), as before the module existed.
    Lua,
}

/// How long [`ScriptBackend::Auto`] trusts "the module is missing" before it
/// tries the module again.
pub const MODULE_RECHECK: Duration = Duration::from_secs(30);

const UNKNOWN: u8 = 0;
const MODULE: u8 = 1;
const LUA: u8 = 2;

/// What a limiter under [`ScriptBackend::Auto`] knows of its server.
pub(crate) struct Detection {
    state: AtomicU8,
    /// When "missing" is to be re-checked, in ms since `base`.
    recheck_at: AtomicU64,
    base: Instant,
}

/// Where the next call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    Module,
    Lua,
    /// Not known yet (or "missing" is due for a re-check).
    Unknown,
}

impl Detection {
    pub(crate) fn new() -> Self {
        Detection {
            state: AtomicU8::new(UNKNOWN),
            recheck_at: AtomicU64::new(0),
            base: Instant::now(),
        }
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn route(&self) -> Route {
        match self.state.load(Ordering::Relaxed) {
            MODULE => Route::Module,
            LUA if self.elapsed_ms() < self.recheck_at.load(Ordering::Relaxed) => Route::Lua,
            _ => Route::Unknown,
        }
    }

    pub(crate) fn found(&self) {
        self.state.store(MODULE, Ordering::Relaxed);
    }

    pub(crate) fn missing(&self) {
        let recheck = u64::try_from(MODULE_RECHECK.as_millis()).unwrap_or(u64::MAX);
        self.recheck_at
            .store(self.elapsed_ms().saturating_add(recheck), Ordering::Relaxed);
        self.state.store(LUA, Ordering::Relaxed);
    }
}

/// `ERR unknown command ...`: the server has no such command (no module).
pub(crate) fn is_unknown_command(error: &RedisError) -> bool {
    error.code() == Some("ERR")
        && error
            .detail()
            .is_some_and(|d| d.starts_with("unknown command"))
}

/// `ratelab: protocol version ... expected, got ...`: a module of another
/// protocol version refused this one's call (nothing was decided or
/// written).
pub(crate) fn is_other_version(error: &RedisError) -> bool {
    error.code() == Some("ratelab:")
        && error
            .detail()
            .is_some_and(|d| d.starts_with("protocol version "))
}

/// `RATELAB.PROTOCOL` on a single node: `Ok(true)` when the module is loaded
/// and speaks this protocol version, `Ok(false)` when the command is unknown
/// or answers another version (each version refuses the others' calls);
/// other errors are the call's.
pub(crate) async fn probe(connection: &Connection) -> Result<bool, RedisError> {
    match connection
        .query::<Value>(&redis::cmd("RATELAB.PROTOCOL"))
        .await
    {
        Ok(Value::Int(version)) => Ok(version == i64::from(PROTOCOL_VERSION)),
        Ok(_) => Ok(false),
        Err(e) if is_unknown_command(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_is_rechecked_and_found_sticks() {
        let detection = Detection::new();
        assert_eq!(detection.route(), Route::Unknown);
        detection.missing();
        assert_eq!(detection.route(), Route::Lua);
        detection.recheck_at.store(0, Ordering::Relaxed);
        assert_eq!(detection.route(), Route::Unknown);
        detection.found();
        assert_eq!(detection.route(), Route::Module);
    }

    #[test]
    fn unknown_command_is_recognised() {
        let server = |code: &str, detail: &str| {
            redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
        };
        assert!(is_unknown_command(&server(
            "ERR",
            "unknown command 'RATELAB.GCRA', with args beginning with: 'k' "
        )));
        assert!(!is_unknown_command(&server(
            "ERR",
            "wrong number of arguments"
        )));
        assert!(!is_unknown_command(&server(
            "ratelab",
            "gcra: invalid arguments"
        )));
        // A module of another version refuses the call the same way the
        // scripts would.
        assert!(is_other_version(&server(
            "ratelab:",
            "protocol version 1, 2 or 3 expected, got 4"
        )));
        assert!(!is_other_version(&server(
            "ratelab",
            "gcra: invalid arguments"
        )));
    }
}
