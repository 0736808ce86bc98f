//! The key a command names, opened for direct access ([`Open`]): what it
//! holds, its expiry, its string read in place, a state stored as `SET`
//! stores and replicates it, the keyspace events and the signal a command
//! raises; and (`zset`) the sliding log's sorted set. A key opened to read
//! only ([`Reading`]) tells whether it holds anything.

#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::{Context, raw};

use crate::args::unix_micros;
use crate::ffi::{KeyArg, OK, api};

mod zset;

/// The Unix ms, on the server clock, `ttl_ms` from now: the `PXAT` a TTL
/// becomes (as Redis itself replicates an expiry).
fn expiry_at(ttl_ms: u64) -> i64 {
    let at = (unix_micros() / 1000).saturating_add(ttl_ms);
    i64::try_from(at).unwrap_or(i64::MAX)
}

/// `PXAT`, made once when the module loads ([`prepare`]) and kept: every
/// state written is replicated with it.
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(std::ptr::null_mut());

/// [`PXAT`].
fn pxat() -> *mut raw::RedisModuleString {
    let pxat = PXAT.load(Ordering::Relaxed);
    assert!(!pxat.is_null(), "PXAT is made when the module loads");
    pxat
}

/// Readies the module for the keys it opens (its `init`, before any
/// command runs): [`Open`] signals what it writes, and [`PXAT`] is made.
/// `false` when Redis cannot make it.
pub(crate) fn prepare(ctx: &Context) -> bool {
    // A key opened to write signals as modified only when written through
    // (`Open`'s drop), as a command signals only what it changes.
    ctx.set_module_options(raw::ModuleOptions::NO_IMPLICIT_SIGNAL_MODIFIED);
    // SAFETY: a string of no context (kept until the server exits), made
    // from a static buffer Redis copies.
    let pxat =
        unsafe { api(raw::RedisModule_CreateString)(std::ptr::null_mut(), c"PXAT".as_ptr(), 4) };
    if pxat.is_null() {
        return false;
    }
    PXAT.store(pxat, Ordering::Relaxed);
    true
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
    let key = unsafe { api(raw::RedisModule_OpenKey)(ctx.get_raw(), name.object(), mode) };
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
    let key = unsafe { api(raw::RedisModule_OpenKey)(ctx.get_raw(), name.object(), mode) };
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
                self.name.object(),
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
                self.name.object(),
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
                self.name.object(),
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
                    api(raw::RedisModule_SignalModifiedKey)(self.ctx.get_raw(), self.name.object());
                }
                api(raw::RedisModule_CloseKey)(self.key);
            }
        }
    }
}
