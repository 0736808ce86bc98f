//! The sliding windows' remote forms: the Redis scripts
//! `lua/sliding_log.lua` and `lua/sliding_counter.lua`, and their states.
//!
//! The **sliding log** is a sorted set: one member `<µs>:<n>` per admitted
//! unit, scored by the µs it was admitted at (`n` numbers the units of one
//! µs from 1), and after a reset the member `fence`, scored by the latest
//! instant the reset saw (the fence is that plus 1), and once it settled a
//! receipt, the member `ledger:<the ledger's tail>` scored 2^53 (see
//! [`Spent`]). Its parameters: `W`,
//! the limit. The **sliding counter** is `struct '<dddd'`: the current
//! window's index, the previous and the current counts, the fence. Its
//! parameters: `W`, the limit, µs per step, steps per window.

use std::io::Write;

use ratelab_core::toolkit::remote::{
    self, Encoded, MAX_COUNT, MAX_LOG_UNITS, Params, RemoteForm, Shape, Stored, StoredOf,
    StringForm, Value, doubles, integers, lua,
};

use ratelab_core::toolkit::Spent;
use ratelab_core::toolkit::remote::StoredLedger;

use crate::{Log, MAX_STORED_LOG_LIMIT, SlidingCounter, SlidingLog, Windows};

/// The sorted-set member of a sliding log's fence.
pub const FENCE_MEMBER: &[u8] = b"fence";

/// How the member of a sliding log's ledger begins (its settlements, once
/// it settled any): the ledger's tail follows, as a window's string holds
/// it after its state.
pub const LEDGER_PREFIX: &[u8] = b"ledger:";

/// The score of a sliding log's ledger member: 2^53, after every instant,
/// so that it sorts last and no pruning or count of instants meets it.
pub const LEDGER_SCORE: u64 = 1 << 53;

/// The latest score a unit or the fence has: 2^52, the latest instant.
pub const MAX_INSTANT_SCORE: u64 = 1 << 52;

/// Whether `member` is a unit the scripts log at `at`: `<at>:<n>`, `n` from
/// 1, in decimal without a leading zero.
pub fn is_unit_member(member: &[u8], at: u64) -> bool {
    let mut prefix = [0u8; 24];
    let mut cursor = std::io::Cursor::new(&mut prefix[..]);
    write!(cursor, "{at}:").expect("a u64 and a colon fit 24 bytes");
    let len = usize::try_from(cursor.position()).expect("at most 24");
    let Some(number) = member.strip_prefix(&prefix[..len]) else {
        return false;
    };
    number.first().is_some_and(|d| (b'1'..=b'9').contains(d))
        && number.iter().all(u8::is_ascii_digit)
}

/// Writes the member of the `n`-th unit logged at `at` (`<at>:<n>`) into
/// `out`, without allocating: what [`is_unit_member`] reads.
pub fn write_unit_member(out: &mut impl Write, at: u64, n: u64) -> std::io::Result<()> {
    write!(out, "{at}:{n}")
}

impl RemoteForm for SlidingLog {
    const NAME: &'static str = "sliding-log";
    const CODE: &'static str = "sl";
    const SCRIPT_FILE: &'static str = "sliding_log.lua";
    const SCRIPT: &'static str = include_str!("../lua/sliding_log.lua");
    const PARAMS: usize = 2;
    const SHAPE: Shape = Shape::SortedSet;
    /// One member per unit: a log above [`MAX_STORED_LOG_LIMIT`] is refused.
    const MAX_STORED_BURST: Option<(u32, &'static str)> = Some((
        MAX_STORED_LOG_LIMIT,
        "a sliding log above 10,000 units on Redis (one sorted-set member per unit); use the sliding counter",
    ));

    /// The window `W` µs, the limit (the burst).
    fn params(&self) -> Params {
        Params::new(&[self.window, self.limit])
    }

    fn from_params(params: &[u64]) -> Option<Self> {
        remote::window_quota(params[0], params[1]).map(SlidingLog::new)
    }

    fn max_wait_micros(&self) -> u64 {
        self.window
    }

    fn out_of_range(&self, stored: &StoredOf<Self>) -> Option<String> {
        let total = stored.state.total();
        (total > MAX_LOG_UNITS).then(|| format!("{total} units, past {MAX_LOG_UNITS}"))
    }

    /// A member per unit, and the fence's.
    fn encode(&self, stored: &StoredOf<Self>) -> Value {
        let mut members = Vec::new();
        for (at, units) in stored.state.entries() {
            for n in 1..=units {
                let mut member = Vec::new();
                write_unit_member(&mut member, at, n).expect("writing to a Vec");
                members.push((member, at));
            }
        }
        let fence = stored.ledger.fence();
        if fence > 0 {
            members.push((FENCE_MEMBER.to_vec(), fence - 1));
        }
        if stored.ledger.has_tail() {
            members.push((ledger_member(&stored.ledger), LEDGER_SCORE));
        }
        Value::SortedSet(members)
    }

    /// Every member read (where the script reads those it needs): units as
    /// the scripts write them, no later than `now + skew`; a fence that
    /// still fences (scored after `now − W`), likewise.
    fn decode(&self, value: &Value, now: u64, skew: u64) -> Result<StoredOf<Self>, String> {
        let Value::SortedSet(members) = value else {
            return Err("a string, not a zset".to_owned());
        };
        let latest = now.saturating_add(skew);
        let cutoff = now.saturating_sub(self.window);
        let mut fence = 0;
        let mut ledger = None;
        let mut units: Vec<u64> = Vec::with_capacity(members.len());
        for (member, score) in members {
            let score = *score;
            if score == LEDGER_SCORE && ledger.is_none() {
                ledger = Some(member);
                continue;
            }
            if member == FENCE_MEMBER {
                if score > cutoff || now < self.window {
                    if score > latest || score >= remote::EXACT {
                        return Err(format!(
                            "fence at {}",
                            lua::show(score.to_string().as_bytes())
                        ));
                    }
                    fence = score + 1;
                }
                continue;
            }
            if score > latest || !is_unit_member(member, score) {
                return Err(format!(
                    "entry {} at {}",
                    lua::show(member),
                    lua::show(score.to_string().as_bytes())
                ));
            }
            units.push(score);
        }
        let total = u64::try_from(units.len()).unwrap_or(u64::MAX);
        if total > MAX_LOG_UNITS {
            return Err(format!("{total} units, more than {MAX_LOG_UNITS}"));
        }
        units.sort_unstable();
        let mut entries: Vec<(u64, u64)> = Vec::new();
        for at in units {
            match entries.last_mut() {
                Some((last, n)) if *last == at => *n += 1,
                _ => entries.push((at, 1)),
            }
        }
        let log = Log::from_entries(entries).ok_or_else(|| "entries out of order".to_owned())?;
        let mut spent = Spent::fenced(fence);
        if let Some(member) = ledger {
            read_ledger_member(&mut spent, member)?;
        }
        Ok(Stored {
            state: log,
            ledger: spent,
            latest: 0,
        })
    }
}

/// The member that holds a sliding log's ledger: [`LEDGER_PREFIX`] and the
/// ledger's tail.
pub fn ledger_member(spent: &Spent) -> Vec<u8> {
    let mut tail = Encoded::new();
    spent.write_tail(&mut tail);
    let mut member = LEDGER_PREFIX.to_vec();
    member.extend_from_slice(&tail);
    member
}

/// Reads the ledger member `member` (scored [`LEDGER_SCORE`]) into `spent`
/// (which holds the fence), as the script reads it: [`LEDGER_PREFIX`] and a
/// tail of a window's ledger's size, not empty; or what is wrong with it.
pub fn read_ledger_member(spent: &mut Spent, member: &[u8]) -> Result<(), String> {
    match member.strip_prefix(LEDGER_PREFIX) {
        Some(tail) if !tail.is_empty() && Spent::tail_sized(tail.len()) => spent.read_tail(tail),
        _ => Err(format!("ledger {}", lua::show(member))),
    }
}

impl RemoteForm for SlidingCounter {
    const NAME: &'static str = "sliding-counter";
    const CODE: &'static str = "sc";
    const SCRIPT_FILE: &'static str = "sliding_counter.lua";
    const SCRIPT: &'static str = include_str!("../lua/sliding_counter.lua");
    const PARAMS: usize = 4;
    const SHAPE: Shape = Shape::String;

    /// The window `W` µs, the limit (the burst), µs per step, steps per
    /// window.
    fn params(&self) -> Params {
        Params::new(&[self.window, self.limit, self.step_micros(), self.steps()])
    }

    fn from_params(params: &[u64]) -> Option<Self> {
        remote::window_quota(params[0], params[1]).map(SlidingCounter::new)
    }

    /// Both windows' counts weigh until two windows have passed.
    fn max_wait_micros(&self) -> u64 {
        2 * self.window
    }

    fn out_of_range(&self, stored: &StoredOf<Self>) -> Option<String> {
        let current = stored.state.current;
        (current > MAX_COUNT).then(|| format!("{current} units in a window, past 2^36"))
    }

    fn encode(&self, stored: &StoredOf<Self>) -> Value {
        remote::encode_string(self, stored)
    }

    fn decode(&self, value: &Value, now: u64, skew: u64) -> Result<StoredOf<Self>, String> {
        remote::decode_string(self, value, now, skew)
    }
}

impl StringForm for SlidingCounter {
    const SIZE: usize = 32;

    fn decode_fixed(&self, fixed: &[u8], now: u64, skew: u64) -> Result<StoredOf<Self>, String> {
        let values = doubles(fixed);
        let Some([index, previous, current, fence]) =
            integers(values).filter(|[index, previous, current, fence]| {
                *previous <= MAX_COUNT && *current <= MAX_COUNT && *fence <= index + 1
            })
        else {
            let [index, previous, current, fence] = values;
            return Err(format!(
                "window {}, counts {} and {}, fence {}",
                lua::tostring(index),
                lua::tostring(previous),
                lua::tostring(current),
                lua::tostring(fence)
            ));
        };
        if remote::window_after_now(index, self.window, now, skew) {
            return Err(format!("window {index} starts after now"));
        }
        Ok(Stored {
            state: Windows::from_parts(index, previous, current),
            ledger: Spent::fenced(fence),
            latest: 0,
        })
    }

    fn encode_fixed(&self, stored: &StoredOf<Self>) -> Encoded {
        let windows = &stored.state;
        Encoded::doubles(&[
            windows.index,
            windows.previous,
            windows.current,
            stored.ledger.fence(),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::Quota;

    fn quota() -> Quota {
        Quota::per_second(5).unwrap().with_burst(10).unwrap()
    }

    #[test]
    fn the_counter_round_trips_and_a_fence_past_its_window_is_refused() {
        let sc = SlidingCounter::new(quota());
        let now = 1_700_000_000_000_000;
        let windows = Stored {
            state: Windows::from_parts(now / sc.window_micros(), 3, 4),
            ledger: Spent::default(),
            latest: 0,
        };
        assert_eq!(sc.decode(&sc.encode(&windows), now, 0), Ok(windows));
        // Past the limit is a settlement's debt; past the fence's own window
        // is no state a script writes.
        let fenced = Stored {
            state: Windows::from_parts(1, 3, 11),
            ledger: Spent::fenced(3),
            latest: 0,
        };
        assert_eq!(
            sc.decode(&sc.encode(&fenced), now, 0),
            Err("window 1, counts 3 and 11, fence 3".to_owned())
        );
    }

    #[test]
    fn the_log_is_a_member_per_unit_and_its_fence() {
        let log = SlidingLog::new(quota());
        let now = 1_700_000_000_000_000;
        let stored = Stored {
            state: Log::from_entries([(now - 5, 2), (now - 1, 1)]).unwrap(),
            ledger: Spent::fenced(now - 3),
            latest: 0,
        };
        let value = log.encode(&stored);
        let Value::SortedSet(members) = &value else {
            panic!("a sorted set")
        };
        let names: Vec<&[u8]> = members.iter().map(|(m, _)| &m[..]).collect();
        let first = format!("{}:1", now - 5);
        assert!(names.contains(&first.as_bytes()) && names.contains(&FENCE_MEMBER));
        assert_eq!(log.decode(&value, now, 0), Ok(stored));
        // A member no script writes.
        let forged = Value::SortedSet(vec![(format!("{now}:01").into_bytes(), now)]);
        assert_eq!(
            log.decode(&forged, now, 0),
            Err(format!("entry \"{now}:01\" at \"{now}\""))
        );
        // A ledger round-trips too.
        let mut spent = Spent::fenced(now - 3);
        assert!(spent.take(
            ratelab_core::toolkit::Stamp {
                at: now - 1,
                mark: 1
            },
            1
        ));
        spent.gave(now - 1, 1);
        let with_ledger = Stored {
            state: Log::from_entries([(now - 5, 2)]).unwrap(),
            ledger: spent,
            latest: 0,
        };
        assert_eq!(
            log.decode(&log.encode(&with_ledger), now, 0),
            Ok(with_ledger)
        );
        assert!(is_unit_member(b"12:3", 12) && !is_unit_member(b"12:0", 12));
        assert!(!is_unit_member(b"1:3", 12) && !is_unit_member(b"12:3x", 12));
    }
}
