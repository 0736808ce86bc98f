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
use std::time::Duration;

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

    /// Its refund gives units back ([`RateLimiter::refund`],
    /// [`AsyncRateLimiter::refund_async`]): true for every ratelab limiter
    /// of a ratelab algorithm. False by default.
    fn refunds(&self) -> bool {
        false
    }
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
    /// cancelled).
    ///
    /// `owed` is how long that admission still weighs on the key: its
    /// decision's [`reset_after`](Decision::reset_after), less the time
    /// since the check was asked (measured from before the call, so that it
    /// errs low). Only what the admission still holds comes back
    /// ([`Algorithm::refund`](crate::Algorithm::refund)): units whose debt
    /// was repaid, or counted in a window that has ended, are not given to
    /// later requests.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use ratelab_core::{Keyed, ManualClock, Quota, RateLimiter};
    /// # use ratelab_core::{AtomicCell, Algorithm, Decision, Error};
    /// # #[derive(Debug)]
    /// # struct Once(Quota);
    /// # impl Algorithm for Once {
    /// #     type State = u64;
    /// #     type Cell = AtomicCell;
    /// #     fn name(&self) -> &'static str { "once" }
    /// #     fn quota(&self) -> &Quota { &self.0 }
    /// #     fn capacity(&self) -> u64 { 1 }
    /// #     fn initial_state(&self) -> u64 { 0 }
    /// #     fn decide(&self, used: &mut u64, _: u64, cost: u32) -> Result<Decision, Error> {
    /// #         let cost = u64::from(cost);
    /// #         if *used + cost > 1 { return Ok(Decision::refused(1).with_remaining(0)); }
    /// #         *used += cost;
    /// #         Ok(Decision::admitted(1).with_remaining(1 - *used).with_reset_after_micros(1_000_000))
    /// #     }
    /// #     fn refund(&self, used: &mut u64, now: u64, cost: u32, owed: u64) -> Result<Decision, Error> {
    /// #         if owed > 0 { *used -= u64::from(cost).min(*used); }
    /// #         self.decide(used, now, 0)
    /// #     }
    /// #     fn full_at(&self, used: &u64) -> u64 { if *used > 0 { u64::MAX } else { 0 } }
    /// # }
    /// let limiter = Keyed::with_clock(Once(Quota::per_second(1)?), ManualClock::new());
    /// let asked = Instant::now();
    /// let decision = limiter.check(b"login:ada", 1)?;
    /// assert!(decision.allowed);
    /// // The login succeeded: it does not count.
    /// let owed = decision.reset_after().saturating_sub(asked.elapsed());
    /// limiter.refund(b"login:ada", 1, owed)?;
    /// assert!(limiter.check(b"login:ada", 1)?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Never takes the key above its capacity: a full key stays full, so a
    /// refund of units never consumed is harmless. What each algorithm
    /// gives back is documented on
    /// [`Algorithm::refund`](crate::Algorithm::refund).
    ///
    /// Answers what a check of cost 0 would after the refund. A cost that
    /// can never fit is [`Error::CostTooHigh`]. The default answers
    /// [`Error::Unsupported`]; every ratelab limiter implements it.
    fn refund(&self, key: &[u8], cost: u32, owed: Duration) -> Result<Decision, Error> {
        let _ = (key, cost, owed);
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

    /// Gives back up to `cost` units `key` consumed, for an admission that
    /// still weighs on it for `owed`: see [`RateLimiter::refund`]. The
    /// default answers [`Error::Unsupported`].
    fn refund_async<'a>(&'a self, key: &'a [u8], cost: u32, owed: Duration) -> CheckFuture<'a> {
        let _ = (key, cost, owed);
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

    fn refund_async<'a>(&'a self, key: &'a [u8], cost: u32, owed: Duration) -> CheckFuture<'a> {
        Box::pin(std::future::ready(self.refund(key, cost, owed)))
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
            fn refunds(&self) -> bool {
                (**self).refunds()
            }
        }

        impl<L: RateLimiter + ?Sized> RateLimiter for $pointer {
            fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
                (**self).check(key, cost)
            }
            fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
                (**self).peek(key, cost)
            }
            fn refund(&self, key: &[u8], cost: u32, owed: Duration) -> Result<Decision, Error> {
                (**self).refund(key, cost, owed)
            }
            fn reset(&self, key: &[u8]) -> Result<(), Error> {
                (**self).reset(key)
            }
        }
    )*};
}

forward_through_pointer!(&L, Box<L>, Arc<L>);
