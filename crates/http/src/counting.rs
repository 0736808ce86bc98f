//! Counting after the response: [`Count`] says which responses a policy
//! counts, [`Refund`] is what a limiter offers to give units back.
//!
//! A policy that counts only some responses decides before the request runs,
//! when the response is not known yet, in one of two ways:
//!
//! - **With a refund** (every ratelab limiter, through
//!   [`Policy::new`](crate::Policy::new); any other through
//!   [`Policy::refundable`](crate::Policy::refundable)):
//!   the request consumes its cost like any other, and if its response does
//!   not count, what its admission still holds is given back. Concurrent
//!   requests are bounded as usual: at most the quota's worth are in flight.
//!   A request slower than its admission weighs (a success that ends after
//!   its window, or after its debt was repaid) gets nothing back: giving it
//!   then would let later failures count for less (see
//!   [`RateLimiter::refund`](ratelab_core::RateLimiter::refund)). The layer
//!   measures the time since the check from before it, on real time: a
//!   limiter on a clock that runs faster (a `ManualClock` moved by a test
//!   while a request runs) can get back units that already came back.
//! - **Without** (a limiter that cannot give units back:
//!   [`Limiter::refunds`](ratelab_core::Limiter::refunds) false): the
//!   request is only peeked, refused if fewer than its cost remain, and the
//!   cost is consumed after the response, if it counts. Requests that run at
//!   the same time all see the same peek: up to the number in flight can
//!   pass beyond the quota. For login protection this is what
//!   rate-limiter-flexible's examples do; a refund closes the gap.
//!
//! Either way the layer waits for that last call (bounded by the policy's
//! timeout) before it returns the response, so that the next request of the
//! client sees it.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::future::join_all;
use http::StatusCode;
use ratelab_core::{
    Algorithm, AsyncRateLimiter, CheckFuture, Clock, Decision, Direct, Error, Keyed, Limiter,
    Quota, ResetFuture,
};

use crate::engine::{Report, State, Verdict};

/// Which responses a policy counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Count {
    /// Every request that passes counts (the default).
    #[default]
    All,
    /// Only requests whose response is a failure (by default a status of 400
    /// or more; see [`Policy::failed_when`](crate::Policy::failed_when)):
    /// failed logins, not successful ones. express-rate-limit's
    /// `skipSuccessfulRequests`.
    Failures,
    /// Only requests whose response is a success: express-rate-limit's
    /// `skipFailedRequests`.
    Successes,
}

/// The future of [`Refund::refund`]: what a peek of cost 0 answers after the
/// refund, if the limiter says (the `RateLimit` fields of the response then
/// show the key as the refund left it).
pub type RefundFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<Decision>, Error>> + Send + 'a>>;

/// A limiter that can give back units it admitted.
///
/// **Contract.** `refund(key, cost, owed)` returns up to `cost` units to
/// `key`, only what the admission still holds `owed` before it stops
/// weighing on the key (see
/// [`RateLimiter::refund`](ratelab_core::RateLimiter::refund)), never
/// taking it above its capacity, and never fails for a key it does not hold
/// (nothing to return). It is called at most once per admitted request,
/// with that request's key and cost, and the admission's `reset_after` less
/// the time since its check was asked and a margin (see [`REFUND_MARGIN`]).
pub trait Refund: Send + Sync {
    /// Gives back up to `cost` units to `key`, of an admission that still
    /// weighs on it for `owed`.
    fn refund<'a>(&'a self, key: &'a [u8], cost: u32, owed: Duration) -> RefundFuture<'a>;
}

/// Taken off the time an admission still weighs before the layer asks for a
/// refund: the time between the layer measuring it and the limiter reading
/// its clock. A refund asked less than this before the admission stops
/// weighing (its window ends, its debt is repaid) gives back nothing.
pub const REFUND_MARGIN: Duration = Duration::from_millis(1);

impl<R: Refund + ?Sized> Refund for std::sync::Arc<R> {
    fn refund<'a>(&'a self, key: &'a [u8], cost: u32, owed: Duration) -> RefundFuture<'a> {
        (**self).refund(key, cost, owed)
    }
}

/// The in-memory keyed limiter gives units back with
/// [`Keyed::refund`](ratelab_core::Keyed::refund).
impl<A: Algorithm, C: Clock> Refund for Keyed<A, C> {
    fn refund<'a>(&'a self, key: &'a [u8], cost: u32, owed: Duration) -> RefundFuture<'a> {
        Box::pin(std::future::ready(
            Keyed::refund(self, key, cost, owed).map(Some),
        ))
    }
}

/// The single bucket gives units back with
/// [`Direct::refund`](ratelab_core::Direct::refund); the key is ignored.
impl<A: Algorithm, C: Clock> Refund for Direct<A, C> {
    fn refund<'a>(&'a self, _key: &'a [u8], cost: u32, owed: Duration) -> RefundFuture<'a> {
        Box::pin(std::future::ready(
            Direct::refund(self, cost, owed).map(Some),
        ))
    }
}

/// Any limiter made refundable through
/// [`AsyncRateLimiter::refund_async`]: a Redis limiter (which this crate
/// does not depend on), or a limiter of your own that implements it.
///
/// ```
/// use ratelab_core::{Keyed, Quota};
/// use ratelab_gcra::Gcra;
/// use ratelab_http::{Count, Policy, Refundable};
///
/// // A `RedisLimiter` goes in the same way.
/// let limiter = Keyed::new(Gcra::new(Quota::per_minute(5)?));
/// let policy = Policy::refundable("login", Refundable(limiter)).count(Count::Failures);
/// # let _ = policy;
/// # Ok::<(), ratelab_core::QuotaError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Refundable<L>(pub L);

impl<L: AsyncRateLimiter> Limiter for Refundable<L> {
    fn quota(&self) -> Quota {
        self.0.quota()
    }

    fn algorithm_name(&self) -> &'static str {
        self.0.algorithm_name()
    }

    fn backend(&self) -> &'static str {
        self.0.backend()
    }

    fn refunds(&self) -> bool {
        self.0.refunds()
    }
}

impl<L: AsyncRateLimiter> AsyncRateLimiter for Refundable<L> {
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        self.0.check_async(key, cost)
    }

    fn check_now(&self, key: &[u8], cost: u32) -> Option<Result<Decision, Error>> {
        self.0.check_now(key, cost)
    }

    fn peek_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        self.0.peek_async(key, cost)
    }

    fn refund_async<'a>(&'a self, key: &'a [u8], cost: u32, owed: Duration) -> CheckFuture<'a> {
        self.0.refund_async(key, cost, owed)
    }

    fn reset_async<'a>(&'a self, key: &'a [u8]) -> ResetFuture<'a> {
        self.0.reset_async(key)
    }
}

impl<L: AsyncRateLimiter> Refund for Refundable<L> {
    fn refund<'a>(&'a self, key: &'a [u8], cost: u32, owed: Duration) -> RefundFuture<'a> {
        let refund = self.0.refund_async(key, cost, owed);
        Box::pin(async move { refund.await.map(Some) })
    }
}

/// How long the admission of `report` still weighs on its key, erring low:
/// its `reset_after`, less the time since its check was asked and
/// [`REFUND_MARGIN`]. Nothing if that is unknown.
fn still_owed(report: &Report) -> Duration {
    match (report.decision(), report.asked) {
        (Some(decision), Some(asked)) => decision
            .reset_after()
            .saturating_sub(asked.elapsed().saturating_add(REFUND_MARGIN)),
        _ => Duration::ZERO,
    }
}

/// A limiter that refunds ([`Limiter::refunds`]) as its own [`Refund`],
/// through [`AsyncRateLimiter::refund_async`]: what [`Policy::new`] gives a
/// ratelab limiter.
///
/// [`Policy::new`]: crate::Policy::new
pub(crate) struct OwnRefund(pub(crate) std::sync::Arc<dyn AsyncRateLimiter>);

impl Refund for OwnRefund {
    fn refund<'a>(&'a self, key: &'a [u8], cost: u32, owed: Duration) -> RefundFuture<'a> {
        let refund = self.0.refund_async(key, cost, owed);
        Box::pin(async move { refund.await.map(Some) })
    }
}

/// Whether some policy of `verdict` has a call to make after the response
/// ([`settle`] has something to do).
pub(crate) fn pending(verdict: &Verdict) -> bool {
    verdict.reports.iter().any(settles)
}

/// The policy of `report` counts only some responses and admitted the
/// request: its cost is consumed, or given back, once the response says.
fn settles(report: &Report) -> bool {
    let check = &report.check;
    matches!(report.state, State::Decided(decision) if decision.allowed)
        && check.policy.count != Count::All
        && check.cost != 0
}

/// After the response: for each policy that counts only some responses and
/// admitted the request, consume the deferred cost if the response counts,
/// or give back the consumed cost if it does not. A refund's answer replaces
/// the policy's decision, so that the response's fields show the key as the
/// refund left it.
pub(crate) async fn settle(verdict: &mut Verdict, status: StatusCode) {
    let calls = verdict
        .reports
        .iter()
        .enumerate()
        .filter_map(|(i, report)| {
            if !settles(report) {
                return None;
            }
            let check = &report.check;
            let policy = &check.policy;
            let failed = (policy.failed_when)(status);
            let counts = match policy.count {
                Count::Failures => failed,
                _ => !failed,
            };
            Some(async move {
                let mut after = None;
                let (what, result) = if check.deferred {
                    if !counts {
                        return (i, None);
                    }
                    let call = policy.limiter.check_async(&check.key, check.cost);
                    let result = tokio::time::timeout(policy.timeout, call)
                        .await
                        .unwrap_or(Err(Error::Timeout(policy.timeout)))
                        .map(drop);
                    ("count", result)
                } else {
                    if counts {
                        return (i, None);
                    }
                    let Some(refund) = &policy.refund else {
                        return (i, None);
                    };
                    let owed = still_owed(report);
                    let call = refund.refund(&check.key, check.cost, owed);
                    let result = tokio::time::timeout(policy.timeout, call)
                        .await
                        .unwrap_or(Err(Error::Timeout(policy.timeout)))
                        .map(|answer| after = answer);
                    ("refund", result)
                };
                crate::telemetry::after_response(&policy.name, what, result.is_ok());
                if let Err(error) = result {
                    tracing::warn!(
                        policy = %policy.name,
                        error = %error,
                        "rate limiter failed after the response: the request's {what} is lost"
                    );
                }
                (i, after)
            })
        });
    for (i, after) in join_all(calls).await {
        if let Some(decision) = after {
            verdict.reports[i].state = State::Decided(decision);
        }
    }
}
