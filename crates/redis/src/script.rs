//! [`Script`] and [`RedisAlgorithm`]: an algorithm's Lua mirror and its
//! arguments.

use std::fmt;

use ratelab_core::Algorithm;

/// A Lua script and its SHA1, as `EVALSHA` wants it.
pub struct Script {
    source: &'static str,
    sha: String,
}

impl Script {
    /// The script `source`; its SHA1 is computed once, here.
    pub fn new(source: &'static str) -> Self {
        Script {
            source,
            sha: redis::Script::new(source).get_hash().to_owned(),
        }
    }

    /// The Lua source.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The SHA1 of the source, in hex.
    pub fn sha(&self) -> &str {
        &self.sha
    }
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script").field("sha", &self.sha).finish()
    }
}

/// An [`Algorithm`] that also runs as a Redis script.
///
/// The script mirrors [`Algorithm::decide`] exactly, in integer
/// microseconds, on one key (`KEYS[1]`), and is called with
/// `ARGV = [now or "", cost, TTL slack in ms, params...]`, `params` being
/// [`RedisAlgorithm::script_params`]. It answers
/// `{allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}`,
/// reads Redis `TIME` when `now` is empty, and gives every key it writes a
/// `PEXPIRE` of the time until the key is back to full capacity (rounded up
/// to the millisecond) plus the slack.
///
/// The algorithm crates implement it under their `redis` feature.
pub trait RedisAlgorithm: Algorithm + Clone {
    /// The Lua mirror of [`Algorithm::decide`].
    fn script(&self) -> &'static Script;

    /// The parameters the script takes after `now`, `cost` and the slack.
    fn script_params(&self) -> Vec<u64>;

    /// The last part of the Redis key, after the user key: a short code for
    /// the algorithm (`gcra`, `tb`, ...), short because on Redis the key name
    /// is a good part of the memory a key takes.
    fn key_suffix(&self) -> &'static str;
}
