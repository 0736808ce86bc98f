//! [`RateLimitInfo`]: what the [`Limits`](crate::Limits) decided for one
//! request, for handlers (in the request's extensions, like
//! express-rate-limit's `req.rateLimit`) and for refusal and
//! unavailability responses.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use ratelab_core::{Decision, ceil_secs};

use crate::client::Client;
use crate::engine::{Outcome, State, Tally};
use crate::matching::Compiled;
use crate::policy::FailureMode;
use crate::response;

/// What happened to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitOutcome {
    /// Every policy admitted it (or failed open): it went to the service.
    Allowed,
    /// Some policy refused it: `429`.
    Refused,
    /// A fail-closed policy could not decide: `503`.
    Unavailable,
}

/// What the [`Limits`](crate::Limits) decided for one request.
///
/// [`Limits::conclude`](crate::Limits::conclude) inserts it into the
/// extensions of every request it passes (unless
/// [`request_extensions`](crate::LimitsBuilder::request_extensions) is
/// off), so that a handler can read it (axum: `Extension<RateLimitInfo>`),
/// and a refused request's [`Refused::info`](crate::Refused::info) is what
/// its response is built from (ratelab-http's `refusal_response` and
/// `unavailable_response` closures get it).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RateLimitInfo {
    /// What happened.
    pub outcome: LimitOutcome,
    /// The client, as identified.
    pub client: Client,
    /// Each policy that applied, in the layer's order.
    pub policies: Vec<PolicyStatus>,
    /// For a refusal, the wait until the same request would pass (`None`:
    /// no wait helps, its cost is above some policy's burst); for `503`,
    /// the wait before trying again (at least 1 s: the limiter's hint when
    /// it gave one). `None` when allowed.
    pub retry_after: Option<Duration>,
}

/// One policy's part of a [`RateLimitInfo`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PolicyStatus {
    /// The policy's name (shared with the policy: no copy per request).
    pub name: Arc<str>,
    /// `q`: the most units that pass at once.
    pub limit: u64,
    /// `w`: the window of `limit`, whole seconds.
    pub window_secs: u64,
    /// What the request costs under this policy.
    pub cost: u32,
    /// The limiter's answer, when it gave one. For a policy that counts
    /// after the response without receipts, the answer to a peek: `remaining`
    /// does not include this request yet.
    pub decision: Option<Decision>,
    /// `t`: the wait until more quota is available than `remaining`.
    pub next_after: Option<Duration>,
    /// This policy refused the request (or can never admit its cost).
    pub violated: bool,
    /// The request's cost is above this policy's burst: no wait helps.
    pub never: bool,
    /// The limiter failed, and the policy did this about it.
    pub failure: Option<FailureMode>,
}

impl PolicyStatus {
    /// Units still available now, if the limiter answered.
    pub fn remaining(&self) -> Option<u64> {
        self.decision.map(|d| d.remaining)
    }
}

impl RateLimitInfo {
    pub(crate) fn new(policies: &[Compiled], tally: &Tally, client: Client) -> Self {
        let statuses = tally
            .reports
            .iter()
            .map(|report| {
                let compiled = &policies[report.check.index];
                let decision = report.decision().copied();
                PolicyStatus {
                    name: compiled.name.clone(),
                    limit: compiled.item.q,
                    window_secs: compiled.item.w,
                    cost: report.check.cost,
                    decision,
                    next_after: report.next_after(),
                    violated: report.violated(),
                    never: matches!(report.state(), State::Never { .. }),
                    failure: match report.state() {
                        State::FailedOpen => Some(FailureMode::Open),
                        State::FailedClosed(_) => Some(FailureMode::Closed),
                        _ => None,
                    },
                }
            })
            .collect();
        let (outcome, retry_after) = match tally.outcome {
            Outcome::Pass { .. } => (LimitOutcome::Allowed, None),
            Outcome::Refuse => (LimitOutcome::Refused, tally.retry_after()),
            // Every 503 says when to come back: the limiter's hint, at least
            // a second (a client told nothing retries at once, or never).
            Outcome::Unavailable => (
                LimitOutcome::Unavailable,
                Some(
                    tally
                        .unavailable_retry_after()
                        .unwrap_or_default()
                        .max(Duration::from_secs(1)),
                ),
            ),
        };
        RateLimitInfo {
            outcome,
            client,
            policies: statuses,
            retry_after,
        }
    }

    /// The status of the policy named `name`, if it applied.
    pub fn policy(&self, name: &str) -> Option<&PolicyStatus> {
        self.policies.iter().find(|p| &*p.name == name)
    }

    /// The least `remaining` among the policies that answered: how many more
    /// unit requests would pass now.
    pub fn remaining(&self) -> Option<u64> {
        self.policies
            .iter()
            .filter_map(PolicyStatus::remaining)
            .min()
    }

    /// `retry_after` in whole seconds, rounded up, at least 1: the
    /// `Retry-After` value.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(|wait| ceil_secs(wait).max(1))
    }

    /// The default response for this outcome: for a refusal, `429` with an
    /// RFC 9457 problem body (`application/problem+json`) naming the
    /// violated policies; for `503`, a problem body naming the policies that
    /// could not decide; both with `Retry-After` when a wait helps. (The
    /// `RateLimit` fields are added to whatever response is sent, by
    /// [`Refused::finish`](crate::Refused::finish).) For an allowed request,
    /// the `429` it would have been. The body is the JSON bytes, for any
    /// framework's body type to wrap.
    pub fn problem_response(&self) -> Response<Bytes> {
        match self.outcome {
            LimitOutcome::Unavailable => {
                let names: Vec<&str> = self
                    .policies
                    .iter()
                    .filter(|p| p.failure == Some(FailureMode::Closed))
                    .map(|p| &*p.name)
                    .collect();
                response::unavailable(&names, self.retry_after_secs())
            }
            _ => {
                let violated = self.policies.iter().filter(|p| p.violated);
                let names: Vec<&str> = violated.clone().map(|p| &*p.name).collect();
                let reasons: Vec<String> = violated
                    .map(|p| {
                        let name = &p.name;
                        if p.never {
                            format!(
                                "a request costing {} can never pass policy \"{name}\", which admits at most {} at once",
                                p.cost, p.limit
                            )
                        } else {
                            format!("policy \"{name}\" allows {} per {} s", p.limit, p.window_secs)
                        }
                    })
                    .collect();
                let retry_after = self.retry_after_secs();
                let detail = match retry_after {
                    Some(secs) => format!("{}; retry in {secs} s.", reasons.join("; ")),
                    None => format!("{}.", reasons.join("; ")),
                };
                response::too_many_requests(&names, &detail, retry_after)
            }
        }
    }
}
