//! [`Leased`]: the limiter that admits from leases.

use crate::LeaseConfig;
use crate::config::ConfigError;
use crate::sizing;
use crate::table::{Ended, Lease, Refusal, Shard, Table};
use parking_lot::Mutex;
use ratelab_core::toolkit::{Issuer, Stamp};
use ratelab_core::{
    AsyncRateLimiter, Bound, CheckFuture, Clock, Decision, Error, Limiter, Quota, Receipt,
    ReceiptFuture, ResetFuture, SystemClock,
};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A shared limiter checked at memory speed: each key's units are leased
/// from `L` in blocks, with a receipt, admitted locally, and what a lease
/// did not use is settled back when it ends. See the [crate](crate) docs
/// for the bound it keeps.
pub struct Leased<L> {
    inner: L,
    clock: Arc<dyn Clock>,
    config: LeaseConfig,
    /// The shared limiter's own bound.
    bound: Bound,
    capacity: u64,
    max_lifetime: u64,
    issuer: Issuer,
    table: Table,
    /// Leases that ended, waiting for an asynchronous call to settle them.
    ended: Mutex<Vec<Ended>>,
    generations: AtomicU64,
    /// The clock's readings may go back (not [`Clock::is_monotonic`]).
    watch_clock: bool,
    /// The last reading, to see the clock go back.
    last_now: AtomicU64,
    /// How many times the clock was seen going back: a renewal sent before
    /// one installs no lease.
    rewinds: AtomicU64,
}

impl<L> fmt::Debug for Leased<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leased")
            .field("config", &self.config)
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

/// What a check does, decided under its shard's lock.
enum Step {
    Admitted(Decision, u64),
    Refused(Decision),
    Wait(tokio::sync::futures::OwnedNotified),
    Renew {
        size: u32,
        sent_at: u64,
        rewinds: u64,
    },
    Direct,
}

impl<L: AsyncRateLimiter> Leased<L> {
    /// Leases from `inner` on the system clock.
    pub fn new(inner: L, config: LeaseConfig) -> Result<Self, ConfigError> {
        Leased::with_clock(inner, config, SystemClock::new())
    }

    /// Leases from `inner`, counting lifetimes on `clock` (a
    /// [`ManualClock`](ratelab_core::ManualClock) in tests).
    pub fn with_clock(
        inner: L,
        config: LeaseConfig,
        clock: impl Clock + 'static,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        if !inner.refunds() {
            return Err(ConfigError::NoReceipts);
        }
        let bound = inner.bound();
        let watch_clock = !clock.is_monotonic();
        Ok(Leased {
            capacity: bound.capacity(),
            bound,
            max_lifetime: config.max_lifetime_micros(),
            table: Table::new(config.max_keys),
            inner,
            clock: Arc::new(clock) as Arc<dyn Clock>,
            config,
            issuer: Issuer::new(),
            ended: Mutex::new(Vec::new()),
            generations: AtomicU64::new(1),
            watch_clock,
            last_now: AtomicU64::new(0),
            rewinds: AtomicU64::new(0),
        })
    }

    /// The shared limiter.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// How leases are sized and kept.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Whether a settlement of `receipt` now would give back to its lease
    /// (the lease it was admitted from is live): otherwise a give-back is
    /// dropped.
    pub fn holds(&self, receipt: &Receipt) -> bool {
        if !self.issuer.issued(receipt) {
            return false;
        }
        let now = self.now();
        let (hash, shard) = self.table.locate(receipt.key());
        let mut shard = shard.lock();
        shard
            .get_mut(hash, receipt.key())
            .and_then(|e| e.lease.as_ref())
            .is_some_and(|l| l.generation == receipt.stamp().at && l.live(now))
    }

    /// Keys holding a lease now.
    pub fn leases(&self) -> usize {
        self.table.shards().iter().map(|s| s.lock().leases()).sum()
    }

    /// Decides a request of `cost` for `key`: from the key's lease when it
    /// holds enough, else by leasing more (one request per key in flight;
    /// the other checks of the key wait for it).
    pub async fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.decide(key, cost, false).await.map(|(d, _)| d)
    }

    /// Decides as [`check`](Leased::check) does, with a receipt for an
    /// admission of a positive cost: its settlement gives units back to the
    /// lease while the lease lives (see [`settle`](Leased::settle)).
    pub async fn check_with_receipt(
        &self,
        key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        self.decide(key, cost, true).await
    }

    /// Settles an admission to `actual` units. While its lease lives, what
    /// it did not use goes back to the lease, and what it used beyond is
    /// taken from it (and settled on the shared limiter with the lease).
    /// Once the lease has ended, a give-back is dropped (the lease was
    /// settled with the units as charged) and a charge beyond the cost is
    /// carried into the key's next lease (dropped if the key has no room
    /// among [`max_keys`](LeaseConfig::max_keys)). A receipt of a check the
    /// shared limiter decided directly is settled there. Answers the
    /// lease's decision, or the shared limiter's for a check of cost 0.
    pub async fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        let redeemed = match self.issuer.redeem(receipt) {
            Ok(redeemed) => redeemed,
            Err(theirs) => return self.inner.settle_async(theirs, actual).await,
        };
        // Spent: the admission counts as charged.
        self.ensure_fits(actual)?;
        let now = self.now();
        let (hash, shard) = self.table.locate(&redeemed.key);
        let mut ended = Vec::new();
        let decision = {
            let mut shard = shard.lock();
            let capacity = self.table.capacity;
            let (cost, generation) = (redeemed.cost, redeemed.stamp.at);
            match shard.entry(hash, &redeemed.key, now, capacity, &mut ended) {
                Some(entry) => match entry.lease.as_mut() {
                    Some(lease) if lease.generation == generation && lease.live(now) => {
                        lease.used = lease.used.saturating_sub(cost).saturating_add(actual);
                        Some(lease.decision(now))
                    }
                    _ => {
                        entry.owed = entry.owed.saturating_add(actual.saturating_sub(cost));
                        None
                    }
                },
                // No room for the key: a charge beyond the cost is dropped.
                None => None,
            }
        };
        self.stash(ended);
        match decision {
            Some(decision) => Ok(decision),
            None => self.inner.check_async(&redeemed.key, 0).await,
        }
    }

    /// Settles every lease past its lifetime, and any lease that ended
    /// without a settlement yet: call it now and then on an instance whose
    /// keys go quiet (a busy key settles its own on its next renewal).
    /// Answers how many settlements were sent; the last error, if any
    /// failed (their units stay charged on the shared limiter).
    pub async fn settle_expired(&self) -> Result<usize, Error> {
        let now = self.now();
        let mut ended = Vec::new();
        for shard in self.table.shards() {
            shard.lock().sweep(now, &mut ended);
        }
        self.stash(ended);
        self.settle_ended().await
    }

    /// Ends every lease and settles each, giving back what it did not use:
    /// call it before the instance stops. A renewal in flight at the call
    /// installs its lease after it; dropped without this, an instance's
    /// unused units stay charged on the shared limiter until the
    /// algorithm gives them back on its own.
    pub async fn release_all(&self) -> Result<usize, Error> {
        let mut ended = Vec::new();
        for shard in self.table.shards() {
            shard.lock().end_all(&mut ended);
        }
        self.stash(ended);
        self.settle_ended().await
    }

    /// The clock's reading. A clock that went back (one a test moves by
    /// hand, not the system's) ends every lease: a lease's lifetime is
    /// counted on a clock that only moves forward, or it would outlive its
    /// bound in real time.
    fn now(&self) -> u64 {
        if !self.watch_clock {
            return self.clock.now_micros();
        }
        // The last reading is loaded before the clock is read: every
        // reading stored by then was taken before this one, so on a clock
        // that only moves forward it is never above it, however threads
        // interleave (a reading taken after the load and stored first is
        // no sign of a rewind).
        let seen = self.last_now.load(Ordering::Acquire);
        let now = self.clock.now_micros();
        if now < seen {
            self.last_now.store(now, Ordering::Release);
            self.rewinds.fetch_add(1, Ordering::AcqRel);
            let mut ended = Vec::new();
            for shard in self.table.shards() {
                shard.lock().end_all(&mut ended);
            }
            self.stash(ended);
        } else {
            self.last_now.fetch_max(now, Ordering::AcqRel);
        }
        now
    }

    /// The admission of `cost` from `key`'s lease, if it is live and holds
    /// enough: no waiting, nothing else changed.
    fn admit_local(&self, key: &[u8], cost: u32, consume: bool) -> Option<(Decision, u64)> {
        let now = self.now();
        let (hash, shard) = self.table.locate(key);
        let mut shard = shard.lock();
        let lease = shard.get_mut(hash, key)?.lease.as_mut()?;
        let used = lease.used.checked_add(cost)?;
        if !lease.live(now) || used > lease.granted {
            return None;
        }
        if consume {
            lease.used = used;
        }
        Some((lease.decision(now), lease.generation))
    }

    fn receipt(&self, key: &[u8], cost: u32, generation: u64) -> Option<Receipt> {
        (cost > 0).then(|| {
            let stamp = Stamp {
                at: generation,
                mark: 0,
            };
            self.issuer.issue(key, cost, stamp)
        })
    }

    fn ensure_fits(&self, cost: u32) -> Result<(), Error> {
        if u64::from(cost) > self.capacity {
            return Err(Error::CostTooHigh {
                cost,
                capacity: self.capacity,
            });
        }
        Ok(())
    }

    async fn decide(
        &self,
        key: &[u8],
        cost: u32,
        with_receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        self.ensure_fits(cost)?;
        if let Some((decision, generation)) = self.admit_local(key, cost, true) {
            return Ok((decision, self.receipt(key, cost, generation)));
        }
        loop {
            match self.step(key, cost) {
                Step::Admitted(decision, generation) => {
                    return Ok((decision, self.receipt(key, cost, generation)));
                }
                Step::Refused(decision) => return Ok((decision, None)),
                Step::Wait(notified) => notified.await,
                Step::Direct if with_receipt => {
                    return self.inner.check_with_receipt_async(key, cost).await;
                }
                Step::Direct => return self.inner.check_async(key, cost).await.map(|d| (d, None)),
                Step::Renew {
                    size,
                    sent_at,
                    rewinds,
                } => {
                    return self.renew(key, cost, size, (sent_at, rewinds)).await;
                }
            }
        }
    }

    /// What a check of `cost` does now, under the key's lock.
    fn step(&self, key: &[u8], cost: u32) -> Step {
        let now = self.now();
        let (hash, shard) = self.table.locate(key);
        let mut ended = Vec::new();
        let step = {
            let mut shard = shard.lock();
            self.step_locked(&mut shard, hash, key, cost, now, &mut ended)
        };
        self.stash(ended);
        step
    }

    fn step_locked(
        &self,
        shard: &mut Shard,
        hash: u64,
        key: &[u8],
        cost: u32,
        now: u64,
        ended: &mut Vec<Ended>,
    ) -> Step {
        // Leases due end here too: the queue never holds more than the
        // leases granted within a lifetime.
        shard.sweep(now, ended);
        let Some(entry) = shard.entry(hash, key, now, self.table.capacity, ended) else {
            return Step::Direct;
        };
        if let Some(lease) = entry.lease.as_mut() {
            if !lease.live(now) {
                entry.end_lease(ended);
            } else if let Some(used) = lease.used.checked_add(cost)
                && used <= lease.granted
            {
                lease.used = used;
                return Step::Admitted(lease.decision(now), lease.generation);
            }
        }
        if entry.renewing {
            return Step::Wait(Arc::clone(&entry.notify).notified_owned());
        }
        if cost == 0 {
            return Step::Direct;
        }
        if let Some(refusal) = entry.refusal {
            if refusal.from <= now && now < refusal.until {
                if cost >= refusal.cost {
                    let decision = refusal
                        .decision
                        .with_retry_after_micros(refusal.until - now);
                    return Step::Refused(decision);
                }
            } else {
                entry.refusal = None;
            }
        }
        // Renew: the lease still live is short of units (it grows next
        // time); what it holds unused is given back before the request.
        if let Some(granted) = entry.lease.as_ref().map(|l| l.granted) {
            entry.end_lease(ended);
            entry.history.used_up(granted, self.config.growth);
        }
        entry.renewing = true;
        let size = entry.history.ask(cost, self.capacity, &self.config);
        let rewinds = self.rewinds.load(Ordering::Acquire);
        Step::Renew {
            size,
            sent_at: now,
            rewinds,
        }
    }

    /// Leases `size` units for `key` (or fewer, when the shared limiter
    /// has fewer left), and admits `cost` from them.
    async fn renew(
        &self,
        key: &[u8],
        cost: u32,
        size: u32,
        sent: (u64, u64),
    ) -> Result<(Decision, Option<Receipt>), Error> {
        let guard = Renewing {
            table: &self.table,
            key,
        };
        // Ignored: a failed give-back leaves its units charged, the safe
        // side; the check goes on.
        let _ = self.settle_ended().await;
        let mut size = size;
        let (mut decision, mut receipt) = self.inner.check_with_receipt_async(key, size).await?;
        if !decision.allowed && !decision.degraded && size > cost {
            // Less is there: ask for what is left, or for the check alone
            // (whose refusal says when it passes).
            size = match u32::try_from(decision.remaining) {
                Ok(left) if left >= cost => left.min(size - 1),
                _ if decision.remaining >= u64::from(cost) => size - 1,
                _ => cost,
            };
            (decision, receipt) = self.inner.check_with_receipt_async(key, size).await?;
        }
        std::mem::forget(guard);
        Ok(self.install(key, cost, size, sent, decision, receipt))
    }

    /// Records the answer to a lease request under the key's lock, wakes
    /// the checks that waited on it, and answers the check that made it.
    fn install(
        &self,
        key: &[u8],
        cost: u32,
        size: u32,
        (sent_at, rewinds): (u64, u64),
        decision: Decision,
        receipt: Option<Receipt>,
    ) -> (Decision, Option<Receipt>) {
        // A clock that went back since the request was sent: its lease is
        // ended at once (the admission of the check stands).
        self.now();
        let rewound = self.rewinds.load(Ordering::Acquire) != rewinds;
        let (hash, shard) = self.table.locate(key);
        let mut shard = shard.lock();
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let Some(entry) = shard.get_mut(hash, key) else {
            // Never: a key renewing is never forgotten. The admission
            // stands, its lease unused (and charged).
            return (decision, None);
        };
        entry.renewing = false;
        entry.notify.notify_waiters();
        if decision.degraded {
            // A failure policy decided: nothing to lease from.
            return (decision, None);
        }
        if !decision.allowed {
            entry.history.refused(decision.remaining);
            entry.refusal = Some(Refusal {
                from: sent_at,
                until: sent_at.saturating_add(decision.retry_after_micros),
                cost: size,
                decision,
            });
            return (decision, None);
        }
        let lifetime = sizing::lifetime(self.bound, &decision, self.max_lifetime);
        let used = cost.saturating_add(std::mem::take(&mut entry.owed));
        entry.history.granted(size, decision.remaining);
        let lease = Lease {
            receipt,
            generation,
            granted: size,
            used,
            sent_at,
            expires_at: sent_at.saturating_add(lifetime),
            reset_at: sent_at.saturating_add(decision.reset_after_micros),
            limit: decision.limit,
            left: decision.remaining,
        };
        let answer = lease.decision(sent_at);
        let expires_at = lease.expires_at;
        entry.lease = Some(lease);
        if rewound {
            let mut ended = Vec::new();
            entry.end_lease(&mut ended);
            drop(shard);
            self.stash(ended);
            return (answer, self.receipt(key, cost, generation));
        }
        shard.schedule(expires_at, generation, hash);
        (answer, self.receipt(key, cost, generation))
    }

    fn stash(&self, ended: Vec<Ended>) {
        if !ended.is_empty() {
            self.ended.lock().extend(ended);
        }
    }

    /// Settles the leases that ended: each counts for the units it used
    /// (at most the capacity: a settlement cannot charge more).
    async fn settle_ended(&self) -> Result<usize, Error> {
        let ended = std::mem::take(&mut *self.ended.lock());
        let mut result = Ok(ended.len());
        let capacity = u32::try_from(self.capacity).unwrap_or(u32::MAX);
        for (receipt, used) in ended {
            if let Err(e) = self.inner.settle_async(receipt, used.min(capacity)).await {
                result = Err(e);
            }
        }
        result
    }
}

/// A renewal in flight; dropped before its answer (an error, a caller that
/// gave up), it lets the key's next check renew, and wakes the waiting ones.
struct Renewing<'a> {
    table: &'a Table,
    key: &'a [u8],
}

impl Drop for Renewing<'_> {
    fn drop(&mut self) {
        let (hash, shard) = self.table.locate(self.key);
        if let Some(entry) = shard.lock().get_mut(hash, self.key) {
            entry.renewing = false;
            entry.notify.notify_waiters();
        }
    }
}

impl<L: AsyncRateLimiter> Limiter for Leased<L> {
    fn quota(&self) -> Quota {
        self.inner.quota()
    }

    fn algorithm_name(&self) -> &'static str {
        self.inner.algorithm_name()
    }

    fn backend(&self) -> &'static str {
        "lease"
    }

    /// The shared limiter's bound, [leased](Bound::leased) for the
    /// configured lifetime.
    fn bound(&self) -> Bound {
        self.bound.leased(self.max_lifetime)
    }

    fn refunds(&self) -> bool {
        true
    }
}

impl<L: AsyncRateLimiter> AsyncRateLimiter for Leased<L> {
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(self.check(key, cost))
    }

    /// The admission at once when the key's lease holds `cost`; `None`
    /// otherwise (a renewal is needed: ask `check_async`).
    fn check_now(&self, key: &[u8], cost: u32) -> Option<Result<Decision, Error>> {
        if let Err(e) = self.ensure_fits(cost) {
            return Some(Err(e));
        }
        self.admit_local(key, cost, true).map(|(d, _)| Ok(d))
    }

    /// From the lease when it holds `cost`, else the shared limiter's.
    fn peek_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(async move {
            self.ensure_fits(cost)?;
            match self.admit_local(key, cost, false) {
                Some((decision, _)) => Ok(decision),
                None => self.inner.peek_async(key, cost).await,
            }
        })
    }

    fn check_with_receipt_async<'a>(&'a self, key: &'a [u8], cost: u32) -> ReceiptFuture<'a> {
        Box::pin(self.check_with_receipt(key, cost))
    }

    fn settle_async(&self, receipt: Receipt, actual: u32) -> CheckFuture<'_> {
        Box::pin(self.settle(receipt, actual))
    }

    /// Drops the key's lease unsettled (a reset forgives its units anyway)
    /// and resets the shared key. Other instances' leases of the key, and a
    /// renewal in flight here, keep what they hold: after a reset a key
    /// admits its full capacity plus what those leases hold unused.
    fn reset_async<'a>(&'a self, key: &'a [u8]) -> ResetFuture<'a> {
        Box::pin(async move {
            let (hash, shard) = self.table.locate(key);
            if let Some(entry) = shard.lock().get_mut(hash, key) {
                entry.lease = None;
                entry.refusal = None;
                entry.owed = 0;
            }
            self.inner.reset_async(key).await
        })
    }
}
