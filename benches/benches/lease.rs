//! Leases (`ratelab-lease`): how many calls reach the shared store per
//! check, and what a check from a lease costs.
//!
//! - `lease-calls` (printed, not criterion): 1, 4 and 16 instances leasing
//!   one hot GCRA key, each offered 10k, 100k and 1M checks a second on a
//!   simulated clock (the in-memory limiter decides exactly as the Redis
//!   script does, on the same clock), with a counting wrapper between the
//!   leases and the shared limiter; the quota is twice the offered load, up
//!   to the 1M units a second a key can express (µs resolution), burst a
//!   tenth of a second's. The plain shared limiter takes one call per
//!   check. Target: at least 100× fewer at 10k checks a second per instance.
//! - `lease-local`: one thread, one hot key, never refused: the in-memory
//!   keyed GCRA against the same limiter behind leases (a check from the
//!   lease, and now and then a renewal). Target: within 2× of memory.
//! - `lease-redis`: one hot key on a real Redis server (the scripts):
//!   the plain Redis limiter against leases of it.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::Criterion;
use ratelab::lease::{LeaseConfig, Leased};
use ratelab::redis::{Connection, RedisStore};
use ratelab::{
    AsyncRateLimiter, Bound, CheckFuture, Decision, Error, Gcra, Keyed, Limiter, ManualClock,
    Quota, Receipt, ReceiptFuture, ResetFuture, SystemClock,
};
use ratelab_benches::summary::lease_calls_group;
use ratelab_benches::{Metric, Mode, Recorder, Row};
use ratelab_testkit::redis::RedisServer;

/// A limiter that counts the calls it forwards.
#[derive(Debug)]
struct Counting<L> {
    inner: L,
    calls: Arc<AtomicU64>,
}

impl<L: Limiter> Limiter for Counting<L> {
    fn quota(&self) -> Quota {
        self.inner.quota()
    }
    fn algorithm_name(&self) -> &'static str {
        self.inner.algorithm_name()
    }
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn bound(&self) -> Bound {
        self.inner.bound()
    }
    fn refunds(&self) -> bool {
        self.inner.refunds()
    }
}

impl<L: AsyncRateLimiter> AsyncRateLimiter for Counting<L> {
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.check_async(key, cost)
    }
    fn check_with_receipt_async<'a>(&'a self, key: &'a [u8], cost: u32) -> ReceiptFuture<'a> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.check_with_receipt_async(key, cost)
    }
    fn settle_async(&self, receipt: Receipt, actual: u32) -> CheckFuture<'_> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.settle_async(receipt, actual)
    }
    fn peek_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.peek_async(key, cost)
    }
    fn reset_async<'a>(&'a self, key: &'a [u8]) -> ResetFuture<'a> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.reset_async(key)
    }
}

const KEY: &[u8] = b"tenant-hot";

fn check_now_or_wait<L: AsyncRateLimiter>(
    rt: &tokio::runtime::Runtime,
    leased: &Leased<L>,
    key: &[u8],
) -> Result<Decision, Error> {
    match leased.check_now(key, 1) {
        Some(decision) => decision,
        None => rt.block_on(leased.check(key, 1)),
    }
}

/// One row of `lease-calls`.
fn calls_per_check(
    rt: &tokio::runtime::Runtime,
    rec: &mut Recorder,
    instances: u32,
    per_instance: u64,
    seconds: f64,
) {
    let clock = ManualClock::new();
    let offered = per_instance * u64::from(instances);
    let limit = u32::try_from((2 * offered).min(1_000_000)).expect("at most 1M");
    let quota = Quota::per_second(limit)
        .and_then(|q| q.with_burst((limit / 10).max(1)))
        .expect("a valid quota");
    let shared = Arc::new(Keyed::with_clock(Gcra::new(quota), clock.clone()));
    let calls = Arc::new(AtomicU64::new(0));
    let leases: Vec<_> = (0..instances)
        .map(|_| {
            let counting = Counting {
                inner: Arc::clone(&shared),
                calls: Arc::clone(&calls),
            };
            Leased::with_clock(counting, LeaseConfig::default(), clock.clone()).expect("valid")
        })
        .collect();
    // Every check moves the clock by the offered load's gap, in ns.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let checks = (offered as f64 * seconds) as u64;
    let gap_ns = 1_000_000_000 / offered.max(1);
    let (mut admitted, mut now_ns) = (0u64, 0u64);
    for i in 0..checks {
        now_ns += gap_ns;
        clock.set(now_ns / 1_000);
        let leased = &leases[usize::try_from(i % u64::from(instances)).expect("small")];
        admitted += u64::from(check_now_or_wait(rt, leased, KEY).expect("decided").allowed);
    }
    let calls = calls.load(Ordering::Relaxed);
    let lifetime = 100_000;
    let span = now_ns / 1_000;
    let own = shared.bound().most_within(span);
    let leased_bound = shared.bound().leased(lifetime).most_within(span);
    println!(
        "lease-calls  {instances:>2} instances × {per_instance:>7}/s  quota {limit:>7}/s: {checks:>9} checks, {admitted:>9} admitted (bound {own}, leased {leased_bound}), {calls:>6} shared calls, {:>8.5} per check, {:>7.0}× fewer",
        calls as f64 / checks as f64,
        checks as f64 / calls.max(1) as f64,
    );
    assert!(admitted <= leased_bound, "admitted beyond the leased bound");
    rec.push(Row::new(
        &lease_calls_group(instances, per_instance),
        "gcra",
        "leased",
        Metric::RoundTripsPerCheck,
        calls as f64 / checks.max(1) as f64,
    ));
}

/// A quota no run exhausts: the admitted path is measured, not refusals.
fn roomy() -> Quota {
    Quota::per_second(1_000_000)
        .and_then(|q| q.with_burst(1_000_000_000))
        .expect("a valid quota")
}

fn local_check(c: &mut Criterion, rec: &mut Recorder, rt: &tokio::runtime::Runtime) {
    rec.criterion(
        "lease-local",
        "memory-gcra",
        ("gcra", "memory"),
        Metric::NsPerCheck,
        1.0,
    );
    rec.criterion(
        "lease-local",
        "leased-gcra",
        ("gcra", "leased"),
        Metric::NsPerCheck,
        1.0,
    );
    let memory = Keyed::with_clock(Gcra::new(roomy()), SystemClock::new());
    let shared = Keyed::with_clock(Gcra::new(roomy()), SystemClock::new());
    let leased = Leased::new(shared, LeaseConfig::default()).expect("valid");
    let mut group = c.benchmark_group("lease-local");
    group.bench_function("memory-gcra", |b| {
        b.iter(|| black_box(memory.check(black_box(KEY), 1)));
    });
    group.bench_function("leased-gcra", |b| {
        b.iter(|| black_box(check_now_or_wait(rt, &leased, black_box(KEY))));
    });
    group.finish();
    let admits = |d: Result<Decision, Error>| d.expect("decided").allowed;
    assert!(
        admits(memory.check(KEY, 1)),
        "the quota was spent: refusals were measured"
    );
    assert!(
        admits(check_now_or_wait(rt, &leased, KEY)),
        "the quota was spent: refusals were measured"
    );
}

fn redis_check(c: &mut Criterion, rec: &mut Recorder, rt: &tokio::runtime::Runtime) {
    rec.criterion(
        "lease-redis",
        "plain",
        ("gcra", "redis-plain"),
        Metric::NsPerCheck,
        1.0,
    );
    rec.criterion(
        "lease-redis",
        "leased",
        ("gcra", "redis-leased"),
        Metric::NsPerCheck,
        1.0,
    );
    let server = RedisServer::start();
    let connection = rt
        .block_on(Connection::single(&server.url()))
        .expect("connect to Redis");
    let quota = roomy();
    let plain = RedisStore::builder(connection.clone(), Gcra::new(quota))
        .prefix("bench-plain")
        .build();
    let calls = Arc::new(AtomicU64::new(0));
    let counting = Counting {
        inner: RedisStore::builder(connection, Gcra::new(quota))
            .prefix("bench-leased")
            .build(),
        calls: Arc::clone(&calls),
    };
    let leased = Leased::new(counting, LeaseConfig::default()).expect("valid");
    let mut group = c.benchmark_group("lease-redis");
    group.bench_function("plain", |b| {
        b.iter(|| black_box(rt.block_on(plain.check(black_box(KEY), 1))));
    });
    let checks = AtomicU64::new(0);
    group.bench_function("leased", |b| {
        b.iter(|| {
            checks.fetch_add(1, Ordering::Relaxed);
            black_box(check_now_or_wait(rt, &leased, black_box(KEY)))
        });
    });
    group.finish();
    let (calls, checks) = (
        calls.load(Ordering::Relaxed),
        checks.load(Ordering::Relaxed),
    );
    println!(
        "lease-redis  leased: {checks} checks, {calls} Redis calls, {:.5} per check",
        calls as f64 / checks.max(1) as f64
    );
}

fn main() {
    let mode = Mode::from_args();
    let mut c = ratelab_benches::criterion(&mode);
    let mut rec = Recorder::new("lease", &mode);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if mode.wants("lease-calls") {
        let seconds = mode.size(1.0, 0.3, 0.002);
        for instances in [1, 4, 16] {
            for per_instance in [10_000, 100_000, 1_000_000] {
                calls_per_check(&rt, &mut rec, instances, per_instance, seconds);
            }
        }
    }
    if mode.wants_any("lease-local", ["memory-gcra", "leased-gcra"]) {
        local_check(&mut c, &mut rec, &rt);
    }
    if mode.wants_any("lease-redis", ["plain", "leased"]) {
        redis_check(&mut c, &mut rec, &rt);
    }
    c.final_summary();
    rec.finish();
}
