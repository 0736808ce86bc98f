//! [`RateLimitInfo`]: what the [`Limits`](crate::Limits) decided for one
//! request, for handlers (in the request's extensions, like
//! express-rate-limit's `req.rateLimit`) and for refusal and
//! unavailability responses.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use ratelab_core::{Decision, ceil_secs};

use crate::client::Client;
use crate::engine::{Outcome, State, Tally};
use crate::matching::Compiled;
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
    /// What the policy did with the request.
    pub outcome: PolicyOutcome,
    /// `t`: the wait until more quota is available than `remaining`, when
    /// the limiter answered.
    pub next_after: Option<Duration>,
}

impl PolicyStatus {
    /// Units still available now, if the limiter answered.
    pub fn remaining(&self) -> Option<u64> {
        self.outcome.decision().map(|d| d.remaining)
    }
}

/// What one policy did with a request: one of these, never two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyOutcome {
    /// Not asked: the request was decided before this policy's turn.
    NotAsked,
    /// The limiter's answer with the request's cost: admitted, or refused
    /// (`allowed` false: the policy is violated). After the response, what
    /// a settlement or a refund answered: the key as it left it.
    Decided(Decision),
    /// The limiter's answer to a peek (a policy that counts after the
    /// response, without receipts): nothing consumed yet, and `remaining`
    /// does not count this request.
    Peeked(Decision),
    /// Admitted, then given back: another policy refused the request, or
    /// failed closed. The decision is the refund's answer.
    GivenBack(Decision),
    /// The request's cost is above this policy's burst: it can never pass,
    /// and no wait helps. The policy is violated.
    Never,
    /// The limiter failed, and the policy let the request pass unchecked.
    FailedOpen,
    /// The limiter failed, and the policy refused the request (`503`).
    FailedClosed,
}

impl PolicyOutcome {
    /// The limiter's answer, when it gave one.
    pub fn decision(&self) -> Option<&Decision> {
        match self {
            PolicyOutcome::Decided(d) | PolicyOutcome::Peeked(d) | PolicyOutcome::GivenBack(d) => {
                Some(d)
            }
            _ => None,
        }
    }

    /// The policy refused the request: its limiter did, or the cost can
    /// never fit it.
    pub fn violated(&self) -> bool {
        matches!(self, PolicyOutcome::Decided(d) if !d.allowed) || *self == PolicyOutcome::Never
    }

    /// The policy's limiter failed and the policy refused the request.
    pub fn failed_closed(&self) -> bool {
        *self == PolicyOutcome::FailedClosed
    }
}

impl RateLimitInfo {
    pub(crate) fn new(policies: &[Compiled], tally: &Tally, client: Client) -> Self {
        let statuses = tally
            .reports
            .iter()
            .map(|report| {
                let compiled = &policies[report.check.index];
                PolicyStatus {
                    name: compiled.name.clone(),
                    limit: compiled.item.q,
                    window_secs: compiled.item.w,
                    cost: report.check.cost,
                    outcome: match report.state() {
                        State::Pending => PolicyOutcome::NotAsked,
                        State::Decided(d) => PolicyOutcome::Decided(d),
                        State::Peeked(d) => PolicyOutcome::Peeked(d),
                        State::GivenBack(d) => PolicyOutcome::GivenBack(d),
                        State::Never { .. } => PolicyOutcome::Never,
                        State::FailedOpen => PolicyOutcome::FailedOpen,
                        State::FailedClosed(_) => PolicyOutcome::FailedClosed,
                    },
                    next_after: report.next_after(),
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

    /// The info of a request admitted by its one policy, `compiled`, with
    /// `decision` at `cost`, `t` being `next_after`: what
    /// [`RateLimitInfo::new`] says of a tally of that one report.
    pub(crate) fn admitted_one(
        compiled: &Compiled,
        cost: u32,
        decision: Decision,
        next_after: Duration,
        client: Client,
    ) -> Self {
        RateLimitInfo {
            outcome: LimitOutcome::Allowed,
            client,
            policies: vec![PolicyStatus {
                name: compiled.name.clone(),
                limit: compiled.item.q,
                window_secs: compiled.item.w,
                cost,
                outcome: PolicyOutcome::Decided(decision),
                next_after: Some(next_after),
            }],
            retry_after: None,
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
                let names = self
                    .policies
                    .iter()
                    .filter(|p| p.outcome.failed_closed())
                    .map(|p| &*p.name);
                response::unavailable(names, self.retry_after_secs())
            }
            _ => {
                let violated = self.policies.iter().filter(|p| p.outcome.violated());
                let retry_after = self.retry_after_secs();
                let detail = Reasons {
                    violated: violated.clone(),
                    retry_after,
                };
                response::too_many_requests(violated.map(|p| &*p.name), detail, retry_after)
            }
        }
    }
}

/// A refusal's `detail`: why each violated policy refused, `; `-separated,
/// then when to retry.
struct Reasons<I> {
    violated: I,
    retry_after: Option<u64>,
}

impl<'a, I: Iterator<Item = &'a PolicyStatus> + Clone> fmt::Display for Reasons<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Pieces written one by one, the integers by `itoa`: what `write!`
        // would write, for a third of the work (refusals are the traffic an
        // attacker makes).
        let mut number = itoa::Buffer::new();
        for (i, p) in self.violated.clone().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            if p.outcome == PolicyOutcome::Never {
                f.write_str("a request costing ")?;
                f.write_str(number.format(p.cost))?;
                f.write_str(" can never pass policy \"")?;
                f.write_str(&p.name)?;
                f.write_str("\", which admits at most ")?;
                f.write_str(number.format(p.limit))?;
                f.write_str(" at once")?;
            } else {
                f.write_str("policy \"")?;
                f.write_str(&p.name)?;
                f.write_str("\" allows ")?;
                f.write_str(number.format(p.limit))?;
                f.write_str(" per ")?;
                f.write_str(number.format(p.window_secs))?;
                f.write_str(" s")?;
            }
        }
        if let Some(secs) = self.retry_after {
            f.write_str("; retry in ")?;
            f.write_str(number.format(secs))?;
            f.write_str(" s")?;
        }
        f.write_str(".")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::client::{ClientKind, Identity};
    use crate::response::QUOTA_EXCEEDED;

    /// The problem body as it was built before it was streamed: every
    /// string made first, the policies a flattened map. The streamed body
    /// must equal it, byte for byte.
    #[derive(serde::Serialize)]
    struct Problem<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        title: &'a str,
        status: u16,
        detail: &'a str,
        #[serde(flatten)]
        policies: BTreeMap<&'a str, &'a [&'a str]>,
    }

    /// The body `info` answered with, from `format!`, `join` and that struct.
    fn reference(info: &RateLimitInfo) -> Vec<u8> {
        let retry_after = info.retry_after_secs();
        let (status, kind, title, detail, list, names) = match info.outcome {
            LimitOutcome::Unavailable => (
                503,
                "about:blank",
                "Service Unavailable",
                "The rate limiter could not decide whether this request is within its quota, \
                 and refuses it rather than let it pass unchecked. Try again later."
                    .to_owned(),
                "unavailable-policies",
                info.policies
                    .iter()
                    .filter(|p| p.outcome.failed_closed())
                    .map(|p| &*p.name)
                    .collect::<Vec<_>>(),
            ),
            _ => {
                let violated = info.policies.iter().filter(|p| p.outcome.violated());
                let reasons: Vec<String> = violated
                    .clone()
                    .map(|p| {
                        let name = &p.name;
                        if p.outcome == PolicyOutcome::Never {
                            format!(
                                "a request costing {} can never pass policy \"{name}\", which admits at most {} at once",
                                p.cost, p.limit
                            )
                        } else {
                            format!("policy \"{name}\" allows {} per {} s", p.limit, p.window_secs)
                        }
                    })
                    .collect();
                let detail = match retry_after {
                    Some(secs) => format!("{}; retry in {secs} s.", reasons.join("; ")),
                    None => format!("{}.", reasons.join("; ")),
                };
                (
                    429,
                    QUOTA_EXCEEDED,
                    "Request cannot be satisfied as assigned quota has been exceeded",
                    detail,
                    "violated-policies",
                    violated.map(|p| &*p.name).collect(),
                )
            }
        };
        serde_json::to_vec(&Problem {
            kind,
            title,
            status,
            detail: &detail,
            policies: [(list, names.as_slice())].into_iter().collect(),
        })
        .unwrap()
    }

    /// Names with every kind of character JSON escapes, and some it does not.
    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z][a-z0-9._-]{0,12}",
            any::<String>(),
            prop::collection::vec(
                prop::sample::select(vec![
                    '"', '\\', '\n', '\r', '\t', '\u{8}', '\u{c}', '\u{0}', '\u{1f}', '\u{7f}',
                    '/', 'a', 'é', '\u{2028}', '😀',
                ]),
                0..8,
            )
            .prop_map(|chars| chars.into_iter().collect()),
        ]
    }

    fn status() -> impl Strategy<Value = PolicyStatus> {
        (
            name(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<bool>(),
            any::<bool>(),
            prop::option::of(any::<bool>()),
        )
            .prop_map(
                |(name, limit, window_secs, cost, violated, never, failure)| PolicyStatus {
                    name: Arc::from(name),
                    limit,
                    window_secs,
                    cost,
                    outcome: match (failure, never, violated) {
                        (Some(true), _, _) => PolicyOutcome::FailedOpen,
                        (Some(false), _, _) => PolicyOutcome::FailedClosed,
                        (None, true, _) => PolicyOutcome::Never,
                        (None, false, true) => PolicyOutcome::Decided(Decision::refused(limit)),
                        (None, false, false) => PolicyOutcome::Decided(Decision::admitted(limit)),
                    },
                    next_after: None,
                },
            )
    }

    proptest! {
        #[test]
        fn the_streamed_problem_body_is_the_one_built_from_strings(
            outcome in 0..3usize,
            policies in prop::collection::vec(status(), 0..4),
            retry_after in prop::option::of(0..100_000_000u64),
        ) {
            let info = RateLimitInfo {
                outcome: [LimitOutcome::Allowed, LimitOutcome::Refused, LimitOutcome::Unavailable][outcome],
                client: Client::identified(ClientKind::User, Identity::new("someone"), None),
                policies,
                retry_after: retry_after.map(Duration::from_millis),
            };
            let response = info.problem_response();
            let expected = reference(&info);
            prop_assert_eq!(response.body().as_ref(), expected.as_slice());
        }
    }
}
