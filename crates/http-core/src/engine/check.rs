//! [`Check`]: one policy that applies to a request, with the key and the
//! cost it counts the request at: the engine's input.

use std::sync::Arc;

use crate::engine::refill::Refill;
use crate::policy::Policy;
use crate::small::SmallBytes;

/// One policy that applies to a request. It holds its policy (a shared
/// handle), so that the engine and its tally borrow nothing: a decision
/// still pending (a Redis call) can go into a future of its own.
#[derive(Debug)]
pub(crate) struct Check {
    /// The caller's handle on the policy (its position among the
    /// [`Limits`](crate::Limits)' policies), handed back in the report.
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
        key: impl AsRef<[u8]>,
        cost: u32,
        refill: Refill,
    ) -> Self {
        // Prefixed with the policy name so that two policies on one limiter
        // (or one Redis) never share state.
        let full = LimiterKey::concat(&[policy.name.as_bytes(), b":", key.as_ref()]);
        Self::with_key(index, policy, full, cost, refill)
    }

    /// [`Check::new`] with its limiter key made already
    /// (`<policy name>:<key>`).
    pub(crate) fn with_key(
        index: usize,
        policy: &Arc<Policy>,
        key: LimiterKey,
        cost: u32,
        refill: Refill,
    ) -> Self {
        Check {
            index,
            policy: policy.clone(),
            key,
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

    /// The cost charged before the response: none for a deferred check,
    /// which counts after it.
    pub(crate) fn charged(&self) -> u32 {
        if self.deferred { 0 } else { self.cost }
    }
}

/// A limiter key, `<policy name>:<client key>`: in place up to 62 bytes
/// (a policy name and an address fit).
pub(crate) type LimiterKey = SmallBytes<62>;
