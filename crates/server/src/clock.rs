//! The wall clock the service decides on: fixed windows start at multiples
//! of their unit since the Unix epoch (UTC), in memory as on Redis, as
//! envoyproxy/ratelimit's do. Tests give the service a
//! [`ManualClock`](ratelab::ManualClock) set to a Unix time instead.

use std::time::{SystemTime, UNIX_EPOCH};

use ratelab::Clock;

/// Microseconds since the Unix epoch, from the system's real-time clock.
///
/// Unlike ratelab's monotonic [`SystemClock`](ratelab::SystemClock), it
/// may step back when the system's time is set back (NTP): a limiter on it
/// then sees time stand still or rewind, which can only refuse more (every
/// algorithm treats a rewind as no time passing).
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock;

impl Clock for WallClock {
    fn now_micros(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_reads_unix_time() {
        let secs = WallClock.now_micros() / 1_000_000;
        let system = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(secs.abs_diff(system) <= 1, "{secs} vs {system}");
    }
}
