//! The async wait helper on tokio's clock: under paused time it neither
//! busy-loops nor outlasts its timeout, whatever the limiter answers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ratelab::{
    AsyncRateLimiter, CheckFuture, Decision, Limiter, Quota, WaitError, wait_and_consume_async,
};

/// Refuses with "retry now", forever; or never answers at all.
#[derive(Debug)]
struct Stubborn {
    hang: bool,
    checks: AtomicU32,
}

impl Limiter for Stubborn {
    fn quota(&self) -> Quota {
        Quota::per_second(1).unwrap()
    }
    fn algorithm_name(&self) -> &'static str {
        "stubborn"
    }
    fn backend(&self) -> &'static str {
        "test"
    }
    fn bound(&self) -> ratelab::Bound {
        ratelab::Bound::rate(&self.quota())
    }
}

impl AsyncRateLimiter for Stubborn {
    fn check_async<'a>(&'a self, _: &'a [u8], _: u32) -> CheckFuture<'a> {
        self.checks.fetch_add(1, Ordering::Relaxed);
        if self.hang {
            Box::pin(std::future::pending())
        } else {
            Box::pin(std::future::ready(Ok(Decision::refused(1))))
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_zero_retry_refusal_times_out_on_tokio_time() {
    let limiter = Stubborn {
        hang: false,
        checks: AtomicU32::new(0),
    };
    let started = tokio::time::Instant::now();
    let error = wait_and_consume_async(&limiter, b"k", 1, Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(error, WaitError::TimedOut { .. }), "{error:?}");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(50), "{waited:?}");
    assert!(waited <= Duration::from_millis(51), "{waited:?}");
    // Before: the deadline came from std's clock, which paused time never
    // moves, so this looped forever.
    assert!(limiter.checks.load(Ordering::Relaxed) <= 52);
}

#[tokio::test(start_paused = true)]
async fn a_limiter_that_never_answers_is_given_up_on_at_the_deadline() {
    let limiter = Stubborn {
        hang: true,
        checks: AtomicU32::new(0),
    };
    let started = tokio::time::Instant::now();
    let error = wait_and_consume_async(&limiter, b"k", 1, Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(error, WaitError::TimedOut { .. }), "{error:?}");
    assert_eq!(started.elapsed(), Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn a_real_limiter_is_waited_for_on_paused_time() {
    let clock = ratelab::ManualClock::new();
    let quota = Quota::per_second(10).unwrap().with_burst(1).unwrap();
    let limiter = ratelab::Keyed::with_clock(ratelab::Gcra::new(quota), clock.clone());
    assert!(limiter.check(b"k", 1).unwrap().allowed);
    // The limiter's clock stands still: its refusal never ends, and the
    // wait gives up once tokio's clock passes the timeout.
    let error = wait_and_consume_async(&limiter, b"k", 1, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(error, WaitError::TimedOut { .. }), "{error:?}");
}
