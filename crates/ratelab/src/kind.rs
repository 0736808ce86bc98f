//! [`AlgorithmKind`]: the one list of ratelab's algorithms, and the one place
//! that builds each from a [`Quota`]. Everything that runs "every algorithm"
//! (the comparison, the benches, the test suites) goes through it, so a new
//! algorithm is its crate plus one arm here.

use std::fmt;
use std::str::FromStr;

use ratelab_core::{Algorithm, Clock, Keyed, Quota, RateLimiter, RemoteForm};

/// One row per algorithm: its feature, its type (the variant's name), and
/// the variant's docs. The enum, [`AlgorithmKind::ALL`],
/// [`AlgorithmKind::name`] (the algorithm's own
/// [`RemoteForm::NAME`]) and [`AlgorithmKind::visit`] follow from it, each
/// row present only with its feature.
macro_rules! algorithm_kinds {
    ($($(#[$doc:meta])* $feature:literal => $variant:ident,)*) => {
        /// One of ratelab's algorithms (those of the enabled features).
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
            $($(#[$doc])* #[cfg(feature = $feature)] $variant,)*
        }

        impl AlgorithmKind {
            /// Every algorithm of the enabled features, in the order every
            /// table and chart lists them.
            pub const ALL: [AlgorithmKind; 0 $(+ cfg!(feature = $feature) as usize)*] = [
                $(#[cfg(feature = $feature)] AlgorithmKind::$variant,)*
            ];

            /// The algorithm's short name, its
            /// [`RemoteForm::NAME`] and [`Algorithm::name`]: `"gcra"`, ...
            pub const fn name(self) -> &'static str {
                match self {
                    $(#[cfg(feature = $feature)]
                    AlgorithmKind::$variant => <crate::$variant as RemoteForm>::NAME,)*
                }
            }

            /// The algorithm built from `quota`, handed to `visitor`.
            #[cfg_attr(not(any($(feature = $feature),*)), allow(unused_variables))]
            pub fn visit<V: AlgorithmVisitor>(self, quota: Quota, visitor: V) -> V::Output {
                match self {
                    $(#[cfg(feature = $feature)]
                    AlgorithmKind::$variant => visitor.visit(crate::$variant::new(quota)),)*
                }
            }
        }
    };
}

// Adding an algorithm: one row here (see the module docs for the rest).
algorithm_kinds! {
    /// [`FixedWindow`](crate::FixedWindow).
    "fixed-window" => FixedWindow,
    /// [`SlidingLog`](crate::SlidingLog): the exact sliding window.
    "sliding-window" => SlidingLog,
    /// [`SlidingCounter`](crate::SlidingCounter).
    "sliding-window" => SlidingCounter,
    /// [`LeakyMeter`](crate::LeakyMeter).
    "leaky-bucket" => LeakyMeter,
    /// [`LeakyQueue`](crate::LeakyQueue).
    "leaky-bucket" => LeakyQueue,
    /// [`TokenBucket`](crate::TokenBucket).
    "token-bucket" => TokenBucket,
    /// [`Gcra`](crate::Gcra).
    "gcra" => Gcra,
}

/// What [`AlgorithmKind::visit`] hands a visitor: an algorithm with every
/// ability ratelab gives one: its decision logic, and its remote form (its
/// script, parameters and stored state), which the Redis backend, the
/// native module and the other languages' clients run.
pub trait KnownAlgorithm: Algorithm + RemoteForm + fmt::Debug {}
impl<A: Algorithm + RemoteForm + fmt::Debug> KnownAlgorithm for A {}

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
