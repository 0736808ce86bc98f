//! Waiting for a turn, sync and async, in real time: a wait sleeps exactly
//! until the limiter says a retry passes; a wait longer than the timeout
//! gives up at once with a clear error; the queue's slots are waited out.
//!
//! The limiters read the precise `SystemClock` (the default, named here on
//! purpose): the spacing is measured with `Instant` to the millisecond, and
//! the opt-in `CoarseClock` lags by up to a millisecond, which can shorten a
//! spacing seen in real time by as much (`lagging_clock.rs` states and
//! proves that bound).
//!
//! Only lower bounds are measured (a loaded machine only sleeps longer);
//! the timeouts are far past the waits, so that none is reached by a slow
//! machine.

use std::time::{Duration, Instant};

use ratelab::Gcra;
use ratelab::LeakyQueue;
use ratelab::{
    Direct, Error, Keyed, Quota, SystemClock, WaitError, wait_and_consume, wait_and_consume_async,
};

/// Far past any wait here (at most 100 ms).
const GENEROUS: Duration = Duration::from_secs(30);

/// 20 per second, burst 1: one turn every 50 ms.
fn quota() -> Quota {
    Quota::per_second(20).unwrap().with_burst(1).unwrap()
}

#[test]
fn a_blocking_wait_takes_the_next_turn() {
    let limiter = Keyed::with_clock(Gcra::new(quota()), SystemClock);
    let started = Instant::now();
    assert!(
        wait_and_consume(&limiter, b"k", 1, GENEROUS)
            .unwrap()
            .allowed
    );
    let second = wait_and_consume(&limiter, b"k", 1, GENEROUS).unwrap();
    assert!(second.allowed);
    assert!(
        started.elapsed() >= Duration::from_millis(50),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_wait_beyond_the_timeout_gives_up_at_once() {
    // One an hour: the next turn is far beyond a 30 s timeout, so a helper
    // that slept in vain would wait the whole 30 s (a bound no loaded
    // machine comes near when it gives up at once).
    let limiter = Direct::new(Gcra::new(Quota::per_hour(1).unwrap()));
    assert!(limiter.wait(1, Duration::from_secs(1)).unwrap().allowed);
    match limiter.wait(1, Duration::from_secs(30)) {
        Err(WaitError::TimedOut {
            waited,
            retry_after,
        }) => {
            assert!(retry_after > Duration::from_secs(30), "{retry_after:?}");
            assert!(waited < Duration::from_secs(30), "it did not sleep in vain");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    let error = limiter.wait(2, Duration::from_secs(1)).unwrap_err();
    assert!(matches!(
        error,
        WaitError::Limiter(Error::CostTooHigh { .. })
    ));
    assert_eq!(
        error.to_string(),
        "a cost of 2 can never fit: at most 1 pass at once"
    );
}

#[test]
fn the_queue_slots_are_waited_out() {
    // The queue holds 3: three admitted at once, with slots 50 ms apart.
    let limiter = Direct::with_clock(LeakyQueue::new(quota().with_burst(3).unwrap()), SystemClock);
    let started = Instant::now();
    for slot in 0..3u32 {
        let decision = limiter.wait(1, GENEROUS).unwrap();
        assert!(decision.allowed);
        assert!(started.elapsed() >= Duration::from_millis(50) * slot);
    }
}

#[tokio::test]
async fn an_async_wait_takes_the_next_turn_or_times_out() {
    let limiter = Keyed::with_clock(Gcra::new(quota()), SystemClock);
    let started = Instant::now();
    for _ in 0..3 {
        let d = wait_and_consume_async(&limiter, b"k", 1, GENEROUS)
            .await
            .unwrap();
        assert!(d.allowed);
    }
    assert!(started.elapsed() >= Duration::from_millis(100));
    // A turn an hour away (50 ms away could come during a pause of a
    // loaded machine): no time to wait for it.
    let hourly = Keyed::with_clock(Gcra::new(Quota::per_hour(1).unwrap()), SystemClock);
    assert!(hourly.check(b"k", 1).unwrap().allowed);
    let timed_out = wait_and_consume_async(&hourly, b"k", 1, Duration::ZERO).await;
    assert!(
        matches!(timed_out, Err(WaitError::TimedOut { .. })),
        "{timed_out:?}"
    );
}
