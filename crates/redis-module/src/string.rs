//! The command of every algorithm whose state is one string
//! ([`StringForm`]): read the key, run the algorithm crate's own `decide`,
//! `stamp`, `settle` and `reset`, write back what the script would write,
//! answer what the script would answer.

use ratelab_core::toolkit::Settlement;
use ratelab_core::toolkit::remote::{self, Encoded, Stored, StoredLedger, StoredOf, StringForm};
use redis_module::{Context, RedisError};

use crate::args::{Args, Op};
use crate::call::{READ, call, get, passed_on, type_name};
use crate::ffi::KeyArg;
use crate::hint::Hint;
use crate::key::{Holds, Open, open, open_to_read, out_of_memory};
use crate::prologue::{self, Prologue};
use crate::reply::{Reply, corrupt, fields, invalid, out_of_range, stamped};

/// `RATELAB.<ALGORITHM> key version now cost slack deadline op params...`
/// for an algorithm whose state is one string: `argv` is what follows the
/// key. A check or a peek allocates nothing on its way to a decision
/// (errors aside); a settlement or a reset of a debt with shifts holds them
/// in a `Vec`.
///
/// A key that holds nothing is not read (but by a check that reads with
/// `GET` first). A check of a positive cost on the server's clock opens its key to read and write at once, and writes
/// through that handle: one lookup of the key, not two; unless the last
/// such check of its key was refused ([`Hint`]): it then reads with `GET`
/// first, one lookup when it refuses again, and opens the key to write only
/// if it admits. A check that opened its key and
/// admits whatever the key holds (GCRA's and the leaky queue's state
/// starts with one instant, and the key's expiry bounds it: see
/// [`latest_instant`]) reads the string in place, since its write stores it
/// again. Any other call reads it with `GET` through `RM_Call` ([`get`]),
/// as the script reads it: opening a string for direct access
/// (`RM_StringDMA`, even to read) turns an embedded string into a raw one,
/// so a key would change encoding under a mere refusal. The state is
/// written straight into the key (`RM_StringSet`, stored as `SET` stores
/// it, and replicated as `SET ... PXAT`), or over the bytes a check read
/// in place ([`Open::store`]). What surrounds the calls copies
/// no argument, allocates nothing and writes the reply directly.
///
/// Every operation is the algorithm crate's own: `decide` for checks and
/// peeks (at `now`), `stamp` for an admission, `settle` (at the latest of
/// `now` and the instant the key was last written at, for the debts) and
/// `reset`; a key whose state can be forgotten (`forgettable_at`) reads as
/// a key never seen, and is deleted rather than written.
///
/// A debt's recent shifts, stored after its state, are read by the
/// settlements and resets only, the calls that use them: a check or a peek
/// decodes the state and the ledger's total (all that `stamp` and
/// `forgettable_at` read), and a check that writes puts the shifts' bytes
/// back as they were, so that it costs what it costs on a key without.
pub(crate) fn command<A: StringForm>(
    ctx: &Context,
    key: KeyArg<'_>,
    argv: &[&[u8]],
) -> Result<Reply, RedisError> {
    let Prologue {
        algorithm,
        parsed,
        now,
        cost,
        op,
    } = prologue::read::<A>(argv)?;

    // Only a settlement or a reset reads a debt's shifts; a window's ledger
    // is read by every call (a check's stamp counts what it gave back).
    let shifts = !A::DEBT || matches!(op, Op::Settle { .. } | Op::Reset);
    // A check of a positive cost on the server's clock may write (unless
    // memory is full, when a write is refused). After an admission of its
    // key (`Hint`) it opens the key to read and write at once, one lookup
    // for both; after a refusal it reads with `GET` first, one lookup when
    // it refuses again. A key opened to write and left as it was signals
    // nothing (`Open`).
    let may_write = op == Op::Check && cost > 0 && parsed.on_server_clock() && !out_of_memory();
    let hint = may_write.then(|| Hint::of(key.bytes()));
    let mut handle = hint
        .is_some_and(|hint| !hint.refused_last())
        .then(|| open(ctx, key));
    // A check that will admit, whatever the key holds, reads it in place:
    // its write is sure to store the state as `SET` does. Any other call
    // reads it with `GET`, which leaves the key as it is.
    let via = match &handle {
        None => Via::Get,
        Some(open) => match open.holds() {
            Holds::Nothing => Via::Nothing,
            Holds::String
                if open.expires_at().is_some_and(|at| {
                    algorithm.admits_all_up_to(latest_instant(at), now, cost)
                }) =>
            {
                Via::InPlace
            }
            _ => Via::Get,
        },
    };
    // The shifts' bytes a check puts back as they were (filled by the
    // read, in place: a state on the stack is not moved about).
    let mut kept = Encoded::new();
    let read = match (via, handle.as_mut()) {
        (Via::Nothing, Some(open)) => {
            // As a read of a key that holds nothing raises it.
            open.notify_missed();
            None
        }
        (Via::InPlace, Some(open)) => {
            let raw = open.read_in_place();
            Some(decode_stored(
                &algorithm,
                key,
                raw,
                now,
                parsed.skew(),
                shifts,
                &mut kept,
            )?)
        }
        (_, opened) => {
            // The key opened to write is closed, unchanged: it holds
            // something (`GET` reads it). A check that opened nothing reads
            // with `GET` whatever the key holds (one lookup); any other
            // call first tells whether there is anything to read.
            let held = opened.is_some() || hint.is_some() || open_to_read(ctx, key).is_some();
            handle = None;
            if held {
                read_with_get(&algorithm, ctx, key, now, parsed.skew(), shifts, &mut kept)?
            } else {
                None
            }
        }
    };
    let exists = read.is_some();
    // Nothing it holds can still be claimed: a key never seen, with no
    // shifts to keep.
    let held = read.filter(|s| algorithm.forgettable_at(&s.state, &s.ledger) > now);
    let was_held = held.is_some();
    let mut stored = held.unwrap_or_else(|| {
        kept = Encoded::new();
        Stored {
            state: algorithm.initial_state(),
            ledger: A::Ledger::default(),
            latest: 0,
        }
    });
    let write = Write {
        ctx,
        key,
        algorithm: &algorithm,
        parsed: &parsed,
        exists,
        now,
    };

    match op {
        Op::Check | Op::Peek => {
            let mut state = stored.state.clone();
            let decision = algorithm
                .decide(&mut state, now, cost)
                .map_err(|_| invalid(A::NAME))?;
            if let Some(hint) = hint {
                hint.record(!decision.allowed);
            }
            // As the scripts: only a check's admission with a cost writes.
            if op == Op::Check && decision.allowed && cost > 0 {
                stored.state = state;
                let stamp = algorithm.stamp(&stored.state, &stored.ledger, now);
                write.store(&mut stored, &kept, now, handle.take())?;
                return Ok(stamped(&decision, stamp));
            }
            Ok(fields(&decision))
        }
        Op::Settle { actual, stamp } => {
            // Never before the latest instant the key was written at: a
            // client clock that went back must not find an admission's end
            // still ahead.
            let at = if A::DEBT {
                now.max(algorithm.latest(&stored))
            } else {
                now
            };
            let settlement = Settlement {
                stamp,
                charged: cost,
                actual: u32::try_from(actual).map_err(|_| invalid(A::NAME))?,
            };
            let decision = algorithm
                .settle(&mut stored.state, &mut stored.ledger, at, settlement)
                .map_err(|_| invalid(A::NAME))?;
            if let Some(what) = algorithm.out_of_range(&stored) {
                return Err(out_of_range(A::NAME, key.bytes(), &what));
            }
            write.store(&mut stored, &kept, at, None)?;
            Ok(fields(&decision))
        }
        Op::Reset => {
            // Only a key that holds something a receipt could still claim
            // keeps a tombstone; any other is deleted.
            if was_held {
                algorithm.reset(&mut stored.state, &mut stored.ledger, now);
                if let Some(what) = algorithm.out_of_range(&stored) {
                    return Err(out_of_range(A::NAME, key.bytes(), &what));
                }
            }
            write.store(&mut stored, &kept, now, None)?;
            let decision = algorithm
                .decide(&mut stored.state.clone(), now, 0)
                .map_err(|_| invalid(A::NAME))?;
            Ok(fields(&decision))
        }
    }
}

/// How a string command reads its key.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// The key, opened to write, holds nothing.
    Nothing,
    /// The key, opened to write, is read in place.
    InPlace,
    /// `GET`, if the key holds anything.
    Get,
}

/// The state `GET` reads at `key` (`None` for no key), or the error that
/// says what is wrong with it.
fn read_with_get<A: StringForm>(
    algorithm: &A,
    ctx: &Context,
    key: KeyArg<'_>,
    now: u64,
    skew: u64,
    shifts: bool,
    kept: &mut Encoded,
) -> Result<Option<StoredOf<A>>, RedisError> {
    let stored = get(ctx, key);
    match stored.string() {
        Ok(Some(raw)) => decode_stored(algorithm, key, raw, now, skew, shifts, kept).map(Some),
        Ok(None) => Ok(None),
        Err(()) => {
            let what = format!("a {}, not a string", type_name(ctx, key.bytes()));
            Err(corrupt(A::NAME, key.bytes(), &what))
        }
    }
}

/// Where a string command writes, and what it needs to.
struct Write<'a, A> {
    ctx: &'a Context,
    key: KeyArg<'a>,
    algorithm: &'a A,
    parsed: &'a Args,
    /// The key held a string when it was read.
    exists: bool,
    now: u64,
}

impl<'a, A: StringForm> Write<'a, A> {
    /// Writes `stored`, decided at `at` (the latest instant written moves
    /// there), followed by `kept` (the shifts' bytes a check read and put
    /// back as they were), with the TTL until it can be forgotten; or
    /// deletes the key when it can be forgotten at `at`, as the scripts do.
    /// Through `handle` when the key is open already.
    fn store(
        &self,
        stored: &mut StoredOf<A>,
        kept: &Encoded,
        at: u64,
        handle: Option<Open<'a>>,
    ) -> Result<(), RedisError> {
        let forgettable = self.algorithm.forgettable_at(&stored.state, &stored.ledger);
        if forgettable <= at {
            // Closed before `DEL` frees what it points to.
            drop(handle);
            if self.exists {
                call(self.ctx, &READ, "DEL", &[self.key.bytes()]).map_err(|e| passed_on(&e))?;
            }
            return Ok(());
        }
        stored.latest = stored.latest.max(at);
        let ttl = self.parsed.ttl_millis(forgettable - self.now);
        let mut value = self.algorithm.encode_fixed(stored);
        stored.ledger.write_tail(&mut value);
        value.push(kept);
        handle
            .unwrap_or_else(|| open(self.ctx, self.key))
            .store(&value, ttl)
            .map_err(RedisError::String)
    }
}

/// The state in a stored string, or the error that says what is wrong
/// with it; and, unless `shifts` asks for a debt's shifts to be read into
/// its ledger, their bytes as they are, added to `kept` (empty), to be
/// written back after it ([`remote::split_string`]: the length is checked
/// by every call, as the script checks it, which costs nothing).
fn decode_stored<A: StringForm>(
    algorithm: &A,
    key: KeyArg<'_>,
    raw: &[u8],
    now: u64,
    skew: u64,
    shifts: bool,
    kept: &mut Encoded,
) -> Result<StoredOf<A>, RedisError> {
    let corrupt_state = |what: String| corrupt(A::NAME, key.bytes(), &what);
    let (mut stored, tail) =
        remote::split_string(algorithm, raw, now, skew).map_err(corrupt_state)?;
    if shifts {
        stored.ledger.read_tail(tail).map_err(corrupt_state)?;
    } else {
        kept.push(tail);
    }
    Ok(stored)
}

/// The latest instant (µs) a key expiring at Unix ms `expires_at` can start
/// with, when the scripts or this module wrote it on the server's clock:
/// each sets the TTL to the time until the key may be forgotten (at or
/// after the instant its state is full again), rounded up to the ms, plus a
/// slack, from a clock read no earlier than the instant's `now`, so the
/// instant is at most 999 µs after the expiry. A key whose TTL a stranger
/// shortened may hold a later one: it is then read in place on a check
/// that refuses, which changes how Redis stores it, never the decision.
fn latest_instant(expires_at: u64) -> u64 {
    expires_at.saturating_mul(1000).saturating_add(999)
}
