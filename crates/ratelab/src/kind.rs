//! [`AlgorithmKind`]: the one list of ratelab's algorithms, and the one place
//! that builds each from a [`Quota`]. Everything that runs "every algorithm"
//! (the comparison, the benches, the test suites) goes through it, so a new
//! algorithm is its crate plus one arm here.

use std::fmt;
use std::str::FromStr;

#[cfg(not(feature = "redis"))]
use ratelab_core::Algorithm;
use ratelab_core::{Clock, Keyed, Quota, RateLimiter};

use crate::{FixedWindow, Gcra, LeakyMeter, LeakyQueue, SlidingCounter, SlidingLog, TokenBucket};

/// One of ratelab's algorithms.
///
/// ```
/// use ratelab::{AlgorithmKind, ManualClock, Quota};
///
/// let quota = Quota::per_second(5)?.with_burst(10)?;
/// for kind in AlgorithmKind::ALL {
///     let limiter = kind.keyed(quota, ManualClock::new());
///     assert_eq!(limiter.algorithm_name(), kind.name());
///     assert!(limiter.check(b"client", 1)?.allowed);
/// }
/// assert_eq!("gcra".parse::<AlgorithmKind>()?, AlgorithmKind::Gcra);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum AlgorithmKind {
    /// [`FixedWindow`].
    FixedWindow,
    /// [`SlidingLog`]: the exact sliding window.
    SlidingLog,
    /// [`SlidingCounter`].
    SlidingCounter,
    /// [`LeakyMeter`].
    LeakyMeter,
    /// [`LeakyQueue`].
    LeakyQueue,
    /// [`TokenBucket`].
    TokenBucket,
    /// [`Gcra`].
    Gcra,
}

/// What [`AlgorithmKind::visit`] hands a visitor: an algorithm with every
/// ability ratelab gives one (and, with the `redis` feature, its script).
#[cfg(not(feature = "redis"))]
pub trait KnownAlgorithm: Algorithm + Clone + fmt::Debug {}
#[cfg(not(feature = "redis"))]
impl<A: Algorithm + Clone + fmt::Debug> KnownAlgorithm for A {}

/// What [`AlgorithmKind::visit`] hands a visitor: an algorithm with every
/// ability ratelab gives one, its Redis script included.
#[cfg(feature = "redis")]
pub trait KnownAlgorithm: ratelab_redis::RedisAlgorithm + fmt::Debug {}
#[cfg(feature = "redis")]
impl<A: ratelab_redis::RedisAlgorithm + fmt::Debug> KnownAlgorithm for A {}

/// Code run on an algorithm whose type is only known at run time: what a
/// closure generic over the algorithm would be.
pub trait AlgorithmVisitor {
    /// What the visit gives back.
    type Output;

    /// Runs on `algorithm`, built from the visit's quota.
    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output;
}

/// A name that is not one of [`AlgorithmKind::ALL`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAlgorithm(pub String);

impl fmt::Display for UnknownAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no algorithm is named {:?}; the names are: ", self.0)?;
        let names: Vec<&str> = AlgorithmKind::ALL.iter().map(|k| k.name()).collect();
        f.write_str(&names.join(", "))
    }
}

impl std::error::Error for UnknownAlgorithm {}

impl AlgorithmKind {
    /// Every algorithm, in the order every table and chart lists them.
    pub const ALL: [AlgorithmKind; 7] = [
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingLog,
        AlgorithmKind::SlidingCounter,
        AlgorithmKind::LeakyMeter,
        AlgorithmKind::LeakyQueue,
        AlgorithmKind::TokenBucket,
        AlgorithmKind::Gcra,
    ];

    /// The algorithm's short name, the same as its
    /// [`Algorithm::name`](ratelab_core::Algorithm::name): `"gcra"`, ...
    pub const fn name(self) -> &'static str {
        match self {
            AlgorithmKind::FixedWindow => "fixed-window",
            AlgorithmKind::SlidingLog => "sliding-log",
            AlgorithmKind::SlidingCounter => "sliding-counter",
            AlgorithmKind::LeakyMeter => "leaky-meter",
            AlgorithmKind::LeakyQueue => "leaky-queue",
            AlgorithmKind::TokenBucket => "token-bucket",
            AlgorithmKind::Gcra => "gcra",
        }
    }

    /// The algorithm built from `quota`, handed to `visitor`.
    pub fn visit<V: AlgorithmVisitor>(self, quota: Quota, visitor: V) -> V::Output {
        match self {
            AlgorithmKind::FixedWindow => visitor.visit(FixedWindow::new(quota)),
            AlgorithmKind::SlidingLog => visitor.visit(SlidingLog::new(quota)),
            AlgorithmKind::SlidingCounter => visitor.visit(SlidingCounter::new(quota)),
            AlgorithmKind::LeakyMeter => visitor.visit(LeakyMeter::new(quota)),
            AlgorithmKind::LeakyQueue => visitor.visit(LeakyQueue::new(quota)),
            AlgorithmKind::TokenBucket => visitor.visit(TokenBucket::new(quota)),
            AlgorithmKind::Gcra => visitor.visit(Gcra::new(quota)),
        }
    }

    /// A keyed in-memory limiter of this algorithm on `clock`.
    pub fn keyed<C: Clock + 'static>(self, quota: Quota, clock: C) -> Box<dyn RateLimiter> {
        struct BuildKeyed<C>(C);
        impl<C: Clock + 'static> AlgorithmVisitor for BuildKeyed<C> {
            type Output = Box<dyn RateLimiter>;
            fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
                Box::new(Keyed::with_clock(algorithm, self.0))
            }
        }
        self.visit(quota, BuildKeyed(clock))
    }
}

impl fmt::Display for AlgorithmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AlgorithmKind {
    type Err = UnknownAlgorithm;

    fn from_str(name: &str) -> Result<Self, UnknownAlgorithm> {
        AlgorithmKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| UnknownAlgorithm(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_algorithms_own_and_parse_back() {
        struct Name;
        impl AlgorithmVisitor for Name {
            type Output = &'static str;
            fn visit<A: KnownAlgorithm>(self, algorithm: A) -> &'static str {
                algorithm.name()
            }
        }
        let quota = Quota::per_second(5).unwrap();
        for kind in AlgorithmKind::ALL {
            assert_eq!(kind.visit(quota, Name), kind.name());
            assert_eq!(kind.name().parse::<AlgorithmKind>(), Ok(kind));
        }
        let error = "gcra2".parse::<AlgorithmKind>().unwrap_err();
        assert!(error.to_string().contains("sliding-log"), "{error}");
    }
}
