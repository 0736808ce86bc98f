//! The leaky buckets' remote forms: the Redis scripts
//! `lua/leaky_meter.lua` and `lua/leaky_queue.lua`, their parameters
//! `T, depth, burst`, and their states. The meter's is `struct '<ddd'`: µs
//! of draining left, the instant it was measured (the latest instant
//! written), the ledger's total; the queue's, `struct '<ddd'`: the next free
//! slot, the ledger's total, the latest instant written. Each is followed by
//! its ledger's recent shifts.

use ratelab_core::toolkit::remote::{
    self, Encoded, MAX_END, Params, RemoteForm, Shape, Stored, StoredOf, StringForm, Value,
    doubles, integers, lua,
};
use ratelab_core::{Algorithm, Quota};

use crate::{LeakyMeter, LeakyQueue, Level};

/// `T` µs, the depth `burst × T` µs, the burst: both buckets' parameters.
fn leaky_params(quota: &Quota, capacity: u64) -> Params {
    Params::new(&[
        quota.emission_interval_micros(),
        quota.burst_tolerance_micros(),
        capacity,
    ])
}

impl RemoteForm for LeakyMeter {
    const NAME: &'static str = "leaky-meter";
    const CODE: &'static str = "lm";
    const SCRIPT_FILE: &'static str = "leaky_meter.lua";
    const SCRIPT: &'static str = include_str!("../lua/leaky_meter.lua");
    const PARAMS: usize = 3;
    const SHAPE: Shape = Shape::String;

    fn params(&self) -> Params {
        leaky_params(&self.quota, self.capacity())
    }

    fn from_params(params: &[u64]) -> Option<Self> {
        remote::rate_quota(params[0], params[2]).map(LeakyMeter::new)
    }

    fn max_wait_micros(&self) -> u64 {
        self.depth
    }

    fn out_of_range(&self, stored: &StoredOf<Self>) -> Option<String> {
        remote::debt_out_of_range(self.full_at(&stored.state), &stored.ledger)
    }

    fn encode(&self, stored: &StoredOf<Self>) -> Value {
        remote::encode_string(self, stored)
    }

    fn decode(&self, value: &Value, now: u64, skew: u64) -> Result<StoredOf<Self>, String> {
        remote::decode_string(self, value, now, skew)
    }
}

impl StringForm for LeakyMeter {
    const SIZE: usize = 24;

    fn decode_fixed(&self, fixed: &[u8], now: u64, skew: u64) -> Result<StoredOf<Self>, String> {
        let values = doubles(fixed);
        let Some((water, at, ledger)) = integers(values)
            .filter(|[water, at, _]| u128::from(*at) + u128::from(*water) <= u128::from(MAX_END))
            .and_then(|[water, at, total]| Some((water, at, remote::ledger_total(total)?)))
        else {
            let [water, at, ledger] = values;
            return Err(format!(
                "level {}, at {}, ledger {}",
                lua::tostring(water),
                lua::tostring(at),
                lua::tostring(ledger)
            ));
        };
        if at > now.saturating_add(skew) {
            return Err(format!("measured at {at}, after now"));
        }
        Ok(Stored {
            state: Level::from_parts(water, at),
            ledger,
            latest: at,
        })
    }

    fn encode_fixed(&self, stored: &StoredOf<Self>) -> Encoded {
        let level = &stored.state;
        Encoded::doubles(&[level.water, level.at, stored.ledger.total()])
    }

    /// The level's own instant.
    fn latest(&self, stored: &StoredOf<Self>) -> u64 {
        stored.state.at
    }
}

impl RemoteForm for LeakyQueue {
    const NAME: &'static str = "leaky-queue";
    const CODE: &'static str = "lq";
    const SCRIPT_FILE: &'static str = "leaky_queue.lua";
    const SCRIPT: &'static str = include_str!("../lua/leaky_queue.lua");
    const PARAMS: usize = 3;
    const SHAPE: Shape = Shape::String;

    fn params(&self) -> Params {
        leaky_params(&self.quota, self.capacity())
    }

    fn from_params(params: &[u64]) -> Option<Self> {
        remote::rate_quota(params[0], params[2]).map(LeakyQueue::new)
    }

    fn max_wait_micros(&self) -> u64 {
        self.depth()
    }

    fn out_of_range(&self, stored: &StoredOf<Self>) -> Option<String> {
        remote::debt_out_of_range(stored.state, &stored.ledger)
    }

    fn encode(&self, stored: &StoredOf<Self>) -> Value {
        remote::encode_string(self, stored)
    }

    fn decode(&self, value: &Value, now: u64, skew: u64) -> Result<StoredOf<Self>, String> {
        remote::decode_string(self, value, now, skew)
    }
}

impl StringForm for LeakyQueue {
    const SIZE: usize = 24;

    fn decode_fixed(&self, fixed: &[u8], now: u64, skew: u64) -> Result<StoredOf<Self>, String> {
        remote::decode_instant(fixed, now, skew, "next slot")
    }

    fn encode_fixed(&self, stored: &StoredOf<Self>) -> Encoded {
        remote::encode_instant(stored)
    }

    fn admits_all_up_to(&self, latest: u64, now: u64, cost: u32) -> bool {
        remote::admits_at_latest(self, latest, now, cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::toolkit::Shifts;

    #[test]
    fn the_meter_s_latest_instant_is_its_level_s() {
        let meter = LeakyMeter::new(Quota::per_second(5).unwrap().with_burst(10).unwrap());
        let now = 1_700_000_000_000_000;
        let stored = Stored {
            state: Level::from_parts(400_000, now - 7),
            ledger: Shifts::from_parts(3, Vec::new()).unwrap(),
            latest: now - 7,
        };
        let back = meter.decode(&meter.encode(&stored), now, 0).unwrap();
        assert_eq!((meter.latest(&back), &back), (now - 7, &stored));
        assert_eq!(
            meter.decode_fixed(&meter.encode_fixed(&stored), now - 10, 0),
            Err(format!("measured at {}, after now", now - 7))
        );
        let queue = LeakyQueue::new(*meter.quota());
        assert_eq!(queue.params(), meter.params());
        assert_eq!(
            queue.decode_fixed(&Encoded::doubles(&[MAX_END + 1, 0, 0]), now, 0),
            Err("next slot 6.7553994410557e+15, ledger 0, written at 0".to_owned())
        );
    }
}
