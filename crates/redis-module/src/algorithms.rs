//! Each algorithm as the module runs it: built back from the parameters the
//! scripts take, its state read and written in the scripts' encoding, and
//! checked as the scripts check it.

use std::time::Duration;

use ratelab_core::{Algorithm, Quota};
use ratelab_fixed_window::{Counter, FixedWindow};
use ratelab_gcra::Gcra;
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue, Level};
use ratelab_sliding_window::{SlidingCounter, SlidingLog, Windows};
use ratelab_token_bucket::{Bucket, TokenBucket};

use crate::args::{Args, MAX_PARAMS};
use crate::lua::{self, show, tostring};

/// An algorithm with the parameters its script takes.
pub(crate) trait Params: Algorithm + Sized {
    /// The name in the scripts' error messages (`ratelab <name>: ...`).
    const NAME: &'static str;

    /// The parameters the script takes after `now`, cost, slack and
    /// deadline: the same list `ratelab-redis` sends (the first
    /// [`Params::PARAMS`] of the array; the rest are zero).
    fn params(&self) -> [u64; MAX_PARAMS];

    /// An algorithm whose [`Params::params`] are `params`, if a [`Quota`]
    /// yields them.
    fn from_params(params: &[u64]) -> Option<Self>;

    /// The algorithm for these arguments, or `None` when the script would
    /// answer "invalid arguments" (its own checks: a cost above the
    /// capacity, a zero interval) or when no quota has these parameters.
    fn from_args(args: &Args) -> Option<Self> {
        let given = args.params().get(..Self::PARAMS)?;
        let algorithm = Self::from_params(given)?;
        (algorithm.params()[..Self::PARAMS] == *given && args.cost <= algorithm.capacity())
            .then_some(algorithm)
    }

    /// How many parameters the script takes.
    const PARAMS: usize;
}

/// A quota of `burst` units, one back every `interval` µs, if one exists:
/// `burst` per a period that rounds to that interval.
fn rate_quota(interval: u64, burst: u64) -> Option<Quota> {
    let burst32 = u32::try_from(burst).ok()?;
    if interval == 0 || burst == 0 {
        return None;
    }
    // `burst × T` itself, else the shortest period that rounds up to `T`
    // (for a tolerance just past the longest period).
    let candidates = [burst.checked_mul(interval)?, burst * (interval - 1) + 1];
    candidates.into_iter().find_map(|period| {
        Quota::new(burst32, Duration::from_micros(period))
            .ok()
            .filter(|q| q.emission_interval_micros() == interval && q.burst() == burst32)
    })
}

/// A quota of `limit` units per window of `window` µs, if one exists.
fn window_quota(window: u64, limit: u64) -> Option<Quota> {
    let limit32 = u32::try_from(limit).ok()?;
    Quota::new(limit32, Duration::from_micros(window))
        .ok()
        .filter(|q| q.window_micros() == window && q.burst() == limit32)
}

impl Params for Gcra {
    const PARAMS: usize = 3;
    const NAME: &'static str = "gcra";

    fn params(&self) -> [u64; MAX_PARAMS] {
        [
            self.interval_micros(),
            self.tolerance_micros(),
            self.capacity(),
            0,
        ]
    }

    fn from_params(p: &[u64]) -> Option<Self> {
        rate_quota(p[0], p[2]).map(Gcra::new)
    }
}

impl Params for TokenBucket {
    const PARAMS: usize = 2;
    const NAME: &'static str = "token-bucket";

    fn params(&self) -> [u64; MAX_PARAMS] {
        [self.interval_micros(), self.capacity(), 0, 0]
    }

    fn from_params(p: &[u64]) -> Option<Self> {
        rate_quota(p[0], p[1]).map(TokenBucket::new)
    }
}

impl Params for LeakyMeter {
    const PARAMS: usize = 3;
    const NAME: &'static str = "leaky-meter";

    fn params(&self) -> [u64; MAX_PARAMS] {
        leaky_params(self.quota(), self.capacity())
    }

    fn from_params(p: &[u64]) -> Option<Self> {
        rate_quota(p[0], p[2]).map(LeakyMeter::new)
    }
}

impl Params for LeakyQueue {
    const PARAMS: usize = 3;
    const NAME: &'static str = "leaky-queue";

    fn params(&self) -> [u64; MAX_PARAMS] {
        leaky_params(self.quota(), self.capacity())
    }

    fn from_params(p: &[u64]) -> Option<Self> {
        rate_quota(p[0], p[2]).map(LeakyQueue::new)
    }
}

fn leaky_params(quota: &Quota, capacity: u64) -> [u64; MAX_PARAMS] {
    [
        quota.emission_interval_micros(),
        quota.burst_tolerance_micros(),
        capacity,
        0,
    ]
}

impl Params for FixedWindow {
    const PARAMS: usize = 2;
    const NAME: &'static str = "fixed-window";

    fn params(&self) -> [u64; MAX_PARAMS] {
        [self.window_micros(), self.capacity(), 0, 0]
    }

    fn from_params(p: &[u64]) -> Option<Self> {
        window_quota(p[0], p[1]).map(FixedWindow::new)
    }
}

impl Params for SlidingLog {
    const PARAMS: usize = 2;
    const NAME: &'static str = "sliding-log";

    fn params(&self) -> [u64; MAX_PARAMS] {
        [self.window_micros(), self.capacity(), 0, 0]
    }

    fn from_params(p: &[u64]) -> Option<Self> {
        // One member per unit: the script refuses larger logs.
        window_quota(p[0], p[1])
            .filter(|q| q.burst() <= ratelab_sliding_window::MAX_STORED_LOG_LIMIT)
            .map(SlidingLog::new)
    }
}

impl Params for SlidingCounter {
    const PARAMS: usize = 4;
    const NAME: &'static str = "sliding-counter";

    fn params(&self) -> [u64; MAX_PARAMS] {
        [
            self.window_micros(),
            self.capacity(),
            self.step_micros(),
            self.steps(),
        ]
    }

    fn from_params(p: &[u64]) -> Option<Self> {
        window_quota(p[0], p[1]).map(SlidingCounter::new)
    }
}

/// An algorithm whose state is one Redis string, in the encoding its script
/// writes.
pub(crate) trait StringState: Params {
    /// The exact length of the stored string, when the script checks it.
    const SIZE: Option<usize>;

    /// The state in `raw`, or what is wrong with it, worded as the script
    /// words it (`now` and `skew` bound the instants it may hold).
    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<Self::State, String>;

    /// `state` as the script writes it.
    fn encode(&self, state: &Self::State) -> Encoded;

    /// Whether a check of `cost` at `now` is admitted whatever the key
    /// holds, knowing only that no instant in it is later than `latest`
    /// (µs). `false` unless the algorithm can tell: only an answer known
    /// before the key is read lets the command read it in place.
    fn admits_all_up_to(&self, _latest: u64, _now: u64, _cost: u32) -> bool {
        false
    }
}

/// [`StringState::admits_all_up_to`] of a state that is one instant, which
/// a later instant never helps to admit (GCRA's theoretical arrival time,
/// the leaky queue's next slot): the latest state possible is decided.
fn admits_at_latest<A: Algorithm<State = u64>>(
    algorithm: &A,
    latest: u64,
    now: u64,
    cost: u32,
) -> bool {
    let mut latest = latest;
    algorithm
        .decide(&mut latest, now, cost)
        .is_ok_and(|decision| decision.allowed)
}

/// A state as a script writes it, on the stack: at most 24 bytes (three
/// doubles, or a decimal integer of at most 20 digits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Encoded {
    bytes: [u8; 24],
    len: usize,
}

impl Encoded {
    fn from_parts(parts: &[&[u8]]) -> Encoded {
        let mut out = Encoded {
            bytes: [0; 24],
            len: 0,
        };
        for part in parts {
            out.bytes[out.len..out.len + part.len()].copy_from_slice(part);
            out.len += part.len();
        }
        out
    }
}

impl std::ops::Deref for Encoded {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// An integer string, as the scripts write a Lua number below 2^53.
fn decimal(mut value: u64) -> Encoded {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        // A digit: below 10.
        #[allow(clippy::cast_possible_truncation)]
        let digit = (value % 10) as u8;
        digits[start] = b'0' + digit;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    Encoded::from_parts(&[&digits[start..]])
}

/// A timestamp written as a decimal string, no later than `now + ahead +
/// skew`; `what` names it in the error messages.
fn read_timestamp(
    raw: &[u8],
    limit: u64,
    beyond: impl FnOnce(&str) -> String,
) -> Result<u64, String> {
    let Some(at) = lua::integer(raw) else {
        return Err(format!("not a timestamp: {}", show(raw)));
    };
    if at > limit {
        return Err(beyond(&String::from_utf8_lossy(raw)));
    }
    Ok(at)
}

/// Little-endian doubles, as Lua's `struct.unpack('<d...')` reads them.
fn doubles<const N: usize>(raw: &[u8]) -> [f64; N] {
    std::array::from_fn(|i| {
        f64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().expect("eight bytes"))
    })
}

/// `x`, known to be an integer below 2^53, as a double (exact).
#[allow(clippy::cast_precision_loss)]
fn double(x: u64) -> f64 {
    x as f64
}

fn pack_doubles(values: &[u64]) -> Encoded {
    let mut out = Encoded::from_parts(&[]);
    for &v in values {
        out = Encoded::from_parts(&[&out, &double(v).to_le_bytes()]);
    }
    out
}

/// `stored(x)` for each, and the integers.
fn integers<const N: usize>(values: [f64; N]) -> Option<[u64; N]> {
    let mut out = [0; N];
    for (o, v) in out.iter_mut().zip(values) {
        *o = lua::stored_integer(v)?;
    }
    Some(out)
}

impl StringState for Gcra {
    const SIZE: Option<usize> = None;

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<u64, String> {
        // Written as at most now + tolerance: anything later would refuse
        // for longer than this quota can.
        let limit = now
            .saturating_add(self.tolerance_micros())
            .saturating_add(skew);
        read_timestamp(raw, limit, |raw| {
            format!("timestamp {raw} beyond now + tolerance")
        })
    }

    fn encode(&self, tat: &u64) -> Encoded {
        decimal(*tat)
    }

    fn admits_all_up_to(&self, latest: u64, now: u64, cost: u32) -> bool {
        admits_at_latest(self, latest, now, cost)
    }
}

impl StringState for LeakyQueue {
    const SIZE: Option<usize> = None;

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<u64, String> {
        let limit = now
            .saturating_add(self.quota().burst_tolerance_micros())
            .saturating_add(skew);
        read_timestamp(raw, limit, |raw| {
            format!("next slot {raw} beyond now + depth")
        })
    }

    fn encode(&self, slot: &u64) -> Encoded {
        decimal(*slot)
    }

    fn admits_all_up_to(&self, latest: u64, now: u64, cost: u32) -> bool {
        admits_at_latest(self, latest, now, cost)
    }
}

impl StringState for TokenBucket {
    /// `struct '<Id'`: whole tokens as a 4-byte integer, the instant they
    /// were counted as a double.
    const SIZE: Option<usize> = Some(12);

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<Bucket, String> {
        let tokens = u64::from(u32::from_le_bytes(raw[..4].try_into().expect("four bytes")));
        let last = f64::from_le_bytes(raw[4..12].try_into().expect("eight bytes"));
        let capacity = self.capacity();
        let Some(last) = lua::stored_integer(last).filter(|_| tokens <= capacity) else {
            return Err(format!(
                "{} tokens of {capacity}, at {}",
                tostring(double(tokens)),
                tostring(last)
            ));
        };
        if last > now.saturating_add(skew) {
            return Err(format!("counted at {last}, after now"));
        }
        Ok(Bucket::from_parts(tokens, last))
    }

    fn encode(&self, bucket: &Bucket) -> Encoded {
        let tokens = u32::try_from(bucket.tokens()).expect("at most the capacity, a u32");
        Encoded::from_parts(&[&tokens.to_le_bytes(), &double(bucket.last()).to_le_bytes()])
    }
}

/// A window that starts after now (beyond a stepped-back clock) was never
/// written with this window length: it would refuse until a far future.
fn window_after_now(index: u64, window: u64, now: u64, skew: u64) -> bool {
    u128::from(index) * u128::from(window) > u128::from(now) + u128::from(skew)
}

impl StringState for FixedWindow {
    /// `struct '<dd'`: window index, units admitted in it.
    const SIZE: Option<usize> = Some(16);

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<Counter, String> {
        let [index, count] = doubles(raw);
        let limit = self.capacity();
        let Some([index, count]) = integers([index, count]).filter(|[_, c]| *c <= limit) else {
            return Err(format!(
                "window {}, count {} of {limit}",
                tostring(index),
                tostring(count)
            ));
        };
        if window_after_now(index, self.window_micros(), now, skew) {
            return Err(format!("window {index} starts after now"));
        }
        Ok(Counter::from_parts(index, count))
    }

    fn encode(&self, counter: &Counter) -> Encoded {
        pack_doubles(&[counter.index(), counter.count()])
    }
}

impl StringState for LeakyMeter {
    /// `struct '<dd'`: µs of draining left, the instant it was measured.
    const SIZE: Option<usize> = Some(16);

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<Level, String> {
        let [water, at] = doubles(raw);
        let depth = self.quota().burst_tolerance_micros();
        let Some([water, at]) = integers([water, at]).filter(|[w, _]| *w <= depth) else {
            return Err(format!(
                "level {} of {depth}, at {}",
                tostring(water),
                tostring(at)
            ));
        };
        if at > now.saturating_add(skew) {
            return Err(format!("measured at {at}, after now"));
        }
        Ok(Level::from_parts(water, at))
    }

    fn encode(&self, level: &Level) -> Encoded {
        pack_doubles(&[level.water(), level.at()])
    }
}

impl StringState for SlidingCounter {
    /// `struct '<ddd'`: current window index, previous count, current count.
    const SIZE: Option<usize> = Some(24);

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<Windows, String> {
        let [index, previous, current] = doubles(raw);
        let limit = self.capacity();
        let Some([index, previous, current]) =
            integers([index, previous, current]).filter(|[_, p, c]| *p <= limit && *c <= limit)
        else {
            return Err(format!(
                "window {}, counts {} and {} of {limit}",
                tostring(index),
                tostring(previous),
                tostring(current)
            ));
        };
        if window_after_now(index, self.window_micros(), now, skew) {
            return Err(format!("window {index} starts after now"));
        }
        Ok(Windows::from_parts(index, previous, current))
    }

    fn encode(&self, windows: &Windows) -> Encoded {
        pack_doubles(&[windows.index(), windows.previous(), windows.current()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quotas() -> Vec<Quota> {
        let mut quotas = vec![
            Quota::per_second(5).unwrap().with_burst(10).unwrap(),
            Quota::per_second(3).unwrap(),
            Quota::per_minute(7).unwrap().with_burst(1).unwrap(),
            Quota::per_hour(1_000_000).unwrap().with_burst(3).unwrap(),
            Quota::new(1, Duration::from_micros(1)).unwrap(),
            Quota::new(u32::MAX, Duration::from_secs(1 << 20)).unwrap(),
        ];
        // The longest period, with a burst past the limit and one below.
        let longest = Duration::from_micros(1 << 50);
        quotas.push(Quota::new(3, longest).unwrap());
        quotas.push(Quota::new(1000, longest).unwrap().with_burst(999).unwrap());
        quotas
    }

    fn round_trips<A: Params + std::fmt::Debug + PartialEq>(build: impl Fn(Quota) -> A) {
        for quota in quotas() {
            let algorithm = build(quota);
            let params = algorithm.params();
            let back = A::from_params(&params[..A::PARAMS]);
            // A sliding log above its cap is the one quota Redis refuses.
            if A::NAME == "sliding-log"
                && quota.burst() > ratelab_sliding_window::MAX_STORED_LOG_LIMIT
            {
                assert!(back.is_none(), "{quota:?}: a log above the cap");
                continue;
            }
            let back =
                back.unwrap_or_else(|| panic!("{} {quota:?}: no quota for {params:?}", A::NAME));
            assert_eq!(back.params(), params, "{} {quota:?}", A::NAME);
        }
    }

    #[test]
    fn every_quota_s_parameters_build_the_same_algorithm_back() {
        round_trips(Gcra::new);
        round_trips(TokenBucket::new);
        round_trips(LeakyMeter::new);
        round_trips(LeakyQueue::new);
        round_trips(FixedWindow::new);
        round_trips(SlidingLog::new);
        round_trips(SlidingCounter::new);
    }

    #[test]
    fn parameters_no_quota_yields_are_refused() {
        assert!(Gcra::from_args(&args(&["5", "100", "999", "10"])).is_none());
        assert!(Gcra::from_args(&args(&["5", "100", "1000", "10"])).is_some());
        // A cost above the capacity, a zero interval, a missing parameter.
        assert!(Gcra::from_args(&args(&["11", "100", "1000", "10"])).is_none());
        assert!(Gcra::from_args(&args(&["1", "0", "0", "10"])).is_none());
        assert!(Gcra::from_args(&args(&["1", "100", "1000"])).is_none());
        assert!(SlidingCounter::from_args(&args(&["1", "1000", "10", "1", "1000"])).is_some());
        assert!(SlidingCounter::from_args(&args(&["1", "1000", "10", "2", "500"])).is_none());
    }

    fn args(tail: &[&str]) -> Args {
        let mut argv = vec!["0", tail[0], "0", ""];
        argv.extend_from_slice(&tail[1..]);
        Args::parse(&argv).unwrap()
    }

    #[test]
    fn states_round_trip_through_the_scripts_encodings() {
        let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
        let now = 1_700_000_000_000_000;
        let tb = TokenBucket::new(quota);
        let bucket = Bucket::from_parts(7, now - 5);
        let raw = tb.encode(&bucket);
        assert_eq!(raw.len(), 12);
        assert_eq!(tb.decode(&raw, now, 0), Ok(bucket));

        let gcra = Gcra::new(quota);
        assert_eq!(&*gcra.encode(&(now + 3)), b"1700000000000003");
        assert_eq!(&*gcra.encode(&0), b"0");
        assert_eq!(&*gcra.encode(&u64::MAX), u64::MAX.to_string().as_bytes());
        assert_eq!(gcra.decode(b"1700000000000003", now, 0), Ok(now + 3));
        assert_eq!(
            gcra.decode(b"x1", now, 0),
            Err("not a timestamp: \"x1\"".to_owned())
        );

        let sc = SlidingCounter::new(quota);
        let windows = Windows::from_parts(now / sc.window_micros(), 3, 4);
        assert_eq!(sc.decode(&sc.encode(&windows), now, 0), Ok(windows));
        let too_many = Windows::from_parts(1, 3, 11);
        assert_eq!(
            sc.decode(&sc.encode(&too_many), now, 0),
            Err("window 1, counts 3 and 11 of 10".to_owned())
        );
    }
}
