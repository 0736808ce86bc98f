//! From a tally to the rate limit fields: which policies the
//! `RateLimit-Policy` and `RateLimit` fields list and with what values, and
//! the legacy fields, in the style the [`Limits`](crate::Limits) are
//! configured for. (`response` serializes them.)

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};

use ratelab_core::{Decision, ceil_secs};

use crate::engine::Tally;
use crate::matching::Compiled;
use crate::response::{self, LimitItem};

/// A wall clock: `X-RateLimit-Reset` Unix times are read from it.
pub(crate) type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// `RateLimit-Policy` (every applicable policy) and `RateLimit` (every one
/// that decided).
fn fields(policies: &[Compiled], tally: &Tally) -> (Option<HeaderValue>, Option<HeaderValue>) {
    let policy =
        response::policy_field(tally.reports.iter().map(|r| &policies[r.check.index].item));
    let limit = response::limit_field(tally.reports.iter().filter_map(|r| {
        let decision = r.decision()?;
        Some(LimitItem {
            policy: &policies[r.check.index].item,
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
    /// `legacyHeaders`), from the
    /// [wall clock](crate::LimitsBuilder::wall_clock).
    Epoch,
}

/// Which fields responses carry, and how: what [`Fields`] are built by.
pub(crate) struct FieldSettings {
    pub(crate) style: HeaderStyle,
    pub(crate) legacy_reset: LegacyReset,
    pub(crate) wall_clock: WallClock,
}

/// The rate limit fields of one response, as the [`Limits`](crate::Limits)
/// are configured: computed once the request is decided (or its response
/// settled), written into the response with [`Fields::write`] (the decision
/// itself need not be kept until then).
pub struct Fields {
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

impl Legacy {
    /// The legacy fields of `decision`, under a policy of `limit` units.
    fn new(settings: &FieldSettings, limit: u64, decision: &Decision) -> Self {
        Legacy {
            limit,
            remaining: decision.remaining,
            // Until the key is full again on every response, a refusal
            // included (the wait for a retry is `Retry-After`): one
            // meaning, as GitHub's has.
            reset: match settings.legacy_reset {
                LegacyReset::Delta => Reset::Delta(ceil_secs(decision.reset_after())),
                LegacyReset::Epoch => Reset::Epoch {
                    after: decision.reset_after(),
                    wall_clock: settings.wall_clock.clone(),
                },
            },
        }
    }
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
    /// The fields for `tally`, under `policies`, as `settings` say.
    pub(crate) fn new(settings: &FieldSettings, policies: &[Compiled], tally: &Tally) -> Self {
        let (policy, limit) = if settings.style.draft() {
            fields(policies, tally)
        } else {
            (None, None)
        };
        let legacy = settings
            .style
            .legacy()
            .then(|| tally.binding())
            .flatten()
            .map(|(report, decision)| {
                Legacy::new(settings, policies[report.check.index].item.q, decision)
            });
        Fields {
            policy,
            limit,
            legacy,
        }
    }

    /// The fields of a request under one policy, `compiled`, which
    /// admitted it with `decision`, `t` being `next_after`: what
    /// [`Fields::new`] says of a tally of that one report.
    pub(crate) fn one(
        settings: &FieldSettings,
        compiled: &Compiled,
        decision: &Decision,
        next_after: Duration,
    ) -> Self {
        let item = &compiled.item;
        let (policy, limit) = if settings.style.draft() {
            let limit = item.limit_alone(decision.remaining, ceil_secs(next_after));
            (item.policy_alone(), limit)
        } else {
            (None, None)
        };
        let legacy = settings
            .style
            .legacy()
            .then(|| Legacy::new(settings, item.q, decision));
        Fields {
            policy,
            limit,
            legacy,
        }
    }

    /// Writes the fields into `headers`: `RateLimit-Policy` and `RateLimit`
    /// appended (a list may span several lines, so that nested limits each
    /// add their items), the legacy fields replacing any there.
    pub fn write(self, headers: &mut HeaderMap) {
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
