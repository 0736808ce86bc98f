//! Each algorithm as the module runs it: built back from the parameters the
//! scripts take, as the scripts check them. Its state's encoding, and the
//! checks of what is read, are the algorithm crate's own
//! ([`RemoteForm`](ratelab_core::toolkit::RemoteForm)).

use ratelab_core::toolkit::RemoteForm;

use crate::args::Args;

/// The algorithm for these arguments (and a settlement's `actual`), or
/// `None` when the script would answer "invalid arguments" (its own checks:
/// exactly its parameters, a quota that yields them, a cost or an actual
/// within the capacity).
pub(crate) fn from_args<A: RemoteForm>(args: &Args, actual: Option<u64>) -> Option<A> {
    let algorithm = A::parse(args.params()?)?;
    let capacity = algorithm.capacity();
    (args.cost <= capacity && actual.is_none_or(|actual| actual <= capacity)).then_some(algorithm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_gcra::Gcra;
    use ratelab_sliding_window::SlidingCounter;

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
