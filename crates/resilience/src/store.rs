//! [`Store`]: a limiter whose state lives outside this process, as the
//! resilience wrapper calls it.

use std::future::Future;
use std::time::Instant;

use ratelab_core::toolkit::{Settlement, Stamp};
use ratelab_core::{Algorithm, Decision, Error};

/// A limiter whose state lives elsewhere (Redis, a database, another
/// service): one algorithm on one quota, any number of keys, each call a
/// round trip that may fail or hang. [`Resilient`](crate::Resilient) wraps
/// one with a timeout, a circuit breaker, a failure policy and the rest; a
/// store implements only the calls.
///
/// Contract for implementations:
///
/// - every call is given `give_up`, the instant its caller stops waiting
///   (`None`: a timeout too long to represent). A store that can must not
///   charge anything once it has passed, on its own clock: a call that a
///   stall held past its caller's timeout is dropped by the wrapper, and
///   must not be charged when the store comes back (the Redis backend
///   sends it to its scripts as a deadline on Redis's measured clock);
/// - an outage (the store unreachable, too slow, moving) is an error for
///   which [`Error::is_unavailable`] holds ([`Error::Backend`],
///   [`Error::Timeout`]); a store that answered with something no store of
///   this algorithm could hold or send is [`Error::Data`]: the failure
///   policy applies to the former only, unless asked otherwise;
/// - [`Store::check`] of a positive cost that is admitted answers its
///   [`Stamp`] (what [`Algorithm::stamp`] gives), which the wrapper puts in
///   the caller's receipt and [`Store::settle`] receives back; anything
///   else answers a default stamp;
/// - a cost or an actual above the capacity never reaches a store: the
///   wrapper refuses it first.
///
/// The futures are returned by value, not boxed, so that a check through
/// the wrapper costs what the store's own call costs.
pub trait Store: Send + Sync + 'static {
    /// The algorithm the store runs: its quota, capacity and name, and the
    /// in-memory fallback's logic.
    type Algorithm: Algorithm + Clone;

    /// The algorithm and its parameters.
    fn algorithm(&self) -> &Self::Algorithm;

    /// Where the state lives, as [`Limiter::backend`](ratelab_core::Limiter::backend)
    /// says it: `"redis"`, ...
    fn name(&self) -> &'static str;

    /// The longest this algorithm takes to be full again from a check, µs:
    /// what a decision made by failing open says it will take.
    fn max_wait_micros(&self) -> u64;

    /// Why this store cannot serve its algorithm as configured, if it
    /// cannot: every call then answers the error at once, before any round
    /// trip. `Ok` by default.
    fn ensure_supported(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Decides a request of `cost` for `key` and consumes it if it passes:
    /// the decision, and the stamp of an admission of a positive cost.
    fn check(
        &self,
        key: &[u8],
        cost: u32,
        give_up: Option<Instant>,
    ) -> impl Future<Output = Result<(Decision, Stamp), Error>> + Send;

    /// The decision a check of `cost` would get now, writing nothing.
    fn peek(
        &self,
        key: &[u8],
        cost: u32,
        give_up: Option<Instant>,
    ) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// Settles one admission of `key` ([`Algorithm::settle`]); answers what
    /// a peek of cost 0 would after it.
    fn settle(
        &self,
        key: &[u8],
        settlement: Settlement,
        give_up: Option<Instant>,
    ) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// Puts `key` back to full capacity ([`Algorithm::reset`]).
    fn reset(
        &self,
        key: &[u8],
        give_up: Option<Instant>,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// A call just failed with an outage (or timed out): whatever the store
    /// measured of its server may be stale (a reconnection may reach
    /// another one). Nothing by default.
    fn unavailable(&self) {}
}
