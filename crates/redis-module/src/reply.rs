//! What a command answers: the reply of a decision (the eight fields the
//! scripts answer), and the scripts' error replies, word for word.

use ratelab_core::Decision;
use ratelab_core::toolkit::Stamp;
use redis_module::RedisError;

use crate::lua::show_bare;

/// The reply of every call: `[allowed, limit, remaining, retry_after_us,
/// reset_after_us, delay_us, stamp_at, stamp_mark]`.
pub(crate) type Reply = [i64; 8];

/// `ratelab <name>: invalid arguments`.
pub(crate) fn invalid(name: &str) -> RedisError {
    RedisError::String(format!("ratelab {name}: invalid arguments"))
}

/// `ratelab <name>: corrupt state at <key>: <what>`.
pub(crate) fn corrupt(name: &str, key: &[u8], what: &str) -> RedisError {
    RedisError::String(format!(
        "ratelab {name}: corrupt state at {}: {what}",
        show_bare(key)
    ))
}

/// `ratelab <name>: out of range at <key>: <what>`.
pub(crate) fn out_of_range(name: &str, key: &[u8], what: &str) -> RedisError {
    RedisError::String(format!(
        "ratelab {name}: out of range at {}: {what}",
        show_bare(key)
    ))
}

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The reply of a decision, with no stamp.
pub(crate) fn fields(decision: &Decision) -> Reply {
    [
        i64::from(decision.allowed),
        int(decision.limit),
        int(decision.remaining),
        int(decision.retry_after_micros),
        int(decision.reset_after_micros),
        int(decision.delay_micros),
        0,
        0,
    ]
}

/// The reply of an admission, with its stamp.
pub(crate) fn stamped(decision: &Decision, stamp: Stamp) -> Reply {
    let mut reply = fields(decision);
    reply[6] = int(stamp.at);
    reply[7] = int(stamp.mark);
    reply
}
