//! From a [`Verdict`] to the rate limit fields: which policies the
//! `RateLimit-Policy` and `RateLimit` fields list and with what values, and
//! the legacy fields, in the style the layer is configured for. (`response`
//! serializes them.)

use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};

use ratelab_core::ceil_secs;

use crate::engine::Verdict;
use crate::layer::{Shared, WallClock};
use crate::matching::Compiled;
use crate::response::{self, LimitItem};

/// `RateLimit-Policy` (every applicable policy) and `RateLimit` (every one
/// that decided).
fn fields(policies: &[Compiled], verdict: &Verdict) -> (Option<HeaderValue>, Option<HeaderValue>) {
    let policy = response::policy_field(
        verdict
            .reports
            .iter()
            .map(|r| &policies[r.check.index].item),
    );
    let limit = response::limit_field(verdict.reports.iter().filter_map(|r| {
        let decision = r.decision()?;
        Some(LimitItem {
            name: policies[r.check.index].item.quoted(),
            r: decision.remaining,
            t: ceil_secs(r.next_after()?),
        })
    }));
    (policy, limit)
}

/// Which rate limit fields responses carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// `RateLimit-Policy` and `RateLimit` (the current IETF draft): the
    /// default.
    #[default]
    Draft,
    /// Only the legacy `X-RateLimit-Limit`, `-Remaining` and `-Reset`.
    Legacy,
    /// Both.
    DraftAndLegacy,
    /// None (`Retry-After` is still sent on `429` and `503`: it is HTTP's own).
    None,
}

impl HeaderStyle {
    pub(crate) fn draft(self) -> bool {
        matches!(self, HeaderStyle::Draft | HeaderStyle::DraftAndLegacy)
    }

    pub(crate) fn legacy(self) -> bool {
        matches!(self, HeaderStyle::Legacy | HeaderStyle::DraftAndLegacy)
    }
}

/// What `X-RateLimit-Reset` holds: when the policy is full again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum LegacyReset {
    /// Seconds from now, rounded up (the default; what IETF's drafts and
    /// express-rate-limit's `draft-6` send).
    #[default]
    Delta,
    /// The Unix time in seconds, rounded up (GitHub's and express-rate-limit's
    /// `legacyHeaders`), from the layer's
    /// [wall clock](crate::RateLimitLayerBuilder::wall_clock).
    Epoch,
}

/// The fields `shared` is configured for, for one verdict: computed when
/// the request is decided, written into the response once it comes (the
/// verdict itself need not be kept until then).
pub(crate) struct Fields {
    policy: Option<HeaderValue>,
    limit: Option<HeaderValue>,
    legacy: Option<Legacy>,
}

/// The legacy fields of the binding decision.
struct Legacy {
    limit: u64,
    remaining: u64,
    reset: Reset,
}

/// `X-RateLimit-Reset`, or what it is computed from when it is written.
enum Reset {
    Delta(u64),
    /// A Unix time: the wall clock is read when the response is written.
    Epoch {
        after: Duration,
        wall_clock: WallClock,
    },
}

impl Fields {
    /// The fields for `verdict`, as `shared` is configured.
    pub(crate) fn new(shared: &Shared, verdict: &Verdict) -> Self {
        let (policy, limit) = if shared.header_style.draft() {
            fields(&shared.policies, verdict)
        } else {
            (None, None)
        };
        let legacy = shared
            .header_style
            .legacy()
            .then(|| verdict.binding())
            .flatten()
            .map(|(report, decision)| Legacy {
                limit: shared.policies[report.check.index].item.q,
                remaining: decision.remaining,
                // Until the key is full again on every response, a refusal
                // included (the wait for a retry is `Retry-After`): one
                // meaning, as GitHub's has.
                reset: match shared.legacy_reset {
                    LegacyReset::Delta => Reset::Delta(ceil_secs(decision.reset_after())),
                    LegacyReset::Epoch => Reset::Epoch {
                        after: decision.reset_after(),
                        wall_clock: shared.wall_clock.clone(),
                    },
                },
            });
        Fields {
            policy,
            limit,
            legacy,
        }
    }

    /// Writes the fields into `headers`.
    pub(crate) fn write(self, headers: &mut HeaderMap) {
        response::append_fields(headers, self.policy, self.limit);
        let Some(legacy) = self.legacy else {
            return;
        };
        let reset = match legacy.reset {
            Reset::Delta(secs) => secs,
            Reset::Epoch { after, wall_clock } => {
                let full_at = wall_clock() + after;
                full_at.duration_since(UNIX_EPOCH).map_or(0, ceil_secs)
            }
        };
        response::set_legacy(headers, legacy.limit, legacy.remaining, reset);
    }
}

impl std::fmt::Debug for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fields")
            .field("policy", &self.policy)
            .field("limit", &self.limit)
            .field("legacy", &self.legacy.is_some())
            .finish()
    }
}

/// Writes the fields `shared` is configured for, for `verdict`, into
/// `headers`.
pub(crate) fn write(shared: &Shared, verdict: &Verdict, headers: &mut HeaderMap) {
    Fields::new(shared, verdict).write(headers);
}
