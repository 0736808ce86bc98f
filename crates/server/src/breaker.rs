//! The circuit breaker of the service's Redis: it opens only when Redis
//! looks gone, not when one request was slow.
//!
//! It counts requests, not descriptors: a request of ten thousand
//! descriptors that fails is one failure. And it opens only after
//! `threshold` requests in a row failed with an outage (a timeout, a lost
//! connection) **and** no request has had an answer from Redis for `quiet`:
//! under load, when some calls time out while others are answered, it
//! stays closed, so a few slow calls never become a cool-down of refusals
//! for everyone. Open, it answers with the failure policy at once for
//! `cool_down`, then lets one request through to probe.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Whether a request may call Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permit {
    /// Closed: call.
    Call,
    /// Open, its cool-down over: this request is the probe.
    Probe,
    /// Open: answer without calling.
    Open,
}

#[derive(Debug)]
pub(crate) struct Breaker {
    threshold: u32,
    quiet: Duration,
    cool_down: Duration,
    /// How long a probe may be out before another request may probe.
    probe_timeout: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    consecutive: u32,
    last_answer: Instant,
    open_until: Option<Instant>,
    probing_until: Option<Instant>,
}

impl Breaker {
    pub(crate) fn new(
        threshold: u32,
        quiet: Duration,
        cool_down: Duration,
        probe_timeout: Duration,
    ) -> Self {
        Breaker {
            threshold,
            quiet,
            cool_down,
            probe_timeout,
            state: Mutex::new(State {
                consecutive: 0,
                last_answer: Instant::now(),
                open_until: None,
                probing_until: None,
            }),
        }
    }

    pub(crate) fn permit(&self) -> Permit {
        let mut state = self.state.lock();
        let Some(open_until) = state.open_until else {
            return Permit::Call;
        };
        let now = Instant::now();
        if now < open_until {
            return Permit::Open;
        }
        match state.probing_until {
            Some(until) if now < until => Permit::Open,
            _ => {
                state.probing_until = Some(now + self.probe_timeout);
                Permit::Probe
            }
        }
    }

    /// Redis answered the request (a data error is an answer too).
    pub(crate) fn success(&self) {
        let mut state = self.state.lock();
        state.consecutive = 0;
        state.last_answer = Instant::now();
        state.open_until = None;
        state.probing_until = None;
    }

    /// The request met an outage.
    pub(crate) fn failure(&self, probe: bool) {
        if self.threshold == 0 {
            return;
        }
        let mut state = self.state.lock();
        state.consecutive = state.consecutive.saturating_add(1);
        let now = Instant::now();
        let gone = state.consecutive >= self.threshold
            && now.duration_since(state.last_answer) >= self.quiet;
        if probe || (state.open_until.is_none() && gone) {
            state.open_until = Some(now + self.cool_down);
            state.probing_until = None;
        }
    }

    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        self.state.lock().open_until.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_among_answers_never_open_it() {
        let breaker = Breaker::new(
            2,
            Duration::from_secs(3600),
            Duration::from_secs(3600),
            Duration::from_secs(1),
        );
        for _ in 0..100 {
            breaker.failure(false);
        }
        // Redis answered within the last hour: slow, not gone.
        assert!(!breaker.is_open());
        assert_eq!(breaker.permit(), Permit::Call);
    }

    #[test]
    fn consecutive_failures_after_a_quiet_spell_open_it_and_a_probe_closes_it() {
        let breaker = Breaker::new(3, Duration::ZERO, Duration::ZERO, Duration::from_secs(3600));
        breaker.failure(false);
        breaker.failure(false);
        assert!(!breaker.is_open());
        breaker.failure(false);
        assert!(breaker.is_open());
        // The cool-down (zero) is over: one probe, the others wait for it.
        assert_eq!(breaker.permit(), Permit::Probe);
        assert_eq!(breaker.permit(), Permit::Open);
        breaker.success();
        assert_eq!(breaker.permit(), Permit::Call);
    }
}
