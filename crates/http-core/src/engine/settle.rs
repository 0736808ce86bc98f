//! After the response: [`Count`](crate::Count) says which responses a
//! policy counts, [`Policy::settle_with`](crate::Policy::settle_with) what a
//! request finally costs; this module makes the calls they need once the
//! response head is known.
//!
//! A policy that decides something from the response decides before the
//! request runs, when the response is not known yet, in one of two ways:
//!
//! - **With a receipt** (every ratelab limiter, in memory or on Redis; any
//!   limiter whose [`Limiter::refunds`](ratelab_core::Limiter::refunds) is
//!   true): the request takes its cost like any other, with a receipt, and
//!   once the response is known the receipt is refunded (a response that
//!   does not count) or settled to what the response says it cost.
//!   Concurrent requests are bounded as usual: at most the quota's worth are
//!   in flight. The limiter gives back only what it can prove the admission
//!   still holds ([`RateLimiter::settle`](ratelab_core::RateLimiter::settle)):
//!   a success slower than its window gets nothing back, so that the next
//!   window's failures all count.
//! - **Without** (a limiter without receipts; [`Count`](crate::Count)
//!   only): the request is only peeked, refused if fewer than its cost
//!   remain, and the cost is consumed after the response, if it counts.
//!   Requests that run at the same time all see the same peek: up to the
//!   number in flight can pass beyond the quota. For login protection this
//!   is what rate-limiter-flexible's examples do; a receipt closes the gap.
//!
//! Either way the response waits for that last call (bounded by the
//! policy's timeout), so that the next request of the client sees it, and
//! the response's `RateLimit` fields show the key as that call left it. A
//! request whose response never comes (the service failed, or the client
//! went away and the future was dropped) keeps what it was charged: it
//! counts.

use std::pin::Pin;
use std::sync::Arc;

use futures::future::join_all;
use http::response::Parts;
use ratelab_core::{Decision, Error};

use crate::engine::call::bounded;
use crate::engine::next;
use crate::engine::report::{Report, State};
use crate::engine::tally::Tally;
use crate::policy::Policy;

/// A limiter call made after the response: which report, what call (for
/// the metrics), its policy, and the answer to put in the report, if any.
type BoxedCall = Pin<
    Box<
        dyn Future<
                Output = (
                    usize,
                    &'static str,
                    Arc<Policy>,
                    Result<Option<Decision>, Error>,
                ),
            > + Send,
    >,
>;

/// Whether some policy of `tally` has a call to make after the response
/// ([`settle`] has something to do).
pub(crate) fn pending(tally: &Tally) -> bool {
    tally.reports.iter().any(waits_for_response)
}

/// The policy of `report` decides something from the response and admitted
/// the request: its cost is counted, given back or settled once the
/// response says.
fn waits_for_response(report: &Report) -> bool {
    let check = &report.check;
    check.policy.after_response()
        && check.cost != 0
        && report.admitted()
        && (check.deferred || report.receipt.is_some())
}

/// After the response whose head is `response`: for each policy that
/// decides something from it and admitted the request, consume a deferred
/// cost if the response counts, refund the receipt if it does not, or
/// settle it to what the response says it cost. An answer replaces the
/// policy's decision, so that the response's fields show the key as the
/// call left it.
pub(crate) async fn settle(tally: &mut Tally, response: &Parts) {
    let calls: Vec<_> = tally
        .reports
        .iter_mut()
        .enumerate()
        .filter(|(_, report)| waits_for_response(report))
        .filter_map(|(i, report)| {
            let policy = report.check.policy.clone();
            let counted = policy.counts(response.status);
            if report.check.deferred {
                if !counted {
                    return None;
                }
                let key = report.check.key.clone();
                let cost = report.check.cost;
                return Some(Box::pin(async move {
                    let call = policy.limiter.check_async(&key, cost);
                    let result = bounded(&policy, call).await;
                    // A count refused for want of room (requests in flight
                    // together saw the same peek) is not charged: it is the
                    // gap a limiter without receipts leaves.
                    (i, "count", policy, result.map(|d| d.allowed.then_some(d)))
                }) as BoxedCall);
            }
            let receipt = report.receipt.take()?;
            let actual = if counted {
                // `None`: the response does not say; the charge stands.
                policy.settle.as_ref().and_then(|settle| settle(response))?
            } else {
                0
            };
            if actual == receipt.cost() {
                return None;
            }
            // More than the burst cannot be charged at once: the burst is
            // the most debt a settlement can leave.
            let actual = actual.min(policy.limiter.quota().burst());
            let what = if actual == 0 { "refund" } else { "settle" };
            Some(Box::pin(async move {
                let call = policy.limiter.settle_async(receipt, actual);
                let result = bounded(&policy, call).await;
                (i, what, policy, result.map(Some))
            }) as BoxedCall)
        })
        .collect();
    if calls.is_empty() {
        return;
    }
    for (i, what, policy, result) in join_all(calls).await {
        crate::telemetry::after_response(&policy.name, what, result.is_ok());
        match result {
            Ok(Some(after)) if !after.degraded => {
                tally.reports[i].set(State::Decided(after));
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(
                policy = %policy.name,
                error = %error,
                "rate limiter failed after the response: the request's {what} is lost"
            ),
        }
    }
    next::complete(&mut tally.reports).await;
}
