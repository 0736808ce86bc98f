//! [`Engine`]: decides one request against every policy that applies to it,
//! in the order [the engine's docs](crate::engine) give.

use std::time::Duration;

use futures::future::join_all;
use ratelab_core::toolkit::duration_to_micros;
use ratelab_core::{Decision, Error, Receipt};
use tokio::time::Instant;

use crate::engine::call::{self, Ask, bounded};
use crate::engine::check::Check;
use crate::engine::next;
use crate::engine::refill::wait_for;
use crate::engine::report::{Report, State};
use crate::engine::tally::{Failure, Outcome, Tally};
use crate::policy::FailureMode;

/// Decides one request against every policy that applies to it, in place:
/// its tally is where the reports were, so that nothing the request holds
/// is moved to say what was decided.
#[derive(Debug)]
pub(crate) struct Engine {
    /// Where every policy stands; its outcome once `decided`.
    pub(crate) tally: Tally,
    decided: bool,
    /// The policies' deadlines are set (at the first call).
    deadlines_set: bool,
}

impl Engine {
    /// The request under `checks`; each policy's timeout starts with the
    /// first call to its limiter.
    pub(crate) fn new(checks: impl IntoIterator<Item = Check>) -> Self {
        Engine {
            tally: Tally {
                reports: checks.into_iter().map(Report::new).collect(),
                // Read only once decided.
                outcome: Outcome::Pass {
                    delay: Duration::ZERO,
                },
                failures: Vec::new(),
            },
            decided: false,
            deadlines_set: false,
        }
    }

    /// Whether policy `i` takes the request's cost with a receipt: its
    /// limiter issues them, and something may give the cost back (another
    /// policy's refusal, or the response).
    fn receipted(&self, i: usize) -> bool {
        let check = &self.tally.reports[i].check;
        check.policy.refunds
            && !check.deferred
            && check.cost > 0
            && (self.tally.reports.len() > 1 || check.policy.after_response())
    }

    /// Decides at once, when it needs no waiting: one policy, whose limiter
    /// answers without a future ([`AsyncRateLimiter::check_now`]: every
    /// in-memory one), and nothing to give back later. No future, no box,
    /// no timer then. `false` otherwise, the engine untouched, for
    /// [`Engine::decide`].
    ///
    /// [`AsyncRateLimiter::check_now`]: ratelab_core::AsyncRateLimiter::check_now
    pub(crate) fn decide_now(&mut self) -> bool {
        if self.decided {
            return true;
        }
        let [report] = &*self.tally.reports else {
            return false;
        };
        if self.receipted(0) {
            return false;
        }
        let check = &report.check;
        let policy = &check.policy;
        let started = crate::telemetry::CallTimer::start();
        let Some(result) = policy.limiter.check_now(&check.key, check.charged()) else {
            return false;
        };
        policy.metrics.limiter_call(started.elapsed());
        self.decided_now(result);
        true
    }

    /// The engine of one check whose limiter answered `result` at once
    /// (asked by [`Engine::decide_now`]'s caller, timed and counted):
    /// decided as [`Engine::decide_now`] decides.
    pub(crate) fn decided_one(check: Check, result: Result<Decision, Error>) -> Self {
        let mut engine = Engine::new([check]);
        engine.decided_now(result);
        engine
    }

    /// The single policy's limiter answered `result` at once: the rest of
    /// [`Engine::decide_now`].
    fn decided_now(&mut self, result: Result<Decision, Error>) {
        let state = self.record(0, result, State::Decided);
        self.tally.reports[0].set(state);
        let outcome = self.after_round(&[0]).unwrap_or_else(|| self.passed());
        next::complete_now(&mut self.tally.reports);
        self.settle_on(outcome);
    }

    /// Asks the limiters and decides what happens to the request (see
    /// [the engine's docs](crate::engine)).
    pub(crate) async fn decide(&mut self) {
        if self.decided {
            return;
        }
        let all: Vec<usize> = (0..self.tally.reports.len()).collect();
        // Every policy with a receipt takes its cost now; with several
        // policies, the others only peek (a refusal elsewhere must find
        // nothing taken that cannot be given back).
        let several = all.len() > 1;
        let first: Vec<(usize, Ask)> = all
            .iter()
            .map(|&i| {
                let check = &self.tally.reports[i].check;
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
            .filter(|&i| peeked(&self.tally.reports[i]))
            .partition(|&i| {
                let r = &self.tally.reports[i];
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
        self.finish(outcome).await;
    }

    /// After the policies of `round` were asked: reads the deferred ones'
    /// peeks as decisions, and says whether the request is refused (or
    /// unavailable) already.
    fn after_round(&mut self, round: &[usize]) -> Option<Outcome> {
        for &i in round {
            let report = &mut self.tally.reports[i];
            if let (true, State::Decided(d)) = (report.check.deferred, report.state) {
                let decision = deferred(d, &report.check);
                report.set(State::Decided(decision));
            }
        }
        if self.tally.reports.iter().any(Report::violated) {
            return Some(Outcome::Refuse);
        }
        if self.tally.reports.iter().any(Report::failed_closed) {
            return Some(Outcome::Unavailable);
        }
        None
    }

    /// Every policy admitted the request: it proceeds after the longest
    /// delay a queueing policy gave it.
    fn passed(&self) -> Outcome {
        let delay = self
            .tally
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

    /// The rounds are over: a request that does not pass gives back every
    /// receipt first; one that passes keeps only those its response may
    /// still settle. Then `t` where a peek must say it.
    async fn finish(&mut self, outcome: Outcome) {
        if let Outcome::Pass { .. } = outcome {
            for report in self.tally.reports.iter_mut() {
                if !report.check.policy.after_response() {
                    // Nothing will give it back: the charge stands.
                    report.receipt = None;
                }
            }
        } else {
            give_back(&mut self.tally.reports).await;
        }
        next::complete(&mut self.tally.reports).await;
        self.settle_on(outcome);
    }

    /// The tally is final, with `outcome`.
    fn settle_on(&mut self, outcome: Outcome) {
        self.tally.outcome = outcome;
        self.decided = true;
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
            for report in self.tally.reports.iter_mut() {
                report.deadline = started.checked_add(report.check.policy.timeout);
            }
        }
        let ask = |i: usize, ask| {
            let report = &self.tally.reports[i];
            call::ask(&report.check, report.deadline, ask)
        };
        if let [(i, how)] = *asks {
            // One call: no need for join_all's allocations.
            let (result, receipt) = ask(i, how).await;
            self.store(i, how, result, receipt);
            return;
        }
        let results = join_all(asks.iter().map(|&(i, how)| ask(i, how))).await;
        for (&(i, how), (result, receipt)) in asks.iter().zip(results) {
            self.store(i, how, result, receipt);
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
        let report = &mut self.tally.reports[i];
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
            // to the engine that is an outage, and this policy's failure mode
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
        // The limiter refuses the new key; so does the engine, whatever the
        // policy's mode.
        //
        // Data errors (corrupt state, a key of the wrong type, a backend out
        // of memory) are not outages either: nothing would repair them by
        // waiting, and failing open would admit on state no one can read.
        let mode = match &error {
            Error::TooManyKeys { .. } | Error::Data(_) => FailureMode::Closed,
            _ => self.tally.reports[i].check.policy.failure,
        };
        let retry_after = match &error {
            Error::Backend(source) => source
                .downcast_ref::<DegradedDecision>()
                .map(|d| d.0.retry_after())
                .filter(|wait| !wait.is_zero()),
            _ => error.retry_after(),
        };
        self.tally.failures.push(Failure {
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
