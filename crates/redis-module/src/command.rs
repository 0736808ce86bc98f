//! The commands: read the key, run the algorithm crate's own `decide`, write
//! back what the script would write, answer what the script would answer.

use std::io::Write as _;
use std::sync::LazyLock;

use ratelab_core::{Algorithm, Decision};
use ratelab_sliding_window::{Log, SlidingLog};

use redis_module::{
    CallOptions, CallOptionsBuilder, CallReply, CallResult, Context, RedisError, RedisValue,
};

use crate::algorithms::{Params, StringState};
use crate::args::{Args, Op, split_op};
use crate::lua::{self, show, show_bare};
use crate::native;

/// Writes: replicated to replicas and the AOF as the commands themselves
/// (as a script's effects are), refused when the server is out of memory
/// (as a script's writes are), errors as replies.
static WRITE: LazyLock<CallOptions> = LazyLock::new(|| {
    CallOptionsBuilder::new()
        .replicate()
        .verify_oom()
        .errors_as_replies()
        .build()
});

/// Reads, and the pruning of the log (a deletion, replicated when it
/// removes anything).
static READ: LazyLock<CallOptions> = LazyLock::new(|| {
    CallOptionsBuilder::new()
        .replicate()
        .errors_as_replies()
        .build()
});

/// `ratelab <name>: invalid arguments`.
fn invalid(name: &str) -> RedisError {
    RedisError::String(format!("ratelab {name}: invalid arguments"))
}

/// `ratelab <name>: corrupt state at <key>: <what>`.
fn corrupt(name: &str, key: &[u8], what: &str) -> RedisError {
    RedisError::String(format!(
        "ratelab {name}: corrupt state at {}: {what}",
        show_bare(key)
    ))
}

/// The reply of every script:
/// `[allowed, limit, remaining, retry_after_us, reset_after_us, delay_us]`.
pub(crate) fn fields(decision: &Decision) -> [i64; 6] {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    [
        i64::from(decision.allowed),
        int(decision.limit),
        int(decision.remaining),
        int(decision.retry_after_micros()),
        int(decision.reset_after_micros()),
        int(decision.delay_micros()),
    ]
}

/// What `TYPE key` answers (`list`, `zset`, a module type's name...).
fn type_name(ctx: &Context, key: &[u8]) -> String {
    match ctx.call("TYPE", &[key]) {
        Ok(RedisValue::SimpleString(name)) => name,
        Ok(RedisValue::SimpleStringStatic(name)) => name.to_owned(),
        other => format!("{other:?}"),
    }
}

/// An error reply passed on as it came.
fn passed_on(error: &redis_module::ErrorReply<'_>) -> RedisError {
    RedisError::String(error.to_utf8_string().unwrap_or_else(|| error.to_string()))
}

/// What the prologue reads: the algorithm, the arguments, the instant, the
/// cost and the operation.
struct Call<A> {
    algorithm: A,
    parsed: Args,
    now: u64,
    cost: u32,
    op: Op,
}

/// Reads the arguments after the key as the prologue does, borrowing them.
fn prologue<A: Params>(argv: &[&[u8]]) -> Result<Call<A>, RedisError> {
    let version = crate::args::check_protocol(argv.first().copied()).map_err(RedisError::String)?;
    let (op, head, params) = split_op(version, &argv[1..]).ok_or_else(|| invalid(A::NAME))?;
    let parsed = Args::parse_parts(head, params).ok_or_else(|| invalid(A::NAME))?;
    let now = parsed.now().map_err(RedisError::String)?;
    let algorithm = A::from_args(&parsed).ok_or_else(|| invalid(A::NAME))?;
    let cost = u32::try_from(parsed.cost).map_err(|_| invalid(A::NAME))?;
    Ok(Call {
        algorithm,
        parsed,
        now,
        cost,
        op,
    })
}

/// `RATELAB.<ALGORITHM> key version now cost slack deadline [op] params...`
/// for an algorithm whose state is one string: `argv` is what follows the
/// key. Allocates nothing on its way to a decision (errors aside).
///
/// A key that holds nothing is not read. A check on the server's clock
/// that admits whatever the key holds (GCRA's and the leaky queue's state
/// is one instant, and the key's expiry bounds it: see [`latest_instant`])
/// reads the string in place, since its write stores it again. Any other
/// call reads it with `GET` through `RM_Call` ([`native`]), as the script
/// reads it: opening a string for direct access (`RM_StringDMA`, even to
/// read) turns an integer or embedded string into a raw one, so a key
/// would change encoding under a mere refusal. A binary state is
/// written straight into the key (`RM_StringSet`, stored as `SET` stores
/// it, and replicated as `SET ... PXAT`); a decimal one (GCRA, the leaky
/// queue) through `SET`, which stores it as an integer (48 bytes a key,
/// where a module's string would take 80). What surrounds the calls copies
/// no argument, allocates nothing and writes the reply directly.
pub(crate) fn string_command<A: StringState>(
    ctx: &Context,
    key: native::KeyArg<'_>,
    argv: &[&[u8]],
) -> Result<[i64; 6], RedisError> {
    let Call {
        algorithm,
        parsed,
        now,
        cost,
        op,
    } = prologue::<A>(argv)?;

    // A check that will admit, whatever the key holds, reads it in place:
    // its write is sure to store the state as `SET` does (unless memory is
    // full, when the write is refused: then nothing may change the key).
    // Any other call reads it with `GET`, which leaves an integer an integer.
    let (mut state, exists) = match native::open_to_read(ctx, key) {
        None => (algorithm.initial_state(), false),
        Some(mut reading)
            if op == Op::Check
                && cost > 0
                && parsed.on_server_clock()
                && reading.is_string()
                && !native::out_of_memory()
                && reading.expires_at().is_some_and(|at| {
                    algorithm.admits_all_up_to(latest_instant(at), now, cost)
                }) =>
        {
            let raw = reading.read_in_place();
            (
                decode_stored(&algorithm, key, raw, now, parsed.skew())?,
                true,
            )
        }
        Some(reading) => {
            drop(reading);
            let stored = native::get(ctx, key);
            match stored.string() {
                Ok(Some(raw)) => (
                    decode_stored(&algorithm, key, raw, now, parsed.skew())?,
                    true,
                ),
                Ok(None) => (algorithm.initial_state(), false),
                Err(()) => {
                    let what = format!("a {}, not a string", type_name(ctx, key.bytes()));
                    return Err(corrupt(A::NAME, key.bytes(), &what));
                }
            }
        }
    };

    if let Op::Refund(owed) = op {
        let decision = algorithm
            .refund(&mut state, now, cost, owed)
            .map_err(|_| invalid(A::NAME))?;
        // As the scripts: a key full again is deleted, any other written
        // with the TTL until it is.
        let full_at = algorithm.full_at(&state);
        if full_at <= now {
            if exists {
                call(ctx, &WRITE, "DEL", &[key.bytes()]).map_err(|e| passed_on(&e))?;
            }
        } else {
            let ttl = parsed.ttl_millis(full_at - now);
            write_state::<A>(ctx, key, &algorithm.encode(&state), ttl)?;
        }
        return Ok(fields(&decision));
    }
    let decision = algorithm
        .decide(&mut state, now, cost)
        .map_err(|_| invalid(A::NAME))?;
    // As the scripts: only a check's admission with a cost writes.
    if op == Op::Check && decision.allowed && cost > 0 {
        let ttl = parsed.ttl_millis(decision.reset_after_micros());
        write_state::<A>(ctx, key, &algorithm.encode(&state), ttl)?;
    }
    Ok(fields(&decision))
}

/// The state in a stored string, or the error that says what is wrong
/// with it.
fn decode_stored<A: StringState>(
    algorithm: &A,
    key: native::KeyArg<'_>,
    raw: &[u8],
    now: u64,
    skew: u64,
) -> Result<A::State, RedisError> {
    if let Some(size) = A::SIZE
        && raw.len() != size
    {
        let what = format!("{} bytes, not {size}: {}", raw.len(), show(raw));
        return Err(corrupt(A::NAME, key.bytes(), &what));
    }
    algorithm
        .decode(raw, now, skew)
        .map_err(|what| corrupt(A::NAME, key.bytes(), &what))
}

/// The latest instant (µs) a key expiring at Unix ms `expires_at` can hold,
/// when the scripts or this module wrote it on the server's clock: each
/// sets the TTL to the time until that instant, rounded up to the ms, plus
/// a slack, from a clock read no earlier than the instant's `now`, so the
/// instant is at most 999 µs after the expiry. A key whose TTL a stranger
/// shortened may hold a later one: it is then read in place on a check
/// that refuses, which changes how Redis stores it, never the decision.
fn latest_instant(expires_at: u64) -> u64 {
    expires_at.saturating_mul(1000).saturating_add(999)
}

/// Writes a state as the script's `SET ... PX` leaves it: a binary one
/// (an algorithm whose encoding has a fixed size) straight into the key,
/// which stores it as `SET` would, a decimal through `SET`, which stores it
/// as an integer where a module's string would stay a string.
fn write_state<A: StringState>(
    ctx: &Context,
    key: native::KeyArg<'_>,
    value: &[u8],
    ttl_ms: u64,
) -> Result<(), RedisError> {
    if A::SIZE.is_some() {
        native::open(ctx, key).store(value, ttl_ms)
    } else {
        native::set(ctx, key, value, ttl_ms)
    }
    .map_err(RedisError::String)
}

/// A call's reply, or the error it answered.
fn call(
    ctx: &Context,
    options: &CallOptions,
    command: &str,
    args: &[&[u8]],
) -> CallResult<'static> {
    ctx.call_ext(command, options, args)
}

fn integer_reply(reply: &CallReply<'_>) -> Option<i64> {
    match reply {
        CallReply::I64(n) => Some(n.to_i64()),
        _ => None,
    }
}

/// `RATELAB.SLIDING-LOG key version now cost slack deadline [op] window
/// limit`: the log is the scripts' sorted set, one member `<µs>:<n>` per
/// admitted unit, scored by the µs it was admitted at; the members of one
/// instant are always `<µs>:1` to `<µs>:<count>`.
///
/// `decide` runs on a [`Log`] that holds what it reads of the set, exactly:
/// the count of live units (a check or a refund prunes the expired ones
/// first, as `decide` prunes them; a peek writes nothing and only counts),
/// the newest instant, and, when the request cannot fit, the instants of the
/// first units whose leaving frees room for it. Every other unit is folded
/// into the newest entry. So a check costs O(log n + cost), as the script
/// does, not O(limit).
pub(crate) fn sliding_log(
    ctx: &Context,
    key: native::KeyArg<'_>,
    argv: &[&[u8]],
) -> Result<[i64; 6], RedisError> {
    use native::log;
    const NAME: &str = SlidingLog::NAME;
    let Call {
        algorithm,
        parsed,
        now,
        cost,
        op,
    } = prologue::<SlidingLog>(argv)?;
    if op == Op::Check
        && let Some(fields) = check_log_directly(ctx, key, &algorithm, &parsed, now, cost)?
    {
        return Ok(fields);
    }
    let window = algorithm.window_micros();
    let limit = algorithm.capacity();
    let k = key.bytes();

    // A unit admitted at `at` counts while at + W > now: scores above `now - W`.
    let cutoff = i128::from(now) - i128::from(window);
    let live = || format!("({cutoff}");
    let not_a_zset = || corrupt(NAME, k, &format!("a {}, not a zset", type_name(ctx, k)));
    let counted = if op == Op::Peek {
        log::count_live(ctx, key, live().as_bytes()).integer()
    } else {
        // Counted, then pruned only if anything is there (most keys of a
        // quiet client have expired): the units left are those counted
        // less those pruned, as the script's prune-then-count finds them.
        match log::card(ctx, key).integer() {
            Some(0) => Some(0),
            Some(card) => {
                // A cutoff below every i64 is below every score too.
                let below = i64::try_from(cutoff).unwrap_or(i64::MIN);
                let pruned = log::prune(ctx, key, below);
                if let Some(error) = pruned.error() {
                    return Err(RedisError::String(error));
                }
                pruned.integer().map(|removed| card - removed)
            }
            None => None,
        }
    };
    let Some(counted) = counted else {
        return Err(not_a_zset());
    };
    let mut total = u64::try_from(counted).unwrap_or(0);
    if total > limit {
        return Err(corrupt(NAME, k, &format!("{total} entries, limit {limit}")));
    }
    // The instant of one entry, checked as the script checks the newest.
    let skew = parsed.skew();
    let instant = |member: &[u8], score: &[u8]| {
        lua::number(score)
            .and_then(lua::stored_integer)
            .filter(|&at| at <= now.saturating_add(skew))
            .ok_or_else(|| {
                corrupt(
                    NAME,
                    k,
                    &format!("entry {} at {}", show(member), show(score)),
                )
            })
    };
    let newest_of = |total: u64| -> Result<Option<u64>, RedisError> {
        if total == 0 {
            return Ok(None);
        }
        let last = log::newest(ctx, key);
        match (last.element(0), last.element(1)) {
            (Some(member), Some(score)) => instant(member, score).map(Some),
            _ => Err(corrupt(NAME, k, "no newest entry")),
        }
    };
    let mut newest = newest_of(total)?;

    if let Op::Refund(owed) = op {
        // The oldest live units leave first, as `SlidingLog::refund` takes
        // them. An instant's units are dropped together and those that stay
        // are added back from `<µs>:1`, as the script does, so that the
        // numbering stays dense. Nothing owed: the admission's units have
        // left the log already, and no other unit goes in their place.
        let mut left = if owed > 0 {
            u64::from(cost).min(total)
        } else {
            0
        };
        total -= left;
        while left > 0 {
            let first = log::oldest(ctx, key);
            let (Some(member), Some(score)) = (first.element(0), first.element(1)) else {
                return Err(corrupt(NAME, k, "no oldest entry"));
            };
            let at = instant(member, score)?;
            let at_text = at.to_string();
            let at_bytes = at_text.as_bytes();
            let here = call(ctx, &READ, "ZCOUNT", &[k, at_bytes, at_bytes])
                .ok()
                .as_ref()
                .and_then(integer_reply)
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0);
            call(ctx, &WRITE, "ZREMRANGEBYSCORE", &[k, at_bytes, at_bytes])
                .map_err(|e| passed_on(&e))?;
            if here > left {
                add_units(ctx, k, at, 0, here - left)?;
                left = 0;
            } else {
                left -= here;
            }
        }
        newest = newest_of(total)?;
        if total == 0 {
            newest = None;
        } else if let Some(at) = newest {
            let ttl = parsed
                .ttl_millis((at + window).saturating_sub(now))
                .to_string();
            call(ctx, &WRITE, "PEXPIRE", &[k, ttl.as_bytes()]).map_err(|e| passed_on(&e))?;
        }
        let mut log = Log::from_entries(newest.map(|at| (at, total)))
            .ok_or_else(|| corrupt(NAME, k, "entries out of order"))?;
        let decision = algorithm
            .decide(&mut log, now, 0)
            .map_err(|_| invalid(NAME))?;
        return Ok(fields(&decision));
    }

    let mut entries: Vec<(u64, u64)> = Vec::new();
    if let Some(at) = newest {
        // A refusal reads when the first `needed` live units leave.
        let needed = (total + u64::from(cost)).saturating_sub(limit);
        let exact = needed.min(total);
        if exact > 0 {
            let first = log::first(
                ctx,
                key,
                live().as_bytes(),
                i64::try_from(exact).unwrap_or(i64::MAX),
            );
            for i in 0..first.len() / 2 {
                let (Some(member), Some(score)) = (first.element(2 * i), first.element(2 * i + 1))
                else {
                    break;
                };
                let at = instant(member, score)?;
                match entries.last_mut() {
                    Some((last, units)) if *last == at => *units += 1,
                    _ => entries.push((at, 1)),
                }
            }
        }
        let folded: u64 = entries.iter().map(|&(_, units)| units).sum();
        if total > folded {
            entries.push((at, total - folded));
        }
    }
    let mut log =
        Log::from_entries(entries).ok_or_else(|| corrupt(NAME, k, "entries out of order"))?;

    let decision = algorithm
        .decide(&mut log, now, cost)
        .map_err(|_| invalid(NAME))?;
    if op == Op::Check && decision.allowed && cost > 0 {
        let at = log.entries().last().map_or(now, |(at, _)| at);
        // Instants are below 2^53 (`stored`), so they fit an i64.
        let at_signed = i64::try_from(at).unwrap_or(i64::MAX);
        // Members go on numbering the units already logged at that instant.
        let first = if newest == Some(at) {
            log::count_at(ctx, key, at_signed)
                .integer()
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0)
        } else {
            0
        };
        if cost == 1 {
            let mut member = [0u8; 48];
            let len = {
                let mut cursor = std::io::Cursor::new(&mut member[..]);
                write!(cursor, "{at}:{}", first + 1).expect("two u64 fit 48 bytes");
                usize::try_from(cursor.position()).expect("at most 48")
            };
            let added = log::add_one(ctx, key, at_signed, &member[..len]);
            if let Some(error) = added.error() {
                return Err(RedisError::String(error));
            }
        } else {
            add_units(ctx, k, at, first, u64::from(cost))?;
        }
        let ttl = parsed.ttl_millis(decision.reset_after_micros());
        let expired = log::expire(ctx, key, i64::try_from(ttl).unwrap_or(i64::MAX));
        if let Some(error) = expired.error() {
            return Err(RedisError::String(error));
        }
    }
    Ok(fields(&decision))
}

/// A check of the sliding log on its sorted set opened for direct access
/// ([`native::zset`]): the same reads, decision and writes as the command
/// path below, a few calls into Redis's data structures rather than a
/// command each. `None` when the key holds what the scripts' error
/// wording must describe (another type, too many units, an instant that
/// is not one): the command path reads it again and answers that error.
fn check_log_directly(
    ctx: &Context,
    key: native::KeyArg<'_>,
    algorithm: &SlidingLog,
    parsed: &Args,
    now: u64,
    cost: u32,
) -> Result<Option<[i64; 6]>, RedisError> {
    use native::Holds;
    let mut set = native::open(ctx, key);
    if !matches!(set.holds(), Holds::Nothing | Holds::Zset) {
        return Ok(None);
    }
    let limit = algorithm.capacity();
    let cutoff = i128::from(now) - i128::from(algorithm.window_micros());
    // A cutoff below every i64 is below every score too.
    let cutoff = i64::try_from(cutoff).unwrap_or(i64::MIN);
    let card = set.len();
    let pruned = if card > 0 { set.prune(cutoff) } else { 0 };
    let total = card.saturating_sub(pruned);
    if total > limit {
        return Ok(None);
    }
    let latest = now.saturating_add(parsed.skew());
    let instant = |score: f64| lua::stored_integer(score).filter(|&at| at <= latest);
    let newest = match set.newest() {
        None if total == 0 => None,
        Some(score) if total > 0 => match instant(score) {
            Some(at) => Some(at),
            None => return Ok(None),
        },
        _ => return Ok(None),
    };

    let mut entries: Vec<(u64, u64)> = Vec::new();
    if let Some(at) = newest {
        // A refusal reads when the first `needed` live units leave.
        let exact = (total + u64::from(cost)).saturating_sub(limit).min(total);
        let mut bad = false;
        set.first_after(cutoff, exact, |score| match instant(score) {
            Some(at) => match entries.last_mut() {
                Some((last, units)) if *last == at => *units += 1,
                _ => entries.push((at, 1)),
            },
            None => bad = true,
        });
        if bad {
            return Ok(None);
        }
        let folded: u64 = entries.iter().map(|&(_, units)| units).sum();
        if total > folded {
            entries.push((at, total - folded));
        }
    }
    let Some(mut log) = Log::from_entries(entries) else {
        return Ok(None);
    };
    let decision = algorithm
        .decide(&mut log, now, cost)
        .map_err(|_| invalid(SlidingLog::NAME))?;
    if decision.allowed && cost > 0 {
        let at = log.entries().last().map_or(now, |(at, _)| at);
        // Instants are below 2^53 (`stored`): exact as an i64 and an f64.
        let at_signed = i64::try_from(at).unwrap_or(i64::MAX);
        // Members go on numbering the units already logged at that instant.
        #[allow(clippy::cast_precision_loss)]
        let first = if newest == Some(at) {
            set.count_at(at as f64)
        } else {
            0
        };
        let mut member = [0u8; 48];
        for n in first + 1..=first + u64::from(cost) {
            let mut cursor = std::io::Cursor::new(&mut member[..]);
            write!(cursor, "{at}:{n}").expect("two u64 fit 48 bytes");
            let len = usize::try_from(cursor.position()).expect("at most 48");
            set.add(at_signed, &member[..len])
                .map_err(RedisError::String)?;
        }
        let ttl = parsed.ttl_millis(decision.reset_after_micros());
        set.expire(ttl).map_err(RedisError::String)?;
    }
    Ok(Some(fields(&decision)))
}

/// Adds `n` units at `at`, members `<at>:<first + 1>` onwards, in chunks of
/// a thousand as the script adds them.
fn add_units(ctx: &Context, k: &[u8], at: u64, first: u64, n: u64) -> Result<(), RedisError> {
    let at_text = at.to_string();
    let at_bytes = at_text.as_bytes();
    let members: Vec<String> = (1..=n).map(|i| format!("{at}:{}", first + i)).collect();
    for chunk in members.chunks(1000) {
        let mut zadd: Vec<&[u8]> = Vec::with_capacity(1 + 2 * chunk.len());
        zadd.push(k);
        for member in chunk {
            zadd.push(at_bytes);
            zadd.push(member.as_bytes());
        }
        call(ctx, &WRITE, "ZADD", &zadd).map_err(|e| passed_on(&e))?;
    }
    Ok(())
}
