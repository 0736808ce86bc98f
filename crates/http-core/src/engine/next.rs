//! `t` where the decision alone cannot say it (see [`refill`](super::refill)):
//! the sliding log and counter are asked, with a peek of `r + 1` units,
//! whose `retry_after` is by definition when more than `r` is available.

use std::time::Duration;

use futures::FutureExt;
use futures::future::join_all;
use ratelab_core::Decision;

use crate::engine::call::bounded;
use crate::engine::refill::Refill;
use crate::engine::report::Report;

/// The units to peek for, when the decision of `report` does not say `t`
/// and its limiter can: `r + 1`.
fn wanted(report: &Report) -> Option<u32> {
    if report.check.refill != Refill::Sliding || report.next.is_some() {
        return None;
    }
    let decision = report.decision()?;
    if decision.remaining >= decision.limit
        || (!decision.allowed && report.check.cost == 1 && !decision.retry_after().is_zero())
    {
        // Full, or refused for one unit: the decision says it.
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
        let check = &report.check;
        let answer = check
            .policy
            .limiter
            .peek_async(&check.key, units)
            .now_or_never();
        if let Some(Ok(peek)) = answer {
            report.next = Some(from_peek(peek));
        }
    }
}
