//! How large a lease is asked for, and how long one lives.

use crate::LeaseConfig;
use ratelab_core::{Bound, Decision};

/// How long a lease granted by `decision` may live, µs: the configured
/// lifetime, and for the aligned windows no later than the end of the
/// window its units were charged in (so that a window's units are admitted
/// in that window only).
///
/// The window's end is read from the grant's `reset_after`: the fixed
/// window is full again when its window ends (`0 < reset_after <= window`);
/// the sliding counter, with units in the current window, a window after
/// it (`window < reset_after <= 2 × window`). Both are the window's end
/// modulo the window.
pub(crate) fn lifetime(bound: Bound, decision: &Decision, max_lifetime: u64) -> u64 {
    match bound {
        Bound::AlignedWindow { window, .. } | Bound::WeightedWindows { window, .. } => {
            let until_end = match decision.reset_after_micros {
                0 => 0,
                reset => (reset - 1) % window + 1,
            };
            max_lifetime.min(until_end)
        }
        Bound::Rate { .. } | Bound::TrailingWindow { .. } => max_lifetime,
    }
}

/// What a key's leases have shown so far, for the size of its next one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct History {
    /// The size the next lease asks for, before the caps; 0 for a key never
    /// leased (its first lease is the check's own cost).
    pub(crate) wanted: u32,
    /// What the shared limit had left, to its last grant's report, the
    /// grant included.
    pub(crate) left: u64,
}

impl History {
    /// The size to ask for a check of `cost`: what the history wants,
    /// capped by the configured size, the capacity and the configured
    /// share of what is left; never below `cost`.
    pub(crate) fn ask(&self, cost: u32, capacity: u64, config: &LeaseConfig) -> u32 {
        if self.wanted == 0 {
            return cost;
        }
        let share = self.left.saturating_mul(u64::from(config.share_percent)) / 100;
        let cap = u64::from(config.max_units).min(capacity).min(share);
        let size = u64::from(self.wanted).min(cap);
        u32::try_from(size).unwrap_or(u32::MAX).max(cost)
    }

    /// A lease of `granted` units was granted, the shared limit reporting
    /// `remaining` after it.
    pub(crate) fn granted(&mut self, granted: u32, remaining: u64) {
        self.left = remaining.saturating_add(u64::from(granted));
        if self.wanted == 0 {
            self.wanted = granted;
        }
    }

    /// A lease request was refused, the shared limit reporting `remaining`:
    /// the next asks for no more than its share of that (at a spent quota,
    /// the check's own cost: one call, not a refused lease and a retry).
    pub(crate) fn refused(&mut self, remaining: u64) {
        self.left = remaining;
    }

    /// The lease ended used up (renewed for want of units): the next one
    /// grows.
    pub(crate) fn used_up(&mut self, granted: u32, growth: u32) {
        self.wanted = granted.max(1).saturating_mul(growth);
    }

    /// The lease ended with units unused: the next one asks for what this
    /// one used in its lifetime.
    pub(crate) fn expired(&mut self, used: u32) {
        self.wanted = used.max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted_with(reset: u64) -> Decision {
        Decision::admitted(10).with_reset_after_micros(reset)
    }

    #[test]
    fn a_window_lease_ends_with_its_window() {
        let fixed = Bound::AlignedWindow {
            limit: 10,
            window: 1_000,
        };
        assert_eq!(lifetime(fixed, &granted_with(300), 5_000), 300);
        assert_eq!(lifetime(fixed, &granted_with(1_000), 5_000), 1_000);
        assert_eq!(lifetime(fixed, &granted_with(300), 100), 100);
        let counter = Bound::WeightedWindows {
            limit: 10,
            window: 1_000,
            step: 100,
            steps: 10,
        };
        assert_eq!(lifetime(counter, &granted_with(1_300), 5_000), 300);
        assert_eq!(lifetime(counter, &granted_with(2_000), 5_000), 1_000);
        let debt = Bound::Rate {
            burst: 10,
            interval: 100,
        };
        assert_eq!(lifetime(debt, &granted_with(700), 5_000), 5_000);
    }

    #[test]
    fn a_lease_starts_at_the_cost_grows_when_used_up_and_shares_what_is_left() {
        let config = LeaseConfig::default().max_units(100).share_percent(50);
        let mut history = History::default();
        assert_eq!(history.ask(3, 1_000, &config), 3);
        history.granted(3, 997);
        history.used_up(3, 4);
        assert_eq!(history.ask(1, 1_000, &config), 12);
        history.used_up(64, 4);
        // The configured size caps it.
        assert_eq!(history.ask(1, 1_000, &config), 100);
        // Half of what is left caps it; never below the cost.
        history.granted(12, 8);
        assert_eq!(history.ask(1, 1_000, &config), 10);
        history.granted(1, 0);
        assert_eq!(history.ask(2, 1_000, &config), 2);
        // After a refusal, what was left then caps it.
        history.refused(0);
        assert_eq!(history.ask(2, 1_000, &config), 2);
        // A lease that expired half used asks for what it used.
        history.granted(100, 10_000);
        history.expired(7);
        assert_eq!(history.ask(1, 1_000, &config), 7);
    }
}
