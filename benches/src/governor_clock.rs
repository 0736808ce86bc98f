//! [`GovernorClock`]: ratelab's [`Clock`] read from a governor clock, so that
//! both sides of a comparison read the same clock source.

use governor::clock::Reference as _;
use ratelab::Clock;

/// ratelab's [`Clock`] on any governor clock: the same clock source on both
/// sides. Microseconds since the adapter was made.
#[derive(Debug, Clone)]
pub struct GovernorClock<C: governor::clock::Clock> {
    clock: C,
    origin: C::Instant,
}

impl<C: governor::clock::Clock> GovernorClock<C> {
    /// Microseconds since now, read from `clock`.
    pub fn new(clock: C) -> Self {
        let origin = clock.now();
        GovernorClock { clock, origin }
    }
}

impl<C> Clock for GovernorClock<C>
where
    C: governor::clock::Clock + Send + Sync,
    C::Instant: governor::clock::Reference + Send + Sync,
{
    #[inline]
    fn now_micros(&self) -> u64 {
        self.clock.now().duration_since(self.origin).as_u64() / 1_000
    }
}
