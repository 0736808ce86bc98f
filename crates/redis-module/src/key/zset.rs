//! The sliding log's sorted set opened for direct access: counted, pruned,
//! read and added to without a command per step. A sorted set, unlike a
//! string, is stored the same whichever way it is written (`RM_ZsetAdd`
//! and `ZADD` both go through Redis's `zsetAdd`), so direct access leaves
//! the key as the script would. The effects go to replicas and the AOF as
//! the commands a script sends (`RM_Replicate`), and raise the keyspace
//! events those commands raise.

#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};

use redis_module::raw;

use super::{Holds, OOM, Open, expiry_at, out_of_memory};
use crate::ffi::{OK, api, bytes};

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
                let element = api(raw::RedisModule_ZsetRangeCurrentElement)(self.key, &mut score);
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
                self.name.object(),
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
                let element = api(raw::RedisModule_ZsetRangeCurrentElement)(self.key, &mut score);
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
                self.name.object(),
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
                self.name.object(),
                at,
            );
            self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire");
        }
        Ok(())
    }
}
