//! The two shapes the scenarios need an algorithm in, beyond what
//! [`AlgorithmKind`] builds itself: a keyed limiter shared between tasks, and
//! bare decision logic for the simulations, which hold one state per client
//! themselves. Which algorithms exist, their names and their order come from
//! [`AlgorithmKind`] alone.

use std::sync::Arc;

use ratelab::{
    Algorithm, AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, Clock, Decision, Error, Keyed,
    KnownAlgorithm, Quota,
};

/// The reference for accuracy: the exact sliding window.
pub const EXACT: AlgorithmKind = AlgorithmKind::SlidingLog;

/// A keyed in-memory limiter of `kind` on `clock`, shared between tasks as
/// an [`AsyncRateLimiter`].
pub fn keyed_shared<C: Clock + 'static>(
    kind: AlgorithmKind,
    quota: Quota,
    clock: C,
) -> Arc<dyn AsyncRateLimiter> {
    struct Shared<C>(C);
    impl<C: Clock + 'static> AlgorithmVisitor for Shared<C> {
        type Output = Arc<dyn AsyncRateLimiter>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            Arc::new(Keyed::with_clock(algorithm, self.0))
        }
    }
    kind.visit(quota, Shared(clock))
}

/// Decision logic with one state per client, indexed `0..clients`: the
/// simulations run it on simulated time without any clock or lock.
pub trait Simulated: Send {
    /// Decides a request of `cost` from `client` at `now` µs.
    fn decide(&mut self, client: usize, now: u64, cost: u32) -> Result<Decision, Error>;
}

struct Sim<A: Algorithm> {
    algorithm: A,
    states: Vec<A::State>,
}

impl<A: Algorithm> Simulated for Sim<A> {
    fn decide(&mut self, client: usize, now: u64, cost: u32) -> Result<Decision, Error> {
        self.algorithm.decide(&mut self.states[client], now, cost)
    }
}

/// `kind`'s decision logic with `clients` fresh states.
pub fn simulated(kind: AlgorithmKind, quota: Quota, clients: usize) -> Box<dyn Simulated> {
    struct Build(usize);
    impl AlgorithmVisitor for Build {
        type Output = Box<dyn Simulated>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            let states = vec![algorithm.initial_state(); self.0];
            Box::new(Sim { algorithm, states })
        }
    }
    kind.visit(quota, Build(clients))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_builds_and_reports_itself() {
        let quota = Quota::per_second(10).unwrap();
        for kind in AlgorithmKind::ALL {
            let limiter = kind.keyed(quota, ratelab::ManualClock::new());
            assert_eq!(limiter.algorithm_name(), kind.name());
            let shared = keyed_shared(kind, quota, ratelab::ManualClock::new());
            assert_eq!(shared.algorithm_name(), kind.name());
            let mut sim = simulated(kind, quota, 2);
            assert!(sim.decide(1, 0, 1).unwrap().allowed);
        }
    }
}
