//! The seven algorithms, built by name the same way for every scenario: as a
//! keyed in-memory limiter on any clock, or as bare decision logic for the
//! simulations, which hold one state per client themselves.

use std::sync::Arc;

use ratelab_core::{
    Algorithm, AsyncRateLimiter, Clock, Decision, Error, Keyed, Quota, RateLimiter,
};

/// The seven algorithms' names, in the order every table and chart lists
/// them.
pub const NAMES: [&str; 7] = [
    "fixed-window",
    "sliding-log",
    "sliding-counter",
    "leaky-meter",
    "leaky-queue",
    "token-bucket",
    "gcra",
];

/// The reference for accuracy: the exact sliding window.
pub const EXACT: &str = "sliding-log";

/// Calls `$body` with `$alg` bound to the named algorithm built on `$quota`;
/// `None` for an unknown name.
macro_rules! with_algorithm {
    ($name:expr, $quota:expr, |$alg:ident| $body:expr) => {
        match $name {
            "fixed-window" => {
                let $alg = ratelab_fixed_window::FixedWindow::new($quota);
                Some($body)
            }
            "sliding-log" => {
                let $alg = ratelab_sliding_window::SlidingLog::new($quota);
                Some($body)
            }
            "sliding-counter" => {
                let $alg = ratelab_sliding_window::SlidingCounter::new($quota);
                Some($body)
            }
            "leaky-meter" => {
                let $alg = ratelab_leaky_bucket::LeakyMeter::new($quota);
                Some($body)
            }
            "leaky-queue" => {
                let $alg = ratelab_leaky_bucket::LeakyQueue::new($quota);
                Some($body)
            }
            "token-bucket" => {
                let $alg = ratelab_token_bucket::TokenBucket::new($quota);
                Some($body)
            }
            "gcra" => {
                let $alg = ratelab_gcra::Gcra::new($quota);
                Some($body)
            }
            _ => None,
        }
    };
}
pub(crate) use with_algorithm;

/// A keyed in-memory limiter of the named algorithm on `clock`.
///
/// # Panics
///
/// On a name not in [`NAMES`].
pub fn keyed<C: Clock + 'static>(name: &str, quota: Quota, clock: C) -> Box<dyn RateLimiter> {
    fn boxed<A: Algorithm, C: Clock + 'static>(a: A, clock: C) -> Box<dyn RateLimiter> {
        Box::new(Keyed::with_clock(a, clock))
    }
    with_algorithm!(name, quota, |a| boxed(a, clock))
        .unwrap_or_else(|| panic!("no algorithm named {name}"))
}

/// A keyed in-memory limiter of the named algorithm on `clock`, shared
/// between tasks as an [`AsyncRateLimiter`].
///
/// # Panics
///
/// On a name not in [`NAMES`].
pub fn keyed_shared<C: Clock + 'static>(
    name: &str,
    quota: Quota,
    clock: C,
) -> Arc<dyn AsyncRateLimiter> {
    fn shared<A: Algorithm, C: Clock + 'static>(a: A, clock: C) -> Arc<dyn AsyncRateLimiter> {
        Arc::new(Keyed::with_clock(a, clock))
    }
    with_algorithm!(name, quota, |a| shared(a, clock))
        .unwrap_or_else(|| panic!("no algorithm named {name}"))
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

/// The named algorithm's decision logic with `clients` fresh states.
///
/// # Panics
///
/// On a name not in [`NAMES`].
pub fn simulated(name: &str, quota: Quota, clients: usize) -> Box<dyn Simulated> {
    fn boxed<A: Algorithm>(algorithm: A, clients: usize) -> Box<dyn Simulated> {
        let states = vec![algorithm.initial_state(); clients];
        Box::new(Sim { algorithm, states })
    }
    with_algorithm!(name, quota, |a| boxed(a, clients))
        .unwrap_or_else(|| panic!("no algorithm named {name}"))
}

/// What each algorithm promises, in a few words, for the tables.
pub fn promise(name: &str) -> &'static str {
    match name {
        "fixed-window" => "<= limit per clock-aligned window; up to 2x across an edge",
        "sliding-log" => "<= limit in every trailing window (exact)",
        "sliding-counter" => "approximately <= limit per trailing window",
        "leaky-meter" | "token-bucket" | "gcra" => "<= burst + rate x t in any interval t",
        "leaky-queue" => "output never faster than the rate; refuses when the queue is full",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_builds_and_reports_itself() {
        let quota = Quota::per_second(10).unwrap();
        for name in NAMES {
            let limiter = keyed(name, quota, ratelab_core::ManualClock::new());
            assert_eq!(limiter.algorithm_name(), name);
            let mut sim = simulated(name, quota, 2);
            assert!(sim.decide(1, 0, 1).unwrap().allowed);
        }
    }
}
