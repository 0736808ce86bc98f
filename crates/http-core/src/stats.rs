//! [`Stats`]: counters of what the [`Limits`](crate::Limits) decided.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::policy::FailureMode;

/// Counters of what the [`Limits`](crate::Limits) decided (all the
/// requests they were asked about, whoever drives them); read them for
/// metrics and alerts ([`Limits::stats`](crate::Limits::stats)).
#[derive(Debug, Default)]
pub struct Stats {
    allowed: AtomicU64,
    refused: AtomicU64,
    unavailable: AtomicU64,
    failed_open: AtomicU64,
    failed_closed: AtomicU64,
}

impl Stats {
    /// Requests passed on to the service (including those some policy
    /// failed open on, and those no policy applied to; not those skipped).
    pub fn allowed(&self) -> u64 {
        self.allowed.load(Ordering::Relaxed)
    }

    /// Requests refused with `429`.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Requests refused with `503` because a fail-closed policy could not
    /// decide.
    pub fn unavailable(&self) -> u64 {
        self.unavailable.load(Ordering::Relaxed)
    }

    /// Limiter failures let through by a fail-open policy (one per policy and
    /// request): the alert for "requests are passing unchecked".
    pub fn failed_open(&self) -> u64 {
        self.failed_open.load(Ordering::Relaxed)
    }

    /// Limiter failures of fail-closed policies (one per policy and request).
    pub fn failed_closed(&self) -> u64 {
        self.failed_closed.load(Ordering::Relaxed)
    }

    pub(crate) fn count_allowed(&self) {
        self.allowed.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_unavailable(&self) {
        self.unavailable.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_failure(&self, mode: FailureMode) {
        let counter = match mode {
            FailureMode::Open => &self.failed_open,
            FailureMode::Closed => &self.failed_closed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
