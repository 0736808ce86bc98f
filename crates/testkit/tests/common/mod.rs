//! Every in-memory algorithm, built the same way, for the tests that run
//! them all side by side.

#![allow(dead_code)]

use ratelab_core::{
    Algorithm, Clock, Decision, Direct, Error, Keyed, ManualClock, Quota, RateLimiter,
};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_token_bucket::TokenBucket;

/// The seven algorithms' names, in the order every table lists them.
pub(crate) const NAMES: [&str; 7] = [
    "fixed-window",
    "sliding-log",
    "sliding-counter",
    "leaky-meter",
    "leaky-queue",
    "token-bucket",
    "gcra",
];

/// A keyed in-memory limiter of the named algorithm.
pub(crate) fn keyed(name: &str, quota: Quota, clock: ManualClock) -> Box<dyn RateLimiter> {
    fn boxed<A: Algorithm>(a: A, clock: ManualClock) -> Box<dyn RateLimiter> {
        Box::new(Keyed::with_clock(a, clock))
    }
    match name {
        "fixed-window" => boxed(FixedWindow::new(quota), clock),
        "sliding-log" => boxed(SlidingLog::new(quota), clock),
        "sliding-counter" => boxed(SlidingCounter::new(quota), clock),
        "leaky-meter" => boxed(LeakyMeter::new(quota), clock),
        "leaky-queue" => boxed(LeakyQueue::new(quota), clock),
        "token-bucket" => boxed(TokenBucket::new(quota), clock),
        "gcra" => boxed(Gcra::new(quota), clock),
        other => panic!("no algorithm named {other}"),
    }
}

/// A single-bucket limiter, erased to a closure `cost -> decision`.
pub(crate) type DirectCheck = Box<dyn Fn(u32) -> Result<Decision, Error> + Send + Sync>;

/// A single-bucket in-memory limiter of the named algorithm.
pub(crate) fn direct<C: Clock + 'static>(name: &str, quota: Quota, clock: C) -> DirectCheck {
    fn boxed<A: Algorithm, C: Clock + 'static>(a: A, clock: C) -> DirectCheck {
        let limiter = Direct::with_clock(a, clock);
        Box::new(move |cost| limiter.check(cost))
    }
    match name {
        "fixed-window" => boxed(FixedWindow::new(quota), clock),
        "sliding-log" => boxed(SlidingLog::new(quota), clock),
        "sliding-counter" => boxed(SlidingCounter::new(quota), clock),
        "leaky-meter" => boxed(LeakyMeter::new(quota), clock),
        "leaky-queue" => boxed(LeakyQueue::new(quota), clock),
        "token-bucket" => boxed(TokenBucket::new(quota), clock),
        "gcra" => boxed(Gcra::new(quota), clock),
        other => panic!("no algorithm named {other}"),
    }
}
