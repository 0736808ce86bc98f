//! The wrapper around a store that is up, down, hanging or corrupt: the
//! give-up instant handed to every call, the timeout and the breaker, each
//! failure policy, the fallback's receipts, data errors, cached refusals
//! and the stats. No Redis: the store here is a map in memory whose
//! availability the test sets.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ratelab_core::toolkit::{Settlement, Shifts, Stamp};
use ratelab_core::{Algorithm, AsyncRateLimiter, Decision, Error, ErrorKind, Limiter, Quota};
use ratelab_gcra::Gcra;
use ratelab_resilience::{FailurePolicy, Resilience, Resilient, Store};

/// What the store does with the next calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Up,
    /// Every call an outage.
    Down,
    /// Every call waits for ever.
    Hangs,
    /// Every call a data error.
    Corrupt,
}

/// GCRA on a map, with its availability set by the test, counting calls.
#[derive(Clone)]
struct Memory(Arc<Shared>);

struct Shared {
    gcra: Gcra,
    keys: Mutex<HashMap<Vec<u8>, (u64, Shifts)>>,
    mode: Mutex<Mode>,
    calls: AtomicU64,
    settlements: AtomicU64,
    unavailable: AtomicU64,
    give_up: Mutex<Option<Option<Instant>>>,
}

impl Memory {
    fn new(quota: Quota) -> Self {
        Memory(Arc::new(Shared {
            gcra: Gcra::new(quota),
            keys: Mutex::new(HashMap::new()),
            mode: Mutex::new(Mode::Up),
            calls: AtomicU64::new(0),
            settlements: AtomicU64::new(0),
            unavailable: AtomicU64::new(0),
            give_up: Mutex::new(None),
        }))
    }

    fn set(&self, mode: Mode) {
        *self.0.mode.lock().unwrap() = mode;
    }

    fn calls(&self) -> u64 {
        self.0.calls.load(Ordering::Relaxed)
    }

    /// The mode's answer, before any state is touched.
    async fn reach(&self, give_up: Option<Instant>) -> Result<(), Error> {
        self.0.calls.fetch_add(1, Ordering::Relaxed);
        *self.0.give_up.lock().unwrap() = Some(give_up);
        let mode = *self.0.mode.lock().unwrap();
        match mode {
            Mode::Up => Ok(()),
            Mode::Down => Err(Error::backend("connection refused")),
            Mode::Hangs => std::future::pending().await,
            Mode::Corrupt => Err(Error::data("corrupt state at k")),
        }
    }

    /// Runs `f` on `key`'s state at instant 0 (time stands still here).
    fn with<T>(&self, key: &[u8], f: impl FnOnce(&Gcra, &mut u64, &mut Shifts) -> T) -> T {
        let mut keys = self.0.keys.lock().unwrap();
        let (tat, ledger) = keys.entry(key.to_vec()).or_default();
        f(&self.0.gcra, tat, ledger)
    }
}

impl Store for Memory {
    type Algorithm = Gcra;

    fn algorithm(&self) -> &Gcra {
        &self.0.gcra
    }

    fn name(&self) -> &'static str {
        "memory-store"
    }

    fn max_wait_micros(&self) -> u64 {
        self.0.gcra.tolerance_micros()
    }

    async fn check(
        &self,
        key: &[u8],
        cost: u32,
        give_up: Option<Instant>,
    ) -> Result<(Decision, Stamp), Error> {
        self.reach(give_up).await?;
        self.with(key, |gcra, tat, ledger| {
            let decision = gcra.decide(tat, 0, cost)?;
            let stamp = if decision.allowed && cost > 0 {
                gcra.stamp(tat, ledger, 0)
            } else {
                Stamp::default()
            };
            Ok((decision, stamp))
        })
    }

    async fn peek(
        &self,
        key: &[u8],
        cost: u32,
        give_up: Option<Instant>,
    ) -> Result<Decision, Error> {
        self.reach(give_up).await?;
        self.with(key, |gcra, tat, _| gcra.decide(&mut tat.clone(), 0, cost))
    }

    async fn settle(
        &self,
        key: &[u8],
        settlement: Settlement,
        give_up: Option<Instant>,
    ) -> Result<Decision, Error> {
        self.reach(give_up).await?;
        self.0.settlements.fetch_add(1, Ordering::Relaxed);
        self.with(key, |gcra, tat, ledger| {
            gcra.settle(tat, ledger, 0, settlement)
        })
    }

    async fn reset(&self, key: &[u8], give_up: Option<Instant>) -> Result<(), Error> {
        self.reach(give_up).await?;
        self.with(key, |gcra, tat, ledger| gcra.reset(tat, ledger, 0));
        Ok(())
    }

    fn unavailable(&self) {
        self.0.unavailable.fetch_add(1, Ordering::Relaxed);
    }
}

fn quota() -> Quota {
    Quota::per_second(5).unwrap().with_burst(10).unwrap()
}

fn wrapped(resilience: Resilience) -> (Memory, Resilient<Memory>) {
    let store = Memory::new(quota());
    (store.clone(), resilience.wrap(store))
}

#[tokio::test]
async fn every_call_is_handed_its_caller_s_give_up_instant() {
    let timeout = Duration::from_millis(250);
    let (store, limiter) = wrapped(Resilience::new().timeout(timeout));
    let before = Instant::now();
    assert!(limiter.check(b"k", 1).await.unwrap().allowed);
    let after = Instant::now();
    let give_up = store
        .0
        .give_up
        .lock()
        .unwrap()
        .unwrap()
        .expect("a timeout to represent");
    assert!(give_up >= before + timeout && give_up <= after + timeout);
    // A peek too.
    *store.0.give_up.lock().unwrap() = None;
    limiter.peek(b"k", 1).await.unwrap();
    assert!(store.0.give_up.lock().unwrap().is_some());
    assert_eq!(limiter.backend(), "memory-store");
    assert_eq!(limiter.algorithm_name(), "gcra");
    assert!(limiter.refunds());
}

#[tokio::test]
async fn a_hanging_store_times_out_then_the_breaker_answers_at_once() {
    let timeout = Duration::from_millis(30);
    let (store, limiter) = wrapped(
        Resilience::new()
            .timeout(timeout)
            .breaker(2, Duration::from_secs(60)),
    );
    store.set(Mode::Hangs);
    for _ in 0..2 {
        let error = limiter.check(b"k", 1).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Timeout, "{error}");
    }
    let calls = store.calls();
    let error = limiter.check(b"k", 1).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::CircuitOpen, "{error}");
    assert_eq!(store.calls(), calls, "the open breaker calls nothing");
    let stats = limiter.stats();
    assert_eq!((stats.timeouts, stats.short_circuited), (2, 1));
    assert!(stats.breaker_open && stats.breaker_opened == 1);
    // The store was told of each outage (its measurements may be stale).
    assert_eq!(store.0.unavailable.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn fail_open_answers_as_a_fresh_key_and_fail_closed_says_when_to_retry() {
    let (store, open) = wrapped(Resilience::new().on_failure(FailurePolicy::Allow));
    store.set(Mode::Down);
    let decision = open.check(b"k", 3).await.unwrap();
    assert!(decision.allowed && decision.degraded);
    assert_eq!(decision.remaining, 7);
    assert_eq!(decision.reset_after_micros, 2_000_000);
    // Nothing was charged anywhere: no receipt.
    let (_, receipt) = open.check_with_receipt(b"k", 3).await.unwrap();
    assert!(receipt.is_none());
    let peek = open.peek(b"k", 0).await.unwrap();
    assert!(peek.allowed && peek.degraded && peek.reset_after_micros == 0);

    let timeout = Duration::from_millis(40);
    let (store, closed) = wrapped(
        Resilience::new()
            .on_failure(FailurePolicy::Deny)
            .timeout(timeout),
    );
    store.set(Mode::Down);
    let decision = closed.check(b"k", 1).await.unwrap();
    assert!(!decision.allowed && decision.degraded);
    assert_eq!(decision.retry_after(), timeout);
}

#[tokio::test]
async fn the_fallback_decides_during_an_outage_and_settles_its_own_receipts() {
    let alerts = Arc::new(AtomicU64::new(0));
    let seen = alerts.clone();
    let (store, limiter) = wrapped(
        Resilience::new()
            .on_failure(FailurePolicy::Fallback)
            .on_alert(move |alert| {
                assert_eq!(alert.algorithm, "gcra");
                assert_eq!(alert.policy, FailurePolicy::Fallback);
                seen.fetch_add(1, Ordering::Relaxed);
            }),
    );
    store.set(Mode::Down);
    let (decision, fallback_receipt) = limiter.check_with_receipt(b"k", 4).await.unwrap();
    assert!(decision.allowed && decision.degraded);
    assert_eq!(decision.remaining, 6, "the fallback charged it");
    assert_eq!(alerts.load(Ordering::Relaxed), 1);
    // The store comes back; its own admission's receipt settles there.
    store.set(Mode::Up);
    let (_, store_receipt) = limiter.check_with_receipt(b"k", 2).await.unwrap();
    let settled = limiter.refund(store_receipt.unwrap()).await.unwrap();
    assert!(!settled.degraded);
    assert_eq!(store.0.settlements.load(Ordering::Relaxed), 1);
    // The fallback's settles in the fallback, never in the store.
    let settled = limiter.refund(fallback_receipt.unwrap()).await.unwrap();
    assert!(settled.degraded);
    assert_eq!(settled.remaining, 10, "the fallback gave its four back");
    assert_eq!(store.0.settlements.load(Ordering::Relaxed), 1);
    // A receipt of another limiter is refused, nothing changed.
    let (_, other) = wrapped(Resilience::new());
    let (_, foreign) = other.check_with_receipt(b"k", 1).await.unwrap();
    let error = limiter.refund(foreign.unwrap()).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ForeignReceipt);
}

#[tokio::test]
async fn a_data_error_is_returned_whatever_the_policy_unless_asked() {
    let (store, limiter) = wrapped(
        Resilience::new()
            .on_failure(FailurePolicy::Allow)
            .breaker(1, Duration::from_secs(60)),
    );
    store.set(Mode::Corrupt);
    for _ in 0..3 {
        let error = limiter.check(b"k", 1).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Data, "{error}");
    }
    let stats = limiter.stats();
    assert_eq!(stats.data_errors, 3);
    assert!(!stats.breaker_open, "the store answered: it is up");

    let (store, lenient) = wrapped(
        Resilience::new()
            .on_failure(FailurePolicy::Allow)
            .policy_on_data_errors(true),
    );
    store.set(Mode::Corrupt);
    let decision = lenient.check(b"k", 1).await.unwrap();
    assert!(decision.allowed && decision.degraded);
}

#[tokio::test]
async fn refusals_are_cached_until_a_settlement_or_a_reset() {
    let (store, limiter) = wrapped(Resilience::new().cache_refusals(100));
    let (_, receipt) = limiter.check_with_receipt(b"k", 10).await.unwrap();
    assert!(!limiter.check(b"k", 1).await.unwrap().allowed);
    let calls = store.calls();
    for _ in 0..5 {
        assert!(!limiter.check(b"k", 1).await.unwrap().allowed);
    }
    assert_eq!(store.calls(), calls, "answered from the cache");
    assert_eq!(limiter.stats().cached_refusals, 5);
    // Another cost goes to the store.
    assert!(!limiter.check(b"k", 2).await.unwrap().allowed);
    assert_eq!(store.calls(), calls + 1);
    // A refund forgets the key's refusal: the next check asks the store.
    limiter.refund(receipt.unwrap()).await.unwrap();
    assert!(limiter.check(b"k", 1).await.unwrap().allowed);
    assert!(
        limiter.check_async(b"other", 11).await.is_err(),
        "a cost that never fits"
    );
}

/// What a `tracing` subscriber writes, kept for the test to read.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An outage under each policy is a warning that says what the limiter did
/// about it, where a program's `tracing` subscriber sees it (an operator
/// must be able to tell "requests pass unchecked" from the logs).
#[tokio::test]
async fn an_outage_is_a_warning_that_says_what_the_policy_did() {
    let log = Log::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    // This test's thread only (the runtime runs the test on it).
    let _installed = tracing::subscriber::set_default(subscriber);
    for (policy, said) in [
        (
            FailurePolicy::Allow,
            "rate limiter failing open, admitted without a check: ",
        ),
        (
            FailurePolicy::Deny,
            "rate limiter failing closed, refused without a check: ",
        ),
        (
            FailurePolicy::Fallback,
            "rate limiter decided in memory by its fallback: ",
        ),
        (
            FailurePolicy::Error,
            "rate limiter failed, the error returned to the caller: ",
        ),
    ] {
        let (store, limiter) = wrapped(Resilience::new().on_failure(policy));
        store.set(Mode::Down);
        let _ = limiter.check(b"k", 1).await;
        let text = String::from_utf8(std::mem::take(&mut *log.0.lock().unwrap())).unwrap();
        let line = text
            .lines()
            .find(|line| line.contains(said))
            .unwrap_or_else(|| panic!("{policy:?}: no warning saying {said:?} in {text:?}"));
        assert!(line.contains(" WARN "), "{line}");
        assert!(line.contains("connection refused"), "{line}");
        assert!(line.contains("algorithm=\"gcra\""), "{line}");
    }
}
