//! [`Quota`]: how much, how often, how bursty; validated once, shared by every
//! algorithm.

use std::fmt;
use std::time::Duration;

use crate::time::MAX_SPAN_MICROS;

/// A rate limit: `limit` units per `period`, of which up to `burst` may be
/// spent at once.
///
/// A `Quota` is always valid: every constructor checks its input and returns a
/// [`QuotaError`] that says what is wrong, never panics. The burst defaults to
/// the limit.
///
/// Every algorithm maps a quota onto its own parameters, documented on its
/// crate. Two derived figures are shared:
///
/// - the **emission interval** `T = ceil(period / limit)`, the time one unit
///   takes to come back (token bucket, GCRA, leaky bucket). Rounding up can
///   only make the rate slower, never faster than asked;
/// - the **window** for the window algorithms: `burst` units per
///   `ceil(period × burst / limit)`, which has the same capacity and the same
///   long-run rate as the bucket algorithms. With the default burst this is
///   exactly `limit` per `period`.
///
/// ```
/// use ratelab_core::Quota;
/// use std::time::Duration;
///
/// // 5 per second, bursts of up to 10: the reference article's bucket.
/// let quota = Quota::per_second(5)?.with_burst(10)?;
/// assert_eq!(quota.emission_interval(), Duration::from_millis(200));
/// assert_eq!(quota.window(), Duration::from_secs(2));
///
/// assert!(Quota::per_second(0).is_err());
/// # Ok::<(), ratelab_core::QuotaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u32,
    period_micros: u64,
    burst: u32,
    emission_interval_micros: u64,
    window_micros: u64,
}

/// Why a [`Quota`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// The limit is zero: nothing could ever pass.
    #[error("the limit must be at least 1 per period, not 0")]
    ZeroLimit,
    /// The period is zero.
    #[error("the period must be longer than zero")]
    ZeroPeriod,
    /// The burst is zero: nothing could ever pass.
    #[error("the burst must be at least 1, not 0")]
    ZeroBurst,
    /// The period is not a whole number of microseconds, the resolution of
    /// every decision.
    #[error("the period {period:?} is not a whole number of microseconds")]
    SubMicrosecondPeriod {
        /// The period asked for.
        period: Duration,
    },
    /// The period is longer than the arithmetic can carry exactly.
    #[error("the period {period:?} is longer than the longest supported, {max:?}")]
    PeriodTooLong {
        /// The period asked for.
        period: Duration,
        /// The longest period supported.
        max: Duration,
    },
    /// More than one unit per microsecond: finer than the time resolution.
    #[error(
        "{limit} per {period:?} is more than one per microsecond, finer than the time resolution"
    )]
    RateTooFine {
        /// The limit asked for.
        limit: u32,
        /// The period asked for.
        period: Duration,
    },
    /// The burst takes longer to refill than the arithmetic can carry exactly.
    #[error(
        "a burst of {burst} at one unit per {interval:?} takes longer to refill than the longest supported span, {max:?}"
    )]
    BurstTooLong {
        /// The burst asked for.
        burst: u32,
        /// The emission interval of the quota.
        interval: Duration,
        /// The longest span supported.
        max: Duration,
    },
}

impl Quota {
    /// `limit` units per `period`, with a burst equal to the limit.
    pub fn new(limit: u32, period: Duration) -> Result<Self, QuotaError> {
        Self::build(limit, period, limit)
    }

    /// `limit` units per second.
    #[inline]
    pub fn per_second(limit: u32) -> Result<Self, QuotaError> {
        Self::new(limit, Duration::from_secs(1))
    }

    /// `limit` units per minute.
    #[inline]
    pub fn per_minute(limit: u32) -> Result<Self, QuotaError> {
        Self::new(limit, Duration::from_secs(60))
    }

    /// `limit` units per hour.
    #[inline]
    pub fn per_hour(limit: u32) -> Result<Self, QuotaError> {
        Self::new(limit, Duration::from_secs(3600))
    }

    /// The same rate, with up to `burst` units at once.
    #[inline]
    pub fn with_burst(self, burst: u32) -> Result<Self, QuotaError> {
        Self::build(self.limit, self.period(), burst)
    }

    fn build(limit: u32, period: Duration, burst: u32) -> Result<Self, QuotaError> {
        if limit == 0 {
            return Err(QuotaError::ZeroLimit);
        }
        if period.is_zero() {
            return Err(QuotaError::ZeroPeriod);
        }
        if burst == 0 {
            return Err(QuotaError::ZeroBurst);
        }
        let max = Duration::from_micros(MAX_SPAN_MICROS);
        if period > max {
            return Err(QuotaError::PeriodTooLong { period, max });
        }
        if !period.subsec_nanos().is_multiple_of(1_000) {
            return Err(QuotaError::SubMicrosecondPeriod { period });
        }
        // Fits: period <= MAX_SPAN_MICROS < 2^64.
        let period_micros = crate::time::duration_to_micros(period);
        if u64::from(limit) > period_micros {
            return Err(QuotaError::RateTooFine { limit, period });
        }
        // Rounds up: never faster than asked.
        let emission_interval_micros = period_micros.div_ceil(u64::from(limit));
        let tolerance = u128::from(burst) * u128::from(emission_interval_micros);
        // A burst up to the limit refills within the period plus the rounding
        // of T (under `limit` µs): accepted whenever the period is, so that a
        // quota whose burst nobody set never fails for it.
        let refill_of_limit = u128::from(limit) * u128::from(emission_interval_micros);
        if tolerance > u128::from(MAX_SPAN_MICROS).max(refill_of_limit) {
            return Err(QuotaError::BurstTooLong {
                burst,
                interval: Duration::from_micros(emission_interval_micros),
                max,
            });
        }
        // ceil(period × burst / limit) <= burst × T <= MAX_SPAN_MICROS.
        let window_micros = u64::try_from(
            (u128::from(period_micros) * u128::from(burst)).div_ceil(u128::from(limit)),
        )
        .expect("at most burst × T, checked above");
        Ok(Quota {
            limit,
            period_micros,
            burst,
            emission_interval_micros,
            window_micros,
        })
    }

    /// Units per period.
    #[inline]
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The period over which `limit` units pass.
    #[inline]
    pub fn period(&self) -> Duration {
        Duration::from_micros(self.period_micros)
    }

    /// The period in microseconds.
    #[inline]
    pub fn period_micros(&self) -> u64 {
        self.period_micros
    }

    /// The most units that can pass at once, from full capacity.
    #[inline]
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The time one unit takes to come back: `ceil(period / limit)`.
    #[inline]
    pub fn emission_interval(&self) -> Duration {
        Duration::from_micros(self.emission_interval_micros)
    }

    /// [`Quota::emission_interval`] in microseconds.
    #[inline]
    pub fn emission_interval_micros(&self) -> u64 {
        self.emission_interval_micros
    }

    /// The time an empty bucket takes to refill completely:
    /// `burst × emission interval`, in microseconds (the GCRA's tolerance).
    #[inline]
    pub fn burst_tolerance_micros(&self) -> u64 {
        u64::from(self.burst) * self.emission_interval_micros
    }

    /// The window the window algorithms use: `burst` units per this span.
    #[inline]
    pub fn window(&self) -> Duration {
        Duration::from_micros(self.window_micros)
    }

    /// [`Quota::window`] in microseconds.
    #[inline]
    pub fn window_micros(&self) -> u64 {
        self.window_micros
    }
}

impl fmt::Debug for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quota")
            .field("limit", &self.limit)
            .field("period", &self.period())
            .field("burst", &self.burst)
            .finish()
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} per {:?}", self.limit, self.period())?;
        if self.burst != self.limit {
            write!(f, ", burst {}", self.burst)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_figures() {
        let q = Quota::per_second(5).unwrap().with_burst(10).unwrap();
        assert_eq!(q.emission_interval_micros(), 200_000);
        assert_eq!(q.burst_tolerance_micros(), 2_000_000);
        assert_eq!(q.window_micros(), 2_000_000);
        let q = Quota::per_second(3).unwrap();
        // 333_333.33.. rounds up: never faster than 3 per second.
        assert_eq!(q.emission_interval_micros(), 333_334);
        assert_eq!(q.window_micros(), 1_000_000);
        let q = Quota::per_minute(7).unwrap().with_burst(2).unwrap();
        // 60 s × 2 / 7 = 17.142857.. s, rounded up.
        assert_eq!(q.window_micros(), 17_142_858);
    }

    #[test]
    fn invalid_quotas_are_errors() {
        assert_eq!(Quota::per_second(0), Err(QuotaError::ZeroLimit));
        assert_eq!(
            Quota::new(1, Duration::ZERO).unwrap_err(),
            QuotaError::ZeroPeriod
        );
        assert_eq!(
            Quota::per_second(1).unwrap().with_burst(0),
            Err(QuotaError::ZeroBurst)
        );
        assert!(matches!(
            Quota::new(1, Duration::from_nanos(1_500)),
            Err(QuotaError::SubMicrosecondPeriod { .. })
        ));
        assert!(matches!(
            Quota::new(1, Duration::MAX),
            Err(QuotaError::PeriodTooLong { .. })
        ));
        assert!(matches!(
            Quota::new(2, Duration::from_micros(1)),
            Err(QuotaError::RateTooFine { .. })
        ));
        assert!(matches!(
            Quota::per_hour(1).unwrap().with_burst(u32::MAX),
            Err(QuotaError::BurstTooLong { .. })
        ));
        // The extremes that are valid stay valid.
        assert!(Quota::new(1, Duration::from_micros(1)).is_ok());
        // The longest period with any limit, its burst left unset: the
        // rounding of T must not make the default burst too long.
        let longest = Duration::from_micros(MAX_SPAN_MICROS);
        for limit in [1, 3, 7, 1_000_003, u32::MAX] {
            let quota = Quota::new(limit, longest).unwrap();
            assert!(quota.burst_tolerance_micros() < MAX_SPAN_MICROS + u64::from(limit));
            assert_eq!(quota.with_burst(limit).unwrap(), quota);
        }
        assert!(matches!(
            Quota::new(3, longest).unwrap().with_burst(4),
            Err(QuotaError::BurstTooLong { .. })
        ));
        assert!(Quota::new(u32::MAX, Duration::from_secs(4_295)).is_ok());
        let fine = Quota::new(1_000, Duration::from_millis(1)).unwrap();
        assert!(fine.with_burst(u32::MAX).is_ok());
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = Quota::new(10, Duration::from_micros(5)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "10 per 5µs is more than one per microsecond, finer than the time resolution"
        );
        assert_eq!(
            Quota::per_second(0).unwrap_err().to_string(),
            "the limit must be at least 1 per period, not 0"
        );
    }
}
