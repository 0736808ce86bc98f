//! The token bucket's remote form: the Redis script `lua/token_bucket.lua`,
//! its parameters `T, burst`, and its state, `struct '<Iddd'`: whole tokens
//! as a 4-byte integer, the instant they were counted, the ledger's total
//! and the latest instant written, then the ledger's recent shifts.

use ratelab_core::Algorithm;
use ratelab_core::toolkit::remote::{
    self, Encoded, MAX_END, Params, RemoteForm, Shape, Stored, StoredOf, StringForm, Value,
    doubles, integers, lua,
};

use crate::{Bucket, TokenBucket};

impl RemoteForm for TokenBucket {
    const NAME: &'static str = "token-bucket";
    const CODE: &'static str = "tb";
    const SCRIPT_FILE: &'static str = "token_bucket.lua";
    const SCRIPT: &'static str = include_str!("../lua/token_bucket.lua");
    const PARAMS: usize = 2;
    const SHAPE: Shape = Shape::String;

    /// `T` µs, the burst.
    fn params(&self) -> Params {
        Params::new(&[self.interval, self.capacity])
    }

    fn from_params(params: &[u64]) -> Option<Self> {
        remote::rate_quota(params[0], params[1]).map(TokenBucket::new)
    }

    fn max_wait_micros(&self) -> u64 {
        self.capacity * self.interval
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

impl StringForm for TokenBucket {
    const SIZE: usize = 28;

    fn decode_fixed(&self, fixed: &[u8], now: u64, skew: u64) -> Result<StoredOf<Self>, String> {
        let tokens = u64::from(u32::from_le_bytes(
            fixed[..4].try_into().expect("four bytes"),
        ));
        let values: [f64; 3] = doubles(&fixed[4..]);
        let capacity = self.capacity;
        let full_at = |last: u64| {
            u128::from(last)
                + u128::from(capacity.saturating_sub(tokens)) * u128::from(self.interval)
        };
        let Some((last, ledger, latest)) = integers(values)
            .filter(|[last, _, _]| tokens <= capacity && full_at(*last) <= u128::from(MAX_END))
            .and_then(|[last, total, latest]| Some((last, remote::ledger_total(total)?, latest)))
        else {
            let [last, ledger, latest] = values;
            return Err(format!(
                "{} tokens of {capacity}, at {}, ledger {}, written at {}",
                lua::tostring(lua::double(tokens)),
                lua::tostring(last),
                lua::tostring(ledger),
                lua::tostring(latest)
            ));
        };
        if latest > now.saturating_add(skew) {
            return Err(format!("written at {latest}, after now"));
        }
        Ok(Stored {
            state: Bucket::from_parts(tokens, last),
            ledger,
            latest,
        })
    }

    fn encode_fixed(&self, stored: &StoredOf<Self>) -> Encoded {
        let bucket = &stored.state;
        let tokens = u32::try_from(bucket.tokens).expect("at most the capacity, a u32");
        let mut out = Encoded::new();
        out.push(&tokens.to_le_bytes());
        out.push_double(bucket.last);
        out.push_double(stored.ledger.total());
        out.push_double(stored.latest);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::Quota;
    use ratelab_core::toolkit::{Shift, Shifts};

    #[test]
    fn the_state_round_trips_with_its_shifts() {
        let tb = TokenBucket::new(Quota::per_second(5).unwrap().with_burst(10).unwrap());
        let now = 1_700_000_000_000_000;
        let bucket = Stored {
            state: Bucket::from_parts(7, now - 5),
            ledger: Shifts::from_parts(9, Vec::new()).unwrap(),
            latest: now,
        };
        let raw = tb.encode_fixed(&bucket);
        assert_eq!(raw.len(), TokenBucket::SIZE);
        assert_eq!(tb.decode(&tb.encode(&bucket), now, 0), Ok(bucket.clone()));
        // With shifts: 24 bytes each after the state.
        let shift = |before, position, at| Shift {
            before,
            position,
            at,
        };
        let shifted = Stored {
            ledger: Shifts::from_parts(9, vec![shift(0, 0, now - 9), shift(4, now + 3, now - 2)])
                .unwrap(),
            ..bucket
        };
        let value = tb.encode(&shifted);
        assert_eq!(value, Value::String([&*raw, &value_tail(&value)].concat()));
        assert_eq!(tb.decode(&value, now, 0), Ok(shifted));
        // More tokens than the bucket holds: no script wrote it.
        let over = Stored {
            state: Bucket::from_parts(11, now),
            ledger: Shifts::default(),
            latest: now,
        };
        assert_eq!(
            tb.decode_fixed(&tb.encode_fixed(&over), now, 0),
            Err("11 tokens of 10, at 1.7e+15, ledger 0, written at 1.7e+15".to_owned())
        );
    }

    fn value_tail(value: &Value) -> Vec<u8> {
        match value {
            Value::String(raw) => raw[TokenBucket::SIZE..].to_vec(),
            Value::SortedSet(_) => panic!("a string"),
        }
    }
}
