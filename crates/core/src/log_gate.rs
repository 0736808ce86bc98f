//! [`LogGate`]: at most one log line per interval, and the count of the rest.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{Clock, SystemClock, duration_to_micros};

/// Lets at most one event through per interval and counts the others, so
/// that a failure repeated thousands of times a second (a limiter's backend
/// down under load) logs one line a second saying how many it stands for,
/// instead of flooding the log.
///
/// [`admit`](LogGate::admit) is lock-free and safe to call from any number
/// of threads at once: of the callers within one interval, exactly one is
/// admitted. It does not log anything itself (this crate has no logging
/// dependency); the caller logs when admitted, with the count it returns.
///
/// ```
/// use ratelab_core::ManualClock;
/// use ratelab_core::toolkit::LogGate;
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let gate = LogGate::with_clock(Duration::from_secs(1), clock.clone());
/// assert_eq!(gate.admit(), Some(0)); // the first event is always admitted
/// assert_eq!(gate.admit(), None);
/// assert_eq!(gate.admit(), None);
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(gate.admit(), Some(2)); // "... and 2 more like it"
/// ```
pub struct LogGate<C = SystemClock> {
    interval_micros: u64,
    clock: C,
    /// When the last event was admitted, plus one; 0 when none was yet (so
    /// that an event at instant 0 of the clock is told apart from "never").
    last_admitted: AtomicU64,
    /// Events refused since the last admitted one.
    suppressed: AtomicU64,
}

impl LogGate {
    /// At most one event per `interval`, on the system clock.
    pub fn new(interval: Duration) -> Self {
        Self::with_clock(interval, SystemClock)
    }
}

impl Default for LogGate {
    /// One event a second.
    fn default() -> Self {
        Self::new(Duration::from_secs(1))
    }
}

impl<C: Clock> LogGate<C> {
    /// At most one event per `interval`, on `clock`.
    pub fn with_clock(interval: Duration, clock: C) -> Self {
        LogGate {
            interval_micros: duration_to_micros(interval),
            clock,
            last_admitted: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Records an event: `Some(n)` if it may be logged, `n` being how many
    /// events were refused since the last admitted one; `None` if one was
    /// admitted less than an interval ago (this one is counted).
    pub fn admit(&self) -> Option<u64> {
        let now = self.clock.now_micros();
        let last = self.last_admitted.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last - 1) >= self.interval_micros;
        // The exchange picks one winner among callers that all saw the gate
        // due; the losers are counted as suppressed.
        if due
            && self
                .last_admitted
                .compare_exchange(
                    last,
                    now.saturating_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Events refused since the last admitted one.
    pub fn suppressed(&self) -> u64 {
        self.suppressed.load(Ordering::Relaxed)
    }
}

impl<C> fmt::Debug for LogGate<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogGate")
            .field("interval", &Duration::from_micros(self.interval_micros))
            .field("suppressed", &self.suppressed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    #[test]
    fn one_event_per_interval_with_the_count_of_the_others() {
        let clock = ManualClock::new();
        let gate = LogGate::with_clock(Duration::from_secs(1), clock.clone());
        assert_eq!(gate.admit(), Some(0));
        assert_eq!(gate.admit(), None);
        clock.advance(Duration::from_millis(999));
        assert_eq!(gate.admit(), None);
        assert_eq!(gate.suppressed(), 2);
        clock.advance(Duration::from_millis(1));
        assert_eq!(gate.admit(), Some(2));
        assert_eq!(gate.suppressed(), 0);
        // The interval runs from the last admitted event, not from a grid.
        clock.advance(Duration::from_millis(1500));
        assert_eq!(gate.admit(), Some(0));
        clock.advance(Duration::from_millis(600));
        assert_eq!(gate.admit(), None);
        clock.advance(Duration::from_millis(400));
        assert_eq!(gate.admit(), Some(1));
    }

    #[test]
    fn an_event_at_the_clock_origin_counts() {
        // Instant 0 is a real instant, not "never admitted".
        let clock = ManualClock::starting_at(0);
        let gate = LogGate::with_clock(Duration::from_secs(1), clock.clone());
        assert_eq!(gate.admit(), Some(0));
        assert_eq!(gate.admit(), None);
    }

    #[test]
    fn a_clock_going_back_admits_nothing_early() {
        let clock = ManualClock::starting_at(10_000_000);
        let gate = LogGate::with_clock(Duration::from_secs(1), clock.clone());
        assert_eq!(gate.admit(), Some(0));
        clock.rewind(Duration::from_secs(5));
        assert_eq!(gate.admit(), None);
    }

    #[test]
    fn a_zero_interval_admits_everything() {
        let gate = LogGate::with_clock(Duration::ZERO, ManualClock::new());
        for _ in 0..3 {
            assert_eq!(gate.admit(), Some(0));
        }
    }

    #[test]
    fn concurrent_callers_one_admitted_none_lost() {
        const THREADS: usize = 8;
        const EACH: usize = 1000;
        let clock = ManualClock::new();
        let gate = LogGate::with_clock(Duration::from_secs(1), clock.clone());
        // (admitted events, suppressed events they reported), per thread.
        let results: Vec<(u64, u64)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| {
                    let gate = &gate;
                    scope.spawn(move || {
                        (0..EACH).fold((0, 0), |(admitted, reported), _| match gate.admit() {
                            Some(n) => (admitted + 1, reported + n),
                            None => (admitted, reported),
                        })
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let admitted: u64 = results.iter().map(|r| r.0).sum();
        let reported: u64 = results.iter().map(|r| r.1).sum();
        assert_eq!(admitted, 1);
        clock.advance(Duration::from_secs(1));
        // Every refused event is reported once, by the admitted one that
        // raced it or by the next.
        let total = u64::try_from(THREADS * EACH).unwrap();
        assert_eq!(reported + gate.admit().unwrap(), total - 1);
    }

    #[test]
    fn the_system_clock_gate_admits_the_first_event() {
        let gate = LogGate::default();
        assert_eq!(gate.admit(), Some(0));
        assert_eq!(gate.admit(), None);
    }
}
