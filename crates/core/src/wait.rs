//! Waiting for a turn: block or await until a request is admitted, within a
//! timeout, on any limiter (`wait_and_consume` in the Python reference).
//!
//! The waits are built on [`Decision::retry_after`]: a refused request sleeps
//! exactly until a retry can pass, then retries (another caller may have taken
//! the room meanwhile). If the limiter says the wait would end after the
//! deadline, the helper gives up at once instead of sleeping in vain. An
//! admitted request with a [`Decision::delay`] (leaky bucket queue) sleeps
//! that delay, which counts against the timeout too: a slot later than the
//! deadline is reported as [`WaitError::TimedOut`] (the slot stays taken; it
//! was consumed, and unused room never admits more than the quota).

use std::time::{Duration, Instant};

use crate::{Decision, Error, RateLimiter};

/// Why a wait ended without a turn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError {
    /// No turn within the timeout.
    #[error("timed out after {waited:?}: the next turn was {retry_after:?} away")]
    TimedOut {
        /// How long the helper waited.
        waited: Duration,
        /// How long the next turn still was when it gave up.
        retry_after: Duration,
    },
    /// The limiter failed, or the request can never pass.
    #[error(transparent)]
    Limiter(#[from] Error),
}

/// What the wait loop does next.
enum Step {
    Done(Decision),
    Sleep(Duration),
}

/// `deadline` is `None` when the timeout is too long to represent: no limit.
fn next_step(
    decision: Decision,
    started: Instant,
    deadline: Option<Instant>,
) -> Result<Step, WaitError> {
    let now = Instant::now();
    let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
    let wait = if decision.allowed {
        decision.delay
    } else {
        decision.retry_after
    };
    if wait > left {
        return Err(WaitError::TimedOut {
            waited: now - started,
            retry_after: wait,
        });
    }
    if decision.allowed {
        return Ok(if wait.is_zero() {
            Step::Done(decision)
        } else {
            Step::Sleep(wait)
        });
    }
    Ok(Step::Sleep(wait))
}

/// Blocks until `key` is admitted for `cost`, or `timeout` passes.
///
/// ```
/// use ratelab_core::{wait_and_consume, RateLimiter};
/// # fn demo(limiter: &dyn RateLimiter) -> Result<(), ratelab_core::WaitError> {
/// let decision = wait_and_consume(limiter, b"scraper", 1, std::time::Duration::from_secs(10))?;
/// assert!(decision.allowed);
/// # Ok(()) }
/// ```
pub fn wait_and_consume<L: RateLimiter + ?Sized>(
    limiter: &L,
    key: &[u8],
    cost: u32,
    timeout: Duration,
) -> Result<Decision, WaitError> {
    wait_for(|| limiter.check(key, cost), timeout)
}

/// Blocks until `check` admits, or `timeout` passes: the loop under
/// [`wait_and_consume`], for limiters without a key such as
/// [`Direct`](crate::Direct).
pub fn wait_for(
    mut check: impl FnMut() -> Result<Decision, Error>,
    timeout: Duration,
) -> Result<Decision, WaitError> {
    let started = Instant::now();
    let deadline = started.checked_add(timeout);
    loop {
        let decision = check()?;
        match next_step(decision, started, deadline)? {
            Step::Done(decision) => return Ok(decision),
            Step::Sleep(wait) => {
                std::thread::sleep(wait);
                if decision.allowed {
                    return Ok(decision);
                }
            }
        }
    }
}

/// Awaits until `key` is admitted for `cost`, or `timeout` passes (tokio
/// timers; the `tokio` feature).
#[cfg(feature = "tokio")]
pub async fn wait_and_consume_async<L: crate::AsyncRateLimiter + ?Sized>(
    limiter: &L,
    key: &[u8],
    cost: u32,
    timeout: Duration,
) -> Result<Decision, WaitError> {
    let started = Instant::now();
    let deadline = started.checked_add(timeout);
    loop {
        let decision = limiter.check_async(key, cost).await?;
        match next_step(decision, started, deadline)? {
            Step::Done(decision) => return Ok(decision),
            Step::Sleep(wait) => {
                tokio::time::sleep(wait).await;
                if decision.allowed {
                    return Ok(decision);
                }
            }
        }
    }
}
