//! The traits every limiter implements: [`Limiter`] (what it is),
//! [`RateLimiter`] (decides synchronously, in memory) and
//! [`AsyncRateLimiter`] (decides asynchronously: Redis, anything with I/O).
//!
//! Every [`RateLimiter`] is an [`AsyncRateLimiter`] by a blanket impl, and
//! both are object safe, so limiters of different algorithms and backends fit
//! in one `Vec<Box<dyn AsyncRateLimiter>>`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::{Decision, Error, Quota};

/// The future an [`AsyncRateLimiter`] returns.
pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send + 'a>>;

/// The future [`AsyncRateLimiter::reset_async`] returns.
pub type ResetFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>;

/// What a limiter says about itself.
pub trait Limiter: Send + Sync {
    /// The quota it enforces.
    fn quota(&self) -> Quota;

    /// The algorithm's short name: `"gcra"`, `"token-bucket"`, ...
    ///
    /// A name, not the algorithm: a concrete limiter's inherent
    /// `algorithm()` gives the algorithm and its parameters.
    fn algorithm_name(&self) -> &'static str;

    /// Where the state lives: `"memory"`, `"redis"`, ...
    fn backend(&self) -> &'static str;
}

/// A keyed limiter that decides synchronously.
///
/// Keys are bytes: any byte string is a valid key, including the empty one.
pub trait RateLimiter: Limiter {
    /// Decides a request of weight `cost` for `key`: all or nothing.
    ///
    /// Cost 0 is a peek: it reports without consuming. A cost that can never
    /// fit is [`Error::CostTooHigh`].
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error>;

    /// The decision a request of weight `cost` for `key` would get now, with
    /// nothing consumed and nothing written: "when could I send `cost`?"
    /// (`retry_after`), "how much is left?" (`remaining`). A later
    /// [`check`](RateLimiter::check) at the same instant, with nothing else
    /// consumed in between, decides exactly the same.
    ///
    /// Unlike a check of cost 0 (which always passes), a peek of cost `n`
    /// says whether `n` would pass. The default answers
    /// [`Error::Unsupported`]; every ratelab limiter implements it.
    fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        let _ = (key, cost);
        Err(Error::Unsupported("a non-consuming query (peek)"))
    }

    /// Gives back up to `cost` units `key` consumed: for a request that was
    /// admitted but should not count (only failures count, the work was
    /// cancelled). Never takes the key above its capacity: a full key stays
    /// full, so a refund of units never consumed is harmless. What each
    /// algorithm gives back is documented on
    /// [`Algorithm::refund`](crate::Algorithm::refund).
    ///
    /// Answers what a check of cost 0 would after the refund. A cost that
    /// can never fit is [`Error::CostTooHigh`]. The default answers
    /// [`Error::Unsupported`]; every ratelab limiter implements it.
    fn refund(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        let _ = (key, cost);
        Err(Error::Unsupported("a refund"))
    }

    /// Puts `key` back to full capacity, as if it had never been seen (a
    /// successful login forgives the failures before it). The default
    /// answers [`Error::Unsupported`]; every ratelab limiter implements it.
    fn reset(&self, key: &[u8]) -> Result<(), Error> {
        let _ = key;
        Err(Error::Unsupported("a reset"))
    }
}

/// A keyed limiter that decides asynchronously.
///
/// Same contract as [`RateLimiter::check`]. Implementations with I/O bound
/// each call by a timeout: a future never waits forever.
pub trait AsyncRateLimiter: Limiter {
    /// Decides a request of weight `cost` for `key`: all or nothing.
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a>;

    /// The decision of [`check_async`](AsyncRateLimiter::check_async) at
    /// once, for a limiter that needs no waiting to give it (every
    /// [`RateLimiter`], in memory): a caller that can use it skips the
    /// boxed future. `None` (the default, for limiters with I/O) decides
    /// nothing and consumes nothing: ask `check_async` then.
    fn check_now(&self, key: &[u8], cost: u32) -> Option<Result<Decision, Error>> {
        let _ = (key, cost);
        None
    }

    /// The decision a request of weight `cost` for `key` would get now,
    /// consuming and writing nothing: see [`RateLimiter::peek`]. The default
    /// answers [`Error::Unsupported`].
    fn peek_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        let _ = (key, cost);
        Box::pin(std::future::ready(Err(Error::Unsupported(
            "a non-consuming query (peek)",
        ))))
    }

    /// Gives back up to `cost` units `key` consumed: see
    /// [`RateLimiter::refund`]. The default answers [`Error::Unsupported`].
    fn refund_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        let _ = (key, cost);
        Box::pin(std::future::ready(Err(Error::Unsupported("a refund"))))
    }

    /// Puts `key` back to full capacity: see [`RateLimiter::reset`]. The
    /// default answers [`Error::Unsupported`].
    fn reset_async<'a>(&'a self, key: &'a [u8]) -> ResetFuture<'a> {
        let _ = key;
        Box::pin(std::future::ready(Err(Error::Unsupported("a reset"))))
    }
}

impl<L: RateLimiter + ?Sized> AsyncRateLimiter for L {
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(std::future::ready(self.check(key, cost)))
    }

    fn check_now(&self, key: &[u8], cost: u32) -> Option<Result<Decision, Error>> {
        Some(self.check(key, cost))
    }

    fn peek_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(std::future::ready(self.peek(key, cost)))
    }

    fn refund_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(std::future::ready(self.refund(key, cost)))
    }

    fn reset_async<'a>(&'a self, key: &'a [u8]) -> ResetFuture<'a> {
        Box::pin(std::future::ready(self.reset(key)))
    }
}

macro_rules! forward_through_pointer {
    ($($pointer:ty),*) => {$(
        impl<L: Limiter + ?Sized> Limiter for $pointer {
            fn quota(&self) -> Quota {
                (**self).quota()
            }
            fn algorithm_name(&self) -> &'static str {
                (**self).algorithm_name()
            }
            fn backend(&self) -> &'static str {
                (**self).backend()
            }
        }

        impl<L: RateLimiter + ?Sized> RateLimiter for $pointer {
            fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
                (**self).check(key, cost)
            }
            fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
                (**self).peek(key, cost)
            }
            fn refund(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
                (**self).refund(key, cost)
            }
            fn reset(&self, key: &[u8]) -> Result<(), Error> {
                (**self).reset(key)
            }
        }
    )*};
}

forward_through_pointer!(&L, Box<L>, Arc<L>);
