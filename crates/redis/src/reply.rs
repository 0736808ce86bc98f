//! Reading a script's reply into a [`Decision`].

use ratelab_core::Decision;

/// `{allowed, limit, remaining, retry_after_us, reset_after_us, delay_us}`.
pub(crate) fn decision_from_reply(reply: &[u64]) -> Option<Decision> {
    let &[allowed, limit, remaining, retry, reset, delay] = reply else {
        return None;
    };
    match allowed {
        1 => Some(
            Decision::admitted(limit)
                .with_remaining(remaining)
                .with_reset_after_micros(reset)
                .with_delay_micros(delay),
        ),
        0 => Some(
            Decision::refused(limit)
                .with_remaining(remaining)
                .with_retry_after_micros(retry)
                .with_reset_after_micros(reset),
        ),
        _ => None,
    }
}
