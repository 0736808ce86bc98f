//! The multi-policy decision engine: given the policies that apply to one
//! request, each with its key and cost, which limiters to ask, in what order
//! and with what cost, and what the answer is. No HTTP here: the service
//! matches the request to policies before, and writes the response after.
//!
//! The order is the one [the guide](crate::guide#several-policies-on-one-request)
//! promises: peek every policy (cost 0) when there are several, then ask
//! with the real cost only the policies predicted to refuse, then, if none
//! refused, all the others. A refusal consumes nothing, so a request refused
//! by one policy consumes from none of the others (races aside).

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::join_all;
use ratelab_core::{Decision, Error, duration_to_micros};
use tokio::time::Instant;

use crate::matching::Refill;
use crate::policy::{FailureMode, Policy};
use crate::small::SmallBytes;

/// One policy that applies to a request: the engine's input. It holds its
/// policy (a shared handle), so that the engine and its verdict borrow
/// nothing: a decision still pending (a Redis call) can go into the
/// response future.
#[derive(Debug)]
pub(crate) struct Check {
    /// The caller's handle on the policy (the layer: its position among the
    /// layer's policies), handed back in the [`Report`].
    pub(crate) index: usize,
    pub(crate) policy: Arc<Policy>,
    /// The limiter key, `<policy name>:<key>`.
    pub(crate) key: LimiterKey,
    pub(crate) cost: u32,
    /// Counted after the response, if it counts
    /// ([`Count`](crate::Count) without a refund): the engine only peeks and
    /// refuses when fewer than `cost` units remain.
    pub(crate) deferred: bool,
    /// How the policy's quota comes back: the wait a deferred refusal
    /// reports.
    pub(crate) refill: Refill,
}

impl Check {
    /// `policy` counts the request under `key` (the client's, or the one the
    /// policy's key function chose) at `cost` units.
    pub(crate) fn new(index: usize, policy: &Arc<Policy>, key: &str, cost: u32) -> Self {
        // Prefixed with the policy name so that two policies on one limiter
        // (or one Redis) never share state.
        let full = LimiterKey::concat(&[policy.name.as_bytes(), b":", key.as_bytes()]);
        Check {
            index,
            policy: policy.clone(),
            key: full,
            cost,
            deferred: false,
            refill: Refill::Other,
        }
    }

    /// The same check, counted after the response (see `deferred`).
    pub(crate) fn deferred(mut self, refill: Refill) -> Self {
        self.deferred = true;
        self.refill = refill;
        self
    }
}

/// A limiter key, `<policy name>:<client key>`: in place up to 62 bytes
/// (a policy name and an address fit).
pub(crate) type LimiterKey = SmallBytes<62>;

/// Where one applicable policy stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Not asked yet.
    Pending,
    /// Peeked (cost 0): nothing consumed.
    Peeked(Decision),
    /// Asked with the request's cost: consumed if allowed.
    Decided(Decision),
    /// The cost can never fit this policy.
    Never { capacity: u64 },
    /// The limiter failed; the request passes this policy unchecked.
    FailedOpen,
    /// The limiter failed; the request is refused with 503, retryable after
    /// the wait if the error says when (an open breaker, a full table).
    FailedClosed(Option<Duration>),
}

/// One policy's part of a [`Verdict`].
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) check: Check,
    /// Bounds all the policy's calls for this request together, from the
    /// engine's first call; `None` before it, or for a timeout too long to
    /// represent (no bound).
    deadline: Option<Instant>,
    /// When the policy's check was asked, read before the call: how long
    /// its admission still weighs is measured from here, for a refund
    /// after the response.
    pub(crate) asked: Option<quanta::Instant>,
    pub(crate) state: State,
}

impl Report {
    /// The decision to report in `RateLimit`, if any.
    pub(crate) fn decision(&self) -> Option<&Decision> {
        match &self.state {
            State::Peeked(d) | State::Decided(d) => Some(d),
            _ => None,
        }
    }

    /// The policy refused the request (or can never admit it).
    pub(crate) fn violated(&self) -> bool {
        matches!(self.state, State::Decided(d) if !d.allowed)
            || matches!(self.state, State::Never { .. })
    }

    fn failed_closed(&self) -> bool {
        matches!(self.state, State::FailedClosed(_))
    }
}

/// The reports of one request, one per check: in place for a single
/// policy (the common case: no allocation), on the heap for more.
#[derive(Debug, Default)]
pub(crate) enum Reports {
    #[default]
    Empty,
    One(Report),
    Many(Vec<Report>),
}

impl std::ops::Deref for Reports {
    type Target = [Report];

    fn deref(&self) -> &[Report] {
        match self {
            Reports::Empty => &[],
            Reports::One(report) => std::slice::from_ref(report),
            Reports::Many(reports) => reports,
        }
    }
}

impl std::ops::DerefMut for Reports {
    fn deref_mut(&mut self) -> &mut [Report] {
        match self {
            Reports::Empty => &mut [],
            Reports::One(report) => std::slice::from_mut(report),
            Reports::Many(reports) => reports,
        }
    }
}

impl FromIterator<Report> for Reports {
    fn from_iter<I: IntoIterator<Item = Report>>(reports: I) -> Self {
        let mut reports = reports.into_iter();
        let Some(first) = reports.next() else {
            return Reports::Empty;
        };
        let Some(second) = reports.next() else {
            return Reports::One(first);
        };
        let mut many = Vec::with_capacity(2 + reports.size_hint().0);
        many.extend([first, second]);
        many.extend(reports);
        Reports::Many(many)
    }
}

/// A limiter that could not decide, in the order the failures happened.
#[derive(Debug)]
pub(crate) struct Failure {
    /// Which report (the position in [`Verdict::reports`]).
    pub(crate) report: usize,
    pub(crate) error: Error,
    /// What the engine did about it: the policy's mode, except for a keyed
    /// limiter out of room for keys, which always fails closed.
    pub(crate) mode: FailureMode,
}

/// What happens to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every policy admitted it (or failed open); it proceeds after `delay`
    /// (a leaky bucket queue's slot; zero otherwise).
    Pass { delay: Duration },
    /// Some policy refused it: `429`.
    Refuse,
    /// A fail-closed policy could not decide, and none refused: `503`.
    Unavailable,
}

/// The engine's output.
#[derive(Debug)]
pub(crate) struct Verdict {
    /// One per check, in the order of the checks.
    pub(crate) reports: Reports,
    pub(crate) outcome: Outcome,
    pub(crate) failures: Vec<Failure>,
}

impl Verdict {
    /// The policies that refused (or can never admit) the request.
    pub(crate) fn violated(&self) -> impl Iterator<Item = &Report> {
        self.reports.iter().filter(|r| r.violated())
    }

    /// The fail-closed policies whose limiter failed.
    pub(crate) fn failed_closed(&self) -> impl Iterator<Item = &Report> {
        self.reports.iter().filter(|r| r.failed_closed())
    }

    /// For a refusal: the wait after which every violated policy would admit
    /// a retry (the longest of their waits); `None` if the cost can never fit
    /// some violated policy, so that no wait helps.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        self.violated()
            .map(|r| r.decision().map(|d| d.retry_after()))
            .try_fold(Duration::ZERO, |max, wait| Some(max.max(wait?)))
    }

    /// For `503`: the longest wait a failed-closed limiter asked for, if any
    /// said when it could decide again.
    pub(crate) fn unavailable_retry_after(&self) -> Option<Duration> {
        self.failed_closed()
            .filter_map(|r| match r.state {
                State::FailedClosed(wait) => wait,
                _ => None,
            })
            .max()
    }

    /// The one decision single-policy headers (the legacy `X-RateLimit-*`)
    /// describe: on a refusal, the violated policy with the longest wait;
    /// otherwise the policy with the least remaining, then the longest
    /// reset. `None` when no policy decided.
    pub(crate) fn binding(&self) -> Option<(&Report, &Decision)> {
        let decided = self.reports.iter().filter_map(|r| Some((r, r.decision()?)));
        match self.outcome {
            Outcome::Refuse => decided
                .filter(|(r, _)| r.violated())
                .max_by_key(|(_, d)| d.retry_after()),
            _ => decided.min_by_key(|(_, d)| (d.remaining, std::cmp::Reverse(d.reset_after()))),
        }
    }
}

/// Decides one request against every policy that applies to it.
#[derive(Debug)]
pub(crate) struct Engine {
    reports: Reports,
    failures: Vec<Failure>,
    /// The policies' deadlines are set (at the first call).
    deadlines_set: bool,
}

impl Engine {
    /// The request under `checks`; each policy's timeout starts with the
    /// first call to its limiter.
    pub(crate) fn new(checks: impl IntoIterator<Item = Check>) -> Self {
        let reports = checks
            .into_iter()
            .map(|check| Report {
                deadline: None,
                asked: None,
                check,
                state: State::Pending,
            })
            .collect();
        Engine {
            reports,
            failures: Vec::new(),
            deadlines_set: false,
        }
    }

    /// The verdict at once, when it needs no waiting: one policy, whose
    /// limiter answers without a future ([`AsyncRateLimiter::check_now`]:
    /// every in-memory one). No future, no box, no timer then. `None`
    /// otherwise, the engine untouched, for [`Engine::decide`].
    ///
    /// [`AsyncRateLimiter::check_now`]: ratelab_core::AsyncRateLimiter::check_now
    pub(crate) fn decide_now(&mut self) -> Option<Verdict> {
        let [report] = &*self.reports else {
            return None;
        };
        let policy = &report.check.policy;
        let started = quanta::Instant::now();
        let result = policy
            .limiter
            .check_now(&report.check.key, real_cost(report))?;
        crate::telemetry::limiter_call(policy, started.elapsed());
        self.reports[0].asked = Some(started);
        self.reports[0].state = self.settle(0, result, State::Decided);
        Some(self.after_only_policy())
    }

    /// The verdict once the only policy has been asked with its cost.
    fn after_only_policy(&mut self) -> Verdict {
        match self.after_round(&[0]) {
            Some(outcome) => self.verdict(outcome),
            None => self.pass(),
        }
    }

    /// Asks the limiters and says what happens to the request. See the
    /// guide, "Several policies on one request".
    pub(crate) async fn decide(mut self) -> Verdict {
        if self.reports.len() == 1 {
            // One policy: asked once with its cost, no peek (the rounds
            // below, without their bookkeeping).
            self.ask(&[0], real_cost, State::Decided).await;
            return self.after_only_policy();
        }
        if self.reports.len() > 1 {
            // Peek everywhere first, so that a policy that is going to refuse
            // refuses before any other consumed anything.
            let all: Vec<usize> = (0..self.reports.len()).collect();
            self.ask(&all, |_| 0, State::Peeked).await;
        }

        // The policies predicted to refuse go first, alone: a refusal
        // consumes nothing, so if they do refuse, nothing was consumed
        // anywhere. Then (or if none was predicted to refuse) the rest.
        let predicted: Vec<usize> = (0..self.reports.len())
            .filter(|&i| {
                let r = &self.reports[i];
                matches!(r.state, State::Peeked(d) if d.remaining < u64::from(r.check.cost))
            })
            .collect();
        let rest: Vec<usize> = (0..self.reports.len())
            .filter(|i| !predicted.contains(i))
            .collect();
        for (n, round) in [predicted, rest].into_iter().enumerate() {
            // A policy failed closed at the peek: the request gets a 503
            // unless a predicted refusal (round 0, which consumes nothing)
            // makes it a 429; either way nothing else is consumed.
            if n == 1 && self.reports.iter().any(Report::failed_closed) {
                return self.verdict(Outcome::Unavailable);
            }
            let round: Vec<usize> = round
                .into_iter()
                .filter(|&i| matches!(self.reports[i].state, State::Pending | State::Peeked(_)))
                .collect();
            self.ask(&round, real_cost, State::Decided).await;
            if let Some(outcome) = self.after_round(&round) {
                return self.verdict(outcome);
            }
        }
        self.pass()
    }

    /// After the policies of `round` were asked with their cost: reads the
    /// deferred ones' peeks as decisions, and says whether the request is
    /// refused (or unavailable) already.
    fn after_round(&mut self, round: &[usize]) -> Option<Outcome> {
        for &i in round {
            let report = &mut self.reports[i];
            if let (true, State::Decided(d)) = (report.check.deferred, report.state) {
                report.state = State::Decided(deferred(d, &report.check));
            }
        }
        if self.reports.iter().any(Report::violated) {
            return Some(Outcome::Refuse);
        }
        if self.reports.iter().any(Report::failed_closed) {
            return Some(Outcome::Unavailable);
        }
        None
    }

    /// Every policy admitted the request: it proceeds after the longest
    /// delay a queueing policy gave it.
    fn pass(&mut self) -> Verdict {
        let delay = self
            .reports
            .iter()
            .filter_map(|r| match r.state {
                State::Decided(d) => Some(d.delay()),
                _ => None,
            })
            .max()
            .unwrap_or_default();
        self.verdict(Outcome::Pass { delay })
    }

    /// The verdict, the reports and failures taken out of the engine.
    fn verdict(&mut self, outcome: Outcome) -> Verdict {
        Verdict {
            reports: std::mem::take(&mut self.reports),
            outcome,
            failures: std::mem::take(&mut self.failures),
        }
    }

    /// Asks the limiters of `which` concurrently, each with `cost(report)`,
    /// and records where each stands (`ok` for an answer).
    async fn ask(
        &mut self,
        which: &[usize],
        cost: impl Fn(&Report) -> u32,
        ok: fn(Decision) -> State,
    ) {
        if which.is_empty() {
            return;
        }
        let started = Instant::now();
        // Read before the calls, so that the time an admission still
        // weighs errs low (a refund then gives back less, never more).
        let asked = quanta::Instant::now();
        for &i in which {
            self.reports[i].asked = Some(asked);
        }
        if !self.deadlines_set {
            // Every call of a policy for this request shares one deadline,
            // from the first.
            self.deadlines_set = true;
            for report in self.reports.iter_mut() {
                report.deadline = started.checked_add(report.check.policy.timeout);
            }
        }
        if let [i] = *which {
            // One call: no need for join_all's allocations.
            let report = &self.reports[i];
            let result = check(report, cost(report), started).await;
            self.reports[i].state = self.settle(i, result, ok);
            return;
        }
        let results = join_all(which.iter().map(|&i| {
            let report = &self.reports[i];
            check(report, cost(report), started)
        }))
        .await;
        for (&i, result) in which.iter().zip(results) {
            self.reports[i].state = self.settle(i, result, ok);
        }
    }

    /// The state a call's result leaves policy `i` in; a failure is recorded.
    fn settle(
        &mut self,
        i: usize,
        result: Result<Decision, Error>,
        ok: fn(Decision) -> State,
    ) -> State {
        let error = match result {
            // A limiter's own failure policy answered for a failing backend:
            // to the layer that is an outage, and this policy's failure mode
            // decides (one precedence: the route's mode wins over the
            // limiter's policy, so a fail-closed route stays closed above a
            // limiter built to fail open).
            Ok(decision) if decision.degraded => Error::backend(DegradedDecision(decision)),
            Ok(decision) => return ok(decision),
            Err(Error::CostTooHigh { capacity, .. }) => return State::Never { capacity },
            Err(error) => error,
        };
        // A keyed in-memory limiter full of keys is not an outage but a
        // flood of new clients (addresses are cheap, an IPv6 /32 holds 2^32
        // /64s): failing open there would let the flood through unlimited.
        // The limiter refuses the new key; so does the layer, whatever the
        // policy's mode.
        //
        // Data errors (corrupt state, a key of the wrong type, a backend out
        // of memory) are not outages either: nothing would repair them by
        // waiting, and failing open would admit on state no one can read.
        let mode = match &error {
            Error::TooManyKeys { .. } | Error::Data(_) => FailureMode::Closed,
            _ => self.reports[i].check.policy.failure,
        };
        let retry_after = match &error {
            Error::Backend(source) => source
                .downcast_ref::<DegradedDecision>()
                .map(|d| d.0.retry_after())
                .filter(|wait| !wait.is_zero()),
            _ => error.retry_after(),
        };
        self.failures.push(Failure {
            report: i,
            error,
            mode,
        });
        match mode {
            FailureMode::Open => State::FailedOpen,
            FailureMode::Closed => State::FailedClosed(retry_after),
        }
    }
}

/// A decision a limiter's failure policy made while its backend was failing,
/// carried as the outage it stands for.
#[derive(Debug)]
struct DegradedDecision(Decision);

impl std::fmt::Display for DegradedDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the limiter's backend is failing: its failure policy {} the request",
            if self.0.allowed {
                "admitted"
            } else {
                "refused"
            }
        )
    }
}

impl std::error::Error for DegradedDecision {}

/// The cost a check is asked with in the round that counts: none for a
/// deferred check, which counts after the response.
fn real_cost(report: &Report) -> u32 {
    if report.check.deferred {
        0
    } else {
        report.check.cost
    }
}

/// A deferred check's peek, read as the decision on its cost: admitted if
/// `cost` units remain (nothing consumed yet), else refused with the wait
/// until they do.
fn deferred(peek: Decision, check: &Check) -> Decision {
    let mut decision = peek;
    let cost = u64::from(check.cost);
    if peek.remaining < cost {
        decision.allowed = false;
        decision = decision.with_retry_after_micros(duration_to_micros(wait_for(
            &peek,
            check.refill,
            cost,
        )));
    }
    decision
}

/// The wait until `units` are available, from a decision that says how many
/// are now: exact for a steady refill (the n-th unit is back
/// `(limit - n) × interval` before the key is full), else the wait until the
/// key is full. Never shorter than the real wait.
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
        Refill::Other => decision.reset_after(),
    }
}

/// One limiter call, bounded by the policy's deadline, timed from `started`
/// for the metrics.
async fn check(report: &Report, cost: u32, started: Instant) -> Result<Decision, Error> {
    let policy = &report.check.policy;
    let mut call = policy.limiter.check_async(&report.check.key, cost);
    // An in-memory limiter has answered already: no timer is set up for it
    // (a timer entry on every request costs more than the check itself).
    let result = match (&mut call).now_or_never() {
        Some(result) => result,
        None => {
            // The layer polls a decision once from `Service::call`, which
            // may run outside the runtime: the timer (which needs it) is
            // set up at the next poll, from the response future.
            yield_once().await;
            match report.deadline {
                None => call.await,
                // The timer is boxed: held in place, it would make every
                // request's future larger (a timer entry is big).
                Some(deadline) => match Box::pin(tokio::time::timeout_at(deadline, call)).await {
                    Ok(result) => result,
                    Err(_) => Err(Error::Timeout(policy.timeout)),
                },
            }
        }
    };
    crate::telemetry::limiter_call(policy, started.elapsed());
    result
}

/// Pending once, asking to be polled again at once.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

#[cfg(test)]
mod tests {
    use std::fmt;
    use std::sync::{Arc, Mutex};

    use ratelab_core::{
        AsyncRateLimiter, CheckFuture, Keyed, Limiter, ManualClock, Quota, RateLimiter,
    };
    use ratelab_gcra::Gcra;

    use super::*;

    type Calls = Arc<Mutex<Vec<(String, u32)>>>;

    /// An in-memory GCRA limiter that records every call (key, cost), into a
    /// log shared by all the policies of a test, so the order shows.
    #[derive(Debug)]
    struct Recorded {
        limiter: Keyed<Gcra, ManualClock>,
        calls: Calls,
    }

    impl Limiter for Recorded {
        fn quota(&self) -> Quota {
            self.limiter.quota()
        }
        fn algorithm_name(&self) -> &'static str {
            self.limiter.algorithm_name()
        }
        fn backend(&self) -> &'static str {
            self.limiter.backend()
        }
    }

    impl RateLimiter for Recorded {
        fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
            let key = String::from_utf8_lossy(key).into_owned();
            self.calls.lock().unwrap().push((key.clone(), cost));
            self.limiter.check(key.as_bytes(), cost)
        }
    }

    /// A limiter whose backend answers `error()`, or never (`None`).
    struct Down(Option<fn() -> Error>);

    impl fmt::Debug for Down {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Down")
        }
    }

    impl Limiter for Down {
        fn quota(&self) -> Quota {
            Quota::per_minute(10).unwrap()
        }
        fn algorithm_name(&self) -> &'static str {
            "gcra"
        }
        fn backend(&self) -> &'static str {
            "down"
        }
    }

    impl AsyncRateLimiter for Down {
        fn check_async<'a>(&'a self, _key: &'a [u8], _cost: u32) -> CheckFuture<'a> {
            match self.0 {
                Some(error) => Box::pin(std::future::ready(Err(error()))),
                None => Box::pin(std::future::pending()),
            }
        }
    }

    fn refused_connection() -> Error {
        Error::backend("connection refused")
    }

    /// Policies on one manual clock, sharing one call log.
    struct Setup {
        clock: ManualClock,
        calls: Calls,
    }

    impl Setup {
        fn new() -> Self {
            Setup {
                clock: ManualClock::new(),
                calls: Calls::default(),
            }
        }

        /// A policy on an in-memory GCRA limiter on the setup's clock.
        fn policy(&self, name: &str, quota: Quota) -> Arc<Policy> {
            Arc::new(Policy::new(
                name,
                Recorded {
                    limiter: Keyed::with_clock(Gcra::new(quota), self.clock.clone()),
                    calls: self.calls.clone(),
                },
            ))
        }

        /// The calls made since the last time this was asked.
        fn calls(&self) -> Vec<(String, u32)> {
            std::mem::take(&mut *self.calls.lock().unwrap())
        }
    }

    fn per_minute(n: u32) -> Quota {
        Quota::per_minute(n).unwrap()
    }

    /// What `policy` has left for alice, by a peek that is not recorded.
    async fn remaining(policy: &Policy) -> u64 {
        let key = format!("{}:alice", policy.name);
        let decision = policy.limiter.check_async(key.as_bytes(), 0).await.unwrap();
        decision.remaining
    }

    /// The engine on alice's request, costing `cost` under each policy.
    async fn decide(policies: &[(&Arc<Policy>, u32)]) -> Verdict {
        let checks = policies
            .iter()
            .enumerate()
            .map(|(i, &(policy, cost))| Check::new(i, policy, "alice", cost));
        Engine::new(checks).decide().await
    }

    fn call(key: &str, cost: u32) -> (String, u32) {
        (key.to_owned(), cost)
    }

    #[test]
    fn the_limiter_key_is_prefixed_with_the_policy_name() {
        let setup = Setup::new();
        let policy = setup.policy("login", per_minute(5));
        let check = Check::new(3, &policy, "user:7", 2);
        assert_eq!(&*check.key, b"login:user:7");
        assert_eq!((check.index, check.cost), (3, 2));
        // Past the inline room, the same bytes.
        let long = "k".repeat(100);
        let check = Check::new(0, &policy, &long, 1);
        assert_eq!(*check.key, *format!("login:{long}").as_bytes());
    }

    #[tokio::test]
    async fn no_policy_passes() {
        let verdict = decide(&[]).await;
        assert_eq!(
            verdict.outcome,
            Outcome::Pass {
                delay: Duration::ZERO
            }
        );
        assert!(verdict.reports.is_empty() && verdict.failures.is_empty());
        assert!(verdict.binding().is_none());
    }

    #[tokio::test]
    async fn one_policy_is_asked_once_without_a_peek() {
        let setup = Setup::new();
        let global = setup.policy("global", per_minute(5));
        let verdict = decide(&[(&global, 2)]).await;
        assert_eq!(setup.calls(), [call("global:alice", 2)]);
        assert_eq!(
            verdict.outcome,
            Outcome::Pass {
                delay: Duration::ZERO
            }
        );
        assert!(
            matches!(verdict.reports[0].state, State::Decided(d) if d.allowed && d.remaining == 3)
        );
    }

    #[tokio::test]
    async fn several_policies_are_peeked_then_consumed() {
        let setup = Setup::new();
        let global = setup.policy("global", per_minute(5));
        let sms = setup.policy("sms", per_minute(10));
        let verdict = decide(&[(&global, 1), (&sms, 3)]).await;
        assert_eq!(
            setup.calls(),
            [
                call("global:alice", 0),
                call("sms:alice", 0),
                call("global:alice", 1),
                call("sms:alice", 3),
            ]
        );
        assert_eq!(
            verdict.outcome,
            Outcome::Pass {
                delay: Duration::ZERO
            }
        );
        assert!(verdict.failures.is_empty());
        assert_eq!((remaining(&global).await, remaining(&sms).await), (4, 7));
        // The headers report what the real calls answered, not the peeks.
        let left: Vec<u64> = verdict
            .reports
            .iter()
            .map(|r| r.decision().unwrap().remaining)
            .collect();
        assert_eq!(left, [4, 7]);
    }

    #[tokio::test]
    async fn a_refusal_by_one_policy_consumes_nothing_from_the_others() {
        let setup = Setup::new();
        let global = setup.policy("global", per_minute(10));
        let login = setup.policy("login", per_minute(1));
        let first = decide(&[(&global, 1), (&login, 1)]).await;
        assert_eq!(
            first.outcome,
            Outcome::Pass {
                delay: Duration::ZERO
            }
        );
        setup.calls();

        let second = decide(&[(&global, 1), (&login, 1)]).await;
        assert_eq!(second.outcome, Outcome::Refuse);
        // Only the policy predicted to refuse was asked with the cost.
        assert_eq!(
            setup.calls(),
            [
                call("global:alice", 0),
                call("login:alice", 0),
                call("login:alice", 1)
            ]
        );
        assert_eq!(remaining(&global).await, 9);
        assert!(matches!(second.reports[0].state, State::Peeked(_)));
        assert!(matches!(second.reports[1].state, State::Decided(d) if !d.allowed));
        let violated: Vec<&str> = second.violated().map(|r| r.check.policy.name()).collect();
        assert_eq!(violated, ["login"]);
        assert_eq!(second.retry_after(), Some(Duration::from_secs(60)));

        // After the wait, the same request passes both.
        setup.clock.advance(Duration::from_secs(60));
        let third = decide(&[(&global, 1), (&login, 1)]).await;
        assert_eq!(
            third.outcome,
            Outcome::Pass {
                delay: Duration::ZERO
            }
        );
        // (Refilled during the wait, then charged this request only.)
        assert_eq!(remaining(&global).await, 9);
    }

    #[tokio::test]
    async fn a_cost_that_can_never_fit_is_refused_with_no_wait() {
        let setup = Setup::new();
        let global = setup.policy("global", per_minute(10));
        let sms = setup.policy("sms", per_minute(2));
        let verdict = decide(&[(&global, 3), (&sms, 3)]).await;
        assert_eq!(verdict.outcome, Outcome::Refuse);
        assert_eq!(verdict.reports[1].state, State::Never { capacity: 2 });
        assert_eq!(verdict.retry_after(), None);
        assert!(
            verdict.failures.is_empty(),
            "a cost too high is not a failure"
        );
        assert_eq!(remaining(&global).await, 10);
    }

    #[tokio::test]
    async fn a_failing_fail_open_policy_drops_out_and_the_others_apply() {
        let setup = Setup::new();
        let down = Arc::new(Policy::new("down", Down(Some(refused_connection))));
        let global = setup.policy("global", per_minute(5));
        let verdict = decide(&[(&down, 1), (&global, 1)]).await;
        assert_eq!(
            verdict.outcome,
            Outcome::Pass {
                delay: Duration::ZERO
            }
        );
        assert_eq!(verdict.reports[0].state, State::FailedOpen);
        assert_eq!(remaining(&global).await, 4);
        let [failure] = &verdict.failures[..] else {
            panic!("one failure expected: {:?}", verdict.failures);
        };
        assert_eq!((failure.report, failure.mode), (0, FailureMode::Open));
        assert!(matches!(failure.error, Error::Backend(_)));

        // It refuses as usual when another policy refuses.
        let login = setup.policy("login", per_minute(1));
        decide(&[(&login, 1)]).await;
        let verdict = decide(&[(&down, 1), (&login, 1)]).await;
        assert_eq!(verdict.outcome, Outcome::Refuse);
    }

    #[tokio::test]
    async fn a_failing_fail_closed_policy_stops_before_anything_is_consumed() {
        let setup = Setup::new();
        let down = Arc::new(Policy::new("down", Down(Some(refused_connection))).fail_closed());
        let global = setup.policy("global", per_minute(5));
        let verdict = decide(&[(&global, 1), (&down, 1)]).await;
        assert_eq!(verdict.outcome, Outcome::Unavailable);
        assert_eq!(setup.calls(), [call("global:alice", 0)]);
        assert_eq!(remaining(&global).await, 5);
        assert_eq!(verdict.reports[1].state, State::FailedClosed(None));
        assert_eq!(verdict.unavailable_retry_after(), None);
        let failed: Vec<&str> = verdict
            .failed_closed()
            .map(|r| r.check.policy.name())
            .collect();
        assert_eq!(failed, ["down"]);
        assert_eq!(verdict.failures[0].mode, FailureMode::Closed);

        // Alone, the same.
        let verdict = decide(&[(&down, 1)]).await;
        assert_eq!(verdict.outcome, Outcome::Unavailable);
    }

    #[tokio::test]
    async fn a_refusal_wins_over_a_failure() {
        let setup = Setup::new();
        let down = Arc::new(Policy::new("down", Down(Some(refused_connection))).fail_closed());
        let login = setup.policy("login", per_minute(1));
        decide(&[(&login, 1)]).await;
        let verdict = decide(&[(&down, 1), (&login, 1)]).await;
        assert_eq!(verdict.outcome, Outcome::Refuse);
        assert_eq!(verdict.failures.len(), 1);
    }

    #[tokio::test]
    async fn a_limiter_out_of_keys_fails_closed_whatever_the_mode() {
        fn full() -> Error {
            Error::TooManyKeys {
                max_keys: 1,
                retry_after: Duration::from_millis(4500),
            }
        }
        let full = Arc::new(Policy::new("full", Down(Some(full))).fail_open());
        let verdict = decide(&[(&full, 1)]).await;
        assert_eq!(verdict.outcome, Outcome::Unavailable);
        assert_eq!(verdict.failures[0].mode, FailureMode::Closed);
        assert_eq!(
            verdict.unavailable_retry_after(),
            Some(Duration::from_millis(4500))
        );
    }

    #[tokio::test]
    async fn a_stuck_limiter_fails_at_its_policy_timeout() {
        let setup = Setup::new();
        let stuck = Arc::new(Policy::new("stuck", Down(None)).timeout(Duration::from_millis(20)));
        let global = setup.policy("global", per_minute(5));
        let verdict = decide(&[(&stuck, 1), (&global, 1)]).await;
        assert_eq!(
            verdict.outcome,
            Outcome::Pass {
                delay: Duration::ZERO
            }
        );
        assert!(matches!(
            verdict.failures[0].error,
            Error::Timeout(t) if t == Duration::from_millis(20)
        ));
        assert_eq!(remaining(&global).await, 4);
    }

    #[tokio::test]
    async fn the_binding_decision_is_the_closest_to_refusing() {
        let setup = Setup::new();
        // Same remaining after this request (1): the longer reset binds.
        let minute = setup.policy("minute", per_minute(2));
        let hour = setup.policy("hour", Quota::per_hour(2).unwrap());
        let roomy = setup.policy("roomy", per_minute(100));
        let verdict = decide(&[(&minute, 1), (&hour, 1), (&roomy, 1)]).await;
        let (report, decision) = verdict.binding().unwrap();
        assert_eq!(report.check.policy.name(), "hour");
        assert_eq!(decision.remaining, 1);

        // On a refusal: the violated policy with the longest wait.
        decide(&[(&minute, 1), (&hour, 1)]).await;
        let verdict = decide(&[(&minute, 1), (&hour, 1), (&roomy, 1)]).await;
        assert_eq!(verdict.outcome, Outcome::Refuse);
        let (report, decision) = verdict.binding().unwrap();
        assert_eq!(report.check.policy.name(), "hour");
        assert_eq!(decision.retry_after(), Duration::from_secs(1800));
        assert_eq!(verdict.retry_after(), Some(Duration::from_secs(1800)));
        assert_eq!(verdict.violated().count(), 2);
    }
}
