//! One request through the [`Limits`], step by step, as any server drives
//! it: [`Limits::start`] reads the request head (who the client is, the
//! login attempt it is, the policies that apply) into a [`Pending`] request,
//! which asks the limiters for a [`Ruling`]; [`Limits::conclude`] turns it
//! into a request that passes ([`Admitted`]) or one to answer at once
//! ([`Refused`]), and once the response head is known,
//! [`Admitted::settle`] (or [`Refused::finish`]) counts what the response
//! says and writes the fields.
//!
//! The request's state stays where the server put its [`Pending`]: the
//! later steps borrow it, so that no step moves what the request holds (a
//! report per policy, the client's key) to say what was decided. A
//! [`Pending`] owns everything and borrows nothing: a decision still
//! pending (a Redis call) can be awaited in a future of its own, and a
//! request decided at once (every in-memory limiter) costs no future, box
//! or allocation of the core's.

use std::net::IpAddr;
use std::time::Duration;

use http::header::{RETRY_AFTER, SET_COOKIE};
use http::request::Parts;
use http::{Extensions, HeaderMap, HeaderValue, response};

use crate::client::Client;
use crate::engine::{self, Check, Engine, LimiterKey, Outcome};
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
    #[inline]
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
            client: Some(client),
            attempt,
        })
    }

    /// [`Limits::start`] without the request's head taken apart, for a
    /// server that holds the request whole (a tower layer): it reads the
    /// request's `headers` and `extensions` only, and `peer` gives the
    /// connection's peer address when no [`PeerAddr`](crate::PeerAddr)
    /// extension does. The request is then the same [`Pending`] request as
    /// [`Limits::start`] makes, to decide and
    /// [conclude](Limits::conclude_in_place) the same way.
    ///
    /// `None` when the limits read more of a request than that: a
    /// [skip](crate::LimitsBuilder::skip) predicate, a [login
    /// guard](crate::LimitsBuilder::login_guard), a [peer
    /// resolver](crate::Identify::peer_addr), or a policy with routes, a
    /// predicate, a key or a cost function (then use [`Limits::start`]).
    #[inline]
    pub fn start_in_place<P>(
        &self,
        headers: &HeaderMap,
        extensions: &Extensions,
        peer: P,
    ) -> Option<Pending>
    where
        P: FnOnce(&Extensions) -> Option<IpAddr>,
    {
        if !self.in_place {
            return None;
        }
        let client = self.identify.client_in_place(headers, extensions, peer);
        Some(self.started_in_place(client))
    }

    /// [`Limits::start_in_place`] and, where one policy's limiter answers
    /// at once and admits the request with nothing to wait for (no queue
    /// slot, nothing to settle after the response), the rest of the steps
    /// too: the request then passes ([`InPlace::Passed`]), its
    /// [`Client`] and [`RateLimitInfo`] in its extensions (unless
    /// [`request_extensions`](crate::LimitsBuilder::request_extensions) is
    /// off), with the fields to write into its response. Nothing is moved
    /// and no [`Pending`] request is made for it. Any other request is
    /// [started](InPlace::Started), decided already if its limiters
    /// answered at once ([`Pending::decide_now`] says so), to go on as one
    /// from [`Limits::start_in_place`]; and
    /// [`NotInPlace`](InPlace::NotInPlace) where [`Limits::start_in_place`]
    /// answers `None`.
    pub fn decide_in_place<B, P>(&self, request: &mut http::Request<B>, peer: P) -> InPlace
    where
        P: FnOnce(&Extensions) -> Option<IpAddr>,
    {
        if !self.in_place {
            return InPlace::NotInPlace;
        }
        let identify = &self.identify;
        let ip = identify.ip_in_place(request.headers(), request.extensions(), peer);
        if self.one_policy {
            let compiled = &self.policies[0];
            if let Some(v4) = identify.by_ipv4(ip) {
                // The common client, keyed without being made unless it
                // goes into the extensions or the request waits.
                let plan = identify.plan_of_anonymous();
                if let Some((key, cost)) = compiled.anonymous_v4_key(v4, plan) {
                    let client = || identify.anonymous_v4(v4);
                    return self.decide_one_now(key, cost, client, request.extensions_mut());
                }
            } else {
                let client = identify.client_at(request.headers(), request.extensions(), ip);
                let Some((key, cost)) = compiled.client_key(&client) else {
                    return InPlace::Started(self.started_in_place(client));
                };
                return self.decide_one_now(key, cost, || client, request.extensions_mut());
            }
        }
        let client = identify.client_at(request.headers(), request.extensions(), ip);
        InPlace::Started(self.started_in_place(client))
    }

    /// The request of `client`, started in place: every policy that
    /// applies to it, none asked yet.
    fn started_in_place(&self, client: Client) -> Pending {
        let checks = self
            .policies
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.applies_to_client(i, &client));
        Pending {
            engine: Engine::new(checks),
            client: Some(client),
            attempt: None,
        }
    }

    /// [`Limits::decide_in_place`] under the one policy, which applies to
    /// the request of the client `client` makes, under `key` at `cost`.
    fn decide_one_now(
        &self,
        key: LimiterKey,
        cost: u32,
        client: impl FnOnce() -> Client,
        extensions: &mut Extensions,
    ) -> InPlace {
        let compiled = &self.policies[0];
        let policy = &compiled.policy;
        let started = telemetry::CallTimer::start();
        let Some(result) = policy.limiter.check_now(&key, cost) else {
            // A limiter that answers later: the request waits for it.
            let check = Check::with_key(0, policy, key, cost, compiled.refill);
            return InPlace::Started(Pending {
                engine: Engine::new([check]),
                client: Some(client()),
                attempt: None,
            });
        };
        let elapsed = started.elapsed();
        let decision = match result {
            Ok(d) if d.allowed && !d.degraded && d.delay().is_zero() => d,
            // Refused, failed, or queued: the engine decides what that
            // means, as it does for every request.
            result => {
                policy.metrics.limiter_call(elapsed);
                let check = Check::with_key(0, policy, key, cost, compiled.refill);
                return InPlace::Started(Pending {
                    engine: Engine::decided_one(check, result),
                    client: Some(client()),
                    attempt: None,
                });
            }
        };
        // What `conclude` and `fields` do for a tally of this one report.
        policy.metrics.admitted_alone(elapsed);
        engine::record_gauges(policy);
        self.alerts.stats.count_allowed();
        let settings = &self.fields;
        let any_field = settings.style.draft() || settings.style.legacy();
        if !(any_field || self.request_extensions) {
            return InPlace::Passed(None);
        }
        let next_after = engine::next_now(&*policy.limiter, &key, compiled.refill, &decision, cost);
        if self.request_extensions {
            let client = client();
            let info =
                RateLimitInfo::admitted_one(compiled, cost, decision, next_after, client.clone());
            extensions.insert(client);
            extensions.insert(info);
        }
        InPlace::Passed(any_field.then(|| Fields::one(settings, compiled, &decision, next_after)))
    }

    /// The step after the decision: the alerts, the metrics and the
    /// counters; then, for a request that passes, [`Conclusion::Pass`], and
    /// the [`Client`] and its [`RateLimitInfo`] in the request's extensions
    /// (unless [`request_extensions`](crate::LimitsBuilder::request_extensions)
    /// is off); for one refused (`429`) or that could not be decided
    /// (`503`), [`Conclusion::Refuse`], to answer without calling the
    /// service.
    ///
    /// # Panics
    ///
    /// If the request was concluded before: a request is concluded once.
    #[inline]
    pub fn conclude<'p>(&self, ruling: Ruling<'p>, parts: &mut Parts) -> Conclusion<'p> {
        self.conclude_in_place(ruling, &mut parts.extensions)
    }

    /// [`Limits::conclude`] for a request held whole: `extensions` are
    /// the request's (a request [started in place](Limits::start_in_place)
    /// or not).
    ///
    /// # Panics
    ///
    /// If the request was concluded before: a request is concluded once.
    #[inline]
    pub fn conclude_in_place<'p>(
        &self,
        ruling: Ruling<'p>,
        extensions: &mut Extensions,
    ) -> Conclusion<'p> {
        let pending = ruling.pending;
        let client = pending.client.take().expect("a request is concluded once");
        let tally = &pending.engine.tally;
        self.alerts.raise(&self.policies, tally, &client);
        tally.record();
        let stats = &self.alerts.stats;
        match tally.outcome {
            Outcome::Pass { .. } => {
                stats.count_allowed();
                if self.request_extensions {
                    let info = RateLimitInfo::new(&self.policies, tally, client.clone());
                    extensions.insert(client);
                    extensions.insert(info);
                }
                return Conclusion::Pass(Admitted { pending });
            }
            Outcome::Refuse => {
                stats.count_refused();
                tracing::debug!(client = %client, "rate limited");
            }
            Outcome::Unavailable => stats.count_unavailable(),
        }
        let info = RateLimitInfo::new(&self.policies, tally, client);
        Conclusion::Refuse(Refused { pending, info })
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

/// What [`Limits::decide_in_place`] did with a request.
#[derive(Debug)]
#[must_use]
// The pending request in place is the point: boxing it would allocate for
// every request that is not passed at once.
#[allow(clippy::large_enum_variant)]
pub enum InPlace {
    /// It passes: call the service, and write these fields (`None`: no
    /// field) into its response.
    Passed(Option<Fields>),
    /// Started, and decided already if its limiters answered at once:
    /// go on as with a request from [`Limits::start_in_place`].
    Started(Pending),
    /// The limits read more of a request than its headers and extensions:
    /// start it with [`Limits::start`].
    NotInPlace,
}

/// A request being limited: its client and the policies that apply to it
/// (from [`Limits::start`]), then what they decided. The steps after the
/// decision borrow it: keep it where it is until the response is settled.
#[derive(Debug)]
#[must_use]
pub struct Pending {
    engine: Engine,
    /// Until [`Limits::conclude`] hands it on (to the request's extensions,
    /// or the refusal's info).
    client: Option<Client>,
    attempt: Option<Attempt>,
}

impl Pending {
    /// The client, as identified (`None` once concluded: the request that
    /// passed carries it, the refusal's info holds it).
    pub fn client(&self) -> Option<&Client> {
        self.client.as_ref()
    }

    /// The ruling at once, when it needs no waiting: one policy, whose
    /// limiter answers without a future (every in-memory one), and nothing
    /// to give back later. No future, box, timer or allocation then. `None`
    /// otherwise, nothing asked: [`Pending::decide`].
    #[inline]
    pub fn decide_now(&mut self) -> Option<Ruling<'_>> {
        self.engine.decide_now().then_some(Ruling { pending: self })
    }

    /// Asks the limiters (each policy's calls bounded together by its
    /// [timeout](crate::Policy::timeout), on tokio's timer) and says what
    /// happens to the request. In-memory limiters have answered at its
    /// first poll. Once decided, a request is not asked again: the ruling
    /// is the same.
    pub async fn decide(&mut self) -> Ruling<'_> {
        self.engine.decide().await;
        Ruling { pending: self }
    }
}

/// What the limiters said about one request, for [`Limits::conclude`].
#[derive(Debug)]
#[must_use]
pub struct Ruling<'p> {
    pending: &'p mut Pending,
}

impl Ruling<'_> {
    /// What happens to the request.
    #[inline]
    pub fn outcome(&self) -> LimitOutcome {
        match self.pending.engine.tally.outcome {
            Outcome::Pass { .. } => LimitOutcome::Allowed,
            Outcome::Refuse => LimitOutcome::Refused,
            Outcome::Unavailable => LimitOutcome::Unavailable,
        }
    }

    /// How long to hold a request that passes before the service sees it:
    /// a queueing policy's slot (the leaky bucket queue: that is the
    /// shaping it is for); zero otherwise.
    #[inline]
    pub fn delay(&self) -> Duration {
        match self.pending.engine.tally.outcome {
            Outcome::Pass { delay } => delay,
            _ => Duration::ZERO,
        }
    }

    /// Whether the response head of a request that passes decides
    /// something: a policy counts only some responses or settles the cost
    /// from the response, or the request is a login attempt (a success gets
    /// a device cookie). Then [`Admitted::settle`] must see it; otherwise
    /// [`Admitted::fields`] are final at once. (Known before the ruling is
    /// concluded, so that a server that settles elsewhere, as the tower
    /// layer does in its response future, knows where to go on.)
    #[inline]
    pub fn waits_for_response(&self) -> bool {
        self.pending.attempt.is_some() || engine::pending(&self.pending.engine.tally)
    }
}

/// A ruling, concluded ([`Limits::conclude`]).
#[derive(Debug)]
#[must_use]
pub enum Conclusion<'p> {
    /// The request goes to the service.
    Pass(Admitted<'p>),
    /// The request is answered at once, `429` or `503`.
    Refuse(Refused<'p>),
}

/// A request that passes: call the service (after [`Ruling::delay`]), then
/// settle with the response head.
#[derive(Debug)]
#[must_use]
pub struct Admitted<'p> {
    pending: &'p mut Pending,
}

impl Admitted<'_> {
    /// The fields as decided, for a request whose response decides nothing
    /// ([`Ruling::waits_for_response`] is false): computed now, written
    /// once the response comes. (Of one whose response does decide
    /// something, the fields before it: the request keeps what it was
    /// charged, as one whose response never comes.)
    ///
    /// `None` when the limits write no field ([`HeaderStyle::None`]):
    /// nothing to carry to the response.
    ///
    /// [`HeaderStyle::None`]: crate::HeaderStyle::None
    #[inline]
    pub fn fields(self, limits: &Limits) -> Option<Fields> {
        let settings = &limits.fields;
        (settings.style.draft() || settings.style.legacy())
            .then(|| Fields::new(settings, &limits.policies, &self.pending.engine.tally))
    }

    /// The last step, once the response head is known: counts, refunds or
    /// settles what each policy decides from it (waiting for those calls,
    /// each bounded by its policy's timeout, so that the client's next
    /// request sees them), sets a successful login's device cookie, and
    /// writes the fields, which show every key as those calls left it.
    pub async fn settle(self, limits: &Limits, response: &mut response::Parts) {
        let Pending {
            engine, attempt, ..
        } = self.pending;
        engine::settle(&mut engine.tally, response).await;
        if let Some((guard, attempt)) = attempt
            && let Some(cookie) = limits.guards[*guard].cookie(attempt, response.status)
        {
            response.headers.append(SET_COOKIE, cookie);
        }
        Fields::new(&limits.fields, &limits.policies, &engine.tally).write(&mut response.headers);
    }
}

/// A request answered without the service: refused (`429`), or not decided
/// (`503`) by a policy that fails closed.
#[derive(Debug)]
#[must_use]
pub struct Refused<'p> {
    pending: &'p mut Pending,
    info: RateLimitInfo,
}

impl Refused<'_> {
    /// What was decided: what the response is built from (the default is
    /// [`RateLimitInfo::problem_response`]).
    #[inline]
    pub fn info(&self) -> &RateLimitInfo {
        &self.info
    }

    /// Finishes the response whose headers are `headers`: `Retry-After`
    /// unless it has its own (a custom refusal keeps its promise to say when
    /// to come back), and the fields.
    #[inline]
    pub fn finish(self, limits: &Limits, headers: &mut HeaderMap) {
        if let Some(secs) = self.info.retry_after_secs() {
            headers
                .entry(RETRY_AFTER)
                .or_insert_with(|| HeaderValue::from(secs));
        }
        Fields::new(&limits.fields, &limits.policies, &self.pending.engine.tally).write(headers);
    }
}
