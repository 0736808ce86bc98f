//! [`Verdict`]: what a lean check answers, the whole [`Decision`] computed
//! only when asked.

use std::fmt;

use crate::{Algorithm, Decision};

/// What a lean check answers ([`Direct::check_lean`](crate::Direct::check_lean),
/// [`Keyed::check_lean`](crate::Keyed::check_lean)): whether the request
/// passed, at once, and the whole [`Decision`] that
/// [`check`](crate::Direct::check) would have answered, computed only when
/// [`Verdict::decision`] asks for it.
///
/// The check itself is the same (all or nothing, the same instant, the same
/// state changes); only the fields a caller may not read (`remaining`,
/// `retry_after`, `reset_after`) are left for later, as governor's
/// `NotUntil` computes its wait only when asked. For an algorithm whose
/// state is one word (GCRA, the leaky queue: [`StateCell::ONE_WORD`]) the
/// verdict keeps that word as the check found it, the instant and the cost,
/// and [`Verdict::decision`] decides again from them: the algorithm's
/// `decide` is a pure function, so it answers what the check would have.
/// For every other algorithm the state may be large (a sliding log) and
/// copying it would cost more than it saves: the check builds its decision
/// as [`check`](crate::Direct::check) does, and the verdict holds it.
///
/// ```
/// use ratelab_core::{Direct, ManualClock, Quota};
/// # use ratelab_core::{Algorithm, Bound, Decision, Error};
/// # use ratelab_core::toolkit::AtomicCell;
/// # /// A toy: `burst` units, never refilled.
/// # #[derive(Debug)]
/// # struct Allowance(Quota);
/// # impl Algorithm for Allowance {
/// #     type State = u64;
/// #     type Cell = AtomicCell;
/// #     type Ledger = u64;
/// #     fn name(&self) -> &'static str { "allowance" }
/// #     fn quota(&self) -> &Quota { &self.0 }
/// #     fn capacity(&self) -> u64 { self.0.burst().into() }
/// #     fn bound(&self) -> Bound { Bound::Rate { burst: self.capacity(), interval: u64::MAX } }
/// #     fn initial_state(&self) -> u64 { 0 }
/// #     fn decide(&self, used: &mut u64, _: u64, cost: u32) -> Result<Decision, Error> {
/// #         let (cost, cap) = (u64::from(cost), self.capacity());
/// #         if *used + cost > cap { return Ok(Decision::refused(cap).with_remaining(cap - *used)); }
/// #         *used += cost;
/// #         Ok(Decision::admitted(cap).with_remaining(cap - *used))
/// #     }
/// #     fn full_at(&self, used: &u64) -> u64 { if *used > 0 { u64::MAX } else { 0 } }
/// # }
/// let limiter = Direct::with_clock(Allowance(Quota::per_hour(3)?), ManualClock::new());
/// // Only the verdict is read: nothing else is computed.
/// assert!(limiter.check_lean(1)?.allowed());
/// // The whole decision, when it is wanted, is what `check` would answer.
/// let verdict = limiter.check_lean(1)?;
/// assert!(verdict.allowed());
/// assert_eq!(verdict.decision().remaining, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`StateCell::ONE_WORD`]: crate::StateCell::ONE_WORD
#[must_use = "a verdict says whether the request passed"]
pub struct Verdict<'a, A: Algorithm> {
    allowed: bool,
    how: How<'a, A>,
}

/// Where the whole decision comes from.
enum How<'a, A: Algorithm> {
    /// Decided again from the state the check found, at its instant.
    Replay {
        algorithm: &'a A,
        before: A::State,
        at: u64,
        cost: u32,
    },
    /// Built by the check.
    Made(Decision),
}

impl<'a, A: Algorithm> Verdict<'a, A> {
    /// The verdict of a check that decided `allowed` for `cost` at `at`
    /// from `before` (the state as the check found it).
    #[inline(always)]
    pub(crate) fn replay(
        algorithm: &'a A,
        before: A::State,
        at: u64,
        cost: u32,
        allowed: bool,
    ) -> Self {
        Verdict {
            allowed,
            how: How::Replay {
                algorithm,
                before,
                at,
                cost,
            },
        }
    }

    /// The verdict of a check that built its whole decision.
    #[inline(always)]
    pub(crate) fn made(decision: Decision) -> Self {
        Verdict {
            allowed: decision.allowed,
            how: How::Made(decision),
        }
    }

    /// The request passed, and its cost was consumed ([`Decision::allowed`]).
    #[inline(always)]
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The whole decision, exactly what [`check`](crate::Direct::check)
    /// would have answered in place of the lean check: `remaining`,
    /// `retry_after` and `reset_after` as of the check's instant (not the
    /// time of this call), whatever was decided since.
    ///
    /// # Panics
    ///
    /// Never for an algorithm that keeps the [`Algorithm`] contract
    /// (`decide` is a pure function of the state, the instant and the
    /// cost): the check already decided `Ok` from the same three.
    #[inline]
    pub fn decision(&self) -> Decision {
        match &self.how {
            How::Made(decision) => *decision,
            How::Replay {
                algorithm,
                before,
                at,
                cost,
            } => match algorithm.decide(&mut before.clone(), *at, *cost) {
                Ok(decision) => decision,
                Err(e) => unreachable!("`decide` is pure: it decided Ok from the same state ({e})"),
            },
        }
    }
}

impl<A: Algorithm> From<Verdict<'_, A>> for Decision {
    fn from(verdict: Verdict<'_, A>) -> Decision {
        verdict.decision()
    }
}

impl<A: Algorithm> Clone for Verdict<'_, A> {
    fn clone(&self) -> Self {
        Verdict {
            allowed: self.allowed,
            how: match &self.how {
                How::Replay {
                    algorithm,
                    before,
                    at,
                    cost,
                } => How::Replay {
                    algorithm,
                    before: before.clone(),
                    at: *at,
                    cost: *cost,
                },
                How::Made(decision) => How::Made(*decision),
            },
        }
    }
}

impl<A: Algorithm> fmt::Debug for Verdict<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verdict")
            .field("allowed", &self.allowed)
            .field("decision", &self.decision())
            .finish()
    }
}
