//! `t` where the decision alone cannot say it (see [`refill`](super::refill)):
//! the sliding log and counter are asked, with a peek of `r + 1` units,
//! whose `retry_after` is by definition when more than `r` is available.

use std::time::Duration;

use futures::FutureExt;
use futures::future::join_all;
use ratelab_core::{AsyncRateLimiter, Decision};

use crate::engine::call::bounded;
use crate::engine::refill::{self, Refill};
use crate::engine::report::Report;

/// The units to peek for, when the decision of `report` does not say `t`
/// and its limiter can: `r + 1`.
fn wanted(report: &Report) -> Option<u32> {
    if report.next.is_some() {
        return None;
    }
    units_to_peek(report.check.refill, report.decision()?, report.check.cost)
}

/// The units to peek for `t` after `decision` answered a check of `cost`
/// on a limiter that refills as `refill` says: `r + 1` when only the
/// limiter can say when they are back.
fn units_to_peek(refill: Refill, decision: &Decision, cost: u32) -> Option<u32> {
    if refill != Refill::Sliding
        || decision.remaining >= decision.limit
        || (!decision.allowed && cost == 1 && !decision.retry_after().is_zero())
    {
        // Not sliding (the decision says it), full, or refused for one
        // unit: the decision says it.
        return None;
    }
    u32::try_from(decision.remaining + 1).ok()
}

/// `t` from a peek's answer: when `r + 1` units pass.
fn from_peek(peek: Decision) -> Duration {
    if peek.allowed {
        // Units came back since the decision (another request's refund).
        Duration::ZERO
    } else {
        peek.retry_after()
    }
}

/// Asks the limiters whose decisions do not say `t` (concurrently, each
/// bounded by its policy's timeout). A peek that fails leaves `t` derived
/// from the decision: late, never early.
pub(crate) async fn complete(reports: &mut [Report]) {
    let peeks: Vec<_> = reports
        .iter()
        .enumerate()
        .filter_map(|(i, report)| {
            let units = wanted(report)?;
            let check = &report.check;
            let policy = &check.policy;
            Some(async move {
                let peek = policy.limiter.peek_async(&check.key, units);
                (i, bounded(policy, peek).await)
            })
        })
        .collect();
    if peeks.is_empty() {
        return;
    }
    let answers = join_all(peeks).await;
    for (i, answer) in answers {
        if let Ok(peek) = answer {
            reports[i].next = Some(from_peek(peek));
        }
    }
}

/// [`complete`] for limiters that answer at once (in memory); a peek that
/// would wait is not made.
pub(crate) fn complete_now(reports: &mut [Report]) {
    for report in reports.iter_mut() {
        let Some(units) = wanted(report) else {
            continue;
        };
        report.next = peek_now(&*report.check.policy.limiter, &report.check.key, units);
    }
}

/// `t` for a check of `cost` under `key` that `decision` answered, with a
/// limiter that answers at once: from the decision, or where only the
/// limiter can say it, from a peek (what [`complete_now`] does for a
/// report).
pub(crate) fn now(
    limiter: &dyn AsyncRateLimiter,
    key: &[u8],
    refill: Refill,
    decision: &Decision,
    cost: u32,
) -> Duration {
    units_to_peek(refill, decision, cost)
        .and_then(|units| peek_now(limiter, key, units))
        .unwrap_or_else(|| refill::derived(decision, refill, cost))
}

/// `t` from a peek for `units` that answers at once; `None` if it would
/// wait or fails.
fn peek_now(limiter: &dyn AsyncRateLimiter, key: &[u8], units: u32) -> Option<Duration> {
    match limiter.peek_async(key, units).now_or_never() {
        Some(Ok(peek)) => Some(from_peek(peek)),
        _ => None,
    }
}
