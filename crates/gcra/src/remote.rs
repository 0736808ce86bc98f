//! GCRA's remote form: the Redis script `lua/gcra.lua`, its parameters
//! `T, tolerance, burst`, and its state, `struct '<ddd'`: the TAT, the
//! ledger's total and the latest instant written, then the ledger's recent
//! shifts.

use ratelab_core::Algorithm;
use ratelab_core::toolkit::remote::{
    self, Encoded, Params, RemoteForm, Shape, StoredOf, StringForm, Value,
};

use crate::Gcra;

impl RemoteForm for Gcra {
    const NAME: &'static str = "gcra";
    const CODE: &'static str = "gcra";
    const SCRIPT_FILE: &'static str = "gcra.lua";
    const SCRIPT: &'static str = include_str!("../lua/gcra.lua");
    const PARAMS: usize = 3;
    const SHAPE: Shape = Shape::String;

    /// `T` µs, the tolerance `burst × T` µs, the burst.
    fn params(&self) -> Params {
        Params::new(&[
            self.interval_micros(),
            self.tolerance_micros(),
            self.capacity(),
        ])
    }

    fn from_params(params: &[u64]) -> Option<Self> {
        remote::rate_quota(params[0], params[2]).map(Gcra::new)
    }

    fn max_wait_micros(&self) -> u64 {
        self.tolerance_micros()
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

impl StringForm for Gcra {
    const SIZE: usize = 24;

    fn decode_fixed(&self, fixed: &[u8], now: u64, skew: u64) -> Result<StoredOf<Self>, String> {
        remote::decode_instant(fixed, now, skew, "TAT")
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
    use ratelab_core::Quota;
    use ratelab_core::toolkit::remote::{MAX_TAIL, Stored};
    use ratelab_core::toolkit::{MAX_RECENT_SHIFTS, Shift, Shifts};

    #[test]
    fn the_state_round_trips_with_its_shifts() {
        let gcra = Gcra::new(Quota::per_second(5).unwrap().with_burst(10).unwrap());
        let now = 1_700_000_000_000_000;
        let recent: Vec<Shift> = (0..MAX_RECENT_SHIFTS as u64)
            .map(|i| Shift {
                before: i,
                position: 1000 + i,
                at: now - i,
            })
            .collect();
        for ledger in [Shifts::default(), Shifts::from_parts(64, recent).unwrap()] {
            let stored = Stored {
                state: now + 3,
                ledger,
                latest: now - 1,
            };
            let value = gcra.encode(&stored);
            let Value::String(raw) = &value else {
                panic!("a string")
            };
            assert!(raw.len() == Gcra::SIZE || raw.len() == Gcra::SIZE + MAX_TAIL);
            assert_eq!(gcra.decode(&value, now, 0), Ok(stored));
        }
        // The parameters build GCRA back (from another quota of the same
        // rate and burst); a tolerance other than burst × T is no quota's.
        let back = Gcra::parse(&gcra.params()).expect("a quota's parameters");
        assert_eq!(back.params(), gcra.params());
        assert_eq!(Gcra::parse(&[200_000, 1_999_999, 10]), None);
    }
}
