//! The hot path on the module API itself: the commands of the algorithms
//! whose state is one string, registered with `RM_CreateCommand` rather
//! than through the binding's wrapper, and the two calls they make.
//!
//! The binding's wrapper copies every argument into a `Vec<RedisString>`
//! (retaining and releasing each), its `call_ext` makes a Redis string of
//! every argument and a format string per call, and its replies go through
//! a `RedisValue` tree: about a microsecond a call, on a command that costs
//! a few. Here the arguments are read in place (`RM_StringPtrLen`), the key
//! goes to `GET` and `SET` as the very object Redis passed (`RM_Call`'s `s`
//! format: a reference, not a copy), and the reply is six
//! `RM_ReplyWithLongLong`. Nothing is allocated on the way to a decision.
//!
//! Every function here is `unsafe` FFI on pointers Redis hands the command
//! for the duration of the call; the safe types ([`KeyArg`], [`Reply`], [`Open`])
//! cannot outlive it.

#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::args::unix_micros;
use crate::command;
use ratelab_core::toolkit::{RemoteForm, StringForm};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_token_bucket::TokenBucket;
use redis_module::{Context, RedisError, RedisString, Status, raw};

/// The key argument of a call: the object Redis passed, and its bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyArg<'a> {
    object: *mut raw::RedisModuleString,
    bytes: &'a [u8],
    _call: PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> KeyArg<'a> {
    /// The key's bytes.
    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// The bytes of an argument.
///
/// # Safety
///
/// `s` is a live Redis string that outlives `'a` (an argument of the
/// running command).
unsafe fn bytes<'a>(s: *mut raw::RedisModuleString) -> &'a [u8] {
    let mut len = 0;
    // SAFETY: the API is set when the module loads; `s` is live.
    let ptr =
        unsafe { raw::RedisModule_StringPtrLen.expect("the module API is loaded")(s, &mut len) };
    if ptr.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: Redis answers the string's buffer and its length; the buffer
    // lives as long as the string, which outlives 'a.
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}

/// The Unix ms, on the server clock, `ttl_ms` from now: the `PXAT` a TTL
/// becomes (as Redis itself replicates an expiry).
fn expiry_at(ttl_ms: u64) -> i64 {
    let at = (unix_micros() / 1000).saturating_add(ttl_ms);
    i64::try_from(at).unwrap_or(i64::MAX)
}

/// Arguments after the key read in place up to this many; beyond, copied
/// to the heap (no call of the protocol has more than 11).
const ON_STACK: usize = 16;

/// The command of an algorithm whose state is one string
/// ([`command::string_command`]), as Redis calls it.
///
/// # Safety
///
/// Called by Redis only, with its context and `argc` live arguments.
unsafe extern "C" fn string_command<A: StringForm>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: as Redis called this function.
    unsafe { run(ctx, argv, argc, Access::Write, command::string_command::<A>) }
}

/// The read-only twin of [`string_command`]: peeks only.
///
/// # Safety
///
/// Called by Redis only, with its context and `argc` live arguments.
unsafe extern "C" fn string_peek<A: StringForm>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: as Redis called this function.
    unsafe {
        run(
            ctx,
            argv,
            argc,
            Access::PeekOnly(A::NAME),
            command::string_command::<A>,
        )
    }
}

/// The sliding log's command ([`command::sliding_log`]), as Redis calls it.
///
/// # Safety
///
/// Called by Redis only, with its context and `argc` live arguments.
unsafe extern "C" fn sliding_log_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: as Redis called this function.
    unsafe { run(ctx, argv, argc, Access::Write, command::sliding_log) }
}

/// The read-only twin of [`sliding_log_command`]: peeks only.
///
/// # Safety
///
/// Called by Redis only, with its context and `argc` live arguments.
unsafe extern "C" fn sliding_log_peek(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: as Redis called this function.
    unsafe {
        run(
            ctx,
            argv,
            argc,
            Access::PeekOnly(SlidingLog::NAME),
            command::sliding_log,
        )
    }
}

/// What a command may do: anything its operation asks, or (the read-only
/// twin, `RATELAB.<ALGORITHM>_RO`) peek only, any other operation refused
/// before anything is read.
#[derive(Debug, Clone, Copy)]
enum Access {
    Write,
    /// Peeks only, for the algorithm named so.
    PeekOnly(&'static str),
}

/// Where `op` stands among the arguments after the key: version, now,
/// cost, slack, deadline, op.
const OP_INDEX: usize = 5;

/// Runs a command on its key and the arguments after it, read in place,
/// and writes its reply: the eight fields, or the error.
///
/// # Safety
///
/// `ctx`, `argv` and `argc` are what Redis passed a command function.
unsafe fn run(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    access: Access,
    command: impl FnOnce(&Context, KeyArg<'_>, &[&[u8]]) -> Result<command::Reply, RedisError>,
) -> c_int {
    let context = Context::new(ctx);
    let argc = usize::try_from(argc).unwrap_or(0);
    if argv.is_null() || argc < 2 {
        return context.reply(Err(RedisError::WrongArity)) as c_int;
    }
    // SAFETY: Redis passes `argc` live arguments.
    let args = unsafe { std::slice::from_raw_parts(argv, argc) };
    let key = KeyArg {
        object: args[1],
        // SAFETY: an argument of this call.
        bytes: unsafe { bytes(args[1]) },
        _call: PhantomData,
    };
    let rest = &args[2..];
    let mut stack: [&[u8]; ON_STACK] = [&[]; ON_STACK];
    let heap: Vec<&[u8]>;
    let after_key: &[&[u8]] = if rest.len() <= ON_STACK {
        for (slot, &arg) in stack.iter_mut().zip(rest) {
            // SAFETY: an argument of this call.
            *slot = unsafe { bytes(arg) };
        }
        &stack[..rest.len()]
    } else {
        // SAFETY: arguments of this call.
        heap = rest.iter().map(|&arg| unsafe { bytes(arg) }).collect();
        &heap
    };
    if let Access::PeekOnly(name) = access
        && after_key.get(OP_INDEX).is_some_and(|&op| op != b"peek")
    {
        return context.reply(Err(RedisError::String(format!(
            "ratelab {name}: RATELAB.{}_RO runs peeks only",
            name.to_ascii_uppercase()
        )))) as c_int;
    }
    match command(&context, key, after_key) {
        Ok(fields) => {
            // SAFETY: replies on the context of the running command.
            unsafe {
                raw::RedisModule_ReplyWithArray.expect("the module API")(ctx, 8);
                let reply_integer = raw::RedisModule_ReplyWithLongLong.expect("the module API");
                for field in fields {
                    reply_integer(ctx, field);
                }
            }
            Status::Ok as c_int
        }
        Err(error) => context.reply(Err(error)) as c_int,
    }
}

/// One algorithm's command: the algorithm's name (the command is
/// `ratelab.<name>`), the function Redis calls, its flags; and its
/// read-only twin for peeks (`ratelab.<name>_ro`), with its flags.
pub(crate) struct Command {
    pub(crate) algorithm: &'static str,
    function: raw::RedisModuleCmdFunc,
    flags: &'static std::ffi::CStr,
    peek: raw::RedisModuleCmdFunc,
    peek_flags: &'static std::ffi::CStr,
}

impl Command {
    /// The command of an algorithm whose state is one string: every
    /// operation is the algorithm crate's own ([`command::string_command`]).
    /// O(1).
    const fn string<A: StringForm>() -> Command {
        Command {
            algorithm: A::NAME,
            function: Some(string_command::<A>),
            flags: FAST,
            peek: Some(string_peek::<A>),
            peek_flags: c"readonly fast",
        }
    }
}

/// Every algorithm's command. "write": a replica refuses it; a cluster
/// routes it by its one key, the first argument. "fast": O(1), which the
/// log is not (O(log n + cost)). No "deny-oom": as for a script, only a
/// write is refused when memory is full. The read-only twin takes the same
/// arguments and answers peeks only: "readonly", so that a replica answers
/// it (and a client reading from replicas may send it there), as it
/// answers a script that writes nothing.
///
/// An algorithm added to the workspace is added here, with its crate in
/// this crate's `Cargo.toml`; until it is, `crates/tests/tests/redis/redis_module.rs`
/// fails, naming it.
pub(crate) const COMMANDS: [Command; 7] = [
    Command::string::<FixedWindow>(),
    Command {
        algorithm: SlidingLog::NAME,
        function: Some(sliding_log_command),
        flags: c"write",
        peek: Some(sliding_log_peek),
        peek_flags: c"readonly",
    },
    Command::string::<SlidingCounter>(),
    Command::string::<LeakyMeter>(),
    Command::string::<LeakyQueue>(),
    Command::string::<TokenBucket>(),
    Command::string::<Gcra>(),
];

/// The flags of an O(1) command.
const FAST: &std::ffi::CStr = c"write fast";

/// `PXAT`, made once when the module loads (`register`) and kept: every
/// state written is replicated with it.
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// [`PXAT`].
fn pxat() -> *mut raw::RedisModuleString {
    let pxat = PXAT.load(Ordering::Relaxed);
    assert!(!pxat.is_null(), "PXAT is made when the module loads");
    pxat
}

/// Registers the algorithms' commands (the module's `init`).
pub(crate) fn register(ctx: &Context, _args: &[RedisString]) -> Status {
    let Some(create) = (unsafe { raw::RedisModule_CreateCommand }) else {
        return Status::Err;
    };
    // A key opened to write signals as modified only when written through
    // (`Open`'s drop), as a command signals only what it changes.
    ctx.set_module_options(raw::ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED);
    // SAFETY: a string of no context (kept until the server exits), made
    // from a static buffer Redis copies.
    let pxat =
        unsafe { api(raw::RedisModule_CreateString)(std::ptr::null_mut(), c"PXAT".as_ptr(), 4) };
    if pxat.is_null() {
        return Status::Err;
    }
    PXAT.store(pxat, Ordering::Relaxed);
    for command in &COMMANDS {
        let twins = [
            ("", command.function, command.flags),
            ("_ro", command.peek, command.peek_flags),
        ];
        for (suffix, function, flags) in twins {
            let Ok(name) = std::ffi::CString::new(format!("ratelab.{}{suffix}", command.algorithm))
            else {
                return Status::Err;
            };
            // SAFETY: the context of OnLoad; NUL-terminated names (Redis
            // copies the name) and static flags; a function of the right
            // signature.
            let status = unsafe {
                create(
                    ctx.get_raw(),
                    name.as_ptr(),
                    function,
                    flags.as_ptr(),
                    1,
                    1,
                    1,
                )
            };
            if status != Status::Ok as c_int {
                ctx.log_warning(&format!("ratelab: cannot register {name:?}"));
                return Status::Err;
            }
        }
    }
    Status::Ok
}

/// A reply of `RM_Call`, freed on drop.
#[derive(Debug)]
pub(crate) struct Reply<'a> {
    reply: *mut raw::RedisModuleCallReply,
    _call: PhantomData<&'a Context>,
}

impl Reply<'_> {
    /// The integer answered, `None` for any other reply.
    pub(crate) fn integer(&self) -> Option<i64> {
        (!self.reply.is_null() && raw::call_reply_type(self.reply) == raw::ReplyType::Integer)
            .then(|| raw::call_reply_integer(self.reply))
    }

    /// The error answered (a null reply is one too: the call was refused).
    pub(crate) fn error(&self) -> Option<String> {
        if self.reply.is_null() {
            return Some("ratelab: a call of the log failed".to_owned());
        }
        (raw::call_reply_type(self.reply) == raw::ReplyType::Error)
            .then(|| raw::call_reply_string(self.reply).unwrap_or_default())
    }

    /// What `GET` answered: the string stored, `None` for no key, `Err`
    /// for a key that holds no string.
    pub(crate) fn string(&self) -> Result<Option<&[u8]>, ()> {
        if self.reply.is_null() {
            return Err(());
        }
        match raw::call_reply_type(self.reply) {
            raw::ReplyType::String => {
                let mut len = 0;
                let ptr = raw::call_reply_string_ptr(self.reply, &mut len);
                if ptr.is_null() || len == 0 {
                    return Ok(Some(&[]));
                }
                // SAFETY: the buffer lives as long as the reply, freed only
                // on drop.
                Ok(Some(unsafe {
                    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
                }))
            }
            raw::ReplyType::Null => Ok(None),
            _ => Err(()),
        }
    }
}

impl Drop for Reply<'_> {
    fn drop(&mut self) {
        if !self.reply.is_null() {
            // SAFETY: a reply of RM_Call, freed once.
            unsafe { raw::RedisModule_FreeCallReply.expect("the module API")(self.reply) };
        }
    }
}

/// `RM_Call(ctx, command, format, args...)` as a [`Reply`]: the format's
/// conversions must match the arguments (`s` a live Redis string, `c` a
/// NUL-terminated C string, `b` a pointer and a length, `l` an `i64`).
macro_rules! rm_call {
    ($ctx:expr, $command:literal, $format:literal $(, $arg:expr)* $(,)?) => {{
        // SAFETY: the caller passes arguments matching the format's
        // conversions; RM_Call copies what it needs before it returns, and
        // the reply is freed by `Reply`.
        let reply = unsafe {
            raw::RedisModule_Call.expect("the module API")(
                $ctx.get_raw(),
                $command.as_ptr(),
                $format.as_ptr(),
                $($arg),*
            )
        };
        Reply {
            reply,
            _call: PhantomData,
        }
    }};
}

/// `GET key`, as a script reads its key: the value stays as Redis stored
/// it (an integer stays an integer).
pub(crate) fn get<'a>(ctx: &'a Context, key: KeyArg<'_>) -> Reply<'a> {
    rm_call!(ctx, c"GET", c"s", key.object)
}

/// The calls of the sliding log's hot path, on the module API: the
/// scripts' own commands, arguments passed by reference or as C buffers.
/// Reads answer errors as replies (`E`); writes are also replicated (`!`)
/// and refused when memory is full (`M`), as a script's are.
pub(crate) mod log {
    use super::*;

    /// `ZCARD key`.
    pub(crate) fn card<'a>(ctx: &'a Context, key: KeyArg<'_>) -> Reply<'a> {
        rm_call!(ctx, c"ZCARD", c"Es", key.object)
    }

    /// `ZREMRANGEBYSCORE key -inf cutoff`: prunes the units that left.
    /// Replicated when it removes anything; no memory check, as it frees.
    pub(crate) fn prune<'a>(ctx: &'a Context, key: KeyArg<'_>, cutoff: i64) -> Reply<'a> {
        rm_call!(
            ctx,
            c"ZREMRANGEBYSCORE",
            c"!Escl",
            key.object,
            c"-inf".as_ptr(),
            cutoff
        )
    }

    /// `ZCOUNT key (cutoff +inf`: the live units, nothing written.
    pub(crate) fn count_live<'a>(ctx: &'a Context, key: KeyArg<'_>, live: &[u8]) -> Reply<'a> {
        rm_call!(
            ctx,
            c"ZCOUNT",
            c"Esbc",
            key.object,
            live.as_ptr().cast::<c_char>(),
            live.len(),
            c"+inf".as_ptr()
        )
    }
}

/// A key opened for direct access (or an empty one), closed on drop: then
/// signalled as modified (`WATCH`, client tracking) if it was written
/// through, and only then (the module sets
/// `REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED`, so that a key opened
/// to write and left as it was signals nothing, as a script's refusal
/// signals nothing).
#[derive(Debug)]
pub(crate) struct Open<'a> {
    ctx: &'a Context,
    name: KeyArg<'a>,
    key: *mut raw::RedisModuleKey,
    /// Written through: signalled as modified when closed.
    written: bool,
    /// The length of the string read in place (`read_in_place`), now a
    /// raw string: a state of that length is written over it.
    read_raw: Option<usize>,
}

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holds {
    Nothing,
    String,
    Zset,
    Other,
}

/// What the module API answers on success (`REDISMODULE_OK`, 0).
const OK: c_int = 0;
const _: () = assert!(raw::REDISMODULE_OK == 0);

/// A function of the module API, set when the module loaded.
fn api<F>(function: Option<F>) -> F {
    function.expect("the module API is loaded")
}

/// The error Redis answers a write it refuses for memory, as `RM_Call`'s
/// `M` flag answers it.
const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// Whether a write must be refused for memory: more used than `maxmemory`
/// allows (the server evicts before a command, when its policy lets it).
pub(crate) fn out_of_memory() -> bool {
    // SAFETY: no arguments.
    unsafe { api(raw::RedisModule_GetUsedMemoryRatio)() > 1.0 }
}

/// A key opened to read only (to tell whether it holds anything, raising
/// `keymiss` when it does not, as `GET` would), closed on drop.
#[derive(Debug)]
pub(crate) struct Reading<'a> {
    key: *mut raw::RedisModuleKey,
    _call: PhantomData<&'a Context>,
}

/// Opens `name` to read: `None` when it holds nothing (as `GET` would
/// answer nil, an expired key included).
pub(crate) fn open_to_read<'a>(ctx: &'a Context, name: KeyArg<'a>) -> Option<Reading<'a>> {
    let mode = c_int::try_from(raw::REDISMODULE_READ).expect("small flags");
    // SAFETY: the running command's context and one of its arguments; the
    // handle is closed by `Reading`'s drop, before the command returns.
    let key = unsafe { api(raw::RedisModule_OpenKey)(ctx.get_raw(), name.object, mode) };
    // A key opened to read only is null when it does not exist.
    (!key.is_null()).then_some(Reading {
        key,
        _call: PhantomData,
    })
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        // SAFETY: a key opened by `open_to_read`, closed once.
        unsafe { api(raw::RedisModule_CloseKey)(self.key) };
    }
}

/// Opens `name` to read and write.
pub(crate) fn open<'a>(ctx: &'a Context, name: KeyArg<'a>) -> Open<'a> {
    let mode =
        c_int::try_from(raw::REDISMODULE_READ | raw::REDISMODULE_WRITE).expect("small flags");
    // SAFETY: the running command's context and one of its arguments; the
    // handle is closed by `Open`'s drop, before the command returns.
    let key = unsafe { api(raw::RedisModule_OpenKey)(ctx.get_raw(), name.object, mode) };
    Open {
        ctx,
        name,
        key,
        written: false,
        read_raw: None,
    }
}

impl Open<'_> {
    /// What the key holds.
    pub(crate) fn holds(&self) -> Holds {
        if self.key.is_null() {
            return Holds::Other;
        }
        // SAFETY: an open key.
        let kind = unsafe { api(raw::RedisModule_KeyType)(self.key) };
        match kind as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => Holds::Nothing,
            raw::REDISMODULE_KEYTYPE_STRING => Holds::String,
            raw::REDISMODULE_KEYTYPE_ZSET => Holds::Zset,
            _ => Holds::Other,
        }
    }

    /// The Unix ms the key expires at, `None` when it has no TTL.
    pub(crate) fn expires_at(&self) -> Option<u64> {
        // SAFETY: an open key.
        let at = unsafe { api(raw::RedisModule_GetAbsExpire)(self.key) };
        u64::try_from(at).ok()
    }

    /// The string the key holds, read in place (`RM_StringDMA`). Redis
    /// first turns an integer or an embedded string into a raw one, so only
    /// a command that is sure to overwrite the key may read it this way:
    /// the write then stores it as `SET` would.
    pub(crate) fn read_in_place(&mut self) -> &[u8] {
        let mode = c_int::try_from(raw::REDISMODULE_READ).expect("small flags");
        let mut len = 0;
        // SAFETY: an open key holding a string; the buffer lives until the
        // key is written or closed, which the borrow of `self` outlasts.
        unsafe {
            let ptr = api(raw::RedisModule_StringDMA)(self.key, &mut len, mode);
            if ptr.is_null() || len == 0 {
                return &[];
            }
            self.read_raw = Some(len);
            std::slice::from_raw_parts(ptr.cast::<u8>(), len)
        }
    }

    /// Raises `keymiss`, as reading a key that holds nothing does (`GET`,
    /// or a key opened to read only): a key opened to write raises nothing.
    pub(crate) fn notify_missed(&self) {
        self.notify(raw::REDISMODULE_NOTIFY_KEY_MISS, c"keymiss");
    }

    /// Stores `value` with a TTL of `ttl_ms`, as `SET key value PXAT at`
    /// does and replicates it, unless the server is out of memory. For
    /// values that are no decimal integer only: `SET` would store one as an
    /// integer, a module's string stays a string. Over the string read in
    /// place when `value` has its length ([`Open::overwrite`]).
    pub(crate) fn store(&mut self, value: &[u8], ttl_ms: u64) -> Result<(), String> {
        if out_of_memory() {
            return Err(OOM.to_owned());
        }
        let at = expiry_at(ttl_ms);
        if self.read_raw == Some(value.len()) {
            return self.overwrite(value, at);
        }
        let ctx = self.ctx.get_raw();
        // SAFETY: an open key; a string made here, whose reference is
        // released once (the key takes its own); the replicated command's
        // format matches its arguments.
        unsafe {
            let string =
                api(raw::RedisModule_CreateString)(ctx, value.as_ptr().cast(), value.len());
            let stored = api(raw::RedisModule_StringSet)(self.key, string);
            self.written = true;
            if stored != OK || api(raw::RedisModule_SetAbsExpire)(self.key, at) != OK {
                api(raw::RedisModule_FreeString)(ctx, string);
                return Err("ratelab: cannot write the state".to_owned());
            }
            // The value stored goes to replicas and the AOF as the very
            // string (as `SET` propagates its argument), and `PXAT` as the
            // one made when the module loaded: no copies.
            api(raw::RedisModule_Replicate)(
                ctx,
                c"SET".as_ptr(),
                c"sssl".as_ptr(),
                self.name.object,
                string,
                pxat(),
                at,
            );
            api(raw::RedisModule_FreeString)(ctx, string);
        }
        self.notify(raw::REDISMODULE_NOTIFY_STRING, c"set");
        self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire");
        Ok(())
    }

    /// Writes `value` over the raw string of the same length read in place
    /// (which that read made raw), expiring at Unix ms `at`: the bytes, the
    /// TTL, the memory taken, the replication (`SET key value PXAT at`),
    /// the events and the signal are `SET`'s; the key stays a raw string
    /// where `SET` would embed a string of up to 44 bytes (only `OBJECT
    /// ENCODING` tells). No key deleted and added again, no string made.
    fn overwrite(&mut self, value: &[u8], at: i64) -> Result<(), String> {
        let mode =
            c_int::try_from(raw::REDISMODULE_READ | raw::REDISMODULE_WRITE).expect("small flags");
        let ctx = self.ctx.get_raw();
        let mut len = 0;
        // SAFETY: an open key holding the raw string read in place, whose
        // buffer (`len` bytes) is written within its length; the replicated
        // command's format matches its arguments.
        unsafe {
            let ptr = api(raw::RedisModule_StringDMA)(self.key, &mut len, mode);
            if ptr.is_null() || len != value.len() {
                return Err("ratelab: cannot write the state".to_owned());
            }
            std::ptr::copy_nonoverlapping(value.as_ptr(), ptr.cast::<u8>(), len);
            self.written = true;
            if api(raw::RedisModule_SetAbsExpire)(self.key, at) != OK {
                return Err("ratelab: cannot write the state".to_owned());
            }
            api(raw::RedisModule_Replicate)(
                ctx,
                c"SET".as_ptr(),
                c"sbsl".as_ptr(),
                self.name.object,
                value.as_ptr().cast::<c_char>(),
                value.len(),
                pxat(),
                at,
            );
        }
        self.notify(raw::REDISMODULE_NOTIFY_STRING, c"set");
        self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire");
        Ok(())
    }

    /// Raises a keyspace event on the key, as the command would.
    fn notify(&self, class: c_int, event: &std::ffi::CStr) {
        // SAFETY: the running command's context and key argument.
        unsafe {
            api(raw::RedisModule_NotifyKeyspaceEvent)(
                self.ctx.get_raw(),
                class,
                event.as_ptr(),
                self.name.object,
            );
        }
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if !self.key.is_null() {
            // SAFETY: a key opened by `open`, closed once; the running
            // command's context and key argument.
            unsafe {
                if self.written {
                    api(raw::RedisModule_SignalModifiedKey)(self.ctx.get_raw(), self.name.object);
                }
                api(raw::RedisModule_CloseKey)(self.key);
            }
        }
    }
}

/// The sliding log's sorted set opened for direct access: counted, pruned,
/// read and added to without a command per step. A sorted set, unlike a
/// string, is stored the same whichever way it is written (`RM_ZsetAdd`
/// and `ZADD` both go through Redis's `zsetAdd`), so direct access leaves
/// the key as the script would. The effects go to replicas and the AOF as
/// the commands a script sends (`RM_Replicate`), and raise the keyspace
/// events those commands raise.
pub(crate) mod zset {
    use super::*;

    /// `score <= at` (`false`) or `score < at` (`true`), as Redis's ranges.
    type Exclusive = bool;

    impl Open<'_> {
        /// How many units the set holds (`ZCARD`).
        pub(crate) fn len(&self) -> u64 {
            if self.holds() != Holds::Zset {
                return 0;
            }
            // SAFETY: an open sorted set.
            let len = unsafe { raw::RedisModule_ValueLength.expect("the module API")(self.key) };
            u64::try_from(len).unwrap_or(u64::MAX)
        }

        /// Calls `each` with the scores from `min` up (and the element, a
        /// string the callee takes or leaves to be freed), while it answers
        /// `true`.
        fn walk(
            &self,
            min: f64,
            min_exclusive: Exclusive,
            max: f64,
            mut each: impl FnMut(f64, *mut raw::RedisModuleString) -> (bool, bool),
        ) {
            if self.holds() != Holds::Zset {
                return;
            }
            // SAFETY: an open sorted set; an iterator started here is stopped
            // before this returns; every element returned is either taken by
            // `each` or freed here.
            unsafe {
                let started = api(raw::RedisModule_ZsetFirstInScoreRange)(
                    self.key,
                    min,
                    max,
                    c_int::from(min_exclusive),
                    0,
                );
                if started != OK {
                    return;
                }
                while api(raw::RedisModule_ZsetRangeEndReached)(self.key) == 0 {
                    let mut score = 0.0;
                    let element =
                        api(raw::RedisModule_ZsetRangeCurrentElement)(self.key, &mut score);
                    if element.is_null() {
                        break;
                    }
                    let (taken, more) = each(score, element);
                    if !taken {
                        api(raw::RedisModule_FreeString)(self.ctx.get_raw(), element);
                    }
                    if !more || api(raw::RedisModule_ZsetRangeNext)(self.key) == 0 {
                        break;
                    }
                }
                api(raw::RedisModule_ZsetRangeStop)(self.key);
            }
        }

        /// Removes the units at or before `cutoff` (`ZREMRANGEBYSCORE key
        /// -inf cutoff`); how many it removed.
        pub(crate) fn prune(&mut self, cutoff: i64) -> u64 {
            let mut gone: Vec<*mut raw::RedisModuleString> = Vec::new();
            // Exact: instants are below 2^53, and a cutoff below every
            // score removes nothing either way.
            #[allow(clippy::cast_precision_loss)]
            let max = cutoff as f64;
            self.walk(f64::NEG_INFINITY, false, max, |_, element| {
                gone.push(element);
                (true, true)
            });
            if gone.is_empty() {
                return 0;
            }
            self.written = true;
            // SAFETY: an open sorted set and elements of it, each freed once.
            unsafe {
                for &element in &gone {
                    let mut deleted = 0;
                    api(raw::RedisModule_ZsetRem)(self.key, element, &mut deleted);
                    api(raw::RedisModule_FreeString)(self.ctx.get_raw(), element);
                }
                api(raw::RedisModule_Replicate)(
                    self.ctx.get_raw(),
                    c"ZREMRANGEBYSCORE".as_ptr(),
                    c"scl".as_ptr(),
                    self.name.object,
                    c"-inf".as_ptr(),
                    cutoff,
                );
                self.notify(raw::REDISMODULE_NOTIFY_ZSET, c"zremrangebyscore");
                if self.holds() == Holds::Nothing {
                    self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del");
                }
            }
            u64::try_from(gone.len()).unwrap_or(u64::MAX)
        }

        /// The newest member and its score (`ZRANGE key -1 -1 WITHSCORES`).
        pub(crate) fn newest(&self) -> Option<(Vec<u8>, f64)> {
            if self.holds() != Holds::Zset {
                return None;
            }
            let mut newest = None;
            // SAFETY: an open sorted set; the iterator is stopped and the
            // element freed before this returns; its bytes are copied first.
            unsafe {
                let started = api(raw::RedisModule_ZsetLastInScoreRange)(
                    self.key,
                    f64::NEG_INFINITY,
                    f64::INFINITY,
                    0,
                    0,
                );
                if started == OK && api(raw::RedisModule_ZsetRangeEndReached)(self.key) == 0 {
                    let mut score = 0.0;
                    let element =
                        api(raw::RedisModule_ZsetRangeCurrentElement)(self.key, &mut score);
                    if !element.is_null() {
                        newest = Some((bytes(element).to_vec(), score));
                        api(raw::RedisModule_FreeString)(self.ctx.get_raw(), element);
                    }
                }
                api(raw::RedisModule_ZsetRangeStop)(self.key);
            }
            newest
        }

        /// The member at rank `n` (from 0) among those scored after
        /// `cutoff`, and its score (`ZRANGEBYSCORE key (cutoff +inf
        /// WITHSCORES LIMIT n 1`).
        pub(crate) fn nth_after(&self, cutoff: i64, n: u64) -> Option<(Vec<u8>, f64)> {
            let mut left = n;
            let mut found = None;
            #[allow(clippy::cast_precision_loss)]
            let min = cutoff as f64;
            self.walk(min, true, f64::INFINITY, |score, element| {
                if left > 0 {
                    left -= 1;
                    return (false, true);
                }
                // SAFETY: an element the walk hands over, live until freed.
                found = Some((unsafe { bytes(element) }.to_vec(), score));
                (false, false)
            });
            found
        }

        /// Whether `member` is in the set (`ZSCORE key member`).
        pub(crate) fn has_member(&self, member: &[u8]) -> bool {
            if self.holds() != Holds::Zset {
                return false;
            }
            let ctx = self.ctx.get_raw();
            // SAFETY: an open sorted set; a string made here and freed once.
            unsafe {
                let element =
                    api(raw::RedisModule_CreateString)(ctx, member.as_ptr().cast(), member.len());
                let mut score = 0.0;
                let found = api(raw::RedisModule_ZsetScore)(self.key, element, &mut score) == OK;
                api(raw::RedisModule_FreeString)(ctx, element);
                found
            }
        }

        /// How many units were admitted at `at` (`ZCOUNT key at at`).
        pub(crate) fn count_at(&self, at: f64) -> u64 {
            let mut count = 0;
            self.walk(at, false, at, |_, _| {
                count += 1;
                (false, true)
            });
            count
        }

        /// Adds one unit, `member` at `at` (`ZADD key at member`), unless
        /// the server is out of memory (as `ZADD` from a script is refused).
        pub(crate) fn add(&mut self, at: i64, member: &[u8]) -> Result<(), String> {
            if out_of_memory() {
                return Err(OOM.to_owned());
            }
            #[allow(clippy::cast_precision_loss)]
            let score = at as f64;
            // SAFETY: an open key; a string made here and freed once; the
            // replicated command's format matches its arguments.
            unsafe {
                let ctx = self.ctx.get_raw();
                let element =
                    api(raw::RedisModule_CreateString)(ctx, member.as_ptr().cast(), member.len());
                let mut flags = 0;
                let added = api(raw::RedisModule_ZsetAdd)(self.key, score, element, &mut flags);
                api(raw::RedisModule_FreeString)(ctx, element);
                self.written = true;
                if added != OK {
                    return Err("ratelab sliding-log: cannot add to the log".to_owned());
                }
                api(raw::RedisModule_Replicate)(
                    ctx,
                    c"ZADD".as_ptr(),
                    c"slb".as_ptr(),
                    self.name.object,
                    at,
                    member.as_ptr().cast::<c_char>(),
                    member.len(),
                );
                self.notify(raw::REDISMODULE_NOTIFY_ZSET, c"zadd");
            }
            Ok(())
        }

        /// Expires the key `ttl_ms` from now (`PEXPIRE`, which Redis
        /// replicates as `PEXPIREAT`).
        pub(crate) fn expire(&mut self, ttl_ms: u64) -> Result<(), String> {
            let at = expiry_at(ttl_ms);
            // SAFETY: an open key; the replicated command's format matches
            // its arguments.
            unsafe {
                self.written = true;
                if api(raw::RedisModule_SetAbsExpire)(self.key, at) != OK {
                    return Err("ratelab sliding-log: cannot expire the log".to_owned());
                }
                api(raw::RedisModule_Replicate)(
                    self.ctx.get_raw(),
                    c"PEXPIREAT".as_ptr(),
                    c"sl".as_ptr(),
                    self.name.object,
                    at,
                );
                self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire");
            }
            Ok(())
        }
    }
}
