//! [`AlgorithmKind`]: the one list of ratelab's algorithms, and the one place
//! that builds each from a [`Quota`]. Everything that runs "every algorithm"
//! (the Redis backend's tests, the native module's tests, the comparison, the
//! benches, the protocol's generated files) goes through it.
//!
//! # Adding an algorithm
//!
//! An algorithm is its crate, its script and one row here. Written by hand,
//! for an algorithm in a crate of its own (`ratelab-foo`):
//!
//! 1. **the crate**, `crates/foo`: the decision logic
//!    ([`Algorithm`](ratelab_core::Algorithm); a debt implements
//!    [`Debt`](ratelab_core::toolkit::Debt) and gets its receipts from
//!    `ratelab_core::toolkit::debt`), its remote form ([`RemoteForm`], and
//!    [`StringForm`](ratelab_core::toolkit::StringForm) for a state kept in one
//!    string) and its script, `crates/foo/lua/foo.lua`;
//! 2. **the workspace** `Cargo.toml`: a member and a
//!    `[workspace.dependencies]` line;
//! 3. **this crate's** `Cargo.toml` (an optional dependency and its feature,
//!    in the defaults) and `lib.rs` (the re-export);
//! 4. **one row** in `algorithm_kinds!` below;
//! 5. the native module's command: one `impl ModuleCommand` in
//!    `crates/redis-module/src/registry.rs` (`Command::string::<Self>()`
//!    for a state kept in one string; a state of another shape needs a
//!    command of its own, as the sliding log's `sliding_log.rs`);
//! 6. a conformance scenario (`crates/testkit/src/conformance.rs`: decisions
//!    worked out by hand);
//! 7. its colour in the comparison's charts (`COLORS` in
//!    `crates/compare/src/charts.rs`);
//! 8. its rows in `lua/README.md` (the scripts table, the State table) and in
//!    the root `README.md`'s crate table;
//! 9. what it admits at a window's edge (`EDGE` in
//!    `crates/tests/tests/memory/window_edge.rs`), and, unless it is a debt (whose
//!    bound and model the tests derive), its bound and its model of kept
//!    admissions where the tests and the comparison check them
//!    (`lagging_clock.rs`, `settle_bound.rs` with `ratelab_testkit::kept`,
//!    `crates/compare/src/scenario/window_edge.rs`).
//!
//! Then **`just regenerate`**: `lua/`'s link to the script, the clients' spec
//! and vectors (`lua/clients/algorithms.json`, `vectors.json`) and the
//! reference table of `lua/README.md`.
//!
//! Everything else follows: the Redis backend (`ratelab-redis` and the
//! resilience wrapper are generic over [`RemoteForm`]), the module's table
//! of commands (built from the rows by [`each_algorithm!`](crate::each_algorithm)),
//! the module's tests and the cross-algorithm tests (`crates/tests`), compare's read-then-write
//! limiter, every table and chart, the benches, and the Python and Node
//! clients (which read `algorithms.json` at run time).
//!
//! **What checks what.** The compiler checks 1 to 3 once the row (4) exists:
//! the row names the type (`crate::Foo`, re-exported by `lib.rs` from the
//! dependency), under its feature (an undeclared feature is an
//! `unexpected_cfgs` warning, an error under `just lint`), and the row's
//! visitor requires the remote form ([`KnownAlgorithm`]); and 5: the
//! module builds its commands from the rows, so that a row without its
//! `ModuleCommand` is a compile error of `ratelab-redis-module` that names
//! the type. Nothing checks that the row exists: it is the registration.
//! Tests name what is missing in 6 to 9 (`conformance.rs`, `charts.rs`,
//! `protocol_vectors.rs`, `readme.rs`, `window_edge.rs`, and a panic naming
//! the file for a bound or model a non-debt lacks), and in what `just
//! regenerate` writes (`protocol_vectors.rs`). Three places name algorithms
//! and fall back safely for a new one, unchecked: `ratelab-http`'s refill
//! shape (`Refill::of`) and the clients' middlewares' list of sliding
//! windows, which only make the `RateLimit` header's `t` more precise, and
//! the benches' `constant_time` (an algorithm not O(1) per check is to be
//! named there, as the sliding log is).

use std::fmt;
use std::str::FromStr;

use ratelab_core::toolkit::RemoteForm;
use ratelab_core::{Algorithm, Bound, Clock, Keyed, Quota, RateLimiter};

/// One row per algorithm: its feature, its type (the variant's name), and
/// the variant's docs. The enum, [`AlgorithmKind::ALL`],
/// [`AlgorithmKind::name`] (the algorithm's own
/// [`RemoteForm::NAME`]), [`AlgorithmKind::visit`] and
/// [`each_algorithm!`](crate::each_algorithm) follow from it, each row
/// present only with its feature.
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

        each_algorithm_of_features! { ($) [] $($feature => $variant,)* }
    };
}

/// Defines [`each_algorithm!`](crate::each_algorithm) on the rows whose
/// feature is enabled, reading one row at a time: a row's `cfg` is read
/// here, where its feature is, and not in the crate that calls the macro
/// (where `feature = "gcra"` would name a feature of its own). `$d` is `$`,
/// for the defined macro's own variables.
macro_rules! each_algorithm_of_features {
    (($d:tt) [$($kept:ident)*]) => {
        /// Expands `callback! { ratelab::FixedWindow, ratelab::SlidingLog,
        /// ... }`: every algorithm of [`AlgorithmKind::ALL`], in its order,
        /// as a type. For code that needs each algorithm's type at compile
        /// time (a table of functions per algorithm, an impl each), where
        /// [`AlgorithmKind::visit`] answers at run time; a trait bound on
        /// the types in `callback` makes an algorithm added to the list
        /// without an impl of it a compile error that names the type.
        ///
        /// ```
        /// use ratelab::{AlgorithmKind, KnownAlgorithm};
        ///
        /// fn name<A: KnownAlgorithm>() -> &'static str {
        ///     A::NAME
        /// }
        /// macro_rules! names {
        ///     ($($algorithm:ty,)*) => {
        ///         [$(name::<$algorithm>()),*]
        ///     };
        /// }
        /// let names = ratelab::each_algorithm!(names);
        /// assert_eq!(names, AlgorithmKind::ALL.map(AlgorithmKind::name));
        /// ```
        #[macro_export]
        macro_rules! each_algorithm {
            ($d callback:ident) => {
                $d callback! { $($d crate::$kept,)* }
            };
        }
    };
    (($d:tt) [$($kept:ident)*] $feature:literal => $variant:ident, $($rest:tt)*) => {
        #[cfg(feature = $feature)]
        each_algorithm_of_features! { ($d) [$($kept)* $variant] $($rest)* }
        #[cfg(not(feature = $feature))]
        each_algorithm_of_features! { ($d) [$($kept)*] $($rest)* }
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
    /// Whether the algorithm's state is a debt ([`RemoteForm::DEBT`]: GCRA,
    /// the token bucket, the leaky meter and queue): full again at one
    /// instant each admission moves `cost × T` later, so that at most
    /// `burst + floor(t / T)` units pass in any interval `t`.
    pub fn debt(self) -> bool {
        struct Debt;
        impl AlgorithmVisitor for Debt {
            type Output = bool;
            fn visit<A: KnownAlgorithm>(self, _: A) -> bool {
                A::DEBT
            }
        }
        // Any valid quota: the answer is the algorithm's, not the quota's.
        let quota = Quota::new(1, std::time::Duration::from_secs(1)).expect("a valid quota");
        self.visit(quota, Debt)
    }

    /// What the algorithm promises on `quota` ([`Algorithm::bound`]).
    pub fn bound(self, quota: Quota) -> Bound {
        struct Promise;
        impl AlgorithmVisitor for Promise {
            type Output = Bound;
            fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Bound {
                algorithm.bound()
            }
        }
        self.visit(quota, Promise)
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
