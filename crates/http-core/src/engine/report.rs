//! [`Report`]: where one policy stands on a request, as the engine asks its
//! limiter and after the response; [`Reports`], one per check, in place
//! for the common single policy.

use std::time::Duration;

use ratelab_core::{Decision, Receipt};
use tokio::time::Instant;

use crate::engine::check::Check;
use crate::engine::refill;

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

/// One policy's part of a [`Tally`](crate::engine::Tally).
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) check: Check,
    /// Bounds all the policy's calls deciding this request together, from
    /// the engine's first call; `None` before it, or for a timeout too long
    /// to represent (no bound).
    pub(super) deadline: Option<Instant>,
    pub(super) state: State,
    /// What the admission took, while something may give it back: a
    /// refusal by another policy, or the response (a success that does not
    /// count, a cost settled).
    pub(crate) receipt: Option<Receipt>,
    /// `t`, when a peek said it (see the engine's `next`); `None` to derive
    /// it from the decision.
    pub(super) next: Option<Duration>,
}

impl Report {
    pub(super) fn new(check: Check) -> Self {
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
                .unwrap_or_else(|| refill::derived(decision, self.check.refill, self.check.cost)),
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

    pub(crate) fn failed_closed(&self) -> bool {
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
