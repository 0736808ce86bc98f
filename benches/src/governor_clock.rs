//! [`GovernorClock`]: ratelab's [`Clock`] read from a governor clock, so that
//! both sides of a comparison read the same clock source.

use governor::clock::Reference as _;
use ratelab::Clock;

/// ratelab's [`Clock`] on any governor clock: the same clock source on both
/// sides. Microseconds since the adapter was made.
///
/// `MONOTONIC` says the clock never goes back ([`Clock::is_monotonic`]):
/// true for quanta's clocks, read directly or through an upkeep thread
/// (every reading is quanta's monotonic `Instant::now`, or a copy one
/// thread made of it, as ratelab's own `CoarseClock`), false for a clock
/// moved by hand (governor's `FakeRelativeClock`). A limiter on a clock
/// declared monotonic skips the bookkeeping only a clock that can go back
/// needs; governor does none either way.
#[derive(Debug, Clone)]
pub struct GovernorClock<C: governor::clock::Clock, const MONOTONIC: bool = false> {
    clock: C,
    origin: C::Instant,
}

impl<C: governor::clock::Clock> GovernorClock<C> {
    /// Microseconds since now, read from `clock`, which may go back.
    pub fn new(clock: C) -> Self {
        let origin = clock.now();
        GovernorClock { clock, origin }
    }
}

impl<C: governor::clock::Clock> GovernorClock<C, true> {
    /// Microseconds since now, read from `clock`, which never goes back
    /// (quanta's, with or without an upkeep thread).
    pub fn monotonic(clock: C) -> Self {
        let origin = clock.now();
        GovernorClock { clock, origin }
    }
}

impl<C, const MONOTONIC: bool> Clock for GovernorClock<C, MONOTONIC>
where
    C: governor::clock::Clock + Send + Sync,
    C::Instant: governor::clock::Reference + Send + Sync,
{
    #[inline]
    fn now_micros(&self) -> u64 {
        self.clock.now().duration_since(self.origin).as_u64() / 1_000
    }

    #[inline]
    fn is_monotonic(&self) -> bool {
        MONOTONIC
    }
}
