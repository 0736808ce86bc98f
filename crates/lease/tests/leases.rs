//! Leases one behaviour at a time: how many calls reach the shared
//! limiter, the single renewal in flight under real concurrency, refusals
//! passed through, clocks going back, a bounded number of keys, local
//! refunds.

use ratelab_core::{
    AsyncRateLimiter, Bound, CheckFuture, Decision, Error, Keyed, Limiter, ManualClock, Quota,
    RateLimiter, Receipt, ReceiptFuture, ResetFuture,
};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_lease::{LeaseConfig, Leased};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A shared limiter that counts the calls it gets, and lets other tasks run
/// before it answers (as a network round trip would).
#[derive(Debug)]
struct Counting<L> {
    inner: Arc<L>,
    calls: Arc<AtomicU64>,
}

impl<L> Clone for Counting<L> {
    fn clone(&self) -> Self {
        Counting {
            inner: Arc::clone(&self.inner),
            calls: Arc::clone(&self.calls),
        }
    }
}

impl<L> Counting<L> {
    fn new(inner: L) -> Self {
        Counting {
            inner: Arc::new(inner),
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

impl<L: Limiter> Limiter for Counting<L> {
    fn quota(&self) -> Quota {
        self.inner.quota()
    }
    fn algorithm_name(&self) -> &'static str {
        self.inner.algorithm_name()
    }
    fn backend(&self) -> &'static str {
        "counting"
    }
    fn bound(&self) -> Bound {
        self.inner.bound()
    }
    fn refunds(&self) -> bool {
        self.inner.refunds()
    }
}

impl<L: RateLimiter> AsyncRateLimiter for Counting<L> {
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        self.count();
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.inner.check(key, cost)
        })
    }
    fn check_with_receipt_async<'a>(&'a self, key: &'a [u8], cost: u32) -> ReceiptFuture<'a> {
        self.count();
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.inner.check_with_receipt(key, cost)
        })
    }
    fn settle_async(&self, receipt: Receipt, actual: u32) -> CheckFuture<'_> {
        self.count();
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.inner.settle(receipt, actual)
        })
    }
    fn reset_async<'a>(&'a self, key: &'a [u8]) -> ResetFuture<'a> {
        self.count();
        Box::pin(async move { self.inner.reset(key) })
    }
}

fn gcra(per_second: u32, burst: u32, clock: &ManualClock) -> Keyed<Gcra, ManualClock> {
    let quota = Quota::per_second(per_second)
        .and_then(|q| q.with_burst(burst))
        .expect("a valid quota");
    Keyed::with_clock(Gcra::new(quota), clock.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_renewal_in_flight_per_key_under_concurrency() {
    let clock = ManualClock::new();
    // Time stands still: exactly the burst can pass.
    let shared = Counting::new(gcra(1_000, 1_000, &clock));
    let config = LeaseConfig::default().max_units(1_000);
    let leased = Arc::new(Leased::with_clock(shared.clone(), config, clock).unwrap());
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let leased = Arc::clone(&leased);
            tokio::spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..500 {
                    admitted += u64::from(leased.check(b"hot", 1).await.unwrap().allowed);
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    // One instance uses its leases to the last unit: all of the burst, no
    // more.
    assert_eq!(admitted, 1_000);
    let calls = shared.calls();
    // 4000 checks; leases of 1, 4, 16, 64, 256, then halves of what is
    // left, and the refusals' one each until cached.
    assert!(calls < 60, "{calls} calls to the shared limiter");
    eprintln!("4000 checks, {admitted} admitted, {calls} calls to the shared limiter");
}

#[tokio::test]
async fn a_refusal_is_the_shared_limiters_and_answered_locally_until_its_retry() {
    let clock = ManualClock::new();
    let shared = Counting::new(gcra(10, 2, &clock));
    let leased = Leased::with_clock(shared.clone(), LeaseConfig::default(), clock.clone()).unwrap();
    assert!(leased.check(b"k", 1).await.unwrap().allowed);
    assert!(leased.check(b"k", 1).await.unwrap().allowed);
    let refused = leased.check(b"k", 1).await.unwrap();
    let direct = shared.inner.peek(b"k", 1).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after_micros, direct.retry_after_micros);
    let calls = shared.calls();
    clock.advance(Duration::from_millis(40));
    let again = leased.check(b"k", 1).await.unwrap();
    assert!(!again.allowed);
    assert_eq!(again.retry_after_micros, direct.retry_after_micros - 40_000);
    assert_eq!(shared.calls(), calls, "answered from the cached refusal");
    clock.advance(Duration::from_micros(again.retry_after_micros));
    assert!(leased.check(b"k", 1).await.unwrap().allowed);
}

#[tokio::test]
async fn a_clock_that_goes_back_ends_the_lease() {
    let clock = ManualClock::new();
    let instance = ManualClock::new();
    let shared = Arc::new(gcra(10, 100, &clock));
    let config = LeaseConfig::default().max_lifetime(Duration::from_millis(100));
    let leased = Leased::with_clock(Arc::clone(&shared), config, instance.clone()).unwrap();
    leased.check(b"k", 1).await.unwrap();
    let (decision, receipt) = leased.check_with_receipt(b"k", 1).await.unwrap();
    assert!(decision.remaining > 0, "a lease with units to spare");
    let receipt = receipt.unwrap();
    assert!(leased.holds(&receipt));
    // 80 ms pass, read by the instance; its clock is then set back 50 ms:
    // counted on it, the lease would live 50 ms longer than its 100 ms.
    clock.advance(Duration::from_millis(80));
    instance.advance(Duration::from_millis(80));
    assert!(leased.holds(&receipt));
    instance.rewind(Duration::from_millis(50));
    assert!(!leased.holds(&receipt));
    assert!(
        leased.check_now(b"k", 1).is_none(),
        "no lease to admit from"
    );
    // Its three unused units went back when it ended: two kept (80 ms
    // repaid 0.8 of one).
    leased.settle_expired().await.unwrap();
    assert_eq!(shared.peek(b"k", 0).unwrap().remaining, 100 - 2);
}

#[tokio::test]
async fn a_lease_lives_from_when_its_request_was_sent() {
    /// Answers a lease request 30 ms after it was sent.
    #[derive(Debug)]
    struct Slow(Keyed<Gcra, ManualClock>, ManualClock);
    impl Limiter for Slow {
        fn quota(&self) -> Quota {
            self.0.quota()
        }
        fn algorithm_name(&self) -> &'static str {
            "gcra"
        }
        fn backend(&self) -> &'static str {
            "slow"
        }
        fn bound(&self) -> Bound {
            self.0.bound()
        }
        fn refunds(&self) -> bool {
            true
        }
    }
    impl AsyncRateLimiter for Slow {
        fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
            Box::pin(async move { self.0.check(key, cost) })
        }
        fn check_with_receipt_async<'a>(&'a self, key: &'a [u8], cost: u32) -> ReceiptFuture<'a> {
            Box::pin(async move {
                let answer = self.0.check_with_receipt(key, cost);
                self.1.advance(Duration::from_millis(30));
                answer
            })
        }
    }
    let clock = ManualClock::new();
    let config = LeaseConfig::default().max_lifetime(Duration::from_millis(100));
    let leased = Leased::with_clock(
        Slow(gcra(100, 100, &clock), clock.clone()),
        config,
        clock.clone(),
    )
    .unwrap();
    leased.check(b"k", 1).await.unwrap();
    let (_, receipt) = leased.check_with_receipt(b"k", 1).await.unwrap();
    let receipt = receipt.unwrap();
    // Sent at 30 ms, answered at 60: it ends at 130, not 160.
    clock.advance(Duration::from_millis(69));
    assert!(leased.holds(&receipt));
    clock.advance(Duration::from_millis(1));
    assert!(!leased.holds(&receipt));
}

#[tokio::test]
async fn a_window_lease_ends_with_the_window_it_was_charged_in() {
    let clock = ManualClock::starting_at(900_000);
    let quota = Quota::per_second(100).unwrap();
    let shared = Arc::new(Keyed::with_clock(FixedWindow::new(quota), clock.clone()));
    let config = LeaseConfig::default().max_lifetime(Duration::from_secs(10));
    let leased = Leased::with_clock(Arc::clone(&shared), config, clock.clone()).unwrap();
    leased.check(b"k", 1).await.unwrap();
    let (_, receipt) = leased.check_with_receipt(b"k", 1).await.unwrap();
    let receipt = receipt.unwrap();
    clock.advance(Duration::from_micros(99_999));
    assert!(leased.holds(&receipt));
    clock.advance(Duration::from_micros(1));
    assert!(!leased.holds(&receipt), "the window ended at 1 s");
}

#[tokio::test]
async fn a_local_refund_returns_units_to_the_lease_and_a_late_one_is_dropped() {
    let clock = ManualClock::new();
    let shared = Counting::new(gcra(10, 100, &clock));
    let config = LeaseConfig::default().max_lifetime(Duration::from_millis(100));
    let leased = Leased::with_clock(shared.clone(), config, clock.clone()).unwrap();
    leased.check(b"k", 1).await.unwrap();
    let (decision, receipt) = leased.check_with_receipt(b"k", 1).await.unwrap();
    let before = decision.remaining;
    // What the shared limit had left at the grant, plus what the lease
    // holds unused: the capacity less the two admitted (the clock stood).
    assert_eq!(before, 100 - 2);
    let calls = shared.calls();
    let after = leased.refund_async(receipt.unwrap()).await.unwrap();
    assert_eq!(after.remaining, before + 1);
    assert_eq!(shared.calls(), calls, "decided locally");
    // A refund after the lease's end gives nothing back.
    let (_, receipt) = leased.check_with_receipt(b"k", 1).await.unwrap();
    clock.advance(Duration::from_millis(100));
    let receipt = receipt.unwrap();
    assert!(!leased.holds(&receipt));
    leased.refund_async(receipt).await.unwrap();
    leased.settle_expired().await.unwrap();
    // Kept: the first lease's unit and one of the second's (of three
    // admissions, one refunded while the lease lived, one too late); the
    // second lease's three unused units came back. 100 ms repaid one.
    assert_eq!(shared.inner.peek(b"k", 0).unwrap().remaining, 100 - 2 + 1);
}

#[tokio::test]
async fn keys_beyond_the_bound_are_checked_on_the_shared_limiter() {
    let clock = ManualClock::new();
    let shared = Counting::new(gcra(1_000, 1_000, &clock));
    // One key per shard: 32 keys at most.
    let config = LeaseConfig::default().max_keys(1);
    let leased = Leased::with_clock(shared.clone(), config, clock.clone()).unwrap();
    for key in 0..1_000u32 {
        for _ in 0..3 {
            assert!(leased.check(&key.to_be_bytes(), 1).await.unwrap().allowed);
        }
    }
    assert!(leased.leases() <= 32, "{} leases", leased.leases());
    let released = leased.release_all().await;
    assert!(released.is_ok());
    assert_eq!(leased.leases(), 0);
}

#[tokio::test]
async fn bad_input_is_an_error() {
    let clock = ManualClock::new();
    let shared = Arc::new(gcra(10, 5, &clock));
    let leased = Leased::with_clock(Arc::clone(&shared), LeaseConfig::default(), clock).unwrap();
    assert!(matches!(
        leased.check(b"k", 6).await,
        Err(Error::CostTooHigh {
            cost: 6,
            capacity: 5
        })
    ));
    assert!(matches!(
        leased.check_now(b"k", 6),
        Some(Err(Error::CostTooHigh { .. }))
    ));
    let (_, receipt) = leased.check_with_receipt(b"k", 1).await.unwrap();
    assert!(matches!(
        leased.settle(receipt.unwrap(), 6).await,
        Err(Error::CostTooHigh { .. })
    ));
    // Another limiter's receipt.
    let (_, theirs) = shared.check_with_receipt(b"k", 1).unwrap();
    let other = Leased::with_clock(
        Arc::new(gcra(10, 5, &ManualClock::new())),
        LeaseConfig::default(),
        ManualClock::new(),
    )
    .unwrap();
    assert!(matches!(
        other.settle(theirs.unwrap(), 0).await,
        Err(Error::ForeignReceipt)
    ));
    for bad in [
        LeaseConfig::default().max_units(0),
        LeaseConfig::default().max_lifetime(Duration::ZERO),
        LeaseConfig::default().share_percent(0),
        LeaseConfig::default().share_percent(101),
        LeaseConfig::default().growth(1),
        LeaseConfig::default().max_keys(0),
    ] {
        assert!(Leased::with_clock(Arc::clone(&shared), bad, ManualClock::new()).is_err());
    }
    let _: Decision = leased.check(b"k", 0).await.unwrap();
}

#[test]
fn a_limiter_without_receipts_cannot_be_leased() {
    /// A shared limiter that issues no receipts.
    #[derive(Debug)]
    struct NoReceipts(Keyed<Gcra, ManualClock>);
    impl Limiter for NoReceipts {
        fn quota(&self) -> Quota {
            self.0.quota()
        }
        fn algorithm_name(&self) -> &'static str {
            "gcra"
        }
        fn backend(&self) -> &'static str {
            "no-receipts"
        }
        fn bound(&self) -> Bound {
            self.0.bound()
        }
    }
    impl AsyncRateLimiter for NoReceipts {
        fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
            Box::pin(async move { self.0.check(key, cost) })
        }
    }
    let clock = ManualClock::new();
    let refused = Leased::with_clock(
        NoReceipts(gcra(10, 10, &clock)),
        LeaseConfig::default(),
        clock,
    );
    assert!(matches!(
        refused,
        Err(ratelab_lease::ConfigError::NoReceipts)
    ));
}

/// A reading held back: its value, the signal that it was taken, and the
/// signal to go on with it.
type HeldReading = (
    u64,
    std::sync::mpsc::Sender<()>,
    std::sync::mpsc::Receiver<()>,
);

/// A clock that goes forward only, read by two threads: the first reading
/// is held back until a later one was taken and used, as a thread
/// preempted between reading the clock and using the reading would be.
#[derive(Debug)]
struct PreemptedReader {
    now: AtomicU64,
    held: std::sync::Mutex<Option<HeldReading>>,
}

impl ratelab_core::Clock for PreemptedReader {
    fn now_micros(&self) -> u64 {
        let held = self.held.lock().unwrap().take();
        if let Some((reading, reading_taken, go_on)) = held {
            reading_taken.send(()).unwrap();
            go_on.recv().unwrap();
            return reading;
        }
        self.now.load(Ordering::SeqCst)
    }
}

#[test]
fn readings_used_out_of_order_by_two_threads_are_no_rewind() {
    let shared = Keyed::with_clock(
        Gcra::new(Quota::per_second(1_000).unwrap()),
        ManualClock::new(),
    );
    let clock = Arc::new(PreemptedReader {
        now: AtomicU64::new(1_000),
        held: std::sync::Mutex::new(None),
    });
    let config = LeaseConfig::default().max_lifetime(Duration::from_millis(100));
    let leased = Arc::new(Leased::with_clock(shared, config, Arc::clone(&clock)).unwrap());
    futures::executor::block_on(async {
        // Leases of 1, then 4, then 16 units: enough for what follows.
        for _ in 0..6 {
            assert!(leased.check(b"k", 1).await.unwrap().allowed);
        }
    });
    assert!(leased.check_now(b"k", 1).is_some(), "a lease to admit from");

    // One thread reads 2,000 µs and is held; the other reads 3,000 and
    // admits; then the first goes on with its earlier reading.
    let (reading_taken, taken) = std::sync::mpsc::channel();
    let (go_on, held_back) = std::sync::mpsc::channel();
    *clock.held.lock().unwrap() = Some((2_000, reading_taken, held_back));
    let first = {
        let leased = Arc::clone(&leased);
        std::thread::spawn(move || leased.check_now(b"k", 1).is_some())
    };
    taken.recv().unwrap();
    clock.now.store(3_000, Ordering::SeqCst);
    assert!(
        leased.check_now(b"k", 1).is_some(),
        "the later reader admits"
    );
    go_on.send(()).unwrap();
    assert!(
        first.join().unwrap(),
        "the earlier reading admits from the same lease"
    );
    assert!(
        leased.check_now(b"k", 1).is_some(),
        "the lease still lives: no clock went back"
    );
}
