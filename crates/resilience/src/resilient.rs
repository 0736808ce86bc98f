//! [`Resilience`] and [`Resilient`]: a [`Store`] behind a timeout and the
//! caller's deadline, a circuit breaker, a failure policy with an in-memory
//! fallback, a cache of refusals, alerts and stats.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelab_core::toolkit::{
    Issuer, Settlement, Stamp, clamp_instant, duration_to_micros, ensure_fits,
};
use ratelab_core::{
    Algorithm, AsyncRateLimiter, Bound, CheckFuture, Clock, Decision, Error, Keyed, Limiter, Quota,
    Receipt, ReceiptFuture, ResetFuture, SystemClock,
};

use crate::alert::{Alert, AlertCallback, Alerts};
use crate::breaker::{Breaker, Permit};
use crate::refusal_cache::RefusalCache;
use crate::settings::{
    DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_THRESHOLD, DEFAULT_TIMEOUT, FailurePolicy,
    LATE_REPLY_WAIT,
};
use crate::stats::{Counters, Stats};
use crate::store::Store;

/// How a [`Store`] is wrapped: the timeout, the circuit breaker, the
/// failure policy, the cache of refusals, the alerts, and the clock of the
/// in-memory fallback and of the cache. [`Resilience::wrap`] puts a store
/// behind them.
#[derive(Clone)]
pub struct Resilience {
    timeout: Duration,
    failure: FailurePolicy,
    policy_on_data_errors: bool,
    breaker_threshold: u32,
    breaker_cool_down: Duration,
    on_alert: Option<AlertCallback>,
    refusal_cache: Option<usize>,
    clock: Arc<dyn Clock>,
}

impl Default for Resilience {
    fn default() -> Self {
        Resilience {
            timeout: DEFAULT_TIMEOUT,
            failure: FailurePolicy::Error,
            policy_on_data_errors: false,
            breaker_threshold: DEFAULT_BREAKER_THRESHOLD,
            breaker_cool_down: DEFAULT_BREAKER_COOL_DOWN,
            on_alert: None,
            refusal_cache: None,
            clock: Arc::new(SystemClock),
        }
    }
}

impl fmt::Debug for Resilience {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resilience")
            .field("timeout", &self.timeout)
            .field("failure", &self.failure)
            .field("policy_on_data_errors", &self.policy_on_data_errors)
            .field("breaker_threshold", &self.breaker_threshold)
            .field("breaker_cool_down", &self.breaker_cool_down)
            .field("refusal_cache", &self.refusal_cache)
            .finish_non_exhaustive()
    }
}

impl Resilience {
    /// Every default: a [`DEFAULT_TIMEOUT`], the breaker's defaults, errors
    /// returned ([`FailurePolicy::Error`]), no cache of refusals, the system
    /// clock.
    pub fn new() -> Self {
        Resilience::default()
    }

    /// The most a call waits for the store (default [`DEFAULT_TIMEOUT`]);
    /// then the failure policy applies. The store is handed the instant the
    /// caller gives up, so that a call it runs later charges nothing.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// What a check answers when the store fails (default
    /// [`FailurePolicy::Error`]).
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.failure = policy;
        self
    }

    /// Applies the failure policy to data errors too (a key of the wrong
    /// type, corrupt state, a reply out of bounds, a store out of memory),
    /// instead of returning [`Error::Data`]. Off by default: an outage
    /// passes, a data error stays until someone repairs it, and failing open
    /// on it admits everything meanwhile.
    pub fn policy_on_data_errors(mut self, apply: bool) -> Self {
        self.policy_on_data_errors = apply;
        self
    }

    /// The circuit breaker: after `threshold` consecutive outage failures
    /// (timeouts, connection or cluster errors), the store is not called for
    /// `cool_down` and the failure policy answers at once
    /// ([`Error::CircuitOpen`] under [`FailurePolicy::Error`]); then one call
    /// at a time probes the store, and the first answer closes it. Default
    /// [`DEFAULT_BREAKER_THRESHOLD`] and [`DEFAULT_BREAKER_COOL_DOWN`]; a
    /// threshold of 0 never opens.
    pub fn breaker(mut self, threshold: u32, cool_down: Duration) -> Self {
        self.breaker_threshold = threshold;
        self.breaker_cool_down = cool_down;
        self
    }

    /// Called on every failure, whatever the policy (besides a `tracing`
    /// warning, logged at most once a second, which says what the limiter
    /// did: `rate limiter failing open, admitted without a check: ...`).
    /// The warning goes to the program's `tracing` subscriber: a program
    /// that installs none hears of an outage only here and in
    /// [`Resilient::stats`], and fails open in silence otherwise.
    pub fn on_alert(mut self, callback: impl Fn(&Alert<'_>) + Send + Sync + 'static) -> Self {
        self.on_alert = Some(Arc::new(callback));
        self
    }

    /// Remembers refusals locally: a key refused with `retry_after = d` is
    /// refused again without a round trip until `d` has passed, for requests
    /// of the same cost. At most `max_keys` keys are remembered. Off by
    /// default.
    ///
    /// It only ever refuses, and only what the store would refuse: nothing
    /// can make a refused request pass before its `retry_after` (other
    /// callers can only consume more). It sheds the load of a client
    /// hammering past its limit. The cached answer's `remaining` is the one
    /// the store gave.
    pub fn cache_refusals(mut self, max_keys: usize) -> Self {
        self.refusal_cache = Some(max_keys);
        self
    }

    /// The clock of the in-memory fallback and of the cache of refusals
    /// (default [`SystemClock`]): the clock the store decides on, when it is
    /// the caller's (a simulation's [`ManualClock`](ratelab_core::ManualClock)).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// `store` behind these.
    pub fn wrap<S: Store>(self, store: S) -> Resilient<S> {
        let algorithm = store.algorithm();
        let fallback = (self.failure == FailurePolicy::Fallback)
            .then(|| Keyed::with_clock(algorithm.clone(), self.clock.clone()));
        Resilient {
            inner: Arc::new(Inner {
                capacity: algorithm.capacity(),
                timeout: self.timeout,
                failure: self.failure,
                policy_on_data_errors: self.policy_on_data_errors,
                breaker: Breaker::new(self.breaker_threshold, self.breaker_cool_down, self.timeout),
                alerts: Alerts::new(self.on_alert),
                fallback,
                refusals: self.refusal_cache.map(RefusalCache::new),
                clock: self.clock,
                counters: Counters::default(),
                issuer: Issuer::new(),
                store,
            }),
        }
    }
}

/// A [`Store`] behind a timeout and the caller's deadline, a circuit
/// breaker, a failure policy (fail open, fail closed, or an in-memory
/// fallback), a cache of refusals, alerts and stats: whatever the store, an
/// [`AsyncRateLimiter`] that never hangs and says what it did. Built by
/// [`Resilience::wrap`]; cloning shares it.
///
/// Every call reaches the store at most once, within the timeout, unless
/// the breaker is open (the failure policy then answers at once); the store
/// is handed the instant its caller gives up, so that a call a stall held
/// past it is never charged. A check that reached the store before its
/// deadline but whose answer came after it (a stall between the store's
/// decision and its reply) is not abandoned: its answer is awaited for up
/// to [`LATE_REPLY_WAIT`] more, and an admission in it is given back at
/// once by its stamp ([`Stats::late_refunds`]), so that a check whose
/// caller was told it failed holds nothing once the reply is in. An answer
/// that never comes (the connection lost, or later than that) leaves the
/// admission charged: at most its cost, within the algorithm's bound.
/// Receipts are this limiter's: those of the store's admissions carry the
/// store's stamps and settle there; those the fallback issued during an
/// outage settle in the fallback.
pub struct Resilient<S: Store> {
    inner: Arc<Inner<S>>,
}

struct Inner<S: Store> {
    store: S,
    capacity: u64,
    timeout: Duration,
    failure: FailurePolicy,
    policy_on_data_errors: bool,
    breaker: Breaker,
    alerts: Alerts,
    fallback: Option<Keyed<S::Algorithm, Arc<dyn Clock>>>,
    refusals: Option<RefusalCache>,
    /// The fallback's and the refusal cache's clock.
    clock: Arc<dyn Clock>,
    counters: Counters,
    /// Issues this limiter's receipts, and takes them back.
    issuer: Issuer,
}

impl<S: Store> Clone for Resilient<S> {
    fn clone(&self) -> Self {
        Resilient {
            inner: self.inner.clone(),
        }
    }
}

impl<S: Store> Resilient<S> {
    /// `store` with every default ([`Resilience::new`]).
    pub fn new(store: S) -> Self {
        Resilience::new().wrap(store)
    }

    /// Decides a request of weight `cost` for `key`: all or nothing, at most
    /// one round trip (none for a cost that can never fit, a cached refusal,
    /// or while the circuit breaker is open).
    ///
    /// Errors: [`Error::CostTooHigh`]; [`Error::Data`] when the store holds
    /// or sends something no store could have written (whatever the failure
    /// policy, unless it is applied to data errors too); under
    /// [`FailurePolicy::Error`], [`Error::Timeout`], [`Error::Backend`] or
    /// [`Error::CircuitOpen`] when the store is unavailable.
    pub async fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.decide(key, cost, false)
            .await
            .map(|(decision, _)| decision)
    }

    /// Decides as [`Resilient::check`] does, and hands back, for an
    /// admission of a positive cost, a [`Receipt`] for it: give it to
    /// [`settle`](Resilient::settle) or [`refund`](Resilient::refund) of this
    /// limiter when what the request really counts for is known, or drop it
    /// to keep the charge. The receipt holds the stamp the store answered
    /// (what the key held right after the admission): a settlement gives
    /// back only what the key provably still holds of it (the rule:
    /// [`Receipt`]).
    ///
    /// A decision the failure policy made has no receipt under
    /// [`FailurePolicy::Allow`] and [`FailurePolicy::Deny`] (nothing was
    /// charged anywhere); under [`FailurePolicy::Fallback`] the in-memory
    /// fallback issues it, and [`Resilient::settle`] takes it there. A
    /// cached refusal has none either. Errors as for [`Resilient::check`].
    pub async fn check_with_receipt(
        &self,
        key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        self.decide(key, cost, true).await
    }

    /// A check, with a receipt for an admission when `receipt`.
    async fn decide(
        &self,
        key: &[u8],
        cost: u32,
        receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        let inner = &*self.inner;
        ensure_fits(cost, inner.capacity)?;
        inner.store.ensure_supported()?;
        // The refusal cache's clock: read only when there is a cache, and
        // before the request leaves (the store decides no earlier).
        let local_now = inner
            .refusals
            .as_ref()
            .map(|_| clamp_instant(inner.clock.now_micros()));
        if let (Some(cache), Some(local_now)) = (&inner.refusals, local_now)
            && let Some(refusal) = cache.refusal(key, cost, local_now)
        {
            Counters::count(&inner.counters.cached_refusals);
            return Ok((refusal, None));
        }
        let late = |pending| Inner::refund_when_answered(&self.inner, key, cost, pending);
        let owned = |give_up| {
            let (inner, key) = (Arc::clone(&self.inner), Box::<[u8]>::from(key));
            async move { inner.store.check(&key, cost, give_up).await }
        };
        match inner.guarded_or_late(owned, late).await {
            Ok((decision, stamp)) => {
                if let (Some(cache), Some(local_now)) = (&inner.refusals, local_now)
                    && !decision.allowed
                {
                    cache.remember(key, cost, local_now, &decision);
                }
                let receipt = (receipt && decision.allowed && cost > 0)
                    .then(|| inner.issuer.issue(key, cost, stamp));
                Ok((decision, receipt))
            }
            Err(error) => inner.on_failure(key, cost, error, receipt),
        }
    }

    /// The decision a request of weight `cost` for `key` would get now,
    /// writing nothing: a check at the same instant, with nothing else
    /// consumed in between, decides the same. One round trip; the refusal
    /// cache is neither read nor filled.
    ///
    /// When the store is unavailable the failure policy answers as for a
    /// check, except that the in-memory fallback is peeked, not charged.
    /// Errors as for [`Resilient::check`].
    pub async fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        let inner = &*self.inner;
        ensure_fits(cost, inner.capacity)?;
        inner.store.ensure_supported()?;
        match inner
            .guarded(|give_up| inner.store.peek(key, cost, give_up))
            .await
        {
            Ok(decision) => Ok(decision),
            Err(error) => inner.peek_on_failure(key, cost, error),
        }
    }

    /// Settles the admission `receipt` stands for: it finally counts for
    /// `actual` units instead of the cost it was charged. Less gives the
    /// difference back, only what the key provably still holds of it (units
    /// whose debt was repaid, or counted in a window that has ended, belong
    /// to other requests by then; a reset since gives nothing back); more
    /// charges the difference as debt that later requests wait out,
    /// whatever the room. Never takes the key above its capacity. The rule,
    /// and why it never lets more than the quota count: [`Receipt`].
    /// Answers what a peek of cost 0 would after it. One round trip; this
    /// limiter's cached refusal for the key is forgotten.
    ///
    /// A receipt the in-memory fallback issued (during an outage, under
    /// [`FailurePolicy::Fallback`]) is settled there, in memory.
    ///
    /// Errors: [`Error::ForeignReceipt`] for a receipt neither this limiter
    /// nor its fallback issued (nothing changes); [`Error::CostTooHigh`] for
    /// an `actual` above the capacity (the receipt is spent, the admission
    /// counts as charged). No failure policy applies: when the store is
    /// unavailable the error is returned, and the admission counts as
    /// charged.
    pub async fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        let inner = &*self.inner;
        let redeemed = match inner.issuer.redeem(receipt) {
            Ok(redeemed) => redeemed,
            // The fallback's own, or another limiter's (the fallback says
            // so).
            Err(receipt) => {
                return match &inner.fallback {
                    Some(fallback) => fallback.settle(receipt, actual).map(Decision::degraded),
                    None => Err(Error::ForeignReceipt),
                };
            }
        };
        ensure_fits(actual, inner.capacity)?;
        inner.store.ensure_supported()?;
        if let Some(cache) = &inner.refusals {
            cache.forget(&redeemed.key);
        }
        let settlement = redeemed.settlement(actual);
        inner
            .guarded(|give_up| inner.store.settle(&redeemed.key, settlement, give_up))
            .await
    }

    /// Gives back what the admission `receipt` stands for still holds: a
    /// request admitted that should not count (only failures count, the
    /// work was cancelled). [`Resilient::settle`] to 0.
    pub async fn refund(&self, receipt: Receipt) -> Result<Decision, Error> {
        self.settle(receipt, 0).await
    }

    /// Puts `key` back to full capacity, as if it had never been seen, and
    /// no receipt issued for it before gives anything back afterwards
    /// ([`Algorithm::reset`]). One round trip; this limiter's cached refusal
    /// for `key` is forgotten. As for [`Resilient::settle`], no failure
    /// policy applies.
    pub async fn reset(&self, key: &[u8]) -> Result<(), Error> {
        let inner = &*self.inner;
        inner.store.ensure_supported()?;
        if let Some(cache) = &inner.refusals {
            cache.forget(key);
        }
        inner
            .guarded(|give_up| inner.store.reset(key, give_up))
            .await
    }

    /// What this limiter has done so far.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The algorithm and its parameters.
    pub fn algorithm(&self) -> &S::Algorithm {
        self.inner.store.algorithm()
    }
}

impl<S: Store> Inner<S> {
    fn stats(&self) -> Stats {
        self.counters.snapshot(self.breaker.snapshot())
    }

    /// Runs one call to the store within the timeout and under the circuit
    /// breaker, and counts it: the path every operation takes. The failure
    /// policy is the caller's to apply.
    ///
    /// `call` is given the instant the caller gives up (`None` for a timeout
    /// too long to represent): the deadline it must not charge after.
    async fn guarded<T, F>(&self, call: impl FnOnce(Option<Instant>) -> F) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        self.guarded_or_late(call, drop).await
    }

    /// [`Inner::guarded`], handing a call still pending at the timeout to
    /// `late` rather than dropping it.
    async fn guarded_or_late<T, F>(
        &self,
        call: impl FnOnce(Option<Instant>) -> F,
        late: impl FnOnce(Pin<Box<F>>),
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<T, Error>>,
    {
        let probe = match self.breaker.permit() {
            Permit::Call => false,
            Permit::Probe => true,
            Permit::Refused(wait) => return Err(Error::CircuitOpen(wait)),
        };
        let give_up = Instant::now().checked_add(self.timeout);
        let mut pending = Box::pin(call(give_up));
        let result = match tokio::time::timeout(self.timeout, pending.as_mut()).await {
            Ok(result) => result,
            Err(_) => {
                late(pending);
                Err(Error::Timeout(self.timeout))
            }
        };
        match &result {
            Ok(_) => {
                self.breaker.success();
                Counters::count(&self.counters.answered);
            }
            Err(error) => {
                match error {
                    Error::Timeout(_) => Counters::count(&self.counters.timeouts),
                    Error::Data(_) => Counters::count(&self.counters.data_errors),
                    _ => Counters::count(&self.counters.errors),
                }
                if error.is_unavailable() {
                    // A reconnection may reach another server.
                    self.store.unavailable();
                    self.breaker.failure(probe);
                } else {
                    // The store answered: it is up, whatever it said.
                    self.breaker.success();
                }
            }
        }
        result
    }

    /// A check of `cost` for `key` still pending when its caller gave up:
    /// awaited in the background for up to [`LATE_REPLY_WAIT`], and an
    /// admission it answers is given back at once by its stamp (the caller
    /// was told the check failed; a decision made by the failure policy
    /// charged nothing here).
    fn refund_when_answered<F>(inner: &Arc<Self>, key: &[u8], cost: u32, pending: Pin<Box<F>>)
    where
        F: Future<Output = Result<(Decision, Stamp), Error>> + Send + 'static,
    {
        if cost == 0 {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, key) = (Arc::clone(inner), Box::<[u8]>::from(key));
        runtime.spawn(async move {
            let Ok(Ok((decision, stamp))) = tokio::time::timeout(LATE_REPLY_WAIT, pending).await
            else {
                return;
            };
            if !decision.allowed {
                return;
            }
            let refund = Settlement {
                stamp,
                charged: cost,
                actual: 0,
            };
            let give_up = Instant::now().checked_add(inner.timeout);
            let refunded =
                tokio::time::timeout(inner.timeout, inner.store.settle(&key, refund, give_up))
                    .await;
            match refunded {
                Ok(Ok(_)) => Counters::count(&inner.counters.late_refunds),
                _ => {
                    Counters::count(&inner.counters.late_refunds_failed);
                    tracing::warn!(
                        algorithm = inner.store.algorithm().name(),
                        "a check that timed out was admitted after all, and could not be given \
                         back: it stays charged"
                    );
                }
            }
        });
    }

    /// Raises an alert for `error`, then answers as the policy says: the
    /// policy applies to outages, and to data errors only when asked to.
    /// With `receipt`, an admission the fallback decided has the fallback's
    /// receipt; fail open charges nothing anywhere, so it has none.
    fn on_failure(
        &self,
        key: &[u8],
        cost: u32,
        error: Error,
        receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        let policy = if error.is_unavailable() || self.policy_on_data_errors {
            self.failure
        } else {
            FailurePolicy::Error
        };
        self.alerts.raise(
            &Alert {
                algorithm: self.store.algorithm().name(),
                error: &error,
                policy,
            },
            self.stats(),
        );
        let mut issued = None;
        let decision = match policy {
            FailurePolicy::Error => return Err(error),
            // As a fresh key would answer: what is left after `cost`, and
            // (the contract: full iff nothing is missing) the longest this
            // algorithm takes to be full again when something is.
            FailurePolicy::Allow => Decision::admitted(self.capacity)
                .with_remaining(self.capacity - u64::from(cost))
                .with_reset_after_micros(if cost == 0 {
                    0
                } else {
                    self.store.max_wait_micros().max(1)
                }),
            FailurePolicy::Deny => {
                // An open breaker says when the store is tried again; else
                // the next check may find it back after a timeout at most.
                let wait = match &error {
                    Error::CircuitOpen(wait) => *wait,
                    _ => self.timeout,
                };
                let retry = duration_to_micros(wait).max(1);
                Decision::refused(self.capacity)
                    .with_retry_after_micros(retry)
                    .with_reset_after_micros(retry)
            }
            FailurePolicy::Fallback => match &self.fallback {
                Some(fallback) if receipt => {
                    let (decision, given) = fallback.check_with_receipt(key, cost)?;
                    issued = given;
                    decision
                }
                Some(fallback) => fallback.check(key, cost)?,
                None => return Err(error),
            },
        };
        // Told apart from the store's own answers, so that a caller with its
        // own failure mode (an HTTP policy) can let that mode win.
        Ok((decision.degraded(), issued))
    }

    /// The failure policy's answer to a peek: a check's answer, but the
    /// in-memory fallback is peeked, not charged.
    fn peek_on_failure(&self, key: &[u8], cost: u32, error: Error) -> Result<Decision, Error> {
        // Cost 0 charges no fallback; this raises the alert and applies the
        // policy (or returns the error) exactly as for a check.
        let (answer, _) = self.on_failure(key, 0, error, false)?;
        Ok(match (self.failure, &self.fallback) {
            (FailurePolicy::Fallback, Some(fallback)) => fallback.peek(key, cost)?.degraded(),
            (FailurePolicy::Allow, _) if cost > 0 => Decision::admitted(self.capacity)
                .with_remaining(self.capacity - u64::from(cost))
                .with_reset_after_micros(self.store.max_wait_micros().max(1))
                .degraded(),
            _ => answer,
        })
    }
}

impl<S: Store> Limiter for Resilient<S> {
    fn quota(&self) -> Quota {
        *self.algorithm().quota()
    }

    fn algorithm_name(&self) -> &'static str {
        self.algorithm().name()
    }

    fn backend(&self) -> &'static str {
        self.inner.store.name()
    }

    fn bound(&self) -> Bound {
        self.algorithm().bound()
    }

    fn refunds(&self) -> bool {
        S::Algorithm::REFUNDS
    }
}

impl<S: Store> AsyncRateLimiter for Resilient<S> {
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(self.check(key, cost))
    }

    fn peek_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(self.peek(key, cost))
    }

    fn check_with_receipt_async<'a>(&'a self, key: &'a [u8], cost: u32) -> ReceiptFuture<'a> {
        Box::pin(self.check_with_receipt(key, cost))
    }

    fn settle_async(&self, receipt: Receipt, actual: u32) -> CheckFuture<'_> {
        Box::pin(self.settle(receipt, actual))
    }

    fn reset_async<'a>(&'a self, key: &'a [u8]) -> ResetFuture<'a> {
        Box::pin(self.reset(key))
    }
}

impl<S: Store + fmt::Debug> fmt::Debug for Resilient<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("Resilient")
            .field("store", &inner.store)
            .field("timeout", &inner.timeout)
            .field("failure", &inner.failure)
            .finish_non_exhaustive()
    }
}
