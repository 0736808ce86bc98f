//! [`Error`]: what a limiter answers when it cannot decide.
//!
//! A refusal is not an error: it is a [`Decision`](crate::Decision) with
//! `allowed == false`. An error means the request could never pass, or the
//! limiter could not decide.

use std::time::Duration;

/// Why a limiter could not decide.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The cost is above what the limiter admits even when full: no wait
    /// would let it pass.
    #[error("a cost of {cost} can never fit: at most {capacity} pass at once")]
    CostTooHigh {
        /// The cost asked for.
        cost: u32,
        /// The most that passes at once.
        capacity: u64,
    },
    /// A keyed in-memory limiter holds its maximum number of keys and none of
    /// them is back to full capacity, so none can be forgotten without
    /// admitting more than the quota. The new key is not admitted.
    #[error(
        "the limiter already tracks its maximum of {max_keys} keys, none back to full capacity; a slot frees in {retry_after:?}"
    )]
    TooManyKeys {
        /// The bound on the number of keys.
        max_keys: usize,
        /// The wait until at least one tracked key is back to full capacity.
        retry_after: Duration,
    },
    /// The backend did not answer within its timeout.
    #[error("the rate limiter backend did not answer within {0:?}")]
    Timeout(Duration),
    /// The backend failed (connection refused, dropped or reset, a cluster
    /// moving or down): an outage, where a failure policy applies.
    #[error("the rate limiter backend failed: {0}")]
    Backend(#[source] Source),
    /// The backend answered, but with something no limiter can act on: stored
    /// state no limiter could have written, a key of the wrong type, a reply
    /// out of bounds, a backend out of memory. Not an outage: retrying or
    /// failing open would not repair it, so it is surfaced, not hidden behind
    /// a failure policy.
    #[error("the rate limiter backend holds or returned invalid data: {0}")]
    Data(#[source] Source),
    /// The backend failed repeatedly and is not being called for a while (a
    /// circuit breaker is open): the wait until it is tried again.
    #[error("the rate limiter backend is failing; next attempt in {0:?}")]
    CircuitOpen(Duration),
    /// The limiter does not offer this operation (a third-party limiter that
    /// cannot answer a non-consuming query, say).
    #[error("this rate limiter does not support {0}")]
    Unsupported(&'static str),
    /// A receipt handed to a limiter that did not issue it: nothing was
    /// given back or charged.
    #[error("this receipt was issued by another rate limiter")]
    ForeignReceipt,
}

/// What kind of [`Error`] a limiter answered: comparable, copyable, for
/// matching and tests (an [`Error`] may wrap a backend error that is neither).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`Error::CostTooHigh`].
    CostTooHigh,
    /// [`Error::TooManyKeys`].
    TooManyKeys,
    /// [`Error::Timeout`].
    Timeout,
    /// [`Error::Backend`].
    Backend,
    /// [`Error::Data`].
    Data,
    /// [`Error::CircuitOpen`].
    CircuitOpen,
    /// [`Error::Unsupported`].
    Unsupported,
    /// [`Error::ForeignReceipt`].
    ForeignReceipt,
}

impl Error {
    /// What kind of error this is.
    #[inline]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::CostTooHigh { .. } => ErrorKind::CostTooHigh,
            Error::TooManyKeys { .. } => ErrorKind::TooManyKeys,
            Error::Timeout(_) => ErrorKind::Timeout,
            Error::Backend(_) => ErrorKind::Backend,
            Error::Data(_) => ErrorKind::Data,
            Error::CircuitOpen(_) => ErrorKind::CircuitOpen,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::ForeignReceipt => ErrorKind::ForeignReceipt,
        }
    }

    /// A backend failure from any error.
    #[inline]
    pub fn backend(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        Error::Backend(Source::new(error.into()))
    }

    /// A data error from any error.
    #[inline]
    pub fn data(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        Error::Data(Source::new(error.into()))
    }

    /// How long to wait before the limiter can decide again, when it says
    /// (an open circuit breaker).
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::CircuitOpen(wait)
            | Error::TooManyKeys {
                retry_after: wait, ..
            } => Some(*wait),
            _ => None,
        }
    }

    /// The limiter could not decide for reasons of its own (its backend failed
    /// or was too slow, or it is out of room for keys), as opposed to a
    /// request that can never pass. This is where a failure policy (fail open,
    /// fail closed) applies. [`Error::Data`] is not unavailability: the
    /// backend answered, and what it holds or sent needs repair.
    #[inline]
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::TooManyKeys { .. }
                | Error::Timeout(_)
                | Error::Backend(_)
                | Error::CircuitOpen(_)
        )
    }
}

/// A boxed error, as the cause of an [`Error::Backend`] or [`Error::Data`]:
/// it reads as the error it holds (`downcast_ref` through `Deref` to the
/// `dyn Error` inside, `Display`, `source`).
///
/// It exists for the hot path. A limiter's answer is a `Result<Decision,
/// Error>`, dropped on every check; with the boxes held directly, its drop
/// glue (two virtual drops and a free, for variants an in-memory limiter never
/// returns) stayed a function of its own, called on every check even when the
/// answer was a decision: an eighth of a one-key check's time. Here the drop
/// is one call to a cold function, and the glue inlines to a test of the
/// variant.
pub struct Source(Option<Box<dyn std::error::Error + Send + Sync + 'static>>);

impl Source {
    /// Holds `error`.
    #[inline]
    pub fn new(error: Box<dyn std::error::Error + Send + Sync + 'static>) -> Self {
        Source(Some(error))
    }

    /// The error held.
    pub fn into_inner(mut self) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self.0.take().unwrap_or_else(|| Box::new(Dropped))
    }

    fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        match &self.0 {
            Some(error) => error.as_ref(),
            None => &Dropped,
        }
    }
}

/// What a [`Source`] holds after its drop began (never seen from outside:
/// the drop is the only place that takes the box without consuming the
/// `Source`).
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("(dropped)")
    }
}

impl std::error::Error for Dropped {}

impl Drop for Source {
    #[inline]
    fn drop(&mut self) {
        if let Some(error) = self.0.take() {
            drop_cold(error);
        }
    }
}

#[cold]
#[inline(never)]
fn drop_cold(error: Box<dyn std::error::Error + Send + Sync + 'static>) {
    drop(error);
}

impl std::ops::Deref for Source {
    type Target = dyn std::error::Error + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        self.inner()
    }
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.inner(), f)
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self.inner(), f)
    }
}

/// Transparent: the held error's own cause is the next in the chain.
impl std::error::Error for Source {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner().source()
    }
}

/// `cost` as a `u64`, or [`Error::CostTooHigh`] if it is above `capacity`:
/// the first line of every algorithm's decision.
#[inline]
pub fn ensure_fits(cost: u32, capacity: u64) -> Result<u64, Error> {
    let units = u64::from(cost);
    if units > capacity {
        return Err(Error::CostTooHigh { cost, capacity });
    }
    Ok(units)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connection reset")]
    struct Reset(#[source] std::io::Error);

    #[test]
    fn a_source_reads_as_the_error_it_holds() {
        let error = Error::backend(Reset(std::io::Error::other("peer gone")));
        assert_eq!(
            error.to_string(),
            "the rate limiter backend failed: connection reset"
        );
        let Error::Backend(source) = &error else {
            panic!("a backend error: {error:?}")
        };
        assert!(source.downcast_ref::<Reset>().is_some(), "{source:?}");
        assert_eq!(
            format!("{source:?}"),
            "Reset(Custom { kind: Other, error: \"peer gone\" })"
        );
        // The chain: the error, the source's message, then its own cause.
        let chain: Vec<String> =
            std::iter::successors(Some(&error as &(dyn std::error::Error + 'static)), |e| {
                e.source()
            })
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            chain,
            [
                "the rate limiter backend failed: connection reset",
                "connection reset",
                "peer gone"
            ]
        );
        let Error::Backend(source) = error else {
            unreachable!()
        };
        assert!(source.into_inner().downcast::<Reset>().is_ok());
    }

    #[test]
    fn a_data_error_holds_its_source_too() {
        let error = Error::data("a key of the wrong type");
        assert_eq!(error.kind(), ErrorKind::Data);
        assert_eq!(
            error.to_string(),
            "the rate limiter backend holds or returned invalid data: a key of the wrong type"
        );
        assert!(!error.is_unavailable());
    }
}
