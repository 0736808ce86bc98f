//! The peers measured beside ratelab in the same run: governor (GCRA in
//! memory), driven on its own fake clock so that it decides at exactly the
//! instants ratelab's limiters see; redis-cell (`CL.THROTTLE`) lives in
//! [`crate::scenario::reference`], where it runs on the run's Redis.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::RateLimiter;
use governor::clock::{Clock as _, FakeRelativeClock};
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use ratelab::Quota;

use crate::algorithms::Simulated;

/// The peer's name in tables and data.
pub const GOVERNOR: &str = "governor";

/// One decision of a peer: admitted or not, and the exact wait a refusal
/// indicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerDecision {
    /// Admitted.
    pub allowed: bool,
    /// Zero when admitted.
    pub retry_after: Duration,
}

/// `quota` in governor's terms: one cell every emission interval, a burst
/// of `quota.burst()` (the same GCRA parameters ratelab's gcra uses).
pub fn governor_quota(quota: Quota) -> governor::Quota {
    let burst = NonZeroU32::new(quota.burst()).expect("a quota's burst is positive");
    governor::Quota::with_period(quota.emission_interval())
        .expect("a quota's emission interval is positive")
        .allow_burst(burst)
}

/// governor's direct limiter on its fake clock.
type FakeLimiter = RateLimiter<
    NotKeyed,
    InMemoryState,
    FakeRelativeClock,
    NoOpMiddleware<<FakeRelativeClock as governor::clock::Clock>::Instant>,
>;

/// One governor limiter per client on one fake clock, moved forward to each
/// request's instant (µs since the simulation's start).
pub struct Governor {
    clock: FakeRelativeClock,
    /// Where the fake clock is, µs.
    now: u64,
    limiters: Vec<FakeLimiter>,
    burst: u32,
}

impl std::fmt::Debug for Governor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Governor")
            .field("now", &self.now)
            .field("clients", &self.limiters.len())
            .finish_non_exhaustive()
    }
}

impl Governor {
    /// `clients` fresh limiters on `quota`, the clock at 0.
    pub fn new(quota: Quota, clients: usize) -> Self {
        let clock = FakeRelativeClock::default();
        let q = governor_quota(quota);
        let limiters = (0..clients)
            .map(|_| RateLimiter::direct_with_clock(q, clock.clone()))
            .collect();
        Governor {
            clock,
            now: 0,
            limiters,
            burst: quota.burst(),
        }
    }

    /// Moves the clock to `now` µs (never back).
    pub fn advance_to(&mut self, now: u64) {
        if now > self.now {
            self.clock.advance(Duration::from_micros(now - self.now));
            self.now = now;
        }
    }

    /// A unit request from `client` at `now` µs.
    pub fn check(&mut self, client: usize, now: u64) -> PeerDecision {
        self.advance_to(now);
        match self.limiters[client].check() {
            Ok(()) => PeerDecision {
                allowed: true,
                retry_after: Duration::ZERO,
            },
            Err(not_until) => PeerDecision {
                allowed: false,
                retry_after: not_until.wait_time_from(self.clock.now()),
            },
        }
    }
}

impl Simulated for Governor {
    fn decide(
        &mut self,
        client: usize,
        now: u64,
        cost: u32,
    ) -> Result<ratelab::Decision, ratelab::Error> {
        debug_assert_eq!(cost, 1, "the simulations send unit requests");
        let d = self.check(client, now);
        // Only `allowed` and `retry_after` are compared; governor reports
        // neither a remaining count nor a reset time here.
        let limit = u64::from(self.burst);
        Ok(if d.allowed {
            ratelab::Decision::admitted(limit)
        } else {
            ratelab::Decision::refused(limit).with_retry_after_micros(
                u64::try_from(d.retry_after.as_micros()).unwrap_or(u64::MAX),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn governor_admits_the_burst_then_the_rate() {
        let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
        let mut g = Governor::new(quota, 1);
        let burst = (0..20).filter(|_| g.check(0, 0).allowed).count();
        assert_eq!(burst, 10);
        let refused = g.check(0, 0);
        assert_eq!(refused.retry_after, Duration::from_millis(200));
        let later = (0..10).filter(|_| g.check(0, 1_000_000).allowed).count();
        assert_eq!(later, 5);
    }
}
