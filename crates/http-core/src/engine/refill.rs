//! [`Refill`]: how a policy's quota comes back once consumed, and the waits
//! computed from it: `t` (draft-ietf-httpapi-ratelimit-headers), the wait
//! until more quota is available than `r` says, never shorter than the real
//! one; zero when the policy is full (nothing more will come).
//!
//! A [`Decision`] says how much remains, the wait before a refused request
//! passes, and the wait until the key is full again (`reset_after`). From
//! those alone `t` is exact where units come back on a known schedule: one
//! every interval for the steady refills (GCRA, token bucket, leaky meter
//! and queue: the next unit is back a whole number of intervals before the
//! key is full), all at once at the fixed window's end. The sliding log and
//! counter give units back one by one before the key is full, on a schedule
//! only their state knows (a 4 per 20 s counter is full 40 s after a burst,
//! yet its first unit is back after 25 s): their limiter is asked (the
//! engine's `next`). Which refill a limiter has is its algorithm's
//! [`Bound`].

use std::time::Duration;

use ratelab_core::{Bound, Decision};

/// How a policy's quota comes back after it was consumed: what `t` (the wait
/// until more quota is available) can be computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refill {
    /// One unit every `interval` µs, continuously: GCRA, token bucket, leaky
    /// meter and queue. The next unit is back `(limit - remaining - 1) ×
    /// interval` before the key is full.
    Steady { interval: u64 },
    /// Everything at once when the window ends (the fixed window): the key
    /// is full then.
    Window,
    /// Unit by unit before the key is full, on a schedule only the state
    /// knows (the sliding log and counter): a peek says when.
    Sliding,
}

impl Refill {
    /// The refill of an algorithm that promises `bound`.
    pub(crate) fn of(bound: Bound) -> Self {
        match bound {
            Bound::Rate { interval, .. } => Refill::Steady { interval },
            Bound::AlignedWindow { .. } => Refill::Window,
            Bound::TrailingWindow { .. } | Bound::WeightedWindows { .. } => Refill::Sliding,
        }
    }
}

/// The `RateLimit` field's `t` for a check of `cost` that `decision`
/// answered, from the decision alone: the wait until more quota is
/// available than its `remaining` says (0 when the key is full), never
/// shorter than the real wait. `bound` is the limiter's
/// [`Limiter::bound`](ratelab_core::Limiter::bound).
///
/// Exact for the steady refills (GCRA, token bucket, leaky meter and
/// queue: the next unit is back a whole number of emission intervals before
/// the key is full), the fixed window (everything back at its end) and a
/// refused check of one unit (its `retry_after`). For any other algorithm
/// (the sliding log and counter give units back on a schedule only their
/// state knows) it is the wait until the key is full: late, never early.
/// ratelab-http's own fields ask a sliding limiter with a peek instead;
/// this is what `t` is without that extra call, and what
/// ratelab-server's fields say.
///
/// ```
/// use ratelab_core::{Bound, Decision, Quota};
/// use ratelab_http_core::wait_for_next_unit;
/// use std::time::Duration;
///
/// // GCRA, 3 a minute: 1 left, full again in 40 s; one more is back in 20 s.
/// let quota = Quota::per_minute(3)?;
/// let decision = Decision::admitted(3)
///     .with_remaining(1)
///     .with_reset_after_micros(40_000_000);
/// assert_eq!(wait_for_next_unit(&decision, Bound::rate(&quota), 1), Duration::from_secs(20));
/// // The fixed window gives everything back at once, at its end.
/// let window = Bound::AlignedWindow { limit: 3, window: 60_000_000 };
/// assert_eq!(wait_for_next_unit(&decision, window, 1), Duration::from_secs(40));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn wait_for_next_unit(decision: &Decision, bound: Bound, cost: u32) -> Duration {
    derived(decision, Refill::of(bound), cost)
}

/// `t` from the decision alone (see the module docs): exact for the steady
/// refills, the fixed window, and a refused unit request (its
/// `retry_after`); the wait until full otherwise.
pub(crate) fn derived(decision: &Decision, refill: Refill, cost: u32) -> Duration {
    if decision.remaining >= decision.limit {
        return Duration::ZERO;
    }
    if !decision.allowed && cost == 1 && !decision.retry_after().is_zero() {
        return decision.retry_after();
    }
    wait_for(decision, refill, decision.remaining + 1)
}

/// The wait until `units` are available, from a decision that says how many
/// are now: exact for a steady refill (the n-th unit is back
/// `(limit - n) × interval` before the key is full) and for the fixed
/// window, else the wait until the key is full. Never shorter than the real
/// wait.
pub(crate) fn wait_for(decision: &Decision, refill: Refill, units: u64) -> Duration {
    if decision.remaining >= units {
        return Duration::ZERO;
    }
    match refill {
        Refill::Steady { interval } => {
            let before_full = decision
                .limit
                .saturating_sub(units)
                .saturating_mul(interval);
            decision
                .reset_after()
                .saturating_sub(Duration::from_micros(before_full))
        }
        Refill::Window | Refill::Sliding => decision.reset_after(),
    }
}
