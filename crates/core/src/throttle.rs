//! [`BlockingThrottle`]: client-side rate limiting for plain blocking code,
//! the `@rate_limited` decorator of the Python reference: each call waits
//! its turn (up to a timeout), then runs.

use std::fmt;
use std::time::Duration;

use crate::wait::wait_for_on;
use crate::{Clock, Decision, RateLimiter, SystemClock, WaitError};

/// Waits for a turn before each call, on any [`RateLimiter`] (a
/// [`Direct`](crate::Direct) bucket, or one key of a
/// [`Keyed`](crate::Keyed) limiter).
///
/// Cost 1 per call and no timeout by default. The waits sleep through the
/// throttle's clock ([`Clock::sleep`]): give it the limiter's clock, so that
/// on a [`ManualClock`](crate::ManualClock) a test runs in no time. The async
/// counterpart for tower services is `ratelab_throttle::Throttle`.
///
/// ```
/// use ratelab_core::{BlockingThrottle, RateLimiter, WaitError};
/// use std::time::Duration;
///
/// fn send_newsletter(limiter: impl RateLimiter) -> Result<(), WaitError> {
///     let throttle = BlockingThrottle::new(limiter).timeout(Duration::from_secs(10));
///     for user in ["ana", "bo", "cy"] {
///         throttle.call(|| println!("mail to {user}"))?;
///     }
///     Ok(())
/// }
/// ```
pub struct BlockingThrottle<L, C = SystemClock> {
    limiter: L,
    clock: C,
    key: Vec<u8>,
    cost: u32,
    timeout: Duration,
}

impl<L: RateLimiter> BlockingThrottle<L> {
    /// A throttle on `limiter`, waiting on the system clock (the one the
    /// default limiters read).
    pub fn new(limiter: L) -> Self {
        Self::with_clock(limiter, SystemClock)
    }
}

impl<L: RateLimiter, C: Clock> BlockingThrottle<L, C> {
    /// A throttle on `limiter`, waiting on `clock` (the clock the limiter
    /// reads).
    pub fn with_clock(limiter: L, clock: C) -> Self {
        BlockingThrottle {
            limiter,
            clock,
            key: Vec::new(),
            cost: 1,
            timeout: Duration::MAX,
        }
    }

    /// The longest a call waits for its turn (no limit by default); past it,
    /// the call does not run and answers [`WaitError::TimedOut`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The key every call is counted under (the empty key by default; a
    /// [`Direct`](crate::Direct) limiter ignores it).
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = key.into();
        self
    }

    /// The cost of each call (1 by default).
    pub fn cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }

    /// Waits for a turn, and consumes it.
    pub fn wait(&self) -> Result<Decision, WaitError> {
        wait_for_on(
            &self.clock,
            || self.limiter.check(&self.key, self.cost),
            self.timeout,
        )
    }

    /// Waits for a turn, then runs `f`; `f` does not run if no turn came
    /// within the timeout, or the limiter failed.
    pub fn call<T>(&self, f: impl FnOnce() -> T) -> Result<T, WaitError> {
        self.wait()?;
        Ok(f())
    }

    /// The limiter, to inspect (a peek) or share.
    pub fn limiter(&self) -> &L {
        &self.limiter
    }
}

impl<L: fmt::Debug, C: fmt::Debug> fmt::Debug for BlockingThrottle<L, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingThrottle")
            .field("limiter", &self.limiter)
            .field("clock", &self.clock)
            .field("cost", &self.cost)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}
