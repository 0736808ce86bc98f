//! The arguments after the key, read as the scripts' prologue
//! (`lua/prologue.lua`) reads its `ARGV`.

use std::time::{SystemTime, UNIX_EPOCH};

use ratelab_core::toolkit::{Stamp, clamp_instant};

use crate::lua;

/// What a call does with the key: `ARGV[6]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// Decide, consuming what passes.
    Check,
    /// Decide, writing nothing.
    Peek,
    /// Settle an admission of `cost` (`settle:<actual>:<stamp_at>:<stamp_mark>`): it
    /// finally counts for `actual` units.
    Settle { actual: u64, stamp: Stamp },
    /// Back to full capacity (`reset`), as if never seen.
    Reset,
}

/// The prologue's first check: `ARGV[1]` is the protocol version it speaks
/// (5), else the error `ratelab: protocol version 5 expected, got ...` (a
/// caller built for another version of the protocol never gets a decision
/// made from arguments it meant otherwise).
pub(crate) fn check_protocol(first: Option<&[u8]>) -> Result<(), String> {
    if first == Some(b"5") {
        return Ok(());
    }
    let got = match first {
        None => "nothing".to_owned(),
        Some(b"") => "\"\"".to_owned(),
        Some(raw) => raw[..raw.len().min(32)]
            .iter()
            .map(|&b| {
                if (0x21..=0x7e).contains(&b) || b == b' ' {
                    char::from(b)
                } else {
                    '?'
                }
            })
            .collect(),
    };
    Err(format!("ratelab: protocol version 5 expected, got {got}"))
}

/// Splits the operation out of `ARGV` after the version, as the prologue
/// does: `None` for anything but `check`, `peek`, `reset` and
/// `settle:<actual>:<stamp_at>:<stamp_mark>` (three integers as the
/// prologue's `integer` reads them): invalid arguments. Answers the
/// operation, the four arguments before it (`now`, cost, slack, deadline)
/// and the parameters, borrowed: nothing is copied.
pub(crate) fn split_op<A: AsRef<[u8]>>(argv: &[A]) -> Option<(Op, &[A], &[A])> {
    if argv.len() < 5 {
        return None;
    }
    let (head, rest) = argv.split_at(4);
    let (op, params) = rest.split_first()?;
    let op = match op.as_ref() {
        b"check" => Op::Check,
        b"peek" => Op::Peek,
        b"reset" => Op::Reset,
        op => {
            let mut fields = op.strip_prefix(b"settle:")?.split(|&b| b == b':');
            let mut next = || fields.next().and_then(lua::integer);
            let (actual, at, mark) = (next()?, next()?, next()?);
            if fields.next().is_some() {
                return None;
            }
            Op::Settle {
                actual,
                stamp: Stamp { at, mark },
            }
        }
    };
    Some((op, head, params))
}

/// The most TTL slack, ms: 2^52 µs, the whole range of instants (no clock
/// steps back further), which keeps `slack × 1000 + 1 s` below 2^53.
pub(crate) const MAX_SLACK_MS: u64 = (1u64 << 52).div_ceil(1000);

/// The most parameters an algorithm takes (the sliding counter's four).
pub(crate) const MAX_PARAMS: usize = 4;

/// `ARGV` after the protocol version, once the prologue has read it: every argument a non-negative
/// integer below 2^53.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Args {
    /// The caller's instant, µs, or `None` to read the server's clock.
    pub(crate) now: Option<u64>,
    pub(crate) cost: u64,
    /// TTL slack, ms.
    pub(crate) slack: u64,
    /// Unix µs on the server's clock after which the call must not run.
    pub(crate) deadline: Option<u64>,
    params: [u64; MAX_PARAMS],
    /// How many parameters came (each an integer), the first
    /// [`MAX_PARAMS`] of them kept.
    len: usize,
}

impl Args {
    /// `ARGV = [now or "", cost, slack, deadline or "", params...]`; `None`
    /// when the prologue's `args_ok` would be false.
    #[cfg(test)]
    pub(crate) fn parse<A: AsRef<[u8]>>(argv: &[A]) -> Option<Args> {
        let (head, params) = argv.split_at(argv.len().min(4));
        Args::parse_parts(head, params)
    }

    /// [`Args::parse`] of `head` (`now`, cost, slack, deadline) followed by
    /// `params`.
    pub(crate) fn parse_parts<A: AsRef<[u8]>>(head: &[A], params: &[A]) -> Option<Args> {
        let [now, cost, slack, deadline] = head else {
            return None;
        };
        let optional = |raw: &A| {
            let raw = raw.as_ref();
            if raw.is_empty() {
                Some(None)
            } else {
                lua::integer(raw).map(Some)
            }
        };
        let mut args = Args {
            now: optional(now)?,
            cost: lua::integer(cost.as_ref())?,
            slack: lua::integer(slack.as_ref()).filter(|&ms| ms <= MAX_SLACK_MS)?,
            deadline: optional(deadline)?,
            params: [0; MAX_PARAMS],
            len: params.len(),
        };
        // Each must be an integer, however many came: the algorithm then
        // refuses a count other than its own (after the deadline's check,
        // as the scripts do).
        for (i, raw) in params.iter().enumerate() {
            let value = lua::integer(raw.as_ref())?;
            if i < MAX_PARAMS {
                args.params[i] = value;
            }
        }
        Some(args)
    }

    /// The parameters, or `None` when more than [`MAX_PARAMS`] came (no
    /// algorithm takes them).
    pub(crate) fn params(&self) -> Option<&[u64]> {
        self.params.get(..self.len)
    }

    /// The instant to decide at, µs: the caller's, else the server clock,
    /// clamped as every runner clamps it. `Err` is the "expired" error when
    /// the deadline has passed (nothing may be written then).
    pub(crate) fn now(&self) -> Result<u64, String> {
        let clock = (self.now.is_none() || self.deadline.is_some()).then(unix_micros);
        if let (Some(deadline), Some(clock)) = (self.deadline, clock)
            && clock > deadline
        {
            return Err(format!(
                "ratelab expired: ran {} us after its deadline; nothing was charged",
                clock - deadline
            ));
        }
        let now = self.now.or(clock).expect("the clock is read without `now`");
        Ok(clamp_instant(now))
    }

    /// Whether the call runs on the server's clock (no caller's instant).
    pub(crate) fn on_server_clock(&self) -> bool {
        self.now.is_none()
    }

    /// How far ahead of now a stored instant may be: one second for clocks
    /// that differ after a failover, and the slack.
    pub(crate) fn skew(&self) -> u64 {
        1_000_000u64.saturating_add(self.slack.saturating_mul(1000))
    }

    /// The PEXPIRE of a key that may be forgotten in `micros`: rounded up
    /// to the millisecond, plus the slack.
    pub(crate) fn ttl_millis(&self, micros: u64) -> u64 {
        lua::ceil_millis(micros).saturating_add(self.slack)
    }
}

/// Redis `TIME` as the scripts compute it: seconds × 10^6 + µs. The module
/// runs inside the server, so the process clock *is* the server's clock.
pub(crate) fn unix_micros() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    since.as_secs() * 1_000_000 + u64::from(since.subsec_micros())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_version_comes_first() {
        assert_eq!(check_protocol(Some(b"5")), Ok(()));
        let error = |got: &str| Err(format!("ratelab: protocol version 5 expected, got {got}"));
        // Versions 1 to 3 are no longer answered: their keys hold state in
        // formats this module does not read, and version 3's refund trusted
        // a duration the caller computed.
        for old in ["1", "2", "3"] {
            assert_eq!(check_protocol(Some(old.as_bytes())), error(old));
        }
        assert_eq!(check_protocol(Some(b"4")), error("4"));
        assert_eq!(check_protocol(Some(b"6")), error("6"));
        assert_eq!(check_protocol(None), error("nothing"));
        assert_eq!(check_protocol(Some(b"")), error("\"\""));
        assert_eq!(check_protocol(Some(b"4\x01")), error("4?"));
    }

    #[test]
    fn the_operation_comes_after_the_deadline() {
        let argv = ["1000", "2", "5", "", "peek", "10"];
        let (op, head, params) = split_op(&argv).unwrap();
        assert_eq!(op, Op::Peek);
        assert_eq!(head, ["1000", "2", "5", ""]);
        assert_eq!(params, ["10"]);
        assert_eq!(
            split_op(&["1", "1", "0", "", "reset"]).unwrap().0,
            Op::Reset
        );
        assert!(split_op(&["1", "1", "0"]).is_none());
        assert!(split_op(&["1000", "2", "5", ""]).is_none());
        assert!(split_op(&["1000", "2", "5", "", "drop", "10"]).is_none());
        let settle = ["1000", "2", "5", "", "settle:1:1500:7", "10"];
        assert_eq!(
            split_op(&settle).unwrap().0,
            Op::Settle {
                actual: 1,
                stamp: Stamp { at: 1500, mark: 7 }
            }
        );
        // Read as the prologue's `integer` reads each field.
        let lenient = ["1000", "2", "5", "", "settle: 1:1e3:0", "10"];
        assert_eq!(
            split_op(&lenient).unwrap().0,
            Op::Settle {
                actual: 1,
                stamp: Stamp { at: 1000, mark: 0 }
            }
        );
        for bad in [
            "settle",
            "settle:",
            "settle:1",
            "settle:1:2",
            "settle:1:2:",
            "settle:1:2:3:",
            "settle:1:2:3:4",
            "settle:-1:2:3",
            "settle:1:0x10:3",
            "settle:1:2:1.5",
            "settle:1:2:9007199254740992",
            "settle:1\0:2:3",
            "refund:5",
            "refund",
        ] {
            let argv = ["1000", "2", "5", "", bad, "10"];
            assert!(split_op(&argv).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn reads_the_prologue_arguments() {
        let args = Args::parse(&["1000", "2", "5", "", "10", "20", "3"]).unwrap();
        assert_eq!(args.now, Some(1000));
        assert_eq!(args.cost, 2);
        assert_eq!(args.slack, 5);
        assert_eq!(args.deadline, None);
        assert_eq!(args.params(), Some(&[10, 20, 3][..]));
        assert_eq!(args.now(), Ok(1000));
        assert_eq!(args.skew(), 1_005_000);
        assert_eq!(args.ttl_millis(1_001), 7);
    }

    #[test]
    fn refuses_what_the_prologue_refuses() {
        assert_eq!(Args::parse(&["1", "1", "0"]), None);
        assert_eq!(Args::parse(&["x", "1", "0", ""]), None);
        assert_eq!(Args::parse(&["1", "", "0", ""]), None);
        assert_eq!(Args::parse(&["1", "1", "0", "", "5", "-1"]), None);
        assert_eq!(
            Args::parse(&["1", "1", "0", "", "5", "6", "7", "8", "x"]),
            None
        );
        // Five integers are read, and refused by every algorithm.
        let five = Args::parse(&["1", "1", "0", "", "5", "6", "7", "8", "9"]).unwrap();
        assert_eq!(five.params(), None);
        // The slack: at most 2^52 µs.
        assert!(Args::parse(&["1", "1", "4503599627371", ""]).is_some());
        assert_eq!(Args::parse(&["1", "1", "4503599627372", ""]), None);
    }

    #[test]
    fn a_passed_deadline_expires_and_time_comes_from_the_clock() {
        let late = Args::parse(&["", "1", "0", "1"]).unwrap();
        assert!(late.now().unwrap_err().starts_with("ratelab expired: ran "));
        let now = Args::parse(&["", "1", "0", ""]).unwrap().now().unwrap();
        assert!(now > 1_600_000_000_000_000, "{now}");
        assert_eq!(
            Args::parse(&["9007199254740991", "1", "0", ""])
                .unwrap()
                .now(),
            Ok(1 << 52)
        );
    }
}
