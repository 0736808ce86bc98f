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
//! for the duration of the call; the safe types ([`KeyArg`], [`Stored`])
//! cannot outlive it.

#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};
use std::marker::PhantomData;

use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
use ratelab_sliding_window::SlidingCounter;
use ratelab_token_bucket::TokenBucket;
use redis_module::{Context, RedisError, RedisString, Status, raw};

use crate::algorithms::StringState;
use crate::args::unix_micros;
use crate::command;

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

/// What `GET key` answered: a string, nothing, or an error (a key of
/// another type). Frees the reply on drop.
#[derive(Debug)]
pub(crate) struct Stored<'a> {
    reply: *mut raw::RedisModuleCallReply,
    _call: PhantomData<&'a Context>,
}

impl Stored<'_> {
    /// The string stored, `None` for no key, `Err` for a key that holds no
    /// string.
    pub(crate) fn value(&self) -> Result<Option<&[u8]>, ()> {
        if self.reply.is_null() {
            return Err(());
        }
        match raw::call_reply_type(self.reply) {
            raw::ReplyType::String => {
                let mut len = 0;
                // A live reply of RM_Call, freed only on drop.
                let ptr = raw::call_reply_string_ptr(self.reply, &mut len);
                if ptr.is_null() || len == 0 {
                    return Ok(Some(&[]));
                }
                // SAFETY: the buffer lives as long as the reply, which lives
                // as long as `self`.
                Ok(Some(unsafe {
                    std::slice::from_raw_parts(ptr.cast::<u8>(), len)
                }))
            }
            raw::ReplyType::Null => Ok(None),
            _ => Err(()),
        }
    }
}

impl Drop for Stored<'_> {
    fn drop(&mut self) {
        if !self.reply.is_null() {
            // SAFETY: a reply of RM_Call, freed once.
            unsafe { raw::RedisModule_FreeCallReply.expect("the module API")(self.reply) };
        }
    }
}

/// `GET key`, as a script reads its key: the value stays as Redis stored
/// it (an integer stays an integer).
pub(crate) fn get<'a>(ctx: &'a Context, key: KeyArg<'_>) -> Stored<'a> {
    // SAFETY: RM_Call with one `s` conversion and one live Redis string;
    // the reply is freed by `Stored`.
    let reply = unsafe {
        raw::RedisModule_Call.expect("the module API")(
            ctx.get_raw(),
            c"GET".as_ptr(),
            c"s".as_ptr(),
            key.object,
        )
    };
    Stored {
        reply,
        _call: PhantomData,
    }
}

/// `SET key value PX ttl_ms` as a script sends it: replicated (`!`),
/// refused when memory is full (`M`), errors as replies (`E`). The value
/// goes as a C buffer (`b`), so that Redis makes a fresh object of it and
/// `SET` stores a decimal as an integer (48 bytes a key, as with the
/// script; a string shared with the module would stay a string, 80 bytes).
///
/// The TTL goes as `PXAT` (now on the server clock + `ttl_ms`), the form
/// `SET` itself rewrites `PX` to before it replicates: the same expiry,
/// without the rewrite of the command's arguments.
pub(crate) fn set(ctx: &Context, key: KeyArg<'_>, value: &[u8], ttl_ms: u64) -> Result<(), String> {
    let at = (unix_micros() / 1000).saturating_add(ttl_ms);
    let at = i64::try_from(at).unwrap_or(i64::MAX);
    // SAFETY: the format has `s`, `b`, `c` and `l` conversions, followed by
    // a live Redis string, a (pointer, length) pair of a live slice, a
    // NUL-terminated C string and a long long; RM_Call copies what it
    // needs before it returns. The reply is freed below, once read.
    let reply = unsafe {
        raw::RedisModule_Call.expect("the module API")(
            ctx.get_raw(),
            c"SET".as_ptr(),
            c"!MEsbcl".as_ptr(),
            key.object,
            value.as_ptr().cast::<c_char>(),
            value.len(),
            c"PXAT".as_ptr(),
            at,
        )
    };
    if reply.is_null() {
        return Err("ratelab: SET failed".to_owned());
    }
    let result = match raw::call_reply_type(reply) {
        raw::ReplyType::Error => Err(raw::call_reply_string(reply).unwrap_or_default()),
        _ => Ok(()),
    };
    raw::free_call_reply(reply);
    result
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
unsafe extern "C" fn string_command<A: StringState>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
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
    match command::string_command::<A>(&context, key, after_key) {
        Ok(fields) => {
            // SAFETY: replies on the context of the running command.
            unsafe {
                raw::RedisModule_ReplyWithArray.expect("the module API")(ctx, 6);
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

/// The commands registered here: name, function. Flags: "write" (a replica
/// refuses it; a cluster routes it by its one key, the first argument),
/// "fast" (O(1)); no "deny-oom": as for a script, only a write is refused
/// when memory is full.
const STRING_COMMANDS: [(&std::ffi::CStr, raw::RedisModuleCmdFunc); 6] = [
    (c"ratelab.fixed-window", Some(string_command::<FixedWindow>)),
    (
        c"ratelab.sliding-counter",
        Some(string_command::<SlidingCounter>),
    ),
    (c"ratelab.leaky-meter", Some(string_command::<LeakyMeter>)),
    (c"ratelab.leaky-queue", Some(string_command::<LeakyQueue>)),
    (c"ratelab.token-bucket", Some(string_command::<TokenBucket>)),
    (c"ratelab.gcra", Some(string_command::<Gcra>)),
];

/// Registers the string-state commands (the module's `init`).
pub(crate) fn register(ctx: &Context, _args: &[RedisString]) -> Status {
    let Some(create) = (unsafe { raw::RedisModule_CreateCommand }) else {
        return Status::Err;
    };
    for (name, function) in STRING_COMMANDS {
        // SAFETY: the context of OnLoad; static NUL-terminated names and
        // flags; a function of the right signature.
        let status = unsafe {
            create(
                ctx.get_raw(),
                name.as_ptr(),
                function,
                c"write fast".as_ptr(),
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
    Status::Ok
}
