//! A Redis module that runs every ratelab algorithm's own
//! [`Algorithm::decide`](ratelab_core::Algorithm::decide) as a native
//! command: the decision logic the in-memory limiters run, with no second
//! implementation to drift from the first, and no Lua interpreter to pay for.
//!
//! Load it with `redis-server --loadmodule target/release/libratelab_redis_module.so`
//! (or `MODULE LOAD`). Each algorithm of ratelab's list
//! ([`ratelab::AlgorithmKind`]) is one command, named after the algorithm
//! ([`algorithms`], [`command`]), that takes exactly what its Lua script
//! takes and answers exactly what it answers:
//!
//! ```text
//! RATELAB.GCRA key 5 now cost slack deadline op T tolerance burst
//!   -> [allowed, limit, remaining, retry_after_us, reset_after_us, delay_us,
//!       stamp_at, stamp_mark]
//! ```
//!
//! `5` is the protocol version (any other answers `ratelab: protocol
//! version 5 expected, got ...`); `op` is `check`, `peek` (the decision a
//! check would get, nothing written), `settle:<actual>:<stamp_at>:<stamp_mark>`
//! (the admission a check stamped so, of `cost`, finally counts for `actual`
//! units: what it did not use comes back as far as the key provably still
//! holds it, what it used beyond is charged as debt; the answer is a peek of
//! cost 0 after it) or `reset` (back to full capacity, no receipt issued
//! before gives anything back afterwards). An admission of a positive cost
//! answers its stamp: what `Algorithm::stamp` gives, to send back with its
//! settlement.
//! Each command has a read-only twin, `RATELAB.<ALGORITHM>_RO` (as Redis
//! has `EVALSHA_RO`): the same arguments and replies, for `peek` only
//! (any other operation answers `ratelab <algorithm>:
//! RATELAB.<ALGORITHM>_RO runs peeks only`, nothing read), flagged
//! `readonly`, so that a replica answers it, as it answers a script that
//! writes nothing, where it refuses the command itself (`READONLY`).
//! `ratelab-redis` sends its peeks there, and to the command itself when a
//! module older than the twins answers `ERR unknown command`: the twins
//! change no argument, reply or encoding, so `RATELAB.PROTOCOL` still
//! answers 5.
//! `now` is the caller's instant in µs, or `""` for the server clock; `slack`
//! is added to every TTL (ms, at most 2^52 µs); `deadline` is the Unix µs
//! (server clock) after which the call writes nothing and answers
//! `ratelab expired: ...`, or `""`; the parameters are the script's
//! (`RemoteForm::params` of the algorithm's crate), exactly as many.
//! Keys hold the scripts' own encodings, so the module and the scripts are
//! interchangeable on the same keys, even mid-stream; the error replies
//! (`ratelab <algorithm>: invalid arguments`,
//! `ratelab <algorithm>: corrupt state at <key>: <what>`,
//! `ratelab <algorithm>: out of range at <key>: <what>`) are the scripts',
//! word for word. The protocol is the scripts' (`lua/README.md` of the
//! repository).
//!
//! ```
//! // What a client sends for an algorithm, by the algorithm's name.
//! assert_eq!(ratelab_redis_module::command("gcra").as_deref(), Some("RATELAB.GCRA"));
//! assert_eq!(
//!     ratelab_redis_module::command("sliding-log").as_deref(),
//!     Some("RATELAB.SLIDING-LOG")
//! );
//! assert_eq!(ratelab_redis_module::command("nope"), None);
//! ```
//!
//! **Why the `redis-module` crate.** It is maintained by Redis (it is what
//! RedisJSON and RediSearch's Rust parts build on) and generates its
//! bindings from the `redismodule.h` of the Redis sources with bindgen, so
//! the module tracks the server's API rather than a hand copy of it; it
//! brings safe wrappers for keys, replies, `RM_Call` with replication and
//! OOM options, and a loader macro. A hand-written FFI of the dozen
//! functions used here would spare a build dependency on libclang
//! (Debian: `clang libclang-dev`) and little else: the time per call goes
//! to Redis itself, not to the binding. The hot path (every algorithm's
//! command) is on the module API directly, which is the crate's `unsafe`
//! code (`registry.rs`, `invoke.rs`, the key handle in `key.rs`, the calls
//! in `call.rs`): the binding's wrapper copies every argument, and its
//! calls and replies allocate, a microsecond a call on a command that
//! costs three or four.
//!
//! The strings (six algorithms) are read through `RM_Call` (`GET`):
//! Redis turns a string opened for direct access (`RM_StringDMA`) into a
//! raw one, even to read it, so a key would change encoding on a mere
//! refusal (the module API has no other read of a string). Two cases skip
//! `GET`: a key that holds nothing is not read (but by a check that reads
//! with `GET` first, below), and a check on the server's
//! clock that is sure to admit reads its key in place, since its write
//! stores the state again. A check of a positive cost on the server's
//! clock, unless the last such check of its key was refused, opens its key
//! to read and write at once (one lookup where two were); after a refusal
//! it reads with `GET` straight away (one lookup when it refuses again) and
//! opens its key only to write. The module remembers which by one bit of a
//! fixed table of 65,536 that keys share by their hash (8 KiB, whatever the
//! number of keys): a wrong guess costs time, never a decision. The module
//! opts out of Redis signalling every
//! key opened to write as modified (`NO_IMPLICIT_SIGNAL_MODIFIED`) and
//! signals a key when it writes it, so that a refusal, as a script's,
//! aborts no transaction that `WATCH`es the key; and it raises the
//! `keymiss` event a script's read of a key that holds nothing raises (a
//! key looked up to write counts no keyspace hit or miss in `INFO stats`;
//! `GET` counts one).
//! GCRA's and the leaky
//! queue's state starts with one instant, and the key's expiry bounds it
//! (every writer sets the TTL to the time until the key may be forgotten,
//! never before that instant, rounded up): when the latest instant that
//! expiry allows is admitted, every state is. The decision is always made
//! on the bytes read, so a stranger's `PEXPIRE` can only make a refusal
//! read the key in place, never admit more. A state is written straight
//! into the key (`RM_StringSet`), which stores it exactly as `SET` would,
//! and replicated as that `SET` (the very string stored, as `SET`
//! propagates its argument): replicas and the AOF receive the effects a
//! script would send, the same keyspace events are raised, and a server out
//! of memory refuses the write as it refuses a script's. A check that read
//! its key in place writes its state over those bytes instead, when it has
//! their length (no key deleted and added again, no string made): the
//! bytes, the TTL, the memory taken, the replication, the events and the
//! signal are still `SET`'s, but the key stays the raw string the read made
//! of it, where `SET` would embed a string of up to 44 bytes (which only
//! `OBJECT ENCODING` tells).
//!
//! The sliding log's sorted set is stored alike either way too
//! (`RM_ZsetAdd` and `ZADD` both go through Redis's own `zsetAdd`), so its
//! check opens the key for direct access and counts, prunes, reads and adds
//! without a command per step (five `RM_Call`s were three times GCRA's
//! time). Its effects still reach replicas and the AOF as the commands a
//! script sends (`ZREMRANGEBYSCORE`, `ZADD`, `PEXPIREAT`, by
//! `RM_Replicate`), raise the same keyspace events, and a server out of
//! memory refuses the `ZADD`. Peeks, settlements, resets, a key with a
//! fence, and any key whose content the error replies must quote, go
//! through `RM_Call`.

#![warn(missing_docs)]
// `unsafe` is confined to the files on the module API (`ffi`, `key`,
// `call`, `invoke`, `registry`): the hot path (see above), measured faster
// than the binding's safe wrappers. The commands themselves (`string`,
// `sliding_log`) are safe code.
#![deny(unsafe_code)]

mod args;
mod call;
mod ffi;
mod hint;
mod invoke;
mod key;
mod lua;
mod prologue;
mod registry;
mod reply;
mod sliding_log;
mod string;

use redis_module::{Context, RedisResult, RedisString, RedisValue, Status, redis_module};

/// The version of the protocol the commands speak (the arguments, replies
/// and key encodings of the Lua scripts they mirror), expected as the first
/// argument after the key, as the scripts expect it as `ARGV[1]`; no other
/// version is answered. `RATELAB.PROTOCOL` answers it, so that a client can
/// tell a module that speaks its protocol from another before it sends a
/// call.
pub const PROTOCOL: i64 = 5;

/// The name of every algorithm the module runs (`Algorithm::name`), in the
/// order its commands are registered.
pub fn algorithms() -> impl Iterator<Item = &'static str> {
    registry::COMMANDS.iter().map(|command| command.algorithm)
}

/// The command that runs the algorithm named `algorithm`
/// (`RATELAB.<NAME>`), if the module runs it.
pub fn command(algorithm: &str) -> Option<String> {
    algorithms()
        .any(|name| name == algorithm)
        .then(|| ratelab_core::toolkit::remote::command_name(algorithm))
}

fn protocol(_: &Context, _: Vec<RedisString>) -> RedisResult {
    Ok(RedisValue::Integer(PROTOCOL))
}

/// The entry point Redis calls on `--loadmodule` (`RedisModule_OnLoad`),
/// generated by the binding: it registers the commands.
#[allow(missing_docs)]
mod entry {
    use super::*;

    /// The algorithms' commands, registered on the module API itself
    /// (`registry`): their hot path skips the binding's argument copies.
    fn init(ctx: &Context, args: &[RedisString]) -> Status {
        registry::register(ctx, args)
    }

    // The allocator: the module keeps nothing between calls but the read
    // hints' fixed table (every byte it stores is a Redis string written
    // through Redis), so the system allocator
    // serves its short-lived buffers, and the rlib stays usable outside Redis.
    // Flags: "write" (a replica refuses it; a cluster routes it by its one key,
    // the first argument); no "deny-oom": as for a script, only a write is
    // refused when memory is full. The algorithms' commands are registered by
    // `init`.
    redis_module! {
        name: "ratelab",
        version: 1,
        allocator: (std::alloc::System, std::alloc::System),
        data_types: [],
        init: init,
        commands: [
            ["ratelab.protocol", protocol, "readonly fast", 0, 0, 0, ""],
        ],
    }
}
