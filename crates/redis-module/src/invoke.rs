//! How Redis calls a command: the functions registered for it, which read
//! the key and the arguments after it in place, refuse on a read-only twin
//! anything but a peek, run the command, and write its reply.
//!
//! The binding's wrapper copies every argument into a `Vec<RedisString>`
//! (retaining and releasing each), and its replies go through a
//! `RedisValue` tree: about a microsecond a call, on a command that costs
//! a few. Here the arguments are read in place (`RM_StringPtrLen`), the key
//! is handed on as the very object Redis passed ([`KeyArg`]), and the reply
//! is eight `RM_ReplyWithLongLong`. Nothing is allocated on the way to a
//! decision.

#![allow(unsafe_code)]

use std::ffi::c_int;

use ratelab_core::toolkit::{RemoteForm, StringForm};
use ratelab_sliding_window::SlidingLog;
use redis_module::{Context, RedisError, Status, raw};

use crate::ffi::{KeyArg, bytes};
use crate::reply::Reply;
use crate::{sliding_log, string};

/// Arguments after the key read in place up to this many; beyond, copied
/// to the heap (no call of the protocol has more than 11).
const ON_STACK: usize = 16;

/// The command of an algorithm whose state is one string
/// ([`string::command`]), as Redis calls it.
///
/// # Safety
///
/// Called by Redis only, with its context and `argc` live arguments.
pub(crate) unsafe extern "C" fn string_command<A: StringForm>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: as Redis called this function.
    unsafe { run(ctx, argv, argc, Access::Write, string::command::<A>) }
}

/// The read-only twin of [`string_command`]: peeks only.
///
/// # Safety
///
/// Called by Redis only, with its context and `argc` live arguments.
pub(crate) unsafe extern "C" fn string_peek<A: StringForm>(
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
            string::command::<A>,
        )
    }
}

/// The sliding log's command ([`sliding_log::command`]), as Redis calls it.
///
/// # Safety
///
/// Called by Redis only, with its context and `argc` live arguments.
pub(crate) unsafe extern "C" fn sliding_log_command(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: as Redis called this function.
    unsafe { run(ctx, argv, argc, Access::Write, sliding_log::command) }
}

/// The read-only twin of [`sliding_log_command`]: peeks only.
///
/// # Safety
///
/// Called by Redis only, with its context and `argc` live arguments.
pub(crate) unsafe extern "C" fn sliding_log_peek(
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
            sliding_log::command,
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
    command: impl FnOnce(&Context, KeyArg<'_>, &[&[u8]]) -> Result<Reply, RedisError>,
) -> c_int {
    let context = Context::new(ctx);
    let argc = usize::try_from(argc).unwrap_or(0);
    if argv.is_null() || argc < 2 {
        return context.reply(Err(RedisError::WrongArity)) as c_int;
    }
    // SAFETY: Redis passes `argc` live arguments.
    let args = unsafe { std::slice::from_raw_parts(argv, argc) };
    // SAFETY: an argument of this call.
    let key = unsafe { KeyArg::new(args[1]) };
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
