//! Reading a script's reply into a [`Decision`], trusting nothing in it.

use std::fmt;

use ratelab_core::Decision;
use ratelab_core::toolkit::Stamp;
use redis::Value;

/// What a reply must satisfy, from the limiter's own parameters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// The algorithm's capacity: the `limit` every reply must carry.
    pub(crate) capacity: u64,
    /// The longest wait the script can answer from state checks wrote,
    /// clock skew allowance included.
    pub(crate) max_wait: u64,
    /// A debt, whose waits after a settlement charged more may run up to
    /// [`MAX_END`].
    pub(crate) debt: bool,
}

/// The latest instant a debt may end at in the protocol (`lua/README.md`,
/// "State"): 2^52 + 2^51 µs.
pub(crate) const MAX_END: u64 = (1 << 52) + (1 << 51);

/// The largest integer the scripts send exactly: 2^53 − 1.
const MAX_EXACT: u64 = (1 << 53) - 1;

/// What the call was, for what its reply may hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asked {
    /// A check of a positive cost: an admission answers its stamp.
    pub(crate) stamps: bool,
    /// The instant sent (a client clock), when there was one.
    pub(crate) now: Option<u64>,
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

/// `{allowed, limit, remaining, retry_after_us, reset_after_us, delay_us,
/// stamp_at, stamp_mark}`: eight integers, `allowed` 0 or 1, `limit` the
/// capacity, `remaining` at most the limit, no wait to retry an admitted
/// request and no delay for a refused one; waits within `bounds.max_wait`,
/// but for a debt's refusals, peeks and settlements (up to [`MAX_END`]:
/// settlements charge whatever the room); a stamp exactly for an admission
/// of a check of a positive cost, within bounds (a debt's end after the
/// instant sent and no further than the longest wait; a window's with a
/// mark of at least 1, the admission's own units), and `0, 0` for anything else. Read as [`Value`] so that a
/// negative integer is seen as one, not wrapped into a huge unsigned one.
pub(crate) fn decision_from_reply(
    script: &'static str,
    reply: &Value,
    bounds: Bounds,
    asked: Asked,
) -> Result<(Decision, Stamp), InvalidReply> {
    let invalid = |why| InvalidReply {
        script,
        reply: shown(reply),
        why,
    };
    let Value::Array(items) = reply else {
        return Err(invalid("not an array"));
    };
    let mut n = [0u64; 8];
    if items.len() != n.len() {
        return Err(invalid("not eight integers"));
    }
    for (slot, item) in n.iter_mut().zip(items) {
        let Value::Int(i) = item else {
            return Err(invalid("not eight integers"));
        };
        *slot = u64::try_from(*i).map_err(|_| invalid("a negative integer"))?;
    }
    let [allowed, limit, remaining, retry, reset, delay, at, mark] = n;
    let stamp = Stamp { at, mark };
    if limit != bounds.capacity {
        return Err(invalid("limit is not this limiter's capacity"));
    }
    if remaining > limit {
        return Err(invalid("remaining above the limit"));
    }
    let admission = asked.stamps && allowed == 1;
    // A settlement's debt lengthens a debt's waits, but never an
    // admission's: it needed the room.
    let max_wait = if bounds.debt && !admission {
        bounds.max_wait.max(MAX_END)
    } else {
        bounds.max_wait
    };
    if retry > max_wait || reset > max_wait || delay > max_wait {
        return Err(invalid("a wait longer than this quota can produce"));
    }
    if admission {
        let ends_ahead = match (bounds.debt, asked.now) {
            // The key is full again after the admission, and at most the
            // longest wait after the instant sent.
            (true, Some(now)) => at > now && at - now <= bounds.max_wait,
            (true, None) => (1..=MAX_END).contains(&at),
            // A window's mark counts at least the admission's own units.
            (false, _) => mark >= 1 && at <= MAX_END,
        };
        if !ends_ahead || mark > MAX_EXACT {
            return Err(invalid("a stamp out of bounds"));
        }
    } else if stamp != Stamp::default() {
        return Err(invalid("a stamp for no admission"));
    }
    let decision = match allowed {
        1 if retry == 0 => Decision::admitted(limit)
            .with_remaining(remaining)
            .with_reset_after_micros(reset)
            .with_delay_micros(delay),
        0 if delay == 0 => Decision::refused(limit)
            .with_remaining(remaining)
            .with_retry_after_micros(retry)
            .with_reset_after_micros(reset),
        0 | 1 => {
            return Err(invalid(
                "a retry wait when admitted, or a delay when refused",
            ));
        }
        _ => return Err(invalid("allowed is neither 0 nor 1")),
    };
    Ok((decision, stamp))
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
        debt: true,
    };
    const WINDOW: Bounds = Bounds {
        debt: false,
        ..BOUNDS
    };
    const CHECK: Asked = Asked {
        stamps: true,
        now: Some(5_000_000),
    };
    const PEEK: Asked = Asked {
        stamps: false,
        now: Some(5_000_000),
    };

    fn reply(items: &[i64]) -> Value {
        Value::Array(items.iter().map(|&i| Value::Int(i)).collect())
    }

    #[test]
    fn a_valid_reply_is_a_decision_and_a_stamp() {
        let ok = |items: &[i64], bounds, asked| {
            decision_from_reply("gcra", &reply(items), bounds, asked).unwrap()
        };
        let (d, stamp) = ok(&[1, 10, 9, 0, 100_000, 0, 5_100_000, 7], BOUNDS, CHECK);
        assert!(d.allowed);
        assert_eq!(d.remaining, 9);
        assert_eq!(
            stamp,
            Stamp {
                at: 5_100_000,
                mark: 7
            }
        );
        let (d, stamp) = ok(&[0, 10, 0, 5, 1_000_000, 0, 0, 0], BOUNDS, CHECK);
        assert!(!d.allowed);
        assert_eq!(stamp, Stamp::default());
        // A window's stamp is its index (0 too), with the units it counts.
        ok(&[1, 10, 9, 0, 100_000, 0, 0, 1], WINDOW, CHECK);
        // A debt a settlement charged: waits far beyond the quota's own.
        ok(
            &[0, 10, 0, 3_000_000_000, 3_000_000_000, 0, 0, 0],
            BOUNDS,
            PEEK,
        );
    }

    #[test]
    fn anything_else_is_an_error_naming_script_and_reply() {
        let bad: [(Value, Bounds, Asked); 19] = [
            (reply(&[1, 10, -1, 0, 0, 0, 0, 0]), BOUNDS, PEEK),
            (reply(&[1, 10, 11, 0, 0, 0, 0, 0]), BOUNDS, PEEK),
            (reply(&[1, 11, 1, 0, 0, 0, 0, 0]), BOUNDS, PEEK),
            (reply(&[2, 10, 1, 0, 0, 0, 0, 0]), BOUNDS, PEEK),
            (reply(&[0, 10, 1, 1_000_001, 0, 0, 0, 0]), WINDOW, PEEK),
            (reply(&[0, 10, 1, 0, i64::MAX, 0, 0, 0]), BOUNDS, PEEK),
            (reply(&[1, 10, 1, 5, 0, 0, 0, 0]), BOUNDS, PEEK),
            (reply(&[0, 10, 1, 5, 0, 5, 0, 0]), BOUNDS, PEEK),
            // Six integers: version 3's reply.
            (reply(&[1, 10, 1, 0, 0, 0]), BOUNDS, PEEK),
            // An admission's waits stay within the quota's.
            (
                reply(&[1, 10, 1, 0, 1_000_001, 0, 6_000_001, 0]),
                BOUNDS,
                CHECK,
            ),
            // A stamp for no admission, or none for one.
            (reply(&[1, 10, 1, 0, 0, 0, 5_100_000, 0]), BOUNDS, PEEK),
            (reply(&[0, 10, 1, 5, 5, 0, 5_100_000, 0]), BOUNDS, CHECK),
            (reply(&[1, 10, 9, 0, 100_000, 0, 0, 0]), BOUNDS, CHECK),
            // A debt's end before the instant sent, or past the longest wait.
            (
                reply(&[1, 10, 9, 0, 100_000, 0, 5_000_000, 0]),
                BOUNDS,
                CHECK,
            ),
            (
                reply(&[1, 10, 9, 0, 100_000, 0, 6_000_001, 0]),
                BOUNDS,
                CHECK,
            ),
            // A window's stamp that counts none, or more than a script counts.
            (reply(&[1, 10, 9, 0, 100_000, 0, 3, 0]), WINDOW, CHECK),
            (reply(&[1, 10, 9, 0, 100_000, 0, 3, 1 << 60]), WINDOW, CHECK),
            (Value::Int(1), BOUNDS, PEEK),
            (
                Value::Array(vec![Value::BulkString(b"1".to_vec()); 8]),
                BOUNDS,
                PEEK,
            ),
        ];
        for (value, bounds, asked) in bad {
            let error = decision_from_reply("gcra", &value, bounds, asked)
                .unwrap_err()
                .to_string();
            assert!(error.starts_with("ratelab gcra: invalid reply "), "{error}");
        }
    }
}
