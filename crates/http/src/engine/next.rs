//! `t` (draft-ietf-httpapi-ratelimit-headers): the wait until more quota is
//! available than `r` says, never shorter than the real one; zero when the
//! policy is full (nothing more will come).
//!
//! A [`Decision`] says how much remains, the wait before a refused request
//! passes, and the wait until the key is full again (`reset_after`). From
//! those alone `t` is exact where units come back on a known schedule: one
//! every interval for the steady refills (GCRA, token bucket, leaky meter
//! and queue: the next unit is back a whole number of intervals before the
//! key is full), all at once at the fixed window's end. The sliding log and
//! counter give units back one by one before the key is full, on a schedule
//! only their state knows (a 4 per 20 s counter is full 40 s after a burst,
//! yet its first unit is back after 25 s): their limiter is asked, with a
//! peek of `r + 1` units, whose `retry_after` is by definition when more than
//! `r` is available. Any other algorithm gets `reset_after`: late, never
//! early.

use std::time::Duration;

use futures::FutureExt;
use futures::future::join_all;
use ratelab_core::Decision;

use super::Report;
use crate::matching::Refill;

/// `t` from the decision alone (see the module docs): exact for the steady
/// refills, the fixed window, and a refused unit request (its
/// `retry_after`); the wait until full otherwise.
pub(crate) fn derived(decision: &Decision, refill: Refill, cost: u32) -> Duration {
    if decision.remaining >= decision.limit {
        return Duration::ZERO;
    }
    if !decision.allowed && cost == 1 && !decision.retry_after().is_zero() {
        return decision.retry_after();
    }
    wait_for(decision, refill, decision.remaining + 1)
}

/// The wait until `units` are available, from a decision that says how many
/// are now: exact for a steady refill (the n-th unit is back
/// `(limit - n) × interval` before the key is full) and for the fixed
/// window, else the wait until the key is full. Never shorter than the real
/// wait.
pub(crate) fn wait_for(decision: &Decision, refill: Refill, units: u64) -> Duration {
    if decision.remaining >= units {
        return Duration::ZERO;
    }
    match refill {
        Refill::Steady { interval } => {
            let before_full = decision
                .limit
                .saturating_sub(units)
                .saturating_mul(interval);
            decision
                .reset_after()
                .saturating_sub(Duration::from_micros(before_full))
        }
        Refill::Window | Refill::Sliding | Refill::Other => decision.reset_after(),
    }
}

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
                (i, super::call::bounded(policy, peek).await)
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
