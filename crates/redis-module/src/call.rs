//! Redis commands called from a command, as a script calls them
//! (`redis.call`), and their replies read. Two ways: the binding's
//! `call_ext`, with the options of a script's writes ([`WRITE`]) and
//! reads ([`READ`]), for the calls off the hot path; and `RM_Call` on the
//! module API itself ([`Reply`]) for the calls on it (a string's `GET`, the
//! sliding log's count and prune), where the binding's `call_ext` would
//! make a Redis string of every argument and a format string per call, and
//! its replies would go through a `RedisValue` tree: here the key goes as
//! the very object Redis passed (`RM_Call`'s `s` format: a reference, not
//! a copy), and the reply is read in place.

#![allow(unsafe_code)]

use std::ffi::c_char;
use std::marker::PhantomData;
use std::sync::LazyLock;

use redis_module::{
    CallOptions, CallOptionsBuilder, CallReply, CallResult, Context, RedisError, RedisValue, raw,
};

use crate::ffi::KeyArg;

/// Writes: replicated to replicas and the AOF as the commands themselves
/// (as a script's effects are), refused when the server is out of memory
/// (as a script's writes are), errors as replies.
pub(crate) static WRITE: LazyLock<CallOptions> = LazyLock::new(|| {
    CallOptionsBuilder::new()
        .replicate()
        .verify_oom()
        .errors_as_replies()
        .build()
});

/// Reads, and deletions (replicated when they remove anything; no memory
/// check, as they free).
pub(crate) static READ: LazyLock<CallOptions> = LazyLock::new(|| {
    CallOptionsBuilder::new()
        .replicate()
        .errors_as_replies()
        .build()
});

/// A call's reply, or the error it answered.
pub(crate) fn call(
    ctx: &Context,
    options: &CallOptions,
    command: &str,
    args: &[&[u8]],
) -> CallResult<'static> {
    ctx.call_ext(command, options, args)
}

pub(crate) fn integer_reply(reply: &CallReply<'_>) -> Option<i64> {
    match reply {
        CallReply::I64(n) => Some(n.to_i64()),
        _ => None,
    }
}

/// The bytes of a string reply.
pub(crate) fn bytes_reply(reply: &CallReply<'_>) -> Option<Vec<u8>> {
    match reply {
        CallReply::String(s) => Some(s.as_bytes().to_vec()),
        _ => None,
    }
}

/// The elements of an array reply of strings (`None` for a null one).
pub(crate) fn strings_reply(reply: &CallReply<'_>) -> Vec<Option<Vec<u8>>> {
    match reply {
        CallReply::Array(items) => items
            .iter()
            .map(|item| item.ok().as_ref().and_then(bytes_reply))
            .collect(),
        _ => Vec::new(),
    }
}

/// What `TYPE key` answers (`list`, `zset`, a module type's name...).
pub(crate) fn type_name(ctx: &Context, key: &[u8]) -> String {
    match ctx.call("TYPE", &[key]) {
        Ok(RedisValue::SimpleString(name)) => name,
        Ok(RedisValue::SimpleStringStatic(name)) => name.to_owned(),
        other => format!("{other:?}"),
    }
}

/// An error reply passed on as it came.
pub(crate) fn passed_on(error: &redis_module::ErrorReply<'_>) -> RedisError {
    RedisError::String(error.to_utf8_string().unwrap_or_else(|| error.to_string()))
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
    rm_call!(ctx, c"GET", c"s", key.object())
}

/// The calls of the sliding log's hot path, on the module API: the
/// scripts' own commands, arguments passed by reference or as C buffers.
/// Reads answer errors as replies (`E`); writes are also replicated (`!`)
/// and refused when memory is full (`M`), as a script's are.
pub(crate) mod log {
    use super::*;

    /// `ZCARD key`.
    pub(crate) fn card<'a>(ctx: &'a Context, key: KeyArg<'_>) -> Reply<'a> {
        rm_call!(ctx, c"ZCARD", c"Es", key.object())
    }

    /// `ZREMRANGEBYSCORE key -inf cutoff`: prunes the units that left.
    /// Replicated when it removes anything; no memory check, as it frees.
    pub(crate) fn prune<'a>(ctx: &'a Context, key: KeyArg<'_>, cutoff: i64) -> Reply<'a> {
        rm_call!(
            ctx,
            c"ZREMRANGEBYSCORE",
            c"!Escl",
            key.object(),
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
            key.object(),
            live.as_ptr().cast::<c_char>(),
            live.len(),
            c"+inf".as_ptr()
        )
    }
}
