//! [`Decision`]: what a limiter answers, with the same meaning everywhere.

use std::time::Duration;

/// The answer to one request, with the same meaning in every algorithm and
/// every backend: the HTTP headers are built from it.
///
/// - `allowed`: the request passed and its cost was consumed; or it was
///   refused and nothing was consumed (all or nothing).
/// - `limit`: the most unit requests that pass at once from full capacity
///   (the burst; for the windows, the window's limit).
/// - `remaining`: how many more unit requests would pass right now, after this
///   one.
/// - `retry_after`: zero when allowed; otherwise the wait until a retry of the
///   same cost passes, if nothing else is consumed meanwhile. A retry at
///   exactly `retry_after` passes; one a microsecond earlier does not.
/// - `reset_after`: the wait until the key is back to full capacity, if
///   nothing else is consumed meanwhile. Zero when it is full now.
/// - `delay`: how long an admitted request must wait before it proceeds. Zero
///   for every algorithm but the leaky bucket queue, which admits a request
///   into a queue and gives it a later slot.
///
/// - `degraded`: the backend was failing and a failure policy decided.
///
/// Every field is public data. Times are whole microseconds, kept as such
/// (`u64`): a decision is built on every check, and three `Duration`s made
/// it half as large again and cost a division each; [`Decision::retry_after`]
/// and the others read them as a [`Duration`], the `*_secs` ones as whole
/// seconds rounded up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Decision {
    /// The request passed (and consumed its cost).
    pub allowed: bool,
    /// Unit requests that pass at once from full capacity.
    pub limit: u64,
    /// Unit requests that would pass right now, after this one.
    pub remaining: u64,
    /// Zero when allowed; else the wait until the same request passes, µs
    /// ([`Decision::retry_after`]).
    pub retry_after_micros: u64,
    /// The wait until the key is back to full capacity, µs
    /// ([`Decision::reset_after`]).
    pub reset_after_micros: u64,
    /// The wait before an admitted request proceeds (leaky bucket queue), µs
    /// ([`Decision::delay`]).
    pub delay_micros: u64,
    /// The limiter's backend was failing and this decision came from its
    /// failure policy (fail open, fail closed, an in-memory fallback), not
    /// from the shared state. A caller with a failure mode of its own (an
    /// HTTP policy marked fail-closed) treats it as the outage it is: its
    /// own mode wins.
    pub degraded: bool,
}

impl Decision {
    /// An admitted request, with nothing remaining and full now until the
    /// `with_*` methods say otherwise:
    /// `Decision::admitted(10).with_remaining(4).with_reset_after_micros(1_200_000)`.
    #[inline]
    pub const fn admitted(limit: u64) -> Self {
        Decision {
            allowed: true,
            limit,
            remaining: 0,
            retry_after_micros: 0,
            reset_after_micros: 0,
            delay_micros: 0,
            degraded: false,
        }
    }

    /// A refused request, to be completed by the `with_*` methods:
    /// `Decision::refused(10).with_retry_after_micros(200_000).with_reset_after_micros(2_000_000)`.
    #[inline]
    pub const fn refused(limit: u64) -> Self {
        Decision {
            allowed: false,
            ..Decision::admitted(limit)
        }
    }

    /// The same decision with `remaining` unit requests still admissible now.
    #[inline]
    pub const fn with_remaining(mut self, remaining: u64) -> Self {
        self.remaining = remaining;
        self
    }

    /// The same decision with a retry passing after `micros`.
    #[inline]
    pub const fn with_retry_after_micros(mut self, micros: u64) -> Self {
        self.retry_after_micros = micros;
        self
    }

    /// The same decision with the key back to full capacity after `micros`.
    #[inline]
    pub const fn with_reset_after_micros(mut self, micros: u64) -> Self {
        self.reset_after_micros = micros;
        self
    }

    /// The same decision, with an admitted request told to wait `micros` for
    /// its slot (leaky bucket queue).
    #[inline]
    pub const fn with_delay_micros(mut self, micros: u64) -> Self {
        self.delay_micros = micros;
        self
    }

    /// The same decision, marked as made by a failure policy while the
    /// backend was failing ([`Decision::degraded`]).
    #[inline]
    pub const fn degraded(mut self) -> Self {
        self.degraded = true;
        self
    }

    /// Zero when allowed; otherwise the wait until a retry of the same cost
    /// passes, if nothing else is consumed meanwhile.
    #[inline]
    pub const fn retry_after(&self) -> Duration {
        Duration::from_micros(self.retry_after_micros)
    }

    /// The wait until the key is back to full capacity, if nothing else is
    /// consumed meanwhile; zero when it is full now.
    #[inline]
    pub const fn reset_after(&self) -> Duration {
        Duration::from_micros(self.reset_after_micros)
    }

    /// How long an admitted request waits before it proceeds: zero for every
    /// algorithm but the leaky bucket queue.
    #[inline]
    pub const fn delay(&self) -> Duration {
        Duration::from_micros(self.delay_micros)
    }

    /// `retry_after` in whole seconds, rounded up: the HTTP `Retry-After`.
    #[inline]
    pub const fn retry_after_secs(&self) -> u64 {
        self.retry_after_micros.div_ceil(1_000_000)
    }

    /// `reset_after` in whole seconds, rounded up.
    #[inline]
    pub const fn reset_after_secs(&self) -> u64 {
        self.reset_after_micros.div_ceil(1_000_000)
    }
}

/// Whole seconds in `d`, rounded up: a client told to wait this long never
/// retries too early.
#[inline]
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_up() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_micros(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        let d = Decision::refused(10)
            .with_retry_after_micros(200_000)
            .with_reset_after_micros(2_000_000);
        assert_eq!((d.retry_after_secs(), d.reset_after_secs()), (1, 2));
    }
}
