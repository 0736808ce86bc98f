//! Reading a script's reply into a [`Decision`], trusting nothing in it.

use std::fmt;

use ratelab_core::Decision;
use redis::Value;

/// What a reply must satisfy, from the limiter's own parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// The algorithm's capacity: the `limit` every reply must carry.
    pub(crate) capacity: u64,
    /// The longest wait the script can answer, clock skew allowance included.
    pub(crate) max_wait: u64,
}

/// A reply no script of this limiter could have sent.
#[derive(Debug)]
pub struct InvalidReply {
    script: &'static str,
    reply: String,
    why: &'static str,
}

impl fmt::Display for InvalidReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ratelab {}: invalid reply {}: {}",
            self.script, self.reply, self.why
        )
    }
}

impl std::error::Error for InvalidReply {}

/// `{allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}`:
/// six integers, `allowed` 0 or 1, `limit` the capacity, `remaining` at most
/// the limit, waits within `bounds.max_wait`, no wait to retry an admitted
/// request and no delay for a refused one. Read as [`Value`] so that a
/// negative integer is seen as one, not wrapped into a huge unsigned one.
pub(crate) fn decision_from_reply(
    script: &'static str,
    reply: &Value,
    bounds: Bounds,
) -> Result<Decision, InvalidReply> {
    let invalid = |why| InvalidReply {
        script,
        reply: shown(reply),
        why,
    };
    let Value::Array(items) = reply else {
        return Err(invalid("not an array"));
    };
    let mut n = [0u64; 6];
    if items.len() != n.len() {
        return Err(invalid("not six integers"));
    }
    for (slot, item) in n.iter_mut().zip(items) {
        let Value::Int(i) = item else {
            return Err(invalid("not six integers"));
        };
        *slot = u64::try_from(*i).map_err(|_| invalid("a negative integer"))?;
    }
    let [allowed, limit, remaining, retry, reset, delay] = n;
    if limit != bounds.capacity {
        return Err(invalid("limit is not this limiter's capacity"));
    }
    if remaining > limit {
        return Err(invalid("remaining above the limit"));
    }
    if retry > bounds.max_wait || reset > bounds.max_wait || delay > bounds.max_wait {
        return Err(invalid("a wait longer than this quota can produce"));
    }
    match allowed {
        1 if retry == 0 => Ok(Decision::admitted(limit)
            .with_remaining(remaining)
            .with_reset_after_micros(reset)
            .with_delay_micros(delay)),
        0 if delay == 0 => Ok(Decision::refused(limit)
            .with_remaining(remaining)
            .with_retry_after_micros(retry)
            .with_reset_after_micros(reset)),
        0 | 1 => Err(invalid(
            "a retry wait when admitted, or a delay when refused",
        )),
        _ => Err(invalid("allowed is neither 0 nor 1")),
    }
}

/// The reply, at most about 200 characters of it.
fn shown(reply: &Value) -> String {
    let mut text = format!("{reply:?}");
    if text.len() > 200 {
        let mut cut = 200;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: Bounds = Bounds {
        capacity: 10,
        max_wait: 1_000_000,
    };

    fn reply(items: &[i64]) -> Value {
        Value::Array(items.iter().map(|&i| Value::Int(i)).collect())
    }

    #[test]
    fn a_valid_reply_is_a_decision() {
        let d = decision_from_reply("gcra", &reply(&[1, 10, 9, 0, 100_000, 0]), BOUNDS).unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 9);
        let d = decision_from_reply("gcra", &reply(&[0, 10, 0, 5, 1_000_000, 0]), BOUNDS).unwrap();
        assert!(!d.allowed);
    }

    #[test]
    fn anything_else_is_an_error_naming_script_and_reply() {
        let bad: [Value; 12] = [
            reply(&[1, 10, -1, 0, 0, 0]),
            reply(&[1, 10, 11, 0, 0, 0]),
            reply(&[1, 11, 1, 0, 0, 0]),
            reply(&[2, 10, 1, 0, 0, 0]),
            reply(&[0, 10, 1, 1_000_001, 0, 0]),
            reply(&[0, 10, 1, 0, i64::MAX, 0]),
            reply(&[1, 10, 1, 5, 0, 0]),
            reply(&[0, 10, 1, 5, 0, 5]),
            reply(&[1, 10, 1, 0, 0]),
            Value::Int(1),
            Value::Nil,
            Value::Array(vec![Value::BulkString(b"1".to_vec()); 6]),
        ];
        for value in bad {
            let error = decision_from_reply("gcra", &value, BOUNDS)
                .unwrap_err()
                .to_string();
            assert!(error.starts_with("ratelab gcra: invalid reply "), "{error}");
        }
    }
}
