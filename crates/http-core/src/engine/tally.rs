//! [`Tally`]: the engine's output, every policy's report and what happens
//! to the request, with what the headers and the refusal read from it.

use std::time::Duration;

use ratelab_core::{Decision, Error};

use crate::engine::report::{Report, Reports, State};
use crate::policy::{FailureMode, Policy};
use crate::telemetry::{self, Decided, RequestOutcome};

/// A limiter that could not decide, in the order the failures happened.
#[derive(Debug)]
pub(crate) struct Failure {
    /// Which report (the position in [`Tally::reports`]).
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
pub(crate) struct Tally {
    /// One per check, in the order of the checks.
    pub(crate) reports: Reports,
    pub(crate) outcome: Outcome,
    pub(crate) failures: Vec<Failure>,
}

impl Tally {
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
            .filter_map(|r| match r.state() {
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

    /// Reports everything the tally has to say to the metrics (see
    /// [`telemetry`]): the request's outcome, each policy's decision and
    /// gauges, each failure.
    pub(crate) fn record(&self) {
        telemetry::request(match self.outcome {
            Outcome::Pass { .. } => RequestOutcome::Allowed,
            Outcome::Refuse => RequestOutcome::Refused,
            Outcome::Unavailable => RequestOutcome::Unavailable,
        });
        for report in self.reports.iter() {
            record_decision(
                &report.check.policy,
                match report.state() {
                    State::Decided(d) if d.allowed => Decided::Allowed,
                    State::Decided(_) => Decided::Refused,
                    State::Never { .. } => Decided::Never,
                    State::Peeked(_) | State::Pending => Decided::Peeked,
                    State::FailedOpen => Decided::FailedOpen,
                    State::FailedClosed(_) => Decided::FailedClosed,
                    State::GivenBack(_) => Decided::GivenBack,
                },
            );
        }
        for failure in &self.failures {
            let policy = &self.reports[failure.report].check.policy.name;
            telemetry::failure(policy, failure.mode.label(), &failure.error);
        }
    }
}

/// Reports to the metrics that `policy` decided `decided` for a request,
/// with the gauges the policy reads.
pub(crate) fn record_decision(policy: &Policy, decided: Decided) {
    policy.metrics.decision(decided);
    record_gauges(policy);
}

/// Reports the gauges `policy` reads to the metrics.
pub(crate) fn record_gauges(policy: &Policy) {
    if let Some(count) = &policy.keys_tracked {
        policy.metrics.keys_tracked(count());
    }
    if let Some(open) = &policy.breaker_open {
        policy.metrics.breaker_open(open());
    }
}
