//! From a [`Verdict`] to what the client is told: which policies the
//! `RateLimit-Policy` and `RateLimit` fields list and with what values, the
//! legacy fields, and the `429`/`503` answers. (`response` serializes them.)

use bytes::Bytes;
use http::{HeaderValue, Response};
use http_body_util::Full;
use std::time::Duration;

use ratelab_core::{Decision, ceil_secs};

use crate::engine::{State, Verdict};
use crate::identity::Client;
use crate::matching::{Compiled, Refill};
use crate::response::{self, LimitItem};

/// `RateLimit-Policy` (every applicable policy) and `RateLimit` (every one
/// that decided).
pub(crate) fn fields(
    policies: &[Compiled],
    verdict: &Verdict<'_>,
) -> (Option<HeaderValue>, Option<HeaderValue>) {
    let policy = response::policy_field(
        verdict
            .reports
            .iter()
            .map(|r| &policies[r.check.index].item),
    );
    let limit = response::limit_field(verdict.reports.iter().filter_map(|r| {
        let decision = r.decision()?;
        let compiled = &policies[r.check.index];
        Some(LimitItem {
            name: &compiled.item.name,
            r: decision.remaining,
            t: ceil_secs(next_after(decision, compiled.refill, r.check.cost)),
        })
    }));
    (policy, limit)
}

/// Legacy `(limit, remaining, reset)`, from the verdict's binding decision.
pub(crate) fn legacy(policies: &[Compiled], verdict: &Verdict<'_>) -> Option<(u64, u64, u64)> {
    let (report, decision) = verdict.binding()?;
    Some((
        policies[report.check.index].item.q,
        decision.remaining,
        // Until the key is full again on every response, a refusal included
        // (the wait for a retry is `Retry-After`): one meaning, as the
        // legacy fields had at GitHub and Twitter.
        ceil_secs(decision.reset_after),
    ))
}

/// The `429` response for a refused verdict.
pub(crate) fn refusal(
    policies: &[Compiled],
    verdict: &Verdict<'_>,
    client: &Client,
) -> Response<Full<Bytes>> {
    let names: Vec<&str> = verdict
        .violated()
        .map(|r| r.check.policy.name.as_str())
        .collect();
    // Never earlier than any violated policy's `t`, and at least 1 s.
    let retry_after = verdict.retry_after().map(|wait| ceil_secs(wait).max(1));
    let reasons: Vec<String> = verdict
        .violated()
        .map(|r| {
            let item = &policies[r.check.index].item;
            let name = item.name.as_str();
            match r.state {
                State::Never { capacity } => format!(
                    "a request costing {} can never pass policy \"{name}\", which admits at most {capacity} at once",
                    r.check.cost
                ),
                _ => format!("policy \"{name}\" allows {} per {} s", item.q, item.w),
            }
        })
        .collect();
    let detail = match retry_after {
        Some(secs) => format!("{}; retry in {secs} s.", reasons.join("; ")),
        None => format!("{}.", reasons.join("; ")),
    };
    tracing::debug!(client = %client, policies = ?names, "rate limited");
    response::too_many_requests(&names, &detail, retry_after)
}

/// The `503` response for a verdict a fail-closed policy could not decide.
pub(crate) fn unavailable(verdict: &Verdict<'_>) -> Response<Full<Bytes>> {
    let names: Vec<&str> = verdict
        .failed_closed()
        .map(|r| r.check.policy.name.as_str())
        .collect();
    let retry_after = verdict
        .unavailable_retry_after()
        .map(|wait| ceil_secs(wait).max(1));
    response::unavailable(&names, retry_after)
}

/// `t` (draft-ietf-httpapi-ratelimit-headers-11, section 3.2): the wait until
/// more quota is available than `remaining` says, never shorter than the real
/// one; zero when the policy is full (nothing more will come).
///
/// Exact when the limiter said it (a unit request refused: its
/// `retry_after`) or the refill is steady (the next unit comes back a whole
/// number of intervals before the key is full); otherwise the wait until the
/// key is full, when more is surely available.
pub(crate) fn next_after(decision: &Decision, refill: Refill, cost: u32) -> Duration {
    if decision.remaining >= decision.limit {
        return Duration::ZERO;
    }
    if !decision.allowed && cost == 1 {
        return decision.retry_after;
    }
    match refill {
        Refill::Steady { interval } => {
            let missing = decision.limit - decision.remaining - 1;
            let before_full = Duration::from_micros(missing.saturating_mul(interval));
            decision.reset_after.saturating_sub(before_full)
        }
        Refill::Other => decision.reset_after,
    }
}
