//! [`LeaseConfig`]: how large leases grow, how long they live, how many keys
//! hold one.

use std::time::Duration;

/// How a [`Leased`](crate::Leased) limiter sizes and keeps its leases.
///
/// ```
/// use ratelab_lease::LeaseConfig;
/// use std::time::Duration;
///
/// let config = LeaseConfig::default()
///     .max_units(500)
///     .max_lifetime(Duration::from_millis(100))
///     .share_percent(25)
///     .growth(4)
///     .max_keys(10_000);
/// assert!(config.validate().is_ok());
/// assert!(LeaseConfig::default().growth(9).validate().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    pub(crate) max_units: u32,
    pub(crate) max_lifetime: Duration,
    pub(crate) share_percent: u8,
    pub(crate) growth: u32,
    pub(crate) max_keys: usize,
}

impl Default for LeaseConfig {
    /// Leases of at most 1000 units, living at most 100 ms, taking at most
    /// half of what the shared limit has left, growing ×4 per renewal, for
    /// at most 10 000 keys.
    fn default() -> Self {
        LeaseConfig {
            max_units: 1_000,
            max_lifetime: Duration::from_millis(100),
            share_percent: 50,
            growth: 4,
            max_keys: 10_000,
        }
    }
}

/// A [`LeaseConfig`] that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A lease must be allowed at least one unit.
    #[error("max_units must be at least 1")]
    NoUnits,
    /// A lease must live some time, and no longer than a day.
    #[error("max_lifetime must be between 1 µs and 1 day, not {0:?}")]
    Lifetime(Duration),
    /// The share of what is left a lease may take, in percent.
    #[error("share_percent must be between 1 and 100, not {0}")]
    Share(u8),
    /// The growth per renewal.
    #[error("growth must be between 2 and 8, not {0}")]
    Growth(u32),
    /// At least one key must be able to hold a lease.
    #[error("max_keys must be at least 1")]
    NoKeys,
    /// The shared limiter issues no receipts: a lease could never give its
    /// unused units back.
    #[error("the shared limiter issues no receipts (Limiter::refunds is false)")]
    NoReceipts,
}

impl LeaseConfig {
    /// The most units one lease holds (also capped by the quota's
    /// capacity).
    pub const fn max_units(mut self, units: u32) -> Self {
        self.max_units = units;
        self
    }

    /// The longest a lease lives, from the instant its request was sent:
    /// the debts' bound grows by the rate times this
    /// ([`Bound::leased`](ratelab_core::Bound::leased)).
    pub const fn max_lifetime(mut self, lifetime: Duration) -> Self {
        self.max_lifetime = lifetime;
        self
    }

    /// The most a lease takes of what the shared limit reported left, in
    /// percent (never less than the check's own cost): a nearly spent quota
    /// is not hoarded by one instance.
    pub const fn share_percent(mut self, percent: u8) -> Self {
        self.share_percent = percent;
        self
    }

    /// How much a lease that was used up grows at its renewal (×2 to ×8).
    pub const fn growth(mut self, growth: u32) -> Self {
        self.growth = growth;
        self
    }

    /// The most keys that hold a lease at once; a key beyond them is
    /// checked on the shared limiter directly.
    pub const fn max_keys(mut self, keys: usize) -> Self {
        self.max_keys = keys;
        self
    }

    /// The longest a lease lives.
    pub const fn lifetime(&self) -> Duration {
        self.max_lifetime
    }

    /// The most units one lease holds.
    pub const fn units(&self) -> u32 {
        self.max_units
    }

    /// The configured lifetime, µs.
    pub(crate) fn max_lifetime_micros(&self) -> u64 {
        u64::try_from(self.max_lifetime.as_micros()).unwrap_or(u64::MAX)
    }

    /// Whether it can work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        const DAY: Duration = Duration::from_secs(86_400);
        if self.max_units == 0 {
            return Err(ConfigError::NoUnits);
        }
        if self.max_lifetime < Duration::from_micros(1) || self.max_lifetime > DAY {
            return Err(ConfigError::Lifetime(self.max_lifetime));
        }
        if !(1..=100).contains(&self.share_percent) {
            return Err(ConfigError::Share(self.share_percent));
        }
        if !(2..=8).contains(&self.growth) {
            return Err(ConfigError::Growth(self.growth));
        }
        if self.max_keys == 0 {
            return Err(ConfigError::NoKeys);
        }
        Ok(())
    }
}
