//! One request through the [`Limits`], step by step, as any server drives
//! it: [`Limits::start`] reads the request head (who the client is, the
//! login attempt it is, the policies that apply), [`Pending`] asks the
//! limiters, [`Limits::conclude`] turns the [`Verdict`] into a request that
//! passes ([`Admitted`]) or one to answer at once ([`Refused`]), and once
//! the response head is known, [`Admitted::settle`] (or
//! [`Refused::finish`]) counts what the response says and writes the
//! fields.
//!
//! Each step owns what the next needs, borrowing nothing but the
//! [`Limits`]: a decision still pending (a Redis call) can be awaited in a
//! future of its own, and a request decided at once (every in-memory
//! limiter) costs no future, box or allocation of the core's.

use std::net::IpAddr;
use std::time::Duration;

use http::header::{RETRY_AFTER, SET_COOKIE};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, response};

use crate::client::Client;
use crate::engine::{self, Engine, Outcome, Tally};
use crate::headers::Fields;
use crate::info::{LimitOutcome, RateLimitInfo};
use crate::limits::Limits;
use crate::login::LoginAttempt;
use crate::matching;
use crate::telemetry::{self, RequestOutcome};

/// A login attempt, and the position of the guard that read it.
type Attempt = (usize, LoginAttempt);

impl Limits {
    /// The first step: the request whose head is `parts`, identified, with
    /// the policies that apply to it, to decide ([`Pending::decide`]); `None`
    /// for a request to [skip](crate::LimitsBuilder::skip), to pass on
    /// untouched, without fields.
    ///
    /// `peer` gives the connection's peer address when neither the
    /// [`Identify::peer_addr`](crate::Identify::peer_addr) resolver nor a
    /// [`PeerAddr`](crate::PeerAddr) extension does: the server's own
    /// record of the connection (`|_| None` for none). On a login guard's
    /// route, the [`LoginAttempt`] goes into the request's extensions, where
    /// the guard's policies read it, replacing any an outer layer put there.
    pub fn start<P>(&self, parts: &mut Parts, peer: P) -> Option<Pending>
    where
        P: FnOnce(&Parts) -> Option<IpAddr>,
    {
        if self.skip.as_ref().is_some_and(|skip| skip(parts)) {
            telemetry::request(RequestOutcome::Skipped);
            return None;
        }
        let client = self.identify.client_with(parts, peer);
        let attempt = self.login_attempt(parts, &client);
        let engine = Engine::new(matching::checks(&self.policies, parts, &client));
        Some(Pending {
            engine,
            client,
            attempt,
        })
    }

    /// The step after the decision: the alerts, the metrics and the
    /// counters; then, for a request that passes, [`Conclusion::Pass`], and
    /// the [`Client`] and its [`RateLimitInfo`] in the request's extensions
    /// (unless [`request_extensions`](crate::LimitsBuilder::request_extensions)
    /// is off); for one refused (`429`) or that could not be decided
    /// (`503`), [`Conclusion::Refuse`], to answer without calling the
    /// service.
    pub fn conclude(&self, verdict: Verdict, parts: &mut Parts) -> Conclusion {
        let Verdict {
            tally,
            client,
            attempt,
        } = verdict;
        self.alerts.raise(&self.policies, &tally, &client);
        tally.record();
        let stats = &self.alerts.stats;
        match tally.outcome {
            Outcome::Pass { .. } => {
                stats.count_allowed();
                if self.request_extensions {
                    let info = RateLimitInfo::new(&self.policies, &tally, client.clone());
                    parts.extensions.insert(client);
                    parts.extensions.insert(info);
                }
                return Conclusion::Pass(Admitted { tally, attempt });
            }
            Outcome::Refuse => {
                stats.count_refused();
                tracing::debug!(client = %client, "rate limited");
            }
            Outcome::Unavailable => stats.count_unavailable(),
        }
        let info = RateLimitInfo::new(&self.policies, &tally, client);
        Conclusion::Refuse(Refused { tally, info })
    }

    /// The login attempt the request is, if it is on a login guard's route:
    /// put into the request's extensions, where the guard's policies read
    /// it. One an outer layer put there is replaced: only the guard says
    /// what an attempt is.
    fn login_attempt(&self, parts: &mut Parts, client: &Client) -> Option<Attempt> {
        if self.guards.is_empty() {
            return None;
        }
        parts.extensions.remove::<LoginAttempt>();
        let (guard, attempt) = self
            .guards
            .iter()
            .enumerate()
            .find_map(|(i, guard)| Some((i, guard.attempt(parts, client)?)))?;
        parts.extensions.insert(attempt.clone());
        Some((guard, attempt))
    }
}

/// A request to decide: its client and the policies that apply to it
/// (from [`Limits::start`]).
#[derive(Debug)]
#[must_use]
pub struct Pending {
    engine: Engine,
    client: Client,
    attempt: Option<Attempt>,
}

impl Pending {
    /// The client, as identified.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The verdict at once, when it needs no waiting: one policy, whose
    /// limiter answers without a future (every in-memory one), and nothing
    /// to give back later. No future, box, timer or allocation then. The
    /// request back, untouched, otherwise: [`Pending::decide`] it.
    // Both are the request's state, in place: boxing the request to hand
    // it back would allocate on the path that is there to allocate nothing.
    #[allow(clippy::result_large_err)]
    #[inline]
    pub fn decide_now(mut self) -> Result<Verdict, Pending> {
        match self.engine.decide_now() {
            Some(tally) => Ok(Verdict {
                tally,
                client: self.client,
                attempt: self.attempt,
            }),
            None => Err(self),
        }
    }

    /// Asks the limiters (each policy's calls bounded together by its
    /// [timeout](crate::Policy::timeout), on tokio's timer) and says what
    /// happens to the request. The future borrows nothing: it may be
    /// awaited anywhere. In-memory limiters have answered at its first
    /// poll.
    pub async fn decide(self) -> Verdict {
        let Pending {
            engine,
            client,
            attempt,
        } = self;
        Verdict {
            tally: engine.decide().await,
            client,
            attempt,
        }
    }
}

/// What the limiters said about one request: for [`Limits::conclude`].
#[derive(Debug)]
#[must_use]
pub struct Verdict {
    tally: Tally,
    client: Client,
    attempt: Option<Attempt>,
}

impl Verdict {
    /// What happens to the request.
    pub fn outcome(&self) -> LimitOutcome {
        match self.tally.outcome {
            Outcome::Pass { .. } => LimitOutcome::Allowed,
            Outcome::Refuse => LimitOutcome::Refused,
            Outcome::Unavailable => LimitOutcome::Unavailable,
        }
    }

    /// The client, as identified.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// A verdict, concluded ([`Limits::conclude`]).
#[derive(Debug)]
#[must_use]
pub enum Conclusion {
    /// The request goes to the service.
    Pass(Admitted),
    /// The request is answered at once, `429` or `503`.
    Refuse(Refused),
}

/// A request that passes: call the service (after [`Admitted::delay`]),
/// then settle with the response head.
#[derive(Debug)]
#[must_use]
pub struct Admitted {
    tally: Tally,
    attempt: Option<Attempt>,
}

impl Admitted {
    /// How long to hold the request before the service sees it: a queueing
    /// policy's slot (the leaky bucket queue: that is the shaping it is
    /// for); zero otherwise.
    #[inline]
    pub fn delay(&self) -> Duration {
        match self.tally.outcome {
            Outcome::Pass { delay } => delay,
            _ => Duration::ZERO,
        }
    }

    /// Whether the response head decides something: a policy counts only
    /// some responses or settles the cost from the response, or the request
    /// is a login attempt (a success gets a device cookie). Then
    /// [`Admitted::settle`] must see it; otherwise [`Admitted::fields`] are
    /// final now.
    #[inline]
    pub fn waits_for_response(&self) -> bool {
        self.attempt.is_some() || engine::pending(&self.tally)
    }

    /// The fields as decided, for a request whose response decides nothing
    /// ([`Admitted::waits_for_response`] is false): computed now, written
    /// once the response comes. (Of one whose response does decide
    /// something, the fields before it: the request keeps what it was
    /// charged, as one whose response never comes.)
    #[inline]
    pub fn fields(self, limits: &Limits) -> Fields {
        Fields::new(&limits.fields, &limits.policies, &self.tally)
    }

    /// The last step, once the response head is known: counts, refunds or
    /// settles what each policy decides from it (waiting for those calls,
    /// each bounded by its policy's timeout, so that the client's next
    /// request sees them), sets a successful login's device cookie, and
    /// writes the fields, which show every key as those calls left it.
    pub async fn settle(mut self, limits: &Limits, response: &mut response::Parts) {
        engine::settle(&mut self.tally, response).await;
        if let Some((guard, attempt)) = &self.attempt
            && let Some(cookie) = limits.guards[*guard].cookie(attempt, response.status)
        {
            response.headers.append(SET_COOKIE, cookie);
        }
        Fields::new(&limits.fields, &limits.policies, &self.tally).write(&mut response.headers);
    }
}

/// A request answered without the service: refused (`429`), or not decided
/// (`503`) by a policy that fails closed.
#[derive(Debug)]
#[must_use]
pub struct Refused {
    tally: Tally,
    info: RateLimitInfo,
}

impl Refused {
    /// What was decided: what the response is built from (the default is
    /// [`RateLimitInfo::problem_response`]).
    pub fn info(&self) -> &RateLimitInfo {
        &self.info
    }

    /// Finishes the response whose headers are `headers`: `Retry-After`
    /// unless it has its own (a custom refusal keeps its promise to say when
    /// to come back), and the fields.
    pub fn finish(self, limits: &Limits, headers: &mut HeaderMap) {
        if let Some(secs) = self.info.retry_after_secs() {
            headers
                .entry(RETRY_AFTER)
                .or_insert_with(|| HeaderValue::from(secs));
        }
        Fields::new(&limits.fields, &limits.policies, &self.tally).write(headers);
    }
}
