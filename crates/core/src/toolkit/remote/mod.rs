//! [`RemoteForm`]: an algorithm as a store outside this process runs it (the
//! Redis scripts, ratelab's native Redis module, the clients in other
//! languages), described once, by the algorithm's own crate.
//!
//! A remote store runs the algorithm's decision logic on state it keeps
//! itself, one key per user key, and is called with numbers: the algorithm's
//! parameters (derived from its [`Quota`]), the instant, the cost, the
//! operation. The remote form is what such a store needs beyond
//! [`Algorithm`]:
//!
//! - a short **code** that ends its keys (`gcra`, `tb`, ...) and a **name**
//!   its errors and the module's command carry;
//! - its **parameters** from a quota, and back: [`RemoteForm::from_params`]
//!   builds the algorithm from the numbers a caller sent, refusing what no
//!   quota yields, exactly as the scripts and the module refuse it;
//! - the **encoding of its stored state**, the scripts' own byte for byte
//!   (the State table of `lua/README.md`), checked as the scripts check it:
//!   [`RemoteForm::encode`] and [`RemoteForm::decode`] for the whole value,
//!   and, for a state kept in one string, [`StringForm`]'s parts that the
//!   module reads in place;
//! - its **script**: the algorithm's Lua file, which the store sends after
//!   the shared [`PROLOGUE`].
//!
//! Nothing here talks to Redis: `ratelab-redis` and the module are generic
//! over [`RemoteForm`], so an algorithm is its crate, its script and one arm
//! of the facade's `AlgorithmKind`.
//!
//! ```
//! use ratelab_core::toolkit::remote::{Params, rate_quota, window_quota};
//!
//! // 10 units, one back every 200 ms: a quota of 5 per second, bursts of 10
//! // (or any other with that rate and burst).
//! let quota = rate_quota(200_000, 10).expect("a quota has them");
//! assert_eq!((quota.emission_interval_micros(), quota.burst()), (200_000, 10));
//! // A window of 10 units per 2 s (5 per second, or 10 per 2 s).
//! assert_eq!(window_quota(2_000_000, 10).map(|q| q.window_micros()), Some(2_000_000));
//! // No quota has a burst of zero units.
//! assert_eq!(rate_quota(200_000, 0), None);
//! let params = Params::new(&[200_000, 2_000_000, 10]);
//! assert_eq!(params.to_string(), "200000,2000000,10");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod lua;

use std::fmt;
use std::time::Duration;

#[cfg(doc)]
use crate::LEDGER_CEILING;
use crate::{
    Algorithm, Ledger, MAX_GIVEN, MAX_RECENT_SHIFTS, MAX_SETTLED, Quota, Shift, Shifts, Spent,
    Stamp,
};

/// The scripts' shared prologue (`lua/prologue.lua`): it reads the
/// arguments, the clock and the deadline, and holds the helpers every
/// algorithm's script uses. The script a store sends is this, followed
/// immediately by the algorithm's [`RemoteForm::SCRIPT`].
pub const PROLOGUE: &str = include_str!("../../../lua/prologue.lua");

/// The version of the stored states' format, the first part of every key's
/// fingerprint input (`v3:<code>:<params>`): a new format names new keys, so
/// that no script ever reads a state written in another.
pub const STATE_FORMAT: &str = "v3";

/// The most parameters an algorithm takes (the sliding counter's four).
pub const MAX_PARAMS: usize = 4;

/// The latest instant a debt may end at, µs: 2^52 + 2^51. Settlements
/// charge debt whatever the room, once per receipt, so a key may owe far
/// more than its capacity, up to this; with `now` at most 2^52 and a
/// tolerance below 2^50 + 2^32, every sum the algorithms make stays below
/// 2^53, exact in the scripts' doubles.
pub const MAX_END: u64 = (1 << 52) + (1 << 51);

/// The most units a window may count: 2^36 (times 65,536 steps, below 2^53).
pub const MAX_COUNT: u64 = 1 << 36;

/// The most units a sliding log may hold on a store (one sorted-set member
/// each).
pub const MAX_LOG_UNITS: u64 = 100_000;

/// 2^53: numbers from it up are not exact in the scripts' doubles, so no
/// stored number reaches it (a debt's shift recorded at such a position is
/// out of range).
pub const EXACT: u64 = 1 << 53;

/// The bytes of one stored shift, after a debt's state: `struct '<ddd'`
/// (before, position, at).
pub const SHIFT_SIZE: usize = 24;

/// The longest tail of shifts a debt's state may have.
pub const MAX_TAIL: usize = SHIFT_SIZE * MAX_RECENT_SHIFTS;

/// The bytes of a window's ledger's head, after its state, when it has more
/// than a fence: `struct '<ddd'` (the floor's `at` and `mark`, how many
/// tallies follow).
pub const SPENT_HEAD: usize = 24;

/// The bytes of one tally or one settled stamp of a window's ledger:
/// `struct '<dd'`.
pub const SPENT_ENTRY: usize = 16;

/// The longest tail a window's ledger may have.
pub const MAX_SPENT_TAIL: usize = SPENT_HEAD + SPENT_ENTRY * (MAX_GIVEN + MAX_SETTLED);

/// The longest fixed part of a stored string (the sliding counter's four
/// doubles).
const MAX_FIXED: usize = 32;

/// The parameters a store is called with (`ARGV[7...]` of the scripts), at
/// most [`MAX_PARAMS`], on the stack. Reads as a slice; displays as the key
/// fingerprint joins them (`200000,2000000,10`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    values: [u64; MAX_PARAMS],
    len: usize,
}

impl Params {
    /// `values`, in order.
    ///
    /// # Panics
    ///
    /// With more than [`MAX_PARAMS`] values: no algorithm takes them.
    pub const fn new(values: &[u64]) -> Self {
        assert!(values.len() <= MAX_PARAMS, "at most MAX_PARAMS parameters");
        let mut out = [0; MAX_PARAMS];
        let mut i = 0;
        while i < values.len() {
            out[i] = values[i];
            i += 1;
        }
        Params {
            values: out,
            len: values.len(),
        }
    }
}

impl std::ops::Deref for Params {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        &self.values[..self.len]
    }
}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, value) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{value}")?;
        }
        Ok(())
    }
}

impl PartialEq<[u64]> for Params {
    fn eq(&self, other: &[u64]) -> bool {
        **self == *other
    }
}

/// What a store keeps under a key for an algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Shape {
    /// One string: the state's fixed part ([`StringForm::SIZE`] bytes),
    /// then the ledger's tail: a debt's recent shifts, [`SHIFT_SIZE`] bytes
    /// each, or a window's settlements ([`SPENT_HEAD`], then
    /// [`SPENT_ENTRY`] bytes each).
    String,
    /// A sorted set (the sliding log: one member per admitted unit, scored
    /// by the µs it was admitted at).
    SortedSet,
}

/// A key's whole value as a store holds it, in the scripts' encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// [`Shape::String`]: the string's bytes.
    String(Vec<u8>),
    /// [`Shape::SortedSet`]: each member and its score (an integer: the
    /// scripts score by µs), in no particular order.
    SortedSet(Vec<(Vec<u8>, u64)>),
}

/// A key's state as a store keeps it: the algorithm's, its ledger (a debt's
/// [`Shifts`], a window's fence), and the latest instant it was written at
/// (the debts that keep one beside their state; 0 for the others).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Stored<S, L> {
    /// The algorithm's state.
    pub state: S,
    /// Its ledger.
    pub ledger: L,
    /// The latest instant a check, settlement or reset wrote the key at, µs.
    pub latest: u64,
}

/// The state an algorithm keeps for a key, as stored.
pub type StoredOf<A> = Stored<<A as Algorithm>::State, <A as Algorithm>::Ledger>;

/// An algorithm's remote form: what a store outside this process (the
/// Redis scripts, the native module, the Python and Node clients) needs to
/// run it, and how it stores its state. See the [module docs](self).
///
/// Contract for implementations:
///
/// - [`RemoteForm::params`] of an algorithm built from any quota builds it
///   back through [`RemoteForm::from_params`], with the same parameters, and
///   parameters no quota yields are refused (`None`), as the script refuses
///   them (`invalid arguments`);
/// - [`RemoteForm::decode`] reads back exactly what [`RemoteForm::encode`]
///   writes, refuses everything else a script would refuse as `corrupt
///   state`, and words the refusal as the script does;
/// - [`RemoteForm::SCRIPT`] mirrors the algorithm's `decide`, `stamp`,
///   `settle`, `reset` and `forgettable_at` exactly, on that encoding.
pub trait RemoteForm: Algorithm<Ledger: StoredLedger> + Clone {
    /// The algorithm's name ([`Algorithm::name`]): in the scripts' and the
    /// module's error replies (`ratelab <name>: ...`) and in the module's
    /// command ([`command_name`]).
    const NAME: &'static str;

    /// A short code that ends the algorithm's keys (`gcra`, `tb`, ...):
    /// short, because on Redis the key's name is a good part of the memory
    /// it takes.
    const CODE: &'static str;

    /// The script's file name (`gcra.lua`): in the algorithm crate's `lua/`
    /// folder, and linked from the repository's `lua/`.
    const SCRIPT_FILE: &'static str;

    /// The script's source, the algorithm's Lua file: a store sends
    /// [`PROLOGUE`] followed by it ([`RemoteForm::script`]).
    const SCRIPT: &'static str;

    /// How many parameters the script takes.
    const PARAMS: usize;

    /// How a store keeps the state.
    const SHAPE: Shape;

    /// The largest burst a store keeps for one key, and why, if there is
    /// one (a sliding log keeps a member per unit): a larger one is
    /// [`RemoteForm::unsupported`], refused before any call, and its
    /// parameters are `invalid arguments` to the script. `None` by default.
    const MAX_STORED_BURST: Option<(u32, &'static str)> = None;

    /// A debt (GCRA, token bucket, leaky meter and queue): its settlements
    /// charge whatever the room, so its waits may run past
    /// [`RemoteForm::max_wait_micros`] up to [`MAX_END`]; a settlement
    /// decides at the latest instant the key was written at; its ledger's
    /// recent shifts follow its state.
    const DEBT: bool = <Self::Ledger as StoredLedger>::SHIFTS;

    /// The parameters the script takes, derived from the quota.
    fn params(&self) -> Params;

    /// The algorithm whose quota yields `params` (exactly
    /// [`RemoteForm::PARAMS`] of them), if any: `None` for parameters no
    /// quota yields, as the script answers `invalid arguments`. The
    /// algorithm built may have other parameters where some are derived
    /// from others (a tolerance from the burst): [`RemoteForm::parse`]
    /// refuses those.
    fn from_params(params: &[u64]) -> Option<Self>;

    /// The longest `retry_after`, `reset_after` or `delay` a store answers
    /// from state checks wrote, µs (before any clock skew allowance): a
    /// reply beyond it is invalid, but for a debt's (see
    /// [`RemoteForm::DEBT`]).
    fn max_wait_micros(&self) -> u64;

    /// Why these parameters cannot run on a store, if they cannot: a burst
    /// above [`RemoteForm::MAX_STORED_BURST`]. Refused before any call.
    fn unsupported(&self) -> Option<&'static str> {
        let (max, why) = Self::MAX_STORED_BURST?;
        (self.capacity() > u64::from(max)).then_some(why)
    }

    /// What in `stored`, after a settlement or a reset, is past one of the
    /// protocol's ceilings ([`MAX_END`], [`MAX_COUNT`], [`MAX_LOG_UNITS`], a
    /// shift's position at [`EXACT`]), worded as the script words it; the
    /// store then answers `out of range` and writes nothing.
    fn out_of_range(&self, stored: &StoredOf<Self>) -> Option<String>;

    /// `stored` as the script writes it.
    fn encode(&self, stored: &StoredOf<Self>) -> Value;

    /// The state in `value`, read and checked as the script reads it at
    /// `now` (instants may be up to `skew` µs ahead), or what is wrong with
    /// it, worded as the script words it after `corrupt state at <key>: `.
    fn decode(&self, value: &Value, now: u64, skew: u64) -> Result<StoredOf<Self>, String>;

    /// The algorithm a caller's `params` name, checked as the script checks
    /// them: exactly [`RemoteForm::PARAMS`], some quota yielding them, every
    /// one as that quota gives it, and a burst a store keeps.
    fn parse(params: &[u64]) -> Option<Self> {
        if params.len() != Self::PARAMS {
            return None;
        }
        let algorithm = Self::from_params(params)?;
        (algorithm.params() == *params && algorithm.unsupported().is_none()).then_some(algorithm)
    }

    /// [`fingerprint_input`] of this algorithm on its quota: what a key's
    /// fingerprint hashes, and what a quota registry records.
    fn fingerprint_input(&self) -> String {
        fingerprint_input(Self::CODE, &self.params())
    }

    /// [`key_suffix`] of this algorithm on its quota: what ends its keys,
    /// after the user key.
    fn key_suffix(&self) -> String {
        key_suffix(Self::CODE, &self.fingerprint_input())
    }

    /// The native module's command that runs this algorithm with the
    /// script's arguments, replies and stored encodings
    /// ([`command_name`]: `RATELAB.GCRA`, ...).
    fn module_command(&self) -> String {
        command_name(Self::NAME)
    }

    /// The script a store sends: [`PROLOGUE`] followed by
    /// [`RemoteForm::SCRIPT`], no separator.
    fn script() -> String {
        let mut source = String::with_capacity(PROLOGUE.len() + Self::SCRIPT.len());
        source.push_str(PROLOGUE);
        source.push_str(Self::SCRIPT);
        source
    }
}

/// A [`RemoteForm`] whose state is one string ([`Shape::String`]): its fixed
/// part, then a debt's shifts. These are the parts the native module reads
/// and writes in place, without allocating; [`encode_string`] and
/// [`decode_string`] put them together as [`RemoteForm::encode`] and
/// [`RemoteForm::decode`].
pub trait StringForm: RemoteForm {
    /// The length of the fixed part: exact for a window's string; a debt's
    /// is followed by 0 to [`MAX_RECENT_SHIFTS`] shifts of [`SHIFT_SIZE`]
    /// bytes.
    const SIZE: usize;

    /// The state in `fixed` (the first [`StringForm::SIZE`] bytes), with a
    /// ledger of its total only (the shifts that follow are read by
    /// [`StoredLedger::read_tail`]), or what is wrong with it, worded as the
    /// script words it.
    fn decode_fixed(&self, fixed: &[u8], now: u64, skew: u64) -> Result<StoredOf<Self>, String>;

    /// The fixed part of `stored`, as the script writes it.
    fn encode_fixed(&self, stored: &StoredOf<Self>) -> Encoded;

    /// The latest instant the key was written at (the leaky meter's is its
    /// level's own instant).
    fn latest(&self, stored: &StoredOf<Self>) -> u64 {
        stored.latest
    }

    /// Whether a check of `cost` at `now` is admitted whatever the key
    /// holds, knowing only that no instant in it is later than `latest`
    /// (µs). `false` unless the algorithm can tell: the module then reads
    /// the key in place, as its write will store it again.
    fn admits_all_up_to(&self, latest: u64, now: u64, cost: u32) -> bool {
        let _ = (latest, now, cost);
        false
    }
}

/// A ledger as a store keeps it: a debt's [`Shifts`] have their total in the
/// state and their recent shifts after it; a window's [`Spent`] has its
/// fence in the state and, once it settled something, its floor, tallies
/// and settled stamps after it.
pub trait StoredLedger: Ledger {
    /// Shifts follow the state (a debt's ledger).
    const SHIFTS: bool;

    /// Whether a tail of `len` bytes has the size of one of this ledger's.
    fn tail_sized(len: usize) -> bool;

    /// Adds what `tail` (of a size [`StoredLedger::tail_sized`] accepts)
    /// holds to this ledger, read with what the state holds of it (a
    /// debt's total, a window's fence); or what is wrong with it, worded as
    /// the scripts word it.
    fn read_tail(&mut self, tail: &[u8]) -> Result<(), String>;

    /// Appends what follows the state.
    fn write_tail(&self, out: &mut Encoded);
}

impl StoredLedger for u64 {
    const SHIFTS: bool = false;

    fn tail_sized(len: usize) -> bool {
        len == 0
    }

    fn read_tail(&mut self, tail: &[u8]) -> Result<(), String> {
        debug_assert!(tail.is_empty(), "a fence has no tail");
        Ok(())
    }

    fn write_tail(&self, _out: &mut Encoded) {}
}

impl StoredLedger for Shifts {
    const SHIFTS: bool = true;

    fn tail_sized(len: usize) -> bool {
        len.is_multiple_of(SHIFT_SIZE) && len <= MAX_TAIL
    }

    /// `read_shifts` of the prologue: each number an integer below 2^53,
    /// each `before` below the next one's, the last one's below the total
    /// (the order [`Shifts::from_parts`] accepts), checked in the script's
    /// order, so that the first fault found is the one named.
    fn read_tail(&mut self, tail: &[u8]) -> Result<(), String> {
        let n = tail.len() / SHIFT_SIZE;
        let total = self.total();
        let mut recent: Vec<Shift> = Vec::with_capacity(n);
        for (i, raw) in tail.chunks_exact(SHIFT_SIZE).enumerate() {
            let values: [f64; 3] = doubles(raw);
            let Some([before, position, at]) = integers(values) else {
                let [before, position, at] = values;
                return Err(format!(
                    "shift {} of {n}: before {}, position {}, at {}",
                    i + 1,
                    lua::tostring(before),
                    lua::tostring(position),
                    lua::tostring(at)
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
        *self =
            Shifts::from_parts(total, recent).ok_or_else(|| format!("{n} shifts out of order"))?;
        Ok(())
    }

    fn write_tail(&self, out: &mut Encoded) {
        for shift in self.recent() {
            for value in [shift.before, shift.position, shift.at] {
                out.push_double(value);
            }
        }
    }
}

impl StoredLedger for Spent {
    const SHIFTS: bool = false;

    fn tail_sized(len: usize) -> bool {
        len == 0
            || (len >= SPENT_HEAD
                && (len - SPENT_HEAD).is_multiple_of(SPENT_ENTRY)
                && len <= MAX_SPENT_TAIL)
    }

    /// `read_spent` of the prologue: the floor and the number of tallies,
    /// the tallies (`at`, units), the settled stamps (`at`, `mark`), every
    /// number an integer below 2^53, as [`Spent::from_parts`] accepts them.
    fn read_tail(&mut self, tail: &[u8]) -> Result<(), String> {
        if tail.is_empty() {
            return Ok(());
        }
        let head: [f64; 3] = doubles(tail);
        let entries = (tail.len() - SPENT_HEAD) / SPENT_ENTRY;
        let Some([floor_at, floor_mark, tallies]) = integers(head)
            .filter(|[_, _, n]| usize::try_from(*n).is_ok_and(|n| n <= MAX_GIVEN && n <= entries))
        else {
            let [at, mark, n] = head;
            return Err(format!(
                "ledger floor {}:{}, {} tallies of {entries} entries",
                lua::tostring(at),
                lua::tostring(mark),
                lua::tostring(n)
            ));
        };
        let mut pairs = Vec::with_capacity(entries);
        for (i, raw) in tail[SPENT_HEAD..].chunks_exact(SPENT_ENTRY).enumerate() {
            let values: [f64; 2] = doubles(raw);
            let Some(pair) = integers(values) else {
                let [a, b] = values;
                return Err(format!(
                    "ledger entry {} of {entries}: {}, {}",
                    i + 1,
                    lua::tostring(a),
                    lua::tostring(b)
                ));
            };
            pairs.push(pair);
        }
        let tallies = usize::try_from(tallies).expect("at most MAX_GIVEN");
        let given = pairs[..tallies]
            .iter()
            .map(|&[at, units]| (at, units))
            .collect();
        let settled = pairs[tallies..]
            .iter()
            .map(|&[at, mark]| Stamp { at, mark })
            .collect();
        let floor = Stamp {
            at: floor_at,
            mark: floor_mark,
        };
        *self = Spent::from_parts(self.fence(), floor, given, settled)
            .ok_or_else(|| format!("ledger of {entries} entries out of order"))?;
        Ok(())
    }

    fn write_tail(&self, out: &mut Encoded) {
        if !self.has_tail() {
            return;
        }
        let floor = self.floor();
        out.push_double(floor.at);
        out.push_double(floor.mark);
        out.push_double(self.given().len() as u64);
        for &(at, units) in self.given() {
            out.push_double(at);
            out.push_double(units);
        }
        for stamp in self.settled() {
            out.push_double(stamp.at);
            out.push_double(stamp.mark);
        }
    }
}

/// The longest tail of any ledger.
const MAX_ANY_TAIL: usize = if MAX_TAIL > MAX_SPENT_TAIL {
    MAX_TAIL
} else {
    MAX_SPENT_TAIL
};

/// A stored string: at most 32 bytes of fixed part, then the ledger's
/// tail.
///
/// Its first 64 bytes sit on the stack, which holds every state
/// with no tail or a short one (GCRA's 24 bytes, a few shifts); a longer
/// string (a ledger's long tail, after settlements) moves to the heap. An
/// empty one costs a few words to make: a store's hot path makes one on
/// every call, whether or not it writes.
#[derive(Clone)]
pub struct Encoded {
    /// The bytes, while they fit.
    inline: [u8; INLINE],
    len: usize,
    /// Every byte, once they no longer fit in `inline`.
    spilled: Vec<u8>,
}

/// The bytes an [`Encoded`] holds on the stack.
const INLINE: usize = 64;

impl Encoded {
    /// Nothing yet.
    pub const fn new() -> Encoded {
        Encoded {
            inline: [0; INLINE],
            len: 0,
            spilled: Vec::new(),
        }
    }

    /// `values`, each a little-endian double (exact: every one an integer
    /// below 2^53), as Lua's `struct.pack('<d...')` writes them.
    pub fn doubles(values: &[u64]) -> Encoded {
        let mut out = Encoded::new();
        for &value in values {
            out.push_double(value);
        }
        out
    }

    /// Appends `part`.
    ///
    /// # Panics
    ///
    /// Past a fixed part and a full tail of shifts: no state is longer.
    pub fn push(&mut self, part: &[u8]) {
        let end = self.len + part.len();
        assert!(
            end <= MAX_FIXED + MAX_ANY_TAIL,
            "no stored string is longer than {} bytes",
            MAX_FIXED + MAX_ANY_TAIL
        );
        if self.spilled.is_empty() && end <= INLINE {
            self.inline[self.len..end].copy_from_slice(part);
        } else {
            if self.spilled.is_empty() {
                self.spilled.reserve(MAX_FIXED + MAX_ANY_TAIL);
                self.spilled.extend_from_slice(&self.inline[..self.len]);
            }
            self.spilled.extend_from_slice(part);
        }
        self.len = end;
    }

    /// Appends `value` as a little-endian double.
    pub fn push_double(&mut self, value: u64) {
        self.push(&lua::double(value).to_le_bytes());
    }
}

impl Default for Encoded {
    fn default() -> Self {
        Encoded::new()
    }
}

impl std::ops::Deref for Encoded {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        if self.spilled.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.spilled
        }
    }
}

impl PartialEq for Encoded {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Encoded {}

impl fmt::Debug for Encoded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Encoded({})", lua::show(self))
    }
}

/// `N` little-endian doubles from `raw`, as Lua's `struct.unpack('<d...')`
/// reads them.
///
/// # Panics
///
/// When `raw` holds fewer than `8 × N` bytes.
pub fn doubles<const N: usize>(raw: &[u8]) -> [f64; N] {
    std::array::from_fn(|i| {
        f64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().expect("eight bytes"))
    })
}

/// Each of `values` as the integer it stores (`stored(x)` of the
/// prologue), or `None` if one is no integer below 2^53.
pub fn integers<const N: usize>(values: [f64; N]) -> Option<[u64; N]> {
    let mut out = [0; N];
    for (o, v) in out.iter_mut().zip(values) {
        *o = lua::stored_integer(v)?;
    }
    Some(out)
}

/// A string as a store holds it, split as the scripts read it: the state
/// (with what its fixed part holds of the ledger) and the bytes of the
/// ledger's tail, unread; or what is wrong with it. A debt's string is
/// followed by 0 to [`MAX_RECENT_SHIFTS`] shifts of [`SHIFT_SIZE`] bytes; a
/// window's by nothing, or a ledger of [`SPENT_HEAD`] bytes and
/// [`SPENT_ENTRY`] bytes per entry.
pub fn split_string<'a, A: StringForm>(
    algorithm: &A,
    raw: &'a [u8],
    now: u64,
    skew: u64,
) -> Result<(StoredOf<A>, &'a [u8]), String> {
    let sized = raw
        .len()
        .checked_sub(A::SIZE)
        .is_some_and(<A::Ledger as StoredLedger>::tail_sized);
    if !sized {
        return Err(if A::DEBT {
            format!(
                "{} bytes, not {} plus 24 per shift, up to 64: {}",
                raw.len(),
                A::SIZE,
                lua::show(raw)
            )
        } else {
            format!(
                "{} bytes, not {} (plus a ledger of 24 and 16 per entry): {}",
                raw.len(),
                A::SIZE,
                lua::show(raw)
            )
        });
    }
    let (fixed, tail) = raw.split_at(A::SIZE);
    Ok((algorithm.decode_fixed(fixed, now, skew)?, tail))
}

/// [`RemoteForm::encode`] of a [`StringForm`]: the fixed part, then a
/// debt's shifts.
pub fn encode_string<A: StringForm>(algorithm: &A, stored: &StoredOf<A>) -> Value {
    let mut out = algorithm.encode_fixed(stored);
    stored.ledger.write_tail(&mut out);
    Value::String(out.to_vec())
}

/// [`RemoteForm::decode`] of a [`StringForm`]: a string, sized, its fixed
/// part and its shifts read and checked.
pub fn decode_string<A: StringForm>(
    algorithm: &A,
    value: &Value,
    now: u64,
    skew: u64,
) -> Result<StoredOf<A>, String> {
    let Value::String(raw) = value else {
        return Err("a zset, not a string".to_owned());
    };
    let (mut stored, tail) = split_string(algorithm, raw, now, skew)?;
    stored.ledger.read_tail(tail)?;
    Ok(stored)
}

/// `v3:<code>:<params>` ([`STATE_FORMAT`], an algorithm's
/// [`RemoteForm::CODE`] and its [`RemoteForm::params`] in decimal joined by
/// commas): what a key's fingerprint hashes, and what a quota registry
/// records, unhashed, so that a reader sees both quotas.
///
/// ```
/// use ratelab_core::toolkit::remote::{Params, fingerprint_input, key_suffix};
///
/// // GCRA, 10 a second.
/// let input = fingerprint_input("gcra", &Params::new(&[100_000, 1_000_000, 10]));
/// assert_eq!(input, "v3:gcra:100000,1000000,10");
/// // sha1("v3:gcra:100000,1000000,10") = "baa2ca816c63..."
/// assert_eq!(key_suffix("gcra", &input), "gcra:baa2ca81");
/// ```
pub fn fingerprint_input(code: &str, params: &Params) -> String {
    format!("{STATE_FORMAT}:{code}:{params}")
}

/// What ends an algorithm's keys on a quota, after the user key:
/// `<code>:<fingerprint>`, the fingerprint being the first 8 lowercase hex
/// digits of the SHA-1 of its [`fingerprint_input`]. A changed quota (or
/// parameter, or state format) thus names new keys and starts clean,
/// instead of meeting state written otherwise.
pub fn key_suffix(code: &str, fingerprint_input: &str) -> String {
    let digest = sha1_smol::Sha1::from(fingerprint_input.as_bytes())
        .digest()
        .to_string();
    format!("{code}:{}", &digest[..8])
}

/// The module's command for the algorithm named `name`: `RATELAB.` and the
/// name in capitals (`RATELAB.GCRA`, `RATELAB.SLIDING-LOG`).
pub fn command_name(name: &str) -> String {
    format!("RATELAB.{}", name.to_ascii_uppercase())
}

/// A quota of `burst` units, one back every `interval` µs, if one exists:
/// `burst` per a period that rounds to that interval (the prologue's
/// `rate_ok`).
pub fn rate_quota(interval: u64, burst: u64) -> Option<Quota> {
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

/// A quota of `limit` units per window of `window` µs, if one exists (the
/// prologue's `window_ok`).
pub fn window_quota(window: u64, limit: u64) -> Option<Quota> {
    let limit32 = u32::try_from(limit).ok()?;
    Quota::new(limit32, Duration::from_micros(window))
        .ok()
        .filter(|q| q.window_micros() == window && q.burst() == limit32)
}

/// A debt's ledger of `total` with no shifts yet: `None` past
/// [`LEDGER_CEILING`].
pub fn ledger_total(total: u64) -> Option<Shifts> {
    Shifts::from_parts(total, Vec::new())
}

/// The fixed part of a state that is one instant (GCRA's TAT, the leaky
/// queue's next free slot), `struct '<ddd'`: the instant, the ledger's
/// total, the latest instant written; `what` names the instant in the
/// refusal.
pub fn decode_instant(
    fixed: &[u8],
    now: u64,
    skew: u64,
    what: &str,
) -> Result<Stored<u64, Shifts>, String> {
    let values: [f64; 3] = doubles(fixed);
    let Some((end, ledger, latest)) = integers(values)
        .filter(|[end, _, _]| *end <= MAX_END)
        .and_then(|[end, total, latest]| Some((end, ledger_total(total)?, latest)))
    else {
        let [end, ledger, latest] = values;
        return Err(format!(
            "{what} {}, ledger {}, written at {}",
            lua::tostring(end),
            lua::tostring(ledger),
            lua::tostring(latest)
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

/// The fixed part [`decode_instant`] reads.
pub fn encode_instant(stored: &Stored<u64, Shifts>) -> Encoded {
    Encoded::doubles(&[stored.state, stored.ledger.total(), stored.latest])
}

/// What is past a ceiling in a debt's state that ends at `end`: the end
/// itself, or a shift recorded at a position no double holds exactly (a
/// stamp's `at + mark` from 2^53 up, which only ledgers grown by resets near
/// the ceilings reach).
pub fn debt_out_of_range(end: u64, ledger: &Shifts) -> Option<String> {
    if end > MAX_END {
        return Some(format!("debt until {end}, past 2^52 + 2^51"));
    }
    ledger
        .recent()
        .iter()
        .any(|shift| shift.position >= EXACT)
        .then(|| "a shift's position at 2^53 or past".to_owned())
}

/// A window that starts after now (beyond a stepped-back clock): never
/// written with this window length, it would refuse until a far future.
pub fn window_after_now(index: u64, window: u64, now: u64, skew: u64) -> bool {
    u128::from(index) * u128::from(window) > u128::from(now) + u128::from(skew)
}

/// [`StringForm::admits_all_up_to`] of a state that is one instant, which a
/// later instant never helps to admit (GCRA's theoretical arrival time, the
/// leaky queue's next slot): the latest state possible is decided.
pub fn admits_at_latest<A: Algorithm<State = u64>>(
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

#[cfg(test)]
mod tests {

    #[test]
    fn an_encoded_string_holds_every_byte_on_the_stack_then_on_the_heap() {
        let mut short = Encoded::new();
        let mut long = Encoded::new();
        let mut expected = Vec::new();
        for i in 0..(MAX_FIXED + MAX_ANY_TAIL) / 8 {
            let part = (i as u64).to_le_bytes();
            long.push(&part);
            expected.extend_from_slice(&part);
            if expected.len() <= INLINE {
                short.push(&part);
                assert_eq!(&*short, &expected[..], "on the stack");
            }
            assert_eq!(&*long, &expected[..], "{} bytes", expected.len());
        }
        // Equal by their bytes, wherever they sit.
        let mut spilled = Encoded::new();
        spilled.push(&expected);
        assert!(spilled == long && spilled != short);
        assert_eq!(Encoded::doubles(&[1, 2]), Encoded::doubles(&[1, 2]));
    }
    use super::*;

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

    #[test]
    fn shifts_are_read_as_from_parts_accepts_them() {
        let le =
            |values: &[f64]| -> Vec<u8> { values.iter().flat_map(|v| v.to_le_bytes()).collect() };
        let read = |total: u64, tail: &[f64]| {
            let mut ledger = ledger_total(total).unwrap();
            ledger.read_tail(&le(tail)).map(|()| ledger)
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
        // Written back as read.
        let ledger = shifts(10, &[(2, 5, 7), (6, 0, 8)]);
        let mut out = Encoded::new();
        ledger.write_tail(&mut out);
        assert_eq!(*out, le(&[2.0, 5.0, 7.0, 6.0, 0.0, 8.0]));
    }

    #[test]
    fn a_shift_no_double_holds_is_out_of_range() {
        let at = |position| shifts(10, &[(2, position, 7)]);
        assert_eq!(debt_out_of_range(5, &at(EXACT - 1)), None);
        assert_eq!(
            debt_out_of_range(5, &at(EXACT)),
            Some("a shift's position at 2^53 or past".to_owned())
        );
        assert_eq!(
            debt_out_of_range(MAX_END + 1, &Shifts::default()),
            Some(format!("debt until {}, past 2^52 + 2^51", MAX_END + 1))
        );
    }

    #[test]
    fn an_instant_is_read_back_and_checked() {
        let now = 1_700_000_000_000_000;
        let stored = Stored {
            state: now + 3,
            ledger: shifts(9, &[]),
            latest: now - 1,
        };
        let raw = encode_instant(&stored);
        assert_eq!(raw.len(), 24);
        assert_eq!(decode_instant(&raw, now, 0, "TAT"), Ok(stored.clone()));
        // Written after now (beyond the skew): no clock of this key's got there.
        let ahead = Stored {
            latest: now + 2,
            ..stored
        };
        assert_eq!(
            decode_instant(&encode_instant(&ahead), now, 1, "TAT"),
            Err(format!("written at {}, after now", now + 2))
        );
        let bad = Encoded::doubles(&[MAX_END + 1, 0, 0]);
        assert!(
            decode_instant(&bad, now, 0, "TAT")
                .unwrap_err()
                .starts_with("TAT ")
        );
    }

    #[test]
    fn no_quota_has_these_parameters() {
        assert!(rate_quota(0, 10).is_none());
        assert!(rate_quota(10, 1 << 32).is_none());
        assert!(
            window_quota(5, 10).is_none(),
            "a window shorter than its limit"
        );
        assert_eq!(command_name("sliding-log"), "RATELAB.SLIDING-LOG");
        assert_eq!(Params::new(&[1, 2]).to_string(), "1,2");
        assert_eq!(format!("{:?}", Params::new(&[1, 2])), "[1, 2]");
    }
}
