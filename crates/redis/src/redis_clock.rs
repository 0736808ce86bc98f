//! [`RedisClock`]: where Redis's `TIME` stands against this process's
//! monotonic clock, measured, so that a call's deadline is the caller's own
//! give-up instant on Redis's clock.
//!
//! A script refuses to run after its deadline (`ratelab expired`, nothing
//! charged), which is what keeps a check its caller gave up on from being
//! charged when a stalled Redis comes back. The deadline must therefore be
//! no later, on Redis's clock, than the instant the caller gives up: a
//! fixed allowance for the difference between the two clocks either lets
//! calls through after their caller left (an allowance too large) or expires
//! calls that were in time (too small). So the offset is measured instead:
//! `TIME` is asked with this process's monotonic clock read just before the
//! request leaves and just after the reply arrives; Redis read its clock
//! somewhere in between, so the offset (Redis's µs since the epoch less ours
//! since our origin) is at least `reading − after`. That lower bound is what
//! the deadline uses, less half the measured round trip (the reply's flight
//! back: a script that runs just before the deadline must still answer in
//! time), less a drift allowance for the sample's age (two clocks disciplined
//! by NTP part by at most 500 ppm). A sample is taken on first use and again
//! once it is older than [`REFRESH`], or after a failure (a reconnection may
//! reach another server). On a cluster, `TIME` is asked of every master and
//! the lowest bound kept: no node's deadline is later than its own clock
//! allows.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use ratelab_core::Error;
use ratelab_core::toolkit::duration_to_micros;
use redis::Value;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};

use crate::classify::classify;
use crate::connection::Connection;

/// How old a sample may get before the next call measures again.
pub(crate) const REFRESH: Duration = Duration::from_secs(5);

/// How fast two clocks may part, in parts per million: the most NTP slews a
/// clock by.
const DRIFT_PPM: u64 = 500;

/// One measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    /// Redis's µs since the Unix epoch less ours since [`origin`], at least.
    offset: i64,
    /// The `TIME` round trip, µs.
    round_trip: u64,
    /// When it was taken, our µs.
    taken: u64,
}

/// The offset of one connection's Redis, measured lazily.
#[derive(Debug, Default)]
pub(crate) struct RedisClock {
    sample: Mutex<Option<Sample>>,
}

/// This process's monotonic origin.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// `at` in µs since [`origin`] (0 before it).
fn local_micros(at: Instant) -> u64 {
    duration_to_micros(at.saturating_duration_since(origin()))
}

impl RedisClock {
    /// The deadline to send with a call whose caller gives up at `give_up`:
    /// µs since the Unix epoch on Redis's clock, no later than `give_up`
    /// there, less the reply's flight back. Measures first when there is no
    /// fresh sample (one more round trip, within the caller's time).
    pub(crate) async fn deadline(
        &self,
        connection: &Connection,
        give_up: Instant,
    ) -> Result<u64, Error> {
        let now = local_micros(Instant::now());
        let fresh = (*self.sample.lock())
            .filter(|s| now.saturating_sub(s.taken) <= duration_to_micros(REFRESH));
        let sample = match fresh {
            Some(sample) => sample,
            None => {
                let sample = measure(connection).await?;
                *self.sample.lock() = Some(sample);
                sample
            }
        };
        Ok(deadline_from(sample, local_micros(give_up), now))
    }

    /// Drops the sample: the next call measures again (after a failure, a
    /// reconnection may reach another server).
    pub(crate) fn forget(&self) {
        *self.sample.lock() = None;
    }
}

/// The deadline on Redis's clock for a give-up instant `give_up` (our µs),
/// from `sample`, at our instant `now`.
fn deadline_from(sample: Sample, give_up: u64, now: u64) -> u64 {
    let age = now.saturating_sub(sample.taken);
    let drift = age.saturating_mul(DRIFT_PPM) / 1_000_000;
    let margin = sample.round_trip / 2 + drift;
    let on_redis = i128::from(give_up) + i128::from(sample.offset) - i128::from(margin);
    u64::try_from(on_redis.max(0)).unwrap_or(u64::MAX)
}

/// Asks `TIME` (of every master, on a cluster) and keeps the lowest bound.
async fn measure(connection: &Connection) -> Result<Sample, Error> {
    let before = Instant::now();
    let readings: Vec<u64> = match connection {
        Connection::Single(_) | Connection::Sentinel(_) => {
            let (secs, micros): (u64, u64) = connection
                .query(&redis::cmd("TIME"))
                .await
                .map_err(classify)?;
            vec![unix_micros(secs, micros)]
        }
        Connection::Cluster(cluster) => {
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let reply = cluster
                .clone()
                .route_command(redis::cmd("TIME"), routing)
                .await
                .map_err(classify)?;
            times_of(&reply)?
        }
    };
    let after = Instant::now();
    let lowest = readings
        .into_iter()
        .min()
        .ok_or_else(|| Error::data("TIME answered nothing"))?;
    let taken = local_micros(after);
    let offset = i64::try_from(i128::from(lowest) - i128::from(taken))
        .map_err(|_| Error::data(format!("TIME answered {lowest} µs: out of range")))?;
    Ok(Sample {
        offset,
        round_trip: duration_to_micros(after.saturating_duration_since(before)),
        taken,
    })
}

/// µs since the Unix epoch from `TIME`'s seconds and microseconds.
fn unix_micros(secs: u64, micros: u64) -> u64 {
    secs.saturating_mul(1_000_000).saturating_add(micros)
}

/// Every `TIME` reading in a cluster's multi-node reply (a map or an array
/// of node to reply).
fn times_of(reply: &Value) -> Result<Vec<u64>, Error> {
    let one = |value: &Value| -> Result<u64, Error> {
        let (secs, micros): (u64, u64) = redis::from_redis_value(value.clone())
            .map_err(|e| Error::data(format!("TIME answered {value:?}: {e}")))?;
        Ok(unix_micros(secs, micros))
    };
    match reply {
        Value::Map(nodes) => nodes.iter().map(|(_, time)| one(time)).collect(),
        Value::Array(nodes) => nodes
            .iter()
            .map(|node| match node {
                Value::Array(pair) if pair.len() == 2 => one(&pair[1]),
                other => one(other),
            })
            .collect(),
        other => Ok(vec![one(other)?]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_the_give_up_instant_on_redis_less_the_flight_back_and_drift() {
        // Redis reads 1_000_000 µs ahead of us; 200 µs round trip.
        let sample = Sample {
            offset: 1_000_000,
            round_trip: 200,
            taken: 5_000,
        };
        assert_eq!(deadline_from(sample, 105_000, 5_000), 1_105_000 - 100);
        // Two seconds old: 1 ms of drift allowed for.
        assert_eq!(
            deadline_from(sample, 2_105_000, 2_005_000),
            3_105_000 - 100 - 1_000
        );
        // Never below the epoch.
        let behind = Sample {
            offset: -10_000_000,
            ..sample
        };
        assert_eq!(deadline_from(behind, 5_000, 5_000), 0);
    }
}
