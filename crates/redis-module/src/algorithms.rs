//! Each algorithm as the module runs it: built back from the parameters the
//! scripts take, its state read and written in the scripts' encoding, and
//! checked as the scripts check it.

use std::time::Duration;

use ratelab_core::{Algorithm, MAX_RECENT_SHIFTS, Quota, Shift, Shifts};
use ratelab_fixed_window::{Counter, FixedWindow};
use ratelab_gcra::Gcra;
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue, Level};
use ratelab_sliding_window::{SlidingCounter, SlidingLog, Windows};
use ratelab_token_bucket::{Bucket, TokenBucket};

use crate::args::{Args, MAX_PARAMS};
use crate::lua::{self, tostring};

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

    /// The algorithm for these arguments (and a settlement's `actual`), or
    /// `None` when the script would answer "invalid arguments" (its own
    /// checks: exactly its parameters, a cost or an actual above the
    /// capacity, a zero interval) or when no quota has these parameters.
    fn from_args(args: &Args, actual: Option<u64>) -> Option<Self> {
        let given = args.params().filter(|p| p.len() == Self::PARAMS)?;
        let algorithm = Self::from_params(given)?;
        let capacity = algorithm.capacity();
        (algorithm.params()[..Self::PARAMS] == *given
            && args.cost <= capacity
            && actual.is_none_or(|actual| actual <= capacity))
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

/// The ceilings of stored state (`lua/README.md`, "State"): settlements
/// charge debt whatever the room, once per receipt, so a key may owe far
/// more than its capacity, up to these. A debt may end up to 2^52 + 2^51 µs
/// (with `now` at most 2^52 and a tolerance below 2^50 + 2^32, every sum the
/// algorithms make stays below 2^53, exact in the scripts' doubles).
pub(crate) const MAX_END: u64 = (1 << 52) + (1 << 51);
/// A window may count up to 2^36 units (times 65,536 steps, below 2^53).
pub(crate) const MAX_COUNT: u64 = 1 << 36;
/// A sliding log may hold this many units (one sorted-set member each).
pub(crate) const MAX_LOG_UNITS: u64 = 100_000;
/// A debt's ledger stops at [`LEDGER_CEILING`](ratelab_core::LEDGER_CEILING): past it, a stored ledger is
/// corrupt (the algorithms never take it further).
///
/// A debt's recent shifts follow its state, 24 bytes each
/// (`struct '<ddd'`: before, position, at), at most [`MAX_RECENT_SHIFTS`].
pub(crate) const SHIFT_SIZE: usize = 24;
/// The longest tail of shifts a debt's state may have.
pub(crate) const MAX_TAIL: usize = SHIFT_SIZE * MAX_RECENT_SHIFTS;
/// Numbers from 2^53 up are not exact in the scripts' doubles: a shift
/// recorded at such a position (a stamp's `at + mark`) cannot be stored.
const EXACT: u64 = 1 << 53;

/// A key's state as stored: the algorithm's, its ledger (a debt's shifts,
/// or a window's fence), and the latest instant it was written at (the
/// debts that keep one beside their state; 0 for the others).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored<S, L> {
    pub(crate) state: S,
    pub(crate) ledger: L,
    pub(crate) latest: u64,
}

/// The state an algorithm keeps for a key, as stored.
pub(crate) type StoredOf<A> = Stored<<A as Algorithm>::State, <A as Algorithm>::Ledger>;

/// An algorithm whose state is one Redis string, in the encoding its script
/// writes.
pub(crate) trait StringState: Params {
    /// The length of the stored state: exact for a window; a debt's is
    /// followed by 0 to [`MAX_RECENT_SHIFTS`] shifts of [`SHIFT_SIZE`]
    /// bytes.
    const SIZE: usize;

    /// A debt (GCRA, token bucket, leaky meter and queue): a settlement
    /// decides at the latest instant the key was written at, if now is
    /// earlier, and the ledger's recent shifts follow the state. The
    /// windows keep their window index instead, and a fence.
    const DEBT: bool;

    /// The state in `raw` (the first [`StringState::SIZE`] bytes of the
    /// string), with a ledger of its total only (a debt's shifts are read
    /// by [`StringState::read_shifts`]), or what is wrong with it, worded as
    /// the script words it (`now` and `skew` bound the instants it may
    /// hold).
    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<StoredOf<Self>, String>;

    /// `stored` as the script writes it: the state, then a debt's recent
    /// shifts.
    fn encode(&self, stored: &StoredOf<Self>) -> Encoded;

    /// Adds the shifts stored in `tail` (what follows the state: a whole
    /// number of shifts, at most [`MAX_RECENT_SHIFTS`]) to `ledger`, a
    /// total with none yet; or what is wrong with them, worded as the
    /// script words it. Nothing to read for a window (its tail is empty).
    fn read_shifts(&self, ledger: &mut Self::Ledger, tail: &[u8]) -> Result<(), String> {
        let _ = (ledger, tail);
        Ok(())
    }

    /// The latest instant the key was written at.
    fn latest(&self, stored: &StoredOf<Self>) -> u64 {
        stored.latest
    }

    /// What is past a ceiling after a settlement or a reset, worded as the
    /// script words it.
    fn out_of_range(&self, stored: &StoredOf<Self>) -> Option<String>;

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

/// A state as a script writes it, on the stack: at most 32 bytes (four
/// doubles), then a debt's tail of shifts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Encoded {
    bytes: [u8; 32 + MAX_TAIL],
    len: usize,
}

impl Encoded {
    /// Nothing yet.
    pub(crate) fn new() -> Encoded {
        Encoded {
            bytes: [0; 32 + MAX_TAIL],
            len: 0,
        }
    }

    /// Appends `part`: what fits in a state and its tail, no more (the
    /// callers' lengths are bounded).
    pub(crate) fn push(&mut self, part: &[u8]) {
        let end = self.len + part.len();
        self.bytes[self.len..end].copy_from_slice(part);
        self.len = end;
    }

    fn from_parts(parts: &[&[u8]]) -> Encoded {
        let mut out = Encoded::new();
        for part in parts {
            out.push(part);
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
    let mut out = Encoded::new();
    for &v in values {
        out.push(&double(v).to_le_bytes());
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

/// A debt's ledger of `total` with no shifts yet: `None` past the ceiling.
fn total_only(total: u64) -> Option<Shifts> {
    Shifts::from_parts(total, Vec::new())
}

/// `read_shifts` of the prologue: the shifts stored in `tail` (a whole
/// number of them, at most [`MAX_RECENT_SHIFTS`]), oldest first, added to
/// `ledger` (its total only so far), as `Shifts::from_parts` accepts them:
/// each number an integer below 2^53, each `before` below the next one's,
/// the last one's below the total. Checked in the script's order, so that
/// the first fault found is the one named.
fn read_debt_shifts(ledger: &mut Shifts, tail: &[u8]) -> Result<(), String> {
    let n = tail.len() / SHIFT_SIZE;
    let total = ledger.total();
    let mut recent: Vec<Shift> = Vec::with_capacity(n);
    for (i, raw) in tail.chunks_exact(SHIFT_SIZE).enumerate() {
        let values: [f64; 3] = doubles(raw);
        let Some([before, position, at]) = integers(values) else {
            let [before, position, at] = values;
            return Err(format!(
                "shift {} of {n}: before {}, position {}, at {}",
                i + 1,
                tostring(before),
                tostring(position),
                tostring(at)
            ));
        };
        if let Some(previous) = recent.last()
            && previous.before >= before
        {
            return Err(format!(
                "shift {i} of {n}: before {}, not below {before}",
                previous.before
            ));
        }
        recent.push(Shift {
            before,
            position,
            at,
        });
    }
    if let Some(last) = recent.last()
        && last.before >= total
    {
        return Err(format!(
            "shift {n} of {n}: before {}, not below {total}",
            last.before
        ));
    }
    *ledger =
        Shifts::from_parts(total, recent).ok_or_else(|| format!("{n} shifts out of order"))?;
    Ok(())
}

/// A debt's recent shifts, as the script writes them after its state.
fn push_shifts(out: &mut Encoded, ledger: &Shifts) {
    for shift in ledger.recent() {
        for value in [shift.before, shift.position, shift.at] {
            out.push(&double(value).to_le_bytes());
        }
    }
}

/// The three doubles of GCRA's and the leaky queue's state: the instant it
/// is full again, the ledger's total, the latest instant written; `what`
/// names the instant in the error message.
fn decode_instant(
    raw: &[u8],
    now: u64,
    skew: u64,
    what: &str,
) -> Result<Stored<u64, Shifts>, String> {
    let values: [f64; 3] = doubles(raw);
    let Some((end, ledger, latest)) = integers(values)
        .filter(|[end, _, _]| *end <= MAX_END)
        .and_then(|[end, total, latest]| Some((end, total_only(total)?, latest)))
    else {
        let [end, ledger, latest] = values;
        return Err(format!(
            "{what} {}, ledger {}, written at {}",
            tostring(end),
            tostring(ledger),
            tostring(latest)
        ));
    };
    if latest > now.saturating_add(skew) {
        return Err(format!("written at {latest}, after now"));
    }
    Ok(Stored {
        state: end,
        ledger,
        latest,
    })
}

/// `stored` of GCRA or the leaky queue as the script writes it.
fn encode_instant(stored: &Stored<u64, Shifts>) -> Encoded {
    let mut out = pack_doubles(&[stored.state, stored.ledger.total(), stored.latest]);
    push_shifts(&mut out, &stored.ledger);
    out
}

/// What is past a ceiling in a debt's state that ends at `end`: the end
/// itself, or a shift recorded at a position no double holds exactly (a
/// stamp's `at + mark` from 2^53 up, which only ledgers grown by resets
/// near the ceilings reach).
fn debt_out_of_range(end: u64, ledger: &Shifts) -> Option<String> {
    if end > MAX_END {
        return Some(format!("debt until {end}, past 2^52 + 2^51"));
    }
    ledger
        .recent()
        .iter()
        .any(|shift| shift.position >= EXACT)
        .then(|| "a shift's position at 2^53 or past".to_owned())
}

impl StringState for Gcra {
    /// `struct '<ddd'`: the TAT, the ledger's total, the latest instant
    /// written; then the ledger's recent shifts.
    const SIZE: usize = 24;
    const DEBT: bool = true;

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<Stored<u64, Shifts>, String> {
        decode_instant(raw, now, skew, "TAT")
    }

    fn encode(&self, stored: &Stored<u64, Shifts>) -> Encoded {
        encode_instant(stored)
    }

    fn read_shifts(&self, ledger: &mut Shifts, tail: &[u8]) -> Result<(), String> {
        read_debt_shifts(ledger, tail)
    }

    fn out_of_range(&self, stored: &Stored<u64, Shifts>) -> Option<String> {
        debt_out_of_range(stored.state, &stored.ledger)
    }

    fn admits_all_up_to(&self, latest: u64, now: u64, cost: u32) -> bool {
        admits_at_latest(self, latest, now, cost)
    }
}

impl StringState for LeakyQueue {
    /// `struct '<ddd'`: the next free slot, the ledger's total, the latest
    /// instant written; then the ledger's recent shifts.
    const SIZE: usize = 24;
    const DEBT: bool = true;

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<Stored<u64, Shifts>, String> {
        decode_instant(raw, now, skew, "next slot")
    }

    fn encode(&self, stored: &Stored<u64, Shifts>) -> Encoded {
        encode_instant(stored)
    }

    fn read_shifts(&self, ledger: &mut Shifts, tail: &[u8]) -> Result<(), String> {
        read_debt_shifts(ledger, tail)
    }

    fn out_of_range(&self, stored: &Stored<u64, Shifts>) -> Option<String> {
        debt_out_of_range(stored.state, &stored.ledger)
    }

    fn admits_all_up_to(&self, latest: u64, now: u64, cost: u32) -> bool {
        admits_at_latest(self, latest, now, cost)
    }
}

impl StringState for TokenBucket {
    /// `struct '<Iddd'`: whole tokens as a 4-byte integer, the instant they
    /// were counted, the ledger's total and the latest instant written, as
    /// doubles; then the ledger's recent shifts.
    const SIZE: usize = 28;
    const DEBT: bool = true;

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<Stored<Bucket, Shifts>, String> {
        let tokens = u64::from(u32::from_le_bytes(raw[..4].try_into().expect("four bytes")));
        let values: [f64; 3] = doubles(&raw[4..]);
        let capacity = self.capacity();
        let full_at = |last: u64| {
            u128::from(last)
                + u128::from(capacity.saturating_sub(tokens)) * u128::from(self.interval_micros())
        };
        let Some((last, ledger, latest)) = integers(values)
            .filter(|[last, _, _]| tokens <= capacity && full_at(*last) <= u128::from(MAX_END))
            .and_then(|[last, total, latest]| Some((last, total_only(total)?, latest)))
        else {
            let [last, ledger, latest] = values;
            return Err(format!(
                "{} tokens of {capacity}, at {}, ledger {}, written at {}",
                tostring(double(tokens)),
                tostring(last),
                tostring(ledger),
                tostring(latest)
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

    fn encode(&self, stored: &Stored<Bucket, Shifts>) -> Encoded {
        let bucket = &stored.state;
        let tokens = u32::try_from(bucket.tokens()).expect("at most the capacity, a u32");
        let mut out = Encoded::from_parts(&[
            &tokens.to_le_bytes(),
            &double(bucket.last()).to_le_bytes(),
            &double(stored.ledger.total()).to_le_bytes(),
            &double(stored.latest).to_le_bytes(),
        ]);
        push_shifts(&mut out, &stored.ledger);
        out
    }

    fn read_shifts(&self, ledger: &mut Shifts, tail: &[u8]) -> Result<(), String> {
        read_debt_shifts(ledger, tail)
    }

    fn out_of_range(&self, stored: &Stored<Bucket, Shifts>) -> Option<String> {
        debt_out_of_range(self.full_at(&stored.state), &stored.ledger)
    }
}

impl StringState for LeakyMeter {
    /// `struct '<ddd'`: µs of draining left, the instant it was measured
    /// (the latest instant written), the ledger's total; then the ledger's
    /// recent shifts.
    const SIZE: usize = 24;
    const DEBT: bool = true;

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<Stored<Level, Shifts>, String> {
        let values = doubles(raw);
        let Some((water, at, ledger)) = integers(values)
            .filter(|[water, at, _]| u128::from(*at) + u128::from(*water) <= u128::from(MAX_END))
            .and_then(|[water, at, total]| Some((water, at, total_only(total)?)))
        else {
            let [water, at, ledger] = values;
            return Err(format!(
                "level {}, at {}, ledger {}",
                tostring(water),
                tostring(at),
                tostring(ledger)
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

    fn encode(&self, stored: &Stored<Level, Shifts>) -> Encoded {
        let level = &stored.state;
        let mut out = pack_doubles(&[level.water(), level.at(), stored.ledger.total()]);
        push_shifts(&mut out, &stored.ledger);
        out
    }

    fn read_shifts(&self, ledger: &mut Shifts, tail: &[u8]) -> Result<(), String> {
        read_debt_shifts(ledger, tail)
    }

    /// The level's own instant.
    fn latest(&self, stored: &Stored<Level, Shifts>) -> u64 {
        stored.state.at()
    }

    fn out_of_range(&self, stored: &Stored<Level, Shifts>) -> Option<String> {
        debt_out_of_range(self.full_at(&stored.state), &stored.ledger)
    }
}

/// A window that starts after now (beyond a stepped-back clock) was never
/// written with this window length: it would refuse until a far future.
fn window_after_now(index: u64, window: u64, now: u64, skew: u64) -> bool {
    u128::from(index) * u128::from(window) > u128::from(now) + u128::from(skew)
}

impl StringState for FixedWindow {
    /// `struct '<ddd'`: window index, units counted in it, fence.
    const SIZE: usize = 24;
    const DEBT: bool = false;

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<Stored<Counter, u64>, String> {
        let values = doubles(raw);
        let Some([index, count, fence]) = integers(values)
            .filter(|[index, count, fence]| *count <= MAX_COUNT && *fence <= index + 1)
        else {
            let [index, count, fence] = values;
            return Err(format!(
                "window {}, count {}, fence {}",
                tostring(index),
                tostring(count),
                tostring(fence)
            ));
        };
        if window_after_now(index, self.window_micros(), now, skew) {
            return Err(format!("window {index} starts after now"));
        }
        Ok(Stored {
            state: Counter::from_parts(index, count),
            ledger: fence,
            latest: 0,
        })
    }

    fn encode(&self, stored: &Stored<Counter, u64>) -> Encoded {
        let counter = &stored.state;
        pack_doubles(&[counter.index(), counter.count(), stored.ledger])
    }

    fn out_of_range(&self, stored: &Stored<Counter, u64>) -> Option<String> {
        let count = stored.state.count();
        (count > MAX_COUNT).then(|| format!("{count} units in a window, past 2^36"))
    }
}

impl StringState for SlidingCounter {
    /// `struct '<dddd'`: current window index, previous count, current
    /// count, fence.
    const SIZE: usize = 32;
    const DEBT: bool = false;

    fn decode(&self, raw: &[u8], now: u64, skew: u64) -> Result<Stored<Windows, u64>, String> {
        let values = doubles(raw);
        let Some([index, previous, current, fence]) =
            integers(values).filter(|[index, previous, current, fence]| {
                *previous <= MAX_COUNT && *current <= MAX_COUNT && *fence <= index + 1
            })
        else {
            let [index, previous, current, fence] = values;
            return Err(format!(
                "window {}, counts {} and {}, fence {}",
                tostring(index),
                tostring(previous),
                tostring(current),
                tostring(fence)
            ));
        };
        if window_after_now(index, self.window_micros(), now, skew) {
            return Err(format!("window {index} starts after now"));
        }
        Ok(Stored {
            state: Windows::from_parts(index, previous, current),
            ledger: fence,
            latest: 0,
        })
    }

    fn encode(&self, stored: &Stored<Windows, u64>) -> Encoded {
        let windows = &stored.state;
        pack_doubles(&[
            windows.index(),
            windows.previous(),
            windows.current(),
            stored.ledger,
        ])
    }

    fn out_of_range(&self, stored: &Stored<Windows, u64>) -> Option<String> {
        let current = stored.state.current();
        (current > MAX_COUNT).then(|| format!("{current} units in a window, past 2^36"))
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
        assert!(Gcra::from_args(&args(&["5", "100", "999", "10"]), None).is_none());
        assert!(Gcra::from_args(&args(&["5", "100", "1000", "10"]), None).is_some());
        // A cost above the capacity, a zero interval, a missing parameter,
        // one too many.
        assert!(Gcra::from_args(&args(&["11", "100", "1000", "10"]), None).is_none());
        assert!(Gcra::from_args(&args(&["1", "0", "0", "10"]), None).is_none());
        assert!(Gcra::from_args(&args(&["1", "100", "1000"]), None).is_none());
        assert!(Gcra::from_args(&args(&["1", "100", "1000", "10", "0"]), None).is_none());
        // A settlement's actual within the capacity too.
        assert!(Gcra::from_args(&args(&["1", "100", "1000", "10"]), Some(10)).is_some());
        assert!(Gcra::from_args(&args(&["1", "100", "1000", "10"]), Some(11)).is_none());
        let counter = ["1", "1000", "10", "1", "1000"];
        assert!(SlidingCounter::from_args(&args(&counter), None).is_some());
        let counter = ["1", "1000", "10", "2", "500"];
        assert!(SlidingCounter::from_args(&args(&counter), None).is_none());
    }

    fn args(tail: &[&str]) -> Args {
        let mut argv = vec!["0", tail[0], "0", ""];
        argv.extend_from_slice(&tail[1..]);
        Args::parse(&argv).unwrap()
    }

    /// A ledger of `total` with these shifts (before, position, at).
    fn shifts(total: u64, recent: &[(u64, u64, u64)]) -> Shifts {
        let recent = recent
            .iter()
            .map(|&(before, position, at)| Shift {
                before,
                position,
                at,
            })
            .collect();
        Shifts::from_parts(total, recent).expect("well ordered")
    }

    /// `stored` encoded, decoded back: its state, then its shifts.
    fn round_trip<A: StringState>(
        algorithm: &A,
        stored: &StoredOf<A>,
        now: u64,
    ) -> Result<StoredOf<A>, String> {
        let raw = algorithm.encode(stored);
        let (state, tail) = raw.split_at(A::SIZE);
        let mut back = algorithm.decode(state, now, 0)?;
        algorithm.read_shifts(&mut back.ledger, tail)?;
        Ok(back)
    }

    #[test]
    fn states_round_trip_through_the_scripts_encodings() {
        let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
        let now = 1_700_000_000_000_000;
        let tb = TokenBucket::new(quota);
        let bucket = Stored {
            state: Bucket::from_parts(7, now - 5),
            ledger: shifts(9, &[]),
            latest: now,
        };
        let raw = tb.encode(&bucket);
        assert_eq!(raw.len(), TokenBucket::SIZE);
        assert_eq!(round_trip(&tb, &bucket, now), Ok(bucket.clone()));
        // With shifts: 24 bytes each after the state.
        let shifted = Stored {
            ledger: shifts(9, &[(0, 0, now - 9), (4, now + 3, now - 2)]),
            ..bucket
        };
        assert_eq!(tb.encode(&shifted).len(), TokenBucket::SIZE + 48);
        assert_eq!(round_trip(&tb, &shifted, now), Ok(shifted));

        let gcra = Gcra::new(quota);
        let tat = Stored {
            state: now + 3,
            ledger: Shifts::default(),
            latest: now - 1,
        };
        let raw = gcra.encode(&tat);
        assert_eq!(raw.len(), Gcra::SIZE);
        assert_eq!(round_trip(&gcra, &tat, now), Ok(tat.clone()));
        // Written after now (beyond the skew): no clock of this key's got there.
        let ahead = Stored {
            latest: now + 2,
            ..tat.clone()
        };
        assert_eq!(
            gcra.decode(&gcra.encode(&ahead), now, 1),
            Err(format!("written at {}, after now", now + 2))
        );
        // Sixty-four shifts, the most kept.
        let full: Vec<(u64, u64, u64)> = (0..64).map(|i| (i, 1000 + i, now - i)).collect();
        let many = Stored {
            ledger: shifts(64, &full),
            ..tat
        };
        assert_eq!(gcra.encode(&many).len(), Gcra::SIZE + MAX_TAIL);
        assert_eq!(round_trip(&gcra, &many, now), Ok(many));

        let sc = SlidingCounter::new(quota);
        let windows = Stored {
            state: Windows::from_parts(now / sc.window_micros(), 3, 4),
            ledger: 0,
            latest: 0,
        };
        assert_eq!(sc.decode(&sc.encode(&windows), now, 0), Ok(windows));
        // Past the limit is a settlement's debt; past the fence's own window
        // is no state a script writes.
        let fenced = Stored {
            state: Windows::from_parts(1, 3, 11),
            ledger: 3,
            latest: 0,
        };
        assert_eq!(
            sc.decode(&sc.encode(&fenced), now, 0),
            Err("window 1, counts 3 and 11, fence 3".to_owned())
        );
    }

    #[test]
    fn shifts_are_read_as_from_parts_accepts_them() {
        let le =
            |values: &[f64]| -> Vec<u8> { values.iter().flat_map(|v| v.to_le_bytes()).collect() };
        let read = |total: u64, tail: &[f64]| {
            let mut ledger = total_only(total).unwrap();
            read_debt_shifts(&mut ledger, &le(tail)).map(|()| ledger)
        };
        assert_eq!(
            read(10, &[2.0, 5.0, 7.0, 6.0, 0.0, 8.0]),
            Ok(shifts(10, &[(2, 5, 7), (6, 0, 8)]))
        );
        assert_eq!(
            read(10, &[2.0, 0.5, 7.0]),
            Err("shift 1 of 1: before 2, position 0.5, at 7".to_owned())
        );
        assert_eq!(
            read(10, &[2.0, 5.0, 7.0, 2.0, 0.0, 8.0]),
            Err("shift 1 of 2: before 2, not below 2".to_owned())
        );
        assert_eq!(
            read(10, &[10.0, 5.0, 7.0]),
            Err("shift 1 of 1: before 10, not below 10".to_owned())
        );
        assert_eq!(
            read(10, &[2.0, 5.0, 9_007_199_254_740_992.0]),
            Err("shift 1 of 1: before 2, position 5, at 9.007199254741e+15".to_owned())
        );
    }

    #[test]
    fn a_shift_no_double_holds_is_out_of_range() {
        let at = |position| shifts(10, &[(2, position, 7)]);
        assert_eq!(debt_out_of_range(5, &at(EXACT - 1)), None);
        assert_eq!(
            debt_out_of_range(5, &at(EXACT)),
            Some("a shift's position at 2^53 or past".to_owned())
        );
    }
}
