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
//!
//! **Never past the timeout**, whatever the limiter answers: a refusal with
//! a zero `retry_after` is retried after [`MIN_RETRY_PAUSE`], not in a busy
//! loop; no sleep ends after the deadline; [`Error::TooManyKeys`] is waited
//! out like a refusal when its `retry_after` fits. The async helper reads
//! tokio's clock, so it behaves the same under a paused test clock.

use std::time::{Duration, Instant};

use crate::{Clock, Decision, Error, RateLimiter, SystemClock};

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

/// The shortest pause between two checks. A limiter that refuses with a
/// zero `retry_after` (a third-party one, or an error such as
/// [`Error::TooManyKeys`] with no wait) would otherwise be asked again in a
/// busy loop; the pause never makes a wait outlast its timeout.
pub const MIN_RETRY_PAUSE: Duration = Duration::from_millis(1);

/// What the wait loop does next.
enum Step {
    Done(Decision),
    /// Sleep, then return the decision (an admitted request's queue slot).
    SleepThenDone(Duration, Decision),
    /// Sleep, then check again.
    Retry(Duration),
}

/// What to do with one answer, `elapsed` into a wait of `timeout` (`None`:
/// no limit). Never a sleep past the deadline.
fn next_step(
    answer: Result<Decision, Error>,
    elapsed: Duration,
    timeout: Option<Duration>,
) -> Result<Step, WaitError> {
    let left = timeout.map_or(Duration::MAX, |t| t.saturating_sub(elapsed));
    let timed_out = |retry_after| WaitError::TimedOut {
        waited: elapsed,
        retry_after,
    };
    let wait = match answer {
        Ok(decision) if decision.allowed => {
            if decision.delay().is_zero() {
                return Ok(Step::Done(decision));
            }
            if decision.delay() > left {
                return Err(timed_out(decision.delay()));
            }
            return Ok(Step::SleepThenDone(decision.delay(), decision));
        }
        Ok(decision) => decision.retry_after(),
        // Out of room for keys is a wait like any other, when it fits.
        Err(Error::TooManyKeys { retry_after, .. }) => retry_after,
        Err(error) => return Err(error.into()),
    };
    if wait > left {
        return Err(timed_out(wait));
    }
    // Less than the clocks' resolution left (a microsecond) is none: a
    // clock that counts whole microseconds would never see such a sleep
    // pass, and the wait would retry forever.
    if left < Duration::from_micros(1) {
        return Err(timed_out(wait.max(MIN_RETRY_PAUSE)));
    }
    Ok(Step::Retry(wait.max(MIN_RETRY_PAUSE).min(left)))
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
    check: impl FnMut() -> Result<Decision, Error>,
    timeout: Duration,
) -> Result<Decision, WaitError> {
    wait_for_on(&SystemClock, check, timeout)
}

/// [`wait_for`] on `clock`: the time waited is read from it and the sleeps
/// go through [`Clock::sleep`], so on a [`ManualClock`](crate::ManualClock)
/// the wait is simulated (the clock moves forward, nothing sleeps). Give it
/// the clock the limiter reads.
pub fn wait_for_on<C: Clock + ?Sized>(
    clock: &C,
    mut check: impl FnMut() -> Result<Decision, Error>,
    timeout: Duration,
) -> Result<Decision, WaitError> {
    let started = clock.now_micros();
    let elapsed = || Duration::from_micros(clock.now_micros().saturating_sub(started));
    // A timeout too long to represent is no limit.
    let limit = Instant::now().checked_add(timeout).map(|_| timeout);
    loop {
        let answer = check();
        match next_step(answer, elapsed(), limit)? {
            Step::Done(decision) => return Ok(decision),
            Step::SleepThenDone(wait, decision) => {
                clock.sleep(wait);
                return Ok(decision);
            }
            Step::Retry(wait) => clock.sleep(wait),
        }
    }
}

/// Awaits until `key` is admitted for `cost`, or `timeout` passes (tokio
/// timers; the `tokio` feature).
///
/// Time is tokio's ([`tokio::time::Instant`]): under a paused test clock the
/// deadline moves with the sleeps. A limiter whose answer does not come
/// before the deadline is given up on too ([`WaitError::TimedOut`]), so the
/// wait is bounded whatever the limiter does; a check abandoned that way may
/// still have been decided by the limiter.
#[cfg(feature = "tokio")]
pub async fn wait_and_consume_async<L: crate::AsyncRateLimiter + ?Sized>(
    limiter: &L,
    key: &[u8],
    cost: u32,
    timeout: Duration,
) -> Result<Decision, WaitError> {
    use tokio::time::Instant;

    let started = Instant::now();
    let deadline = started.checked_add(timeout);
    let limit = deadline.map(|_| timeout);
    loop {
        let check = limiter.check_async(key, cost);
        let answer = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, check).await {
                Ok(answer) => answer,
                Err(_) => {
                    return Err(WaitError::TimedOut {
                        waited: started.elapsed(),
                        retry_after: Duration::ZERO,
                    });
                }
            },
            None => check.await,
        };
        match next_step(answer, started.elapsed(), limit)? {
            Step::Done(decision) => return Ok(decision),
            Step::SleepThenDone(wait, decision) => {
                tokio::time::sleep(wait).await;
                return Ok(decision);
            }
            Step::Retry(wait) => tokio::time::sleep(wait).await,
        }
    }
}
