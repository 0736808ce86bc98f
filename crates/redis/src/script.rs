//! [`Script`]: an algorithm's Lua mirror, its
//! arguments, and the one path every script call takes.

use std::fmt;

#[cfg(doc)]
use ratelab_core::Algorithm;
use ratelab_core::toolkit::Stamp;
use ratelab_core::toolkit::remote::RemoteForm;
use redis::{ErrorKind, FromRedisValue, RedisResult, ServerErrorKind, ToRedisArgs, Value};

use crate::connection::Connection;

/// The version of the script protocol (`lua/README.md`): the first argument
/// of every script call. Version 5 settles admissions by their stamps
/// ([`Op::Settle`]) and resets by script ([`Op::Reset`]); the scripts and
/// the module answer `ratelab: protocol version 5 expected, got <what it
/// got>` to a call of any other version, never a decision.
pub const PROTOCOL_VERSION: u32 = 5;

/// The most TTL slack a script takes, in ms (`ARGV[4]`): 2^52 µs, the
/// whole range of instants (no clock steps back further). See
/// [`RedisLimiterBuilder::ttl_slack`](crate::RedisLimiterBuilder::ttl_slack).
pub const MAX_TTL_SLACK_MS: u64 = (1u64 << 52).div_ceil(1000);

/// What a script call does with the key (`ARGV[6]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// Decides a request of `cost`, consuming it if it passes; an admission
    /// of a positive cost answers its [`Stamp`].
    Check,
    /// The decision a check of `cost` would get now, writing nothing.
    Peek,
    /// Settles the admission stamped `stamp`, of the call's `cost`: it
    /// finally counts for `actual` units ([`Algorithm::settle`]: less gives
    /// back what the key provably still holds of it, more charges the
    /// difference as debt); answers what a peek of cost 0 would after it.
    /// Sent as `settle:<actual>:<stamp.at>:<stamp.mark>`.
    Settle {
        /// What the admission finally counts for.
        actual: u32,
        /// What its check answered.
        stamp: Stamp,
    },
    /// Puts the key back to full capacity ([`Algorithm::reset`]), with a
    /// cost of 0; answers what a peek of cost 0 would after it.
    Reset,
}

impl Op {
    /// The operation's name: `check`, `peek`, `settle`, `reset`.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Check => "check",
            Op::Peek => "peek",
            Op::Settle { .. } => "settle",
            Op::Reset => "reset",
        }
    }
}

/// A Lua script (the shared prologue followed by an algorithm's file) and
/// its SHA1, as `EVALSHA` wants it.
pub struct Script {
    script: redis::Script,
}

impl Script {
    /// The script `source`; its SHA1 is computed once, here.
    pub fn new(source: &str) -> Self {
        Script {
            script: redis::Script::new(source),
        }
    }

    /// `algorithm`'s script ([`RemoteForm::script`]).
    pub fn of<A: RemoteForm>() -> Self {
        Script::new(&A::script())
    }

    /// The SHA1 of the source, in hex.
    pub fn sha(&self) -> &str {
        self.script.get_hash()
    }

    /// `EVALSHA sha 1 key args...`. After `NOSCRIPT` (a flush, a restart, a
    /// failover, a cluster node that never saw it) the script is loaded
    /// (`SCRIPT LOAD`, on every master of a cluster), `on_reload` is told,
    /// and the very same command is sent once more.
    pub async fn invoke<T: FromRedisValue>(
        &self,
        connection: &Connection,
        key: &[u8],
        args: &ScriptArgs,
        on_reload: impl FnOnce(),
    ) -> RedisResult<T> {
        let cmd = self.evalsha(key, args);
        match connection.query(&cmd).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                on_reload();
                connection.load_script(&self.script).await?;
                connection.query(&cmd).await
            }
            other => other,
        }
    }

    /// [`Script::invoke`] followed by `WAIT replicas timeout_ms` on the
    /// same connection ([`Connection::query_then_wait`]): the reply, and how
    /// many replicas acknowledged the connection's writes.
    pub(crate) async fn invoke_then_wait(
        &self,
        connection: &Connection,
        key: &[u8],
        args: &ScriptArgs,
        (replicas, timeout_ms): (u32, u64),
        on_reload: impl FnOnce(),
    ) -> RedisResult<(Value, i64)> {
        let cmd = self.evalsha(key, args);
        match connection
            .query_then_wait(&cmd, key, replicas, timeout_ms)
            .await
        {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                on_reload();
                connection.load_script(&self.script).await?;
                connection
                    .query_then_wait(&cmd, key, replicas, timeout_ms)
                    .await
            }
            other => other,
        }
    }

    fn evalsha(&self, key: &[u8], args: &ScriptArgs) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.sha()).arg(1).arg(key).arg(&args.0);
        cmd
    }
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script").field("sha", &self.sha()).finish()
    }
}

/// The `ARGV` of one script call, each argument encoded once.
#[derive(Debug, Default, Clone)]
pub struct ScriptArgs(Vec<Vec<u8>>);

impl ScriptArgs {
    /// No arguments yet.
    pub fn new() -> Self {
        ScriptArgs(Vec::with_capacity(8))
    }

    /// Appends `arg` (a slice appends each of its items).
    pub fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.0);
        self
    }

    /// The `ARGV` of one call in this protocol version, the one place its
    /// layout is written: `[PROTOCOL_VERSION, now or "", cost, TTL slack in
    /// ms, deadline or "", op, params...]` (`now` and `deadline` in µs; no
    /// `now` reads Redis `TIME`, no deadline never expires).
    pub fn call(
        now: Option<u64>,
        cost: u32,
        ttl_slack_ms: u64,
        deadline: Option<u64>,
        op: Op,
        params: &[u64],
    ) -> Self {
        let mut args = ScriptArgs::new();
        args.arg(PROTOCOL_VERSION);
        match now {
            Some(now) => args.arg(now),
            None => args.arg(""),
        };
        args.arg(cost).arg(ttl_slack_ms);
        match deadline {
            Some(deadline) => args.arg(deadline),
            None => args.arg(""),
        };
        match op {
            Op::Settle { actual, stamp } => {
                args.arg(format!("settle:{actual}:{}:{}", stamp.at, stamp.mark))
            }
            _ => args.arg(op.as_str()),
        };
        args.arg(params);
        args
    }

    /// The arguments, encoded.
    pub(crate) fn as_slice(&self) -> &[Vec<u8>] {
        &self.0
    }

    /// Each argument's bytes, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.0.iter().map(Vec::as_slice)
    }
}
