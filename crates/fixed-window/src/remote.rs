//! The fixed window's remote form: the Redis script `lua/fixed_window.lua`,
//! its parameters `W, limit`, and its state, `struct '<ddd'`: the window's
//! index, the units counted in it, and the fence; then, once a receipt was
//! settled, the window's ledger ([`Spent`](ratelab_core::toolkit::Spent)).

use ratelab_core::toolkit::Spent;
use ratelab_core::toolkit::remote::{
    self, Encoded, MAX_COUNT, Params, RemoteForm, Shape, Stored, StoredOf, StringForm, Value,
    doubles, integers, lua,
};

use crate::{Counter, FixedWindow};

impl RemoteForm for FixedWindow {
    const NAME: &'static str = "fixed-window";
    const CODE: &'static str = "fw";
    const SCRIPT_FILE: &'static str = "fixed_window.lua";
    const SCRIPT: &'static str = include_str!("../lua/fixed_window.lua");
    const PARAMS: usize = 2;
    const SHAPE: Shape = Shape::String;

    /// The window `W` µs, the limit (the burst).
    fn params(&self) -> Params {
        Params::new(&[self.window, self.limit])
    }

    fn from_params(params: &[u64]) -> Option<Self> {
        remote::window_quota(params[0], params[1]).map(FixedWindow::new)
    }

    fn max_wait_micros(&self) -> u64 {
        self.window
    }

    fn out_of_range(&self, stored: &StoredOf<Self>) -> Option<String> {
        let count = stored.state.count;
        (count > MAX_COUNT).then(|| format!("{count} units in a window, past 2^36"))
    }

    fn encode(&self, stored: &StoredOf<Self>) -> Value {
        remote::encode_string(self, stored)
    }

    fn decode(&self, value: &Value, now: u64, skew: u64) -> Result<StoredOf<Self>, String> {
        remote::decode_string(self, value, now, skew)
    }
}

impl StringForm for FixedWindow {
    const SIZE: usize = 24;

    fn decode_fixed(&self, fixed: &[u8], now: u64, skew: u64) -> Result<StoredOf<Self>, String> {
        let values = doubles(fixed);
        let Some([index, count, fence]) = integers(values)
            .filter(|[index, count, fence]| *count <= MAX_COUNT && *fence <= index + 1)
        else {
            let [index, count, fence] = values;
            return Err(format!(
                "window {}, count {}, fence {}",
                lua::tostring(index),
                lua::tostring(count),
                lua::tostring(fence)
            ));
        };
        if remote::window_after_now(index, self.window, now, skew) {
            return Err(format!("window {index} starts after now"));
        }
        Ok(Stored {
            state: Counter::from_parts(index, count),
            ledger: Spent::fenced(fence),
            latest: 0,
        })
    }

    fn encode_fixed(&self, stored: &StoredOf<Self>) -> Encoded {
        let counter = &stored.state;
        Encoded::doubles(&[counter.index, counter.count, stored.ledger.fence()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::Quota;

    #[test]
    fn the_state_round_trips_and_a_window_ahead_is_refused() {
        let fw = FixedWindow::new(Quota::per_second(5).unwrap().with_burst(10).unwrap());
        let now = 1_700_000_000_000_000;
        let index = now / fw.window_micros();
        let stored = Stored {
            state: Counter::from_parts(index, 12),
            ledger: Spent::fenced(index),
            latest: 0,
        };
        assert_eq!(fw.decode(&fw.encode(&stored), now, 0), Ok(stored));
        let ahead = Stored {
            state: Counter::from_parts(index + 1, 1),
            ledger: Spent::default(),
            latest: 0,
        };
        assert_eq!(
            fw.decode(&fw.encode(&ahead), now, 0),
            Err(format!("window {} starts after now", index + 1))
        );
    }
}
