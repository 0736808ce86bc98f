//! The sliding log's command: its state is the scripts' sorted set, read
//! and written as the script reads and writes it, and decided on by the
//! algorithm crate's own `decide`, `settle` and `reset`.

use ratelab_core::Algorithm;
use ratelab_core::toolkit::remote::MAX_LOG_UNITS;
use ratelab_core::toolkit::{RemoteForm, Spent, Stamp};
use ratelab_sliding_window::remote::{
    FENCE_MEMBER, LEDGER_SCORE, is_unit_member, ledger_member, read_ledger_member,
    write_unit_member,
};
use ratelab_sliding_window::{Log, SlidingLog};
use redis_module::{Context, RedisError};

use crate::args::{Args, Op};
use crate::call::{
    READ, WRITE, bytes_reply, call, integer_reply, log, passed_on, strings_reply, type_name,
};
use crate::ffi::KeyArg;
use crate::key::{Holds, open};
use crate::lua::{self, show};
use crate::prologue::{self, Prologue};
use crate::reply::{Reply, corrupt, fields, invalid, out_of_range, stamped};

/// `RATELAB.SLIDING-LOG key version now cost slack deadline op window
/// limit`: the log is the scripts' sorted set, one member `<µs>:<n>` per
/// admitted unit, scored by the µs it was admitted at (the members of one
/// instant are always `<µs>:1` to `<µs>:<count>`), and after a reset the
/// member `fence`, scored by the latest instant the reset saw.
///
/// A check or a peek runs `SlidingLog::decide` on a [`Log`] that holds
/// what it reads of the set, exactly: the count of live units (a check
/// prunes the expired ones first, as `decide` prunes them; a peek writes
/// nothing and only counts), the newest instant, and, when the request
/// cannot fit, the instant of the unit whose leaving frees room for it.
/// Every other unit is folded into the newest entry. So a check costs
/// O(log n + cost), as the script does, not O(limit). A settlement and a
/// reset do on the set what `SlidingLog::settle` and `SlidingLog::reset` do
/// on a log, with the script's commands (the whole log is never loaded);
/// the property tests compare them with the crate's own, call for call.
pub(crate) fn command(ctx: &Context, key: KeyArg<'_>, argv: &[&[u8]]) -> Result<Reply, RedisError> {
    const NAME: &str = SlidingLog::NAME;
    let Prologue {
        algorithm,
        parsed,
        now,
        cost,
        op,
    } = prologue::read::<SlidingLog>(argv)?;
    if op == Op::Check
        && let Some(reply) = check_log_directly(ctx, key, &algorithm, &parsed, now, cost)?
    {
        return Ok(reply);
    }
    let window = algorithm.window_micros();
    let limit = algorithm.capacity();
    let k = key.bytes();
    let latest = now.saturating_add(parsed.skew());

    // A unit admitted at `at` counts while at > cutoff = now - W.
    let cutoff = i128::from(now) - i128::from(window);
    let live = format!("({cutoff}");
    let not_a_zset = || corrupt(NAME, k, &format!("a {}, not a zset", type_name(ctx, k)));
    let counted = if op == Op::Peek {
        log::count_live(ctx, key, live.as_bytes()).integer()
    } else {
        // Counted, then pruned only if anything is there (most keys of a
        // quiet client have expired): the members left are those counted
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
    // The ledger's member, scored 2^53 (no unit is): read by every call but
    // a peek, which only leaves it out of its count.
    let ledger_score = LEDGER_SCORE.to_string();
    let found = call(
        ctx,
        &READ,
        "ZRANGEBYSCORE",
        &[k, ledger_score.as_bytes(), ledger_score.as_bytes()],
    );
    let found = found.ok().as_ref().map(strings_reply).unwrap_or_default();
    let mut ledger_name: Option<Vec<u8>> = None;
    let mut spent = Spent::default();
    if let Some(first) = found.first() {
        let name = first.clone().unwrap_or_default();
        total = total.saturating_sub(found.len() as u64);
        if op != Op::Peek {
            let read = if found.len() > 1 {
                Err(format!("ledger {}", show(&name)))
            } else {
                read_ledger_member(&mut spent, &name)
            };
            read.map_err(|what| corrupt(NAME, k, &what))?;
        }
        ledger_name = Some(name);
    }
    // The fence's score (fence - 1) while it fences: a live one, checked.
    let mut fence_score = None;
    if let Some(text) = call(ctx, &READ, "ZSCORE", &[k, FENCE_MEMBER])
        .ok()
        .as_ref()
        .and_then(bytes_reply)
    {
        let score = lua::number(&text);
        #[allow(clippy::cast_precision_loss)]
        let is_live = score.is_none_or(|s| s > cutoff as f64);
        if is_live {
            let Some(score) = score.and_then(lua::stored_integer).filter(|&s| s <= latest) else {
                return Err(corrupt(NAME, k, &format!("fence at {}", show(&text))));
            };
            fence_score = Some(score);
            total = total.saturating_sub(1);
        }
    }
    if total > MAX_LOG_UNITS {
        return Err(corrupt(
            NAME,
            k,
            &format!("{total} units, more than {MAX_LOG_UNITS}"),
        ));
    }
    let bad_entry = |member: &[u8], score: &[u8]| {
        corrupt(
            NAME,
            k,
            &format!("entry {} at {}", show(member), show(score)),
        )
    };
    // The newest unit's instant (the fence may sort after it), checked.
    let newest_of = |total: u64, ledger: Option<&[u8]>| -> Result<Option<u64>, RedisError> {
        if total == 0 {
            return Ok(None);
        }
        // The ledger sorts last, and the fence may sort after the newest
        // unit.
        let last = call(ctx, &READ, "ZRANGE", &[k, b"-3", b"-1", b"WITHSCORES"]);
        let items = last.ok().as_ref().map(strings_reply).unwrap_or_default();
        let at = |i: usize| items.get(i).cloned().flatten().unwrap_or_default();
        let mut i = items.len().saturating_sub(2);
        while i > 0 && {
            let member = at(i);
            member == FENCE_MEMBER || ledger == Some(&member[..])
        } {
            i -= 2;
        }
        let (member, score) = (at(i), at(i + 1));
        unit(&member, &score, latest)
            .map(Some)
            .ok_or_else(|| bad_entry(&member, &score))
    };
    let mut newest = newest_of(total, ledger_name.as_deref())?;
    // Units logged at `at` (the fence is no unit).
    let count_at = |at: u64| -> u64 {
        let text = at.to_string();
        let n = call(ctx, &READ, "ZCOUNT", &[k, text.as_bytes(), text.as_bytes()])
            .ok()
            .as_ref()
            .and_then(integer_reply)
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0);
        n - u64::from(fence_score == Some(at))
    };
    // The key's TTL: until its last unit, its fence, and the instants its
    // ledger holds settlements for have left the window.
    let expire = |newest: Option<u64>, spent: &Spent| -> Result<(), RedisError> {
        let Some(last) = newest.max(fence_score).max(spent.latest()) else {
            return Ok(());
        };
        let ttl = parsed
            .ttl_millis((last + window).saturating_sub(now))
            .to_string();
        call(ctx, &WRITE, "PEXPIRE", &[k, ttl.as_bytes()]).map_err(|e| passed_on(&e))?;
        Ok(())
    };
    // What a peek of cost 0 answers.
    let full = |total: u64, newest: Option<u64>| -> Result<Reply, RedisError> {
        let mut log = Log::from_entries(newest.map(|at| (at, total)).filter(|&(_, n)| n > 0))
            .ok_or_else(|| corrupt(NAME, k, "entries out of order"))?;
        let decision = algorithm
            .decide(&mut log, now, 0)
            .map_err(|_| invalid(NAME))?;
        Ok(fields(&decision))
    };

    match op {
        Op::Check | Op::Peek => {
            let mut entries: Vec<(u64, u64)> = Vec::new();
            if let Some(at) = newest {
                let needed = (total + u64::from(cost)).saturating_sub(limit);
                if needed > 0 && cost > 0 {
                    // Refused: when the unit whose leaving frees room for
                    // `cost` leaves (the fence sorts after the units of its
                    // own instant).
                    let mut offset = needed - 1;
                    if let Some(score) = fence_score {
                        let score = score.to_string();
                        let before = call(
                            ctx,
                            &READ,
                            "ZCOUNT",
                            &[k, live.as_bytes(), score.as_bytes()],
                        )
                        .ok()
                        .as_ref()
                        .and_then(integer_reply)
                        .and_then(|n| u64::try_from(n).ok())
                        .unwrap_or(0)
                        .saturating_sub(1);
                        if before <= offset {
                            offset += 1;
                        }
                    }
                    let offset = offset.to_string();
                    let reply = call(
                        ctx,
                        &READ,
                        "ZRANGEBYSCORE",
                        &[
                            k,
                            live.as_bytes(),
                            b"+inf",
                            b"WITHSCORES",
                            b"LIMIT",
                            offset.as_bytes(),
                            b"1",
                        ],
                    );
                    let items = reply.ok().as_ref().map(strings_reply).unwrap_or_default();
                    let item = |i: usize| items.get(i).cloned().flatten().unwrap_or_default();
                    let (member, score) = (item(0), item(1));
                    let freeing =
                        unit(&member, &score, latest).ok_or_else(|| bad_entry(&member, &score))?;
                    entries.push((freeing, needed));
                    if total > needed {
                        entries.push((at, total - needed));
                    }
                } else if total > 0 {
                    entries.push((at, total));
                }
            }
            let mut log = Log::from_entries(entries)
                .ok_or_else(|| corrupt(NAME, k, "entries out of order"))?;
            let decision = algorithm
                .decide(&mut log, now, cost)
                .map_err(|_| invalid(NAME))?;
            if op == Op::Check && decision.allowed && cost > 0 {
                let at = log.entries().last().map_or(now, |(at, _)| at);
                // Members go on numbering the units already logged at that
                // instant.
                let first = if newest == Some(at) { count_at(at) } else { 0 };
                add_units(ctx, k, at, first, u64::from(cost))?;
                expire(Some(at), &spent)?;
                let mark = spent.mark(at, first + u64::from(cost));
                return Ok(stamped(&decision, Stamp { at, mark }));
            }
            Ok(fields(&decision))
        }
        Op::Settle { actual, stamp } => {
            let actual = u64::from(u32::try_from(actual).map_err(|_| invalid(NAME))?);
            let charged = u64::from(cost);
            // Receipts of instants that have left the log give nothing back.
            spent.expire(u64::try_from(cutoff + 1).unwrap_or(0));
            if actual < charged {
                // Units leave only from the instant the admission was logged
                // at, while they are in the log and after the fence; once
                // per stamp.
                let here = if fence_score.is_none_or(|score| stamp.at > score) {
                    count_at(stamp.at)
                } else {
                    0
                };
                if here > 0 && spent.take(stamp, here) {
                    let taken = (charged - actual).min(here);
                    // The last `taken` numbers of that instant go, checked
                    // first: they must be units the scripts wrote there.
                    let names: Vec<Vec<u8>> = (here - taken + 1..=here)
                        .map(|i| {
                            let mut name = Vec::new();
                            write_unit_member(&mut name, stamp.at, i).expect("writing to a Vec");
                            name
                        })
                        .collect();
                    for chunk in names.chunks(1000) {
                        let mut args: Vec<&[u8]> = vec![k];
                        args.extend(chunk.iter().map(Vec::as_slice));
                        let scores = call(ctx, &READ, "ZMSCORE", &args)
                            .ok()
                            .as_ref()
                            .map(strings_reply)
                            .unwrap_or_default();
                        for (name, score) in chunk.iter().zip(
                            scores
                                .into_iter()
                                .chain(std::iter::repeat(None))
                                .take(chunk.len()),
                        ) {
                            #[allow(clippy::cast_precision_loss)]
                            let there = score
                                .as_deref()
                                .and_then(lua::number)
                                .is_some_and(|s| s == stamp.at as f64);
                            if !there {
                                let what = format!("no unit {}", show(name));
                                return Err(corrupt(NAME, k, &what));
                            }
                        }
                    }
                    for chunk in names.chunks(1000) {
                        let mut args: Vec<&[u8]> = vec![k];
                        args.extend(chunk.iter().map(Vec::as_slice));
                        call(ctx, &READ, "ZREM", &args).map_err(|e| passed_on(&e))?;
                    }
                    total -= taken;
                    spent.gave(stamp.at, taken);
                }
            } else if actual > charged {
                // Past the limit if need be, logged as an admission now.
                let extra = actual - charged;
                if total + extra > MAX_LOG_UNITS {
                    let what = format!("{} units, past {MAX_LOG_UNITS}", total + extra);
                    return Err(out_of_range(NAME, k, &what));
                }
                let at = newest.map_or(now, |newest| newest.max(now));
                let first = if newest == Some(at) { count_at(at) } else { 0 };
                add_units(ctx, k, at, first, extra)?;
                total += extra;
            }
            store_ledger(ctx, k, ledger_name.as_deref(), &spent)?;
            let ledger_name = spent.has_tail().then(|| ledger_member(&spent));
            newest = newest_of(total, ledger_name.as_deref())?;
            expire(newest, &spent)?;
            full(total, newest)
        }
        Op::Reset => {
            // Only a key that holds something a receipt could still claim
            // keeps a tombstone, the fence: every receipt so far names an
            // instant up to the latest one seen.
            let settled = spent.latest().is_some_and(|at| at + window > now);
            if total > 0 || fence_score.is_some() || settled {
                let latest = newest.map_or(now, |newest| newest.max(now));
                call(ctx, &READ, "DEL", &[k]).map_err(|e| passed_on(&e))?;
                let at = latest.to_string();
                call(ctx, &WRITE, "ZADD", &[k, at.as_bytes(), FENCE_MEMBER])
                    .map_err(|e| passed_on(&e))?;
                let ttl = parsed.ttl_millis(latest + window - now).to_string();
                call(ctx, &WRITE, "PEXPIRE", &[k, ttl.as_bytes()]).map_err(|e| passed_on(&e))?;
            }
            full(0, None)
        }
    }
}

/// A check of the sliding log on its sorted set opened for direct access
/// ([`key`](crate::key)'s `zset`): the same reads, decision and writes as the command
/// path above, a few calls into Redis's data structures rather than a
/// command each. `None` when the key holds what the scripts' error
/// wording must describe (another type, too many units, a member that is
/// not one the scripts write) or a fence: the command path reads it again
/// and answers that error, or decides.
fn check_log_directly(
    ctx: &Context,
    key: KeyArg<'_>,
    algorithm: &SlidingLog,
    parsed: &Args,
    now: u64,
    cost: u32,
) -> Result<Option<Reply>, RedisError> {
    let mut set = open(ctx, key);
    if !matches!(set.holds(), Holds::Nothing | Holds::Zset) || set.has_member(FENCE_MEMBER) {
        return Ok(None);
    }
    // A ledger (scored 2^53, after every unit): the command path reads it.
    #[allow(clippy::cast_precision_loss)]
    if set
        .newest()
        .is_some_and(|(_, score)| score >= LEDGER_SCORE as f64)
    {
        return Ok(None);
    }
    if set.holds() == Holds::Nothing {
        // The script reads a log that holds nothing three times (`ZCARD`,
        // the ledger's `ZRANGEBYSCORE`, the fence's `ZSCORE`), each read
        // raising `keymiss`; a key opened to write raises none.
        set.notify_missed();
        set.notify_missed();
        set.notify_missed();
    }
    let limit = algorithm.capacity();
    let cutoff = i128::from(now) - i128::from(algorithm.window_micros());
    // A cutoff below every i64 is below every score too.
    let cutoff = i64::try_from(cutoff).unwrap_or(i64::MIN);
    let card = set.len();
    let pruned = if card > 0 { set.prune(cutoff) } else { 0 };
    let total = card.saturating_sub(pruned);
    if total > MAX_LOG_UNITS {
        return Ok(None);
    }
    let latest = now.saturating_add(parsed.skew());
    let newest = match set.newest() {
        None if total == 0 => None,
        Some((member, score)) if total > 0 => match unit_of(&member, score, latest) {
            Some(at) => Some(at),
            None => return Ok(None),
        },
        _ => return Ok(None),
    };

    let mut entries: Vec<(u64, u64)> = Vec::new();
    if let Some(at) = newest {
        let needed = (total + u64::from(cost)).saturating_sub(limit);
        if needed > 0 && cost > 0 {
            // Refused: when the unit whose leaving frees room leaves.
            let Some((member, score)) = set.nth_after(cutoff, needed - 1) else {
                return Ok(None);
            };
            let Some(freeing) = unit_of(&member, score, latest) else {
                return Ok(None);
            };
            entries.push((freeing, needed));
            if total > needed {
                entries.push((at, total - needed));
            }
        } else if total > 0 {
            entries.push((at, total));
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
            write_unit_member(&mut cursor, at, n).expect("two u64 fit 48 bytes");
            let len = usize::try_from(cursor.position()).expect("at most 48");
            set.add(at_signed, &member[..len])
                .map_err(RedisError::String)?;
        }
        let ttl = parsed.ttl_millis((at + algorithm.window_micros()).saturating_sub(now));
        set.expire(ttl).map_err(RedisError::String)?;
        // No ledger here: nothing was given back at `at`.
        let mark = first + u64::from(cost);
        return Ok(Some(stamped(&decision, Stamp { at, mark })));
    }
    Ok(Some(fields(&decision)))
}

/// Writes a sliding log's ledger member as `spent` holds it, in place of
/// `old` (none when it holds nothing), as the script's `store_ledger`.
fn store_ledger(
    ctx: &Context,
    k: &[u8],
    old: Option<&[u8]>,
    spent: &Spent,
) -> Result<(), RedisError> {
    let new = spent.has_tail().then(|| ledger_member(spent));
    if new.as_deref() == old {
        return Ok(());
    }
    if let Some(old) = old {
        call(ctx, &READ, "ZREM", &[k, old]).map_err(|e| passed_on(&e))?;
    }
    if let Some(new) = new {
        let score = LEDGER_SCORE.to_string();
        call(ctx, &WRITE, "ZADD", &[k, score.as_bytes(), &new]).map_err(|e| passed_on(&e))?;
    }
    Ok(())
}

/// `unit(member, score)` of the sliding log's script: the instant of a
/// member as the scripts write them (`<at>:<n>` scored `at`, `n` from 1,
/// no leading zero), no later than `latest`; `None` for any other.
fn unit(member: &[u8], score: &[u8], latest: u64) -> Option<u64> {
    let at = lua::number(score)
        .and_then(lua::stored_integer)
        .filter(|&at| at <= latest)?;
    is_unit_member(member, at).then_some(at)
}

/// [`unit()`] of a member read from the set, with its score as a number.
fn unit_of(member: &[u8], score: f64, latest: u64) -> Option<u64> {
    let at = lua::stored_integer(score).filter(|&at| at <= latest)?;
    is_unit_member(member, at).then_some(at)
}

/// Adds `n` units at `at`, members `<at>:<first + 1>` onwards, in chunks of
/// a thousand as the script adds them.
fn add_units(ctx: &Context, k: &[u8], at: u64, first: u64, n: u64) -> Result<(), RedisError> {
    let at_text = at.to_string();
    let at_bytes = at_text.as_bytes();
    let members: Vec<Vec<u8>> = (1..=n)
        .map(|i| {
            let mut member = Vec::new();
            write_unit_member(&mut member, at, first + i).expect("writing to a Vec");
            member
        })
        .collect();
    for chunk in members.chunks(1000) {
        let mut zadd: Vec<&[u8]> = Vec::with_capacity(1 + 2 * chunk.len());
        zadd.push(k);
        for member in chunk {
            zadd.push(at_bytes);
            zadd.push(member);
        }
        call(ctx, &WRITE, "ZADD", &zadd).map_err(|e| passed_on(&e))?;
    }
    Ok(())
}
