//! The wait helpers never outlast their timeout, whatever the limiter
//! answers, and wait out a full table when the wait fits.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ratelab_core::{
    Clock, Decision, Error, Limiter, ManualClock, Quota, RateLimiter, WaitError, wait_and_consume,
    wait_for, wait_for_on,
};

/// A third-party limiter that always refuses and says "retry now".
#[derive(Debug)]
struct RefusesWithZeroWait {
    checks: AtomicU32,
}

impl Limiter for RefusesWithZeroWait {
    fn quota(&self) -> Quota {
        Quota::per_second(1).unwrap()
    }
    fn algorithm_name(&self) -> &'static str {
        "stubborn"
    }
    fn backend(&self) -> &'static str {
        "test"
    }
    fn bound(&self) -> ratelab_core::Bound {
        ratelab_core::Bound::rate(&self.quota())
    }
}

impl RateLimiter for RefusesWithZeroWait {
    fn check(&self, _: &[u8], _: u32) -> Result<Decision, Error> {
        self.checks.fetch_add(1, Ordering::Relaxed);
        Ok(Decision::refused(1))
    }
}

#[test]
fn a_zero_retry_refusal_times_out_on_time_without_spinning() {
    // On the real clock: never before the timeout, and paced (a busy loop
    // would check thousands of times; a loaded machine checks less often,
    // never more).
    let limiter = RefusesWithZeroWait {
        checks: AtomicU32::new(0),
    };
    let started = Instant::now();
    let error = wait_and_consume(&limiter, b"k", 1, Duration::from_millis(50)).unwrap_err();
    assert!(matches!(error, WaitError::TimedOut { .. }), "{error:?}");
    assert!(started.elapsed() >= Duration::from_millis(50));
    let checks = limiter.checks.load(Ordering::Relaxed);
    assert!(checks <= 52, "{checks} checks in 50 ms");
    // On a clock the test holds: it gives up exactly at the timeout, not a
    // pause later.
    let clock = ManualClock::new();
    let limiter = RefusesWithZeroWait {
        checks: AtomicU32::new(0),
    };
    let error = wait_for_on(&clock, || limiter.check(b"k", 1), Duration::from_millis(50));
    assert!(
        matches!(error, Err(WaitError::TimedOut { waited, .. }) if waited == Duration::from_millis(50)),
        "{error:?}"
    );
    assert_eq!(clock.now_micros(), 50_000, "slept past its timeout");
    assert_eq!(
        limiter.checks.load(Ordering::Relaxed),
        51,
        "one per pause, plus the last"
    );
}

#[test]
fn a_zero_timeout_never_sleeps() {
    let limiter = RefusesWithZeroWait {
        checks: AtomicU32::new(0),
    };
    assert!(wait_and_consume(&limiter, b"k", 1, Duration::ZERO).is_err());
    let clock = ManualClock::new();
    assert!(wait_for_on(&clock, || limiter.check(b"k", 1), Duration::ZERO).is_err());
    assert_eq!(clock.now_micros(), 0, "it slept");
    assert_eq!(limiter.checks.load(Ordering::Relaxed), 2, "one check each");
}

#[test]
fn too_many_keys_is_waited_out_when_it_fits() {
    let calls = AtomicU32::new(0);
    let started = Instant::now();
    let decision = wait_for(
        || match calls.fetch_add(1, Ordering::Relaxed) {
            0 => Err(Error::TooManyKeys {
                max_keys: 1,
                retry_after: Duration::from_millis(30),
            }),
            _ => Ok(Decision::admitted(1)),
        },
        Duration::from_secs(1),
    )
    .unwrap();
    assert!(decision.allowed);
    assert!(started.elapsed() >= Duration::from_millis(30));

    // One that does not fit gives up at once: no time passes on a clock
    // the test holds.
    let clock = ManualClock::new();
    let error = wait_for_on(
        &clock,
        || {
            Err(Error::TooManyKeys {
                max_keys: 1,
                retry_after: Duration::from_secs(60),
            })
        },
        Duration::from_millis(100),
    )
    .unwrap_err();
    assert!(
        matches!(error, WaitError::TimedOut { retry_after, .. } if retry_after == Duration::from_secs(60))
    );
    assert_eq!(
        clock.now_micros(),
        0,
        "it slept toward a turn past its timeout"
    );
}

#[test]
fn a_refusal_that_never_ends_is_an_error_at_once() {
    let error = wait_for(
        || {
            Err(Error::CostTooHigh {
                cost: 2,
                capacity: 1,
            })
        },
        Duration::from_secs(10),
    )
    .unwrap_err();
    assert!(matches!(
        error,
        WaitError::Limiter(Error::CostTooHigh { .. })
    ));
}

/// On a clock that counts whole microseconds, a timeout with less than a
/// microsecond left once the pauses are spent must end the wait: a sleep
/// that short never moves the clock, and the wait used to retry forever
/// (50.0005 ms against a limiter refusing with a zero `retry_after`).
#[test]
fn less_than_a_microsecond_left_times_out_on_a_manual_clock() {
    use ratelab_core::BlockingThrottle;

    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let timeout = Duration::from_nanos(50_000_500);
        let clock = ManualClock::new();
        let limiter = RefusesWithZeroWait {
            checks: AtomicU32::new(0),
        };
        let waited = wait_for_on(&clock, || limiter.check(b"k", 1), timeout);
        let throttle = BlockingThrottle::with_clock(
            RefusesWithZeroWait {
                checks: AtomicU32::new(0),
            },
            clock.clone(),
        )
        .timeout(timeout);
        let throttled = throttle.call(|| ());
        let _ = done.send((waited, throttled, clock.now_micros()));
    });
    let (waited, throttled, now) = finished
        .recv_timeout(Duration::from_secs(10))
        .expect("the waits on a manual clock never ended");
    assert!(
        matches!(waited, Err(WaitError::TimedOut { .. })),
        "{waited:?}"
    );
    assert!(
        matches!(throttled, Err(WaitError::TimedOut { .. })),
        "{throttled:?}"
    );
    // Neither wait slept past its timeout (50 ms each, on one clock).
    assert!(now <= 100_000, "{now} µs slept");
}
