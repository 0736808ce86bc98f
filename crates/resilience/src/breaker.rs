//! A circuit breaker: after consecutive outage failures, the store is not
//! called for a cool-down and the failure policy answers at once, so that an
//! outage does not cost every request the full timeout.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The breaker of one limiter.
pub(crate) struct Breaker {
    /// Consecutive outage failures that open the breaker (0: never opens).
    threshold: u32,
    cool_down: Duration,
    /// How long a probe may take before another caller may probe: a probe
    /// whose caller gave up (its future dropped) must not hold the breaker
    /// open for ever.
    probe_timeout: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    consecutive: u32,
    /// Open until then: no call to the store before.
    open_until: Option<Instant>,
    /// A probe is out, until then at the latest.
    probing_until: Option<Instant>,
    opened: u64,
    short_circuited: u64,
}

/// Whether a call may reach the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit {
    /// Closed: call.
    Call,
    /// Open, its cool-down over: this call is the one probe.
    Probe,
    /// Open: do not call, for this long at least.
    Refused(Duration),
}

/// What the breaker looks like now, for [`Stats`](crate::Stats).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot {
    pub(crate) open: bool,
    pub(crate) cool_down_left: Duration,
    pub(crate) opened: u64,
    pub(crate) short_circuited: u64,
}

impl Breaker {
    pub(crate) fn new(threshold: u32, cool_down: Duration, probe_timeout: Duration) -> Self {
        Breaker {
            threshold,
            cool_down,
            probe_timeout,
            state: Mutex::new(State::default()),
        }
    }

    pub(crate) fn permit(&self) -> Permit {
        self.permit_at(Instant::now())
    }

    /// [`Breaker::permit`] at `now` (the tests' instants).
    fn permit_at(&self, now: Instant) -> Permit {
        let mut state = self.state.lock();
        let Some(open_until) = state.open_until else {
            return Permit::Call;
        };
        if now < open_until {
            state.short_circuited += 1;
            return Permit::Refused(open_until - now);
        }
        match state.probing_until {
            Some(until) if now < until => {
                state.short_circuited += 1;
                // The probe answers within its timeout: retry then.
                Permit::Refused(until - now)
            }
            _ => {
                state.probing_until = Some(now + self.probe_timeout);
                Permit::Probe
            }
        }
    }

    /// The store answered (a decision or a data error: it is up either way).
    pub(crate) fn success(&self) {
        let mut state = self.state.lock();
        state.consecutive = 0;
        state.open_until = None;
        state.probing_until = None;
    }

    /// An outage failure (a timeout, a connection or cluster error).
    pub(crate) fn failure(&self, probe: bool) {
        self.failure_at(probe, Instant::now());
    }

    /// [`Breaker::failure`] at `now` (the tests' instants).
    fn failure_at(&self, probe: bool, now: Instant) {
        if self.threshold == 0 {
            return;
        }
        let mut state = self.state.lock();
        state.consecutive = state.consecutive.saturating_add(1);
        if probe || (state.open_until.is_none() && state.consecutive >= self.threshold) {
            state.open_until = Some(now + self.cool_down);
            state.probing_until = None;
            state.opened += 1;
        }
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let state = self.state.lock();
        let now = Instant::now();
        Snapshot {
            open: state.open_until.is_some(),
            cool_down_left: state
                .open_until
                .map_or(Duration::ZERO, |until| until.saturating_duration_since(now)),
            opened: state.opened,
            short_circuited: state.short_circuited,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Instants the test chooses: `ms` milliseconds after `start`.
    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn opens_after_the_threshold_then_lets_one_probe_through() {
        let breaker = Breaker::new(3, Duration::from_millis(30), Duration::from_secs(5));
        let start = Instant::now();
        for _ in 0..2 {
            assert_eq!(breaker.permit_at(start), Permit::Call);
            breaker.failure_at(false, start);
        }
        assert_eq!(breaker.permit_at(start), Permit::Call);
        breaker.failure_at(false, start);
        assert_eq!(
            breaker.permit_at(at(start, 29)),
            Permit::Refused(Duration::from_millis(1))
        );
        assert!(breaker.snapshot().open);
        assert_eq!(breaker.permit_at(at(start, 30)), Permit::Probe);
        // One probe at a time.
        assert!(matches!(
            breaker.permit_at(at(start, 30)),
            Permit::Refused(_)
        ));
        // The probe failed: a new cool-down from then.
        breaker.failure_at(true, at(start, 40));
        assert_eq!(
            breaker.permit_at(at(start, 69)),
            Permit::Refused(Duration::from_millis(1))
        );
        assert_eq!(breaker.permit_at(at(start, 70)), Permit::Probe);
        breaker.success();
        assert_eq!(breaker.permit_at(at(start, 70)), Permit::Call);
        assert!(!breaker.snapshot().open);
        assert_eq!(breaker.snapshot().opened, 2);
    }

    #[test]
    fn a_lost_probe_does_not_hold_it_open() {
        let breaker = Breaker::new(1, Duration::ZERO, Duration::from_millis(20));
        let start = Instant::now();
        breaker.failure_at(false, start);
        assert_eq!(breaker.permit_at(start), Permit::Probe);
        assert_eq!(
            breaker.permit_at(at(start, 19)),
            Permit::Refused(Duration::from_millis(1))
        );
        // Its caller never came back: another may probe.
        assert_eq!(breaker.permit_at(at(start, 20)), Permit::Probe);
    }

    #[test]
    fn a_zero_threshold_never_opens() {
        let breaker = Breaker::new(0, Duration::from_secs(1), Duration::from_secs(1));
        for _ in 0..10 {
            breaker.failure(false);
        }
        assert_eq!(breaker.permit(), Permit::Call);
    }
}
