//! The multi-policy decision engine: given the policies that apply to one
//! request, each with its key and cost, which limiters to ask, in what order
//! and with what cost, what to give back, and what the answer is. No HTTP
//! here: the service matches the request to policies before, and writes the
//! response after.
//!
//! The order is the one [the guide](crate::guide#several-policies-on-one-request)
//! promises. One policy is asked once. With several, every policy whose
//! limiter issues receipts takes the request's cost with a receipt while the
//! others peek, all at once; then the others are asked with the cost (those
//! predicted to refuse first). A request refused, or failed closed, anywhere
//! gives every receipt back before it is answered: it leaves every policy
//! that can give back as if it never came.

mod call;
mod next;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use ratelab_core::{Decision, Error, Receipt, duration_to_micros};
use tokio::time::Instant;

use crate::matching::Refill;
use crate::policy::{FailureMode, Policy};
use crate::small::SmallBytes;

pub(crate) use call::bounded;
pub(crate) use next::{complete as complete_next, wait_for};

/// A limiter call made after the response: which report, what call (for
/// the metrics), its policy, and the answer to put in the report, if any.
pub(crate) type BoxedCall = std::pin::Pin<
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
    /// Counted after the response, if it counts ([`Count`](crate::Count)
    /// on a limiter without receipts): the engine only peeks and refuses
    /// when fewer than `cost` units remain.
    pub(crate) deferred: bool,
    /// How the policy's quota comes back: `t`, and the wait a deferred
    /// refusal reports.
    pub(crate) refill: Refill,
}

impl Check {
    /// `policy` counts the request under `key` (the client's, or the one the
    /// policy's key function chose) at `cost` units; its quota comes back
    /// as `refill` says.
    pub(crate) fn new(
        index: usize,
        policy: &Arc<Policy>,
        key: &str,
        cost: u32,
        refill: Refill,
    ) -> Self {
        // Prefixed with the policy name so that two policies on one limiter
        // (or one Redis) never share state.
        let full = LimiterKey::concat(&[policy.name.as_bytes(), b":", key.as_bytes()]);
        Check {
            index,
            policy: policy.clone(),
            key: full,
            cost,
            deferred: false,
            refill,
        }
    }

    /// The same check, counted after the response (see `deferred`).
    pub(crate) fn deferred(mut self) -> Self {
        self.deferred = true;
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
    /// Asked with the request's cost: consumed if allowed. After the
    /// response, what a settlement or refund answered (the key as it left
    /// it).
    Decided(Decision),
    /// Admitted, then given back: another policy refused the request (or
    /// failed closed). The decision is the refund's answer.
    GivenBack(Decision),
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
    /// Bounds all the policy's calls deciding this request together, from
    /// the engine's first call; `None` before it, or for a timeout too long
    /// to represent (no bound).
    deadline: Option<Instant>,
    state: State,
    /// What the admission took, while something may give it back: a
    /// refusal by another policy, or the response (a success that does not
    /// count, a cost settled).
    pub(crate) receipt: Option<Receipt>,
    /// `t`, when a peek said it (see [`next`]); `None` to derive it from the
    /// decision.
    next: Option<Duration>,
}

impl Report {
    fn new(check: Check) -> Self {
        Report {
            check,
            deadline: None,
            state: State::Pending,
            receipt: None,
            next: None,
        }
    }

    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// A new state: `t` is for the decision it came with.
    pub(crate) fn set(&mut self, state: State) {
        self.state = state;
        self.next = None;
    }

    /// The decision to report in `RateLimit`, if any.
    pub(crate) fn decision(&self) -> Option<&Decision> {
        match &self.state {
            State::Peeked(d) | State::Decided(d) | State::GivenBack(d) => Some(d),
            _ => None,
        }
    }

    /// `t`: the wait until more quota is available than the decision's
    /// `remaining`; `None` without a decision.
    pub(crate) fn next_after(&self) -> Option<Duration> {
        let decision = self.decision()?;
        Some(
            self.next
                .unwrap_or_else(|| next::derived(decision, self.check.refill, self.check.cost)),
        )
    }

    /// The policy refused the request (or can never admit it).
    pub(crate) fn violated(&self) -> bool {
        matches!(self.state, State::Decided(d) if !d.allowed)
            || matches!(self.state, State::Never { .. })
    }

    /// The policy admitted the request with its cost.
    pub(crate) fn admitted(&self) -> bool {
        matches!(self.state, State::Decided(d) if d.allowed)
    }

    fn failed_closed(&self) -> bool {
        matches!(self.state, State::FailedClosed(_))
    }
}

/// The reports of one request, one per check: in place for a single
/// policy (the common case: no allocation), on the heap for more.
// The one report in place is the point: boxing it would allocate on every
// request for a few bytes less to move.
#[allow(clippy::large_enum_variant)]
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

/// How one policy is asked in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    /// Cost 0: what it would say, nothing consumed.
    Peek,
    /// The cost that counts now (none for a deferred check), without a
    /// receipt: nothing will be given back.
    Charge,
    /// The cost, with a receipt for what may be given back.
    Receipt,
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
        Engine {
            reports: checks.into_iter().map(Report::new).collect(),
            failures: Vec::new(),
            deadlines_set: false,
        }
    }

    /// Whether policy `i` takes the request's cost with a receipt: its
    /// limiter issues them, and something may give the cost back (another
    /// policy's refusal, or the response).
    fn receipted(&self, i: usize) -> bool {
        let check = &self.reports[i].check;
        check.policy.refunds
            && !check.deferred
            && check.cost > 0
            && (self.reports.len() > 1 || check.policy.after_response())
    }

    /// The verdict at once, when it needs no waiting: one policy, whose
    /// limiter answers without a future ([`AsyncRateLimiter::check_now`]:
    /// every in-memory one), and nothing to give back later. No future, no
    /// box, no timer then. `None` otherwise, the engine untouched, for
    /// [`Engine::decide`].
    ///
    /// [`AsyncRateLimiter::check_now`]: ratelab_core::AsyncRateLimiter::check_now
    pub(crate) fn decide_now(&mut self) -> Option<Verdict> {
        let [report] = &*self.reports else {
            return None;
        };
        if self.receipted(0) {
            return None;
        }
        let policy = &report.check.policy;
        let started = quanta::Instant::now();
        let result = policy
            .limiter
            .check_now(&report.check.key, charged(report))?;
        crate::telemetry::limiter_call(policy, started.elapsed());
        let state = self.record(0, result, State::Decided);
        self.reports[0].set(state);
        let outcome = self.after_round(&[0]).unwrap_or_else(|| self.passed());
        next::complete_now(&mut self.reports);
        Some(self.verdict(outcome))
    }

    /// Asks the limiters and says what happens to the request. See the
    /// guide, "Several policies on one request".
    pub(crate) async fn decide(mut self) -> Verdict {
        let all: Vec<usize> = (0..self.reports.len()).collect();
        // Every policy with a receipt takes its cost now; with several
        // policies, the others only peek (a refusal elsewhere must find
        // nothing taken that cannot be given back).
        let several = all.len() > 1;
        let first: Vec<(usize, Ask)> = all
            .iter()
            .map(|&i| {
                let check = &self.reports[i].check;
                let ask = if self.receipted(i) {
                    Ask::Receipt
                } else if several && !check.deferred && check.cost > 0 {
                    Ask::Peek
                } else {
                    // Alone, deferred (charged 0 now), or costing nothing:
                    // nothing it takes needs giving back.
                    Ask::Charge
                };
                (i, ask)
            })
            .collect();
        self.ask(&first).await;
        if let Some(outcome) = self.after_round(&all) {
            return self.finish(outcome).await;
        }

        // The policies that only peeked (limiters without receipts): those
        // predicted to refuse go first, alone, since a refusal consumes
        // nothing; then the rest.
        let peeked = |r: &Report| matches!(r.state, State::Peeked(_));
        let (predicted, rest): (Vec<usize>, Vec<usize>) = all
            .into_iter()
            .filter(|&i| peeked(&self.reports[i]))
            .partition(|&i| {
                let r = &self.reports[i];
                matches!(r.state, State::Peeked(d) if d.remaining < u64::from(r.check.cost))
            });
        for round in [predicted, rest] {
            let asks: Vec<(usize, Ask)> = round.iter().map(|&i| (i, Ask::Charge)).collect();
            self.ask(&asks).await;
            if let Some(outcome) = self.after_round(&round) {
                return self.finish(outcome).await;
            }
        }
        let outcome = self.passed();
        self.finish(outcome).await
    }

    /// After the policies of `round` were asked: reads the deferred ones'
    /// peeks as decisions, and says whether the request is refused (or
    /// unavailable) already.
    fn after_round(&mut self, round: &[usize]) -> Option<Outcome> {
        for &i in round {
            let report = &mut self.reports[i];
            if let (true, State::Decided(d)) = (report.check.deferred, report.state) {
                let decision = deferred(d, &report.check);
                report.set(State::Decided(decision));
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
    fn passed(&self) -> Outcome {
        let delay = self
            .reports
            .iter()
            .filter_map(|r| match r.state {
                State::Decided(d) => Some(d.delay()),
                _ => None,
            })
            .max()
            .unwrap_or_default();
        Outcome::Pass { delay }
    }

    /// The verdict once the rounds are over: a request that does not pass
    /// gives back every receipt first; one that passes keeps only those
    /// its response may still settle. Then `t` where a peek must say it.
    async fn finish(mut self, outcome: Outcome) -> Verdict {
        if let Outcome::Pass { .. } = outcome {
            for report in self.reports.iter_mut() {
                if !report.check.policy.after_response() {
                    // Nothing will give it back: the charge stands.
                    report.receipt = None;
                }
            }
        } else {
            give_back(&mut self.reports).await;
        }
        next::complete(&mut self.reports).await;
        self.verdict(outcome)
    }

    /// The verdict, the reports and failures taken out of the engine.
    fn verdict(&mut self, outcome: Outcome) -> Verdict {
        Verdict {
            reports: std::mem::take(&mut self.reports),
            outcome,
            failures: std::mem::take(&mut self.failures),
        }
    }

    /// Asks the limiters of `asks` concurrently, each as its [`Ask`] says,
    /// and records where each stands.
    async fn ask(&mut self, asks: &[(usize, Ask)]) {
        if asks.is_empty() {
            return;
        }
        if !self.deadlines_set {
            // Every call of a policy for this request shares one deadline,
            // from the first.
            self.deadlines_set = true;
            let started = Instant::now();
            for report in self.reports.iter_mut() {
                report.deadline = started.checked_add(report.check.policy.timeout);
            }
        }
        if let [(i, ask)] = *asks {
            // One call: no need for join_all's allocations.
            let (result, receipt) = call::ask(&self.reports[i], ask).await;
            self.store(i, ask, result, receipt);
            return;
        }
        let results = join_all(
            asks.iter()
                .map(|&(i, ask)| call::ask(&self.reports[i], ask)),
        )
        .await;
        for (&(i, ask), (result, receipt)) in asks.iter().zip(results) {
            self.store(i, ask, result, receipt);
        }
    }

    /// Records what asking policy `i` as `ask` answered.
    fn store(
        &mut self,
        i: usize,
        ask: Ask,
        result: Result<Decision, Error>,
        receipt: Option<Receipt>,
    ) {
        let ok = if ask == Ask::Peek {
            State::Peeked
        } else {
            State::Decided
        };
        let state = self.record(i, result, ok);
        let report = &mut self.reports[i];
        report.receipt = receipt;
        report.set(state);
    }

    /// The state a call's result leaves policy `i` in; a failure is recorded.
    fn record(
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

/// Gives back, concurrently, every receipt the reports hold: the request
/// they were taken for is not served. Each answer (the key as the refund
/// left it) becomes its report's decision, for the response's fields. A
/// refund that fails keeps its units taken (logged): nothing retries it.
async fn give_back(reports: &mut [Report]) {
    let refunds: Vec<_> = reports
        .iter_mut()
        .enumerate()
        .filter_map(|(i, report)| {
            let receipt = report.receipt.take()?;
            let policy = report.check.policy.clone();
            Some(async move {
                let result = bounded(&policy, policy.limiter.refund_async(receipt)).await;
                (i, result)
            })
        })
        .collect();
    if refunds.is_empty() {
        return;
    }
    for (i, result) in join_all(refunds).await {
        let report = &mut reports[i];
        let policy = &report.check.policy;
        crate::telemetry::after_response(&policy.name, "give-back", result.is_ok());
        match result {
            Ok(after) if !after.degraded && report.admitted() => {
                report.set(State::GivenBack(after));
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(
                policy = %policy.name,
                error = %error,
                "rate limiter failed to give back the units of a refused request: they stay taken"
            ),
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

/// The cost a check is charged now: none for a deferred check, which counts
/// after the response.
fn charged(report: &Report) -> u32 {
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
