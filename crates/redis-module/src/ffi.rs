//! The module API at its most basic, shared by the files that call it: a
//! function of the API, what it answers on success, the bytes of a Redis
//! string, and the key argument of the running command.
//!
//! Every function of the API is `unsafe` FFI on pointers Redis hands the
//! command for the duration of the call; the safe types built on it
//! ([`KeyArg`], [`Reply`](crate::call::Reply), [`Open`](crate::key::Open))
//! cannot outlive it.

#![allow(unsafe_code)]

use std::ffi::c_int;
use std::marker::PhantomData;

use redis_module::raw;

/// A function of the module API, set when the module loaded.
#[inline]
pub(crate) fn api<F>(function: Option<F>) -> F {
    function.expect("the module API is loaded")
}

/// What the module API answers on success (`REDISMODULE_OK`, 0).
pub(crate) const OK: c_int = 0;
const _: () = assert!(raw::REDISMODULE_OK == 0);

/// The key argument of a call: the object Redis passed, and its bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyArg<'a> {
    object: *mut raw::RedisModuleString,
    bytes: &'a [u8],
    _call: PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> KeyArg<'a> {
    /// The key argument `object`, read in place.
    ///
    /// # Safety
    ///
    /// `object` is an argument of the running command, which outlives `'a`.
    #[inline]
    pub(crate) unsafe fn new(object: *mut raw::RedisModuleString) -> KeyArg<'a> {
        KeyArg {
            object,
            // SAFETY: an argument of the running command.
            bytes: unsafe { bytes(object) },
            _call: PhantomData,
        }
    }

    /// The key's bytes.
    #[inline]
    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The object Redis passed: the key handed on to `RM_OpenKey`,
    /// `RM_Call` and `RM_Replicate` by reference, not copied.
    #[inline]
    pub(crate) fn object(&self) -> *mut raw::RedisModuleString {
        self.object
    }
}

/// The bytes of an argument.
///
/// # Safety
///
/// `s` is a live Redis string that outlives `'a` (an argument of the
/// running command).
#[inline]
pub(crate) unsafe fn bytes<'a>(s: *mut raw::RedisModuleString) -> &'a [u8] {
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
