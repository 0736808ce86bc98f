//! The traits every limiter implements: [`Limiter`] (what it is),
//! [`RateLimiter`] (decides synchronously, in memory) and
//! [`AsyncRateLimiter`] (decides asynchronously: Redis, anything with I/O).
//!
//! Every [`RateLimiter`] is an [`AsyncRateLimiter`] by a blanket impl, and
//! both are object safe, so limiters of different algorithms and backends fit
//! in one `Vec<Box<dyn AsyncRateLimiter>>`.

use crate::{Bound, Decision, Error, Quota, Receipt};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The future an [`AsyncRateLimiter`] returns.
pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send + 'a>>;

/// The future [`AsyncRateLimiter::check_with_receipt_async`] returns.
pub type ReceiptFuture<'a> =
    Pin<Box<dyn Future<Output = Result<(Decision, Option<Receipt>), Error>> + Send + 'a>>;

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

    /// What its algorithm promises about the units that count
    /// ([`Algorithm::bound`](crate::Algorithm::bound)).
    fn bound(&self) -> Bound;

    /// It issues receipts and settles them ([`RateLimiter::settle`],
    /// [`AsyncRateLimiter::settle_async`]): true for every ratelab limiter
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

    /// Decides a request as [`check`](RateLimiter::check) does, and hands
    /// back, when it was admitted with a positive cost, a [`Receipt`] for
    /// it: give it to [`settle`](RateLimiter::settle) or
    /// [`refund`](RateLimiter::refund) when what the request really counts
    /// for is known (a success that should not count, tokens an LLM
    /// produced, bytes served), or drop it to keep the charge.
    ///
    /// ```
    /// use ratelab_core::{Keyed, ManualClock, Quota, RateLimiter};
    /// # use ratelab_core::{Algorithm, Bound, Decision, Error};
    /// # use ratelab_core::toolkit::{LockedCell, Settlement, Stamp};
    /// # /// A toy: `burst` units per key, never refilled.
    /// # #[derive(Debug)]
    /// # struct Allowance(Quota);
    /// # impl Algorithm for Allowance {
    /// #     type State = u64;
    /// #     type Cell = LockedCell<u64>;
    /// #     type Ledger = u64;
    /// #     const REFUNDS: bool = true;
    /// #     fn name(&self) -> &'static str { "allowance" }
    /// #     fn quota(&self) -> &Quota { &self.0 }
    /// #     fn capacity(&self) -> u64 { self.0.burst().into() }
    /// #     // Never refilled: a rate of one unit per forever.
    /// #     fn bound(&self) -> Bound { Bound::Rate { burst: self.capacity(), interval: u64::MAX } }
    /// #     fn initial_state(&self) -> u64 { 0 }
    /// #     fn decide(&self, used: &mut u64, _: u64, cost: u32) -> Result<Decision, Error> {
    /// #         let (cost, cap) = (u64::from(cost), self.capacity());
    /// #         if *used + cost > cap { return Ok(Decision::refused(cap).with_remaining(cap - *used)); }
    /// #         *used += cost;
    /// #         Ok(Decision::admitted(cap).with_remaining(cap - *used))
    /// #     }
    /// #     fn stamp(&self, _: &u64, _: &u64, _: u64) -> Stamp { Stamp { at: 1, mark: 0 } }
    /// #     fn settle(&self, used: &mut u64, _: &mut u64, now: u64, s: Settlement) -> Result<Decision, Error> {
    /// #         if s.stamp.at == 1 { *used -= u64::from(s.charged.saturating_sub(s.actual)).min(*used); }
    /// #         *used += u64::from(s.actual.saturating_sub(s.charged));
    /// #         self.decide(used, now, 0)
    /// #     }
    /// #     fn full_at(&self, used: &u64) -> u64 { if *used > 0 { u64::MAX } else { 0 } }
    /// # }
    /// let limiter = Keyed::with_clock(Allowance(Quota::per_hour(3)?), ManualClock::new());
    /// let (decision, receipt) = limiter.check_with_receipt(b"login:ada", 1)?;
    /// assert!(decision.allowed);
    /// // The login succeeded: it does not count.
    /// let after = limiter.refund(receipt.expect("admitted"))?;
    /// assert_eq!(after.remaining, 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// The default answers [`Error::Unsupported`]; every ratelab limiter
    /// implements it.
    fn check_with_receipt(
        &self,
        key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        let _ = (key, cost);
        Err(Error::Unsupported("receipts"))
    }

    /// Settles the admission `receipt` stands for: it finally counts for
    /// `actual` units instead of the cost it was charged. Less gives the
    /// difference back, only what the limiter can prove the admission still
    /// holds (units whose debt was repaid, or counted in a window that has
    /// ended, belong to other requests by then); more charges the
    /// difference as debt that later requests wait out, whatever the room.
    /// The rule and why it never lets more than the quota count:
    /// [`Receipt`].
    ///
    /// Answers what a check of cost 0 would after it. `actual` above the
    /// capacity is [`Error::CostTooHigh`] (the receipt is spent, and the
    /// admission counts as charged); a receipt of another limiter is
    /// [`Error::ForeignReceipt`]. The default answers
    /// [`Error::Unsupported`]; every ratelab limiter implements it.
    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        let _ = (receipt, actual);
        Err(Error::Unsupported("a settlement"))
    }

    /// Gives back what the admission `receipt` stands for still holds: a
    /// request admitted that should not count (only failures count, the
    /// work was cancelled). [`settle`](RateLimiter::settle) to 0.
    fn refund(&self, receipt: Receipt) -> Result<Decision, Error> {
        self.settle(receipt, 0)
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

    /// Decides as [`check_async`](AsyncRateLimiter::check_async) does, with
    /// a [`Receipt`] for an admission of a positive cost: see
    /// [`RateLimiter::check_with_receipt`]. The default answers
    /// [`Error::Unsupported`].
    fn check_with_receipt_async<'a>(&'a self, key: &'a [u8], cost: u32) -> ReceiptFuture<'a> {
        let _ = (key, cost);
        Box::pin(std::future::ready(Err(Error::Unsupported("receipts"))))
    }

    /// Settles the admission `receipt` stands for to `actual` units: see
    /// [`RateLimiter::settle`]. The default answers [`Error::Unsupported`].
    fn settle_async(&self, receipt: Receipt, actual: u32) -> CheckFuture<'_> {
        let _ = (receipt, actual);
        Box::pin(std::future::ready(Err(Error::Unsupported("a settlement"))))
    }

    /// Gives back what the admission `receipt` stands for still holds:
    /// [`settle_async`](AsyncRateLimiter::settle_async) to 0.
    fn refund_async(&self, receipt: Receipt) -> CheckFuture<'_> {
        self.settle_async(receipt, 0)
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

    fn check_with_receipt_async<'a>(&'a self, key: &'a [u8], cost: u32) -> ReceiptFuture<'a> {
        Box::pin(std::future::ready(self.check_with_receipt(key, cost)))
    }

    fn settle_async(&self, receipt: Receipt, actual: u32) -> CheckFuture<'_> {
        Box::pin(std::future::ready(self.settle(receipt, actual)))
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
            fn bound(&self) -> Bound {
                (**self).bound()
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
            fn check_with_receipt(
                &self,
                key: &[u8],
                cost: u32,
            ) -> Result<(Decision, Option<Receipt>), Error> {
                (**self).check_with_receipt(key, cost)
            }
            fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
                (**self).settle(receipt, actual)
            }
            fn reset(&self, key: &[u8]) -> Result<(), Error> {
                (**self).reset(key)
            }
        }
    )*};
}

forward_through_pointer!(&L, Box<L>, Arc<L>);
