//! A command's arguments after the key, read as the scripts' prologue
//! (`lua/prologue.lua`) reads its `ARGV`, in its order and with its errors;
//! then the algorithm built back from the parameters the scripts take, as
//! the scripts check them. Its state's encoding, and the checks of what is
//! read, are the algorithm crate's own ([`RemoteForm`]).

use ratelab_core::toolkit::RemoteForm;
use redis_module::RedisError;

use crate::args::{Args, Op, check_protocol, split_op};
use crate::reply::invalid;

/// What the prologue reads: the algorithm, the arguments, the instant, the
/// cost and the operation.
pub(crate) struct Prologue<A> {
    pub(crate) algorithm: A,
    pub(crate) parsed: Args,
    pub(crate) now: u64,
    pub(crate) cost: u32,
    pub(crate) op: Op,
}

/// Reads the arguments after the key as the prologue does, borrowing them,
/// in its order: the version, the arguments it reads as integers (and the
/// operation), the deadline, then the algorithm's own checks.
pub(crate) fn read<A: RemoteForm>(argv: &[&[u8]]) -> Result<Prologue<A>, RedisError> {
    check_protocol(argv.first().copied()).map_err(RedisError::String)?;
    let (op, head, params) = split_op(&argv[1..]).ok_or_else(|| invalid(A::NAME))?;
    let parsed = Args::parse_parts(head, params).ok_or_else(|| invalid(A::NAME))?;
    // A reset takes no cost.
    if op == Op::Reset && parsed.cost != 0 {
        return Err(invalid(A::NAME));
    }
    let now = parsed.now().map_err(RedisError::String)?;
    let actual = match op {
        Op::Settle { actual, .. } => Some(actual),
        _ => None,
    };
    let algorithm = from_args::<A>(&parsed, actual).ok_or_else(|| invalid(A::NAME))?;
    let cost = u32::try_from(parsed.cost).map_err(|_| invalid(A::NAME))?;
    Ok(Prologue {
        algorithm,
        parsed,
        now,
        cost,
        op,
    })
}

/// The algorithm for these arguments (and a settlement's `actual`), or
/// `None` when the script would answer "invalid arguments" (its own checks:
/// exactly its parameters, a quota that yields them, a cost or an actual
/// within the capacity).
fn from_args<A: RemoteForm>(args: &Args, actual: Option<u64>) -> Option<A> {
    let algorithm = A::parse(args.params()?)?;
    let capacity = algorithm.capacity();
    (args.cost <= capacity && actual.is_none_or(|actual| actual <= capacity)).then_some(algorithm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab::{Gcra, SlidingCounter};

    fn args(tail: &[&str]) -> Args {
        let mut argv = vec!["0", tail[0], "0", ""];
        argv.extend_from_slice(&tail[1..]);
        Args::parse(&argv).unwrap()
    }

    #[test]
    fn parameters_no_quota_yields_are_refused() {
        let gcra = |tail: &[&str], actual| from_args::<Gcra>(&args(tail), actual);
        assert!(gcra(&["5", "100", "999", "10"], None).is_none());
        assert!(gcra(&["5", "100", "1000", "10"], None).is_some());
        // A cost above the capacity, a zero interval, a missing parameter,
        // one too many.
        assert!(gcra(&["11", "100", "1000", "10"], None).is_none());
        assert!(gcra(&["1", "0", "0", "10"], None).is_none());
        assert!(gcra(&["1", "100", "1000"], None).is_none());
        assert!(gcra(&["1", "100", "1000", "10", "0"], None).is_none());
        // A settlement's actual within the capacity too.
        assert!(gcra(&["1", "100", "1000", "10"], Some(10)).is_some());
        assert!(gcra(&["1", "100", "1000", "10"], Some(11)).is_none());
        let counter = ["1", "1000", "10", "1", "1000"];
        assert!(from_args::<SlidingCounter>(&args(&counter), None).is_some());
        let counter = ["1", "1000", "10", "2", "500"];
        assert!(from_args::<SlidingCounter>(&args(&counter), None).is_none());
    }
}
