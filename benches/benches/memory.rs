//! In memory: every algorithm and governor on one key (one thread, then two
//! threads at once) and keyed over 100,000 and 1,000,000 random keys.
//!
//! Groups (criterion ids `<group>/<function>`, the function being the
//! algorithm's name, `governor` or `governor-foldhash`): `memory-direct`,
//! `memory-two-threads`, `memory-keyed-100k`, `memory-keyed-1m`. Quotas and
//! fairness: see `ratelab_benches::algorithms`.
//!
//! Clocks: ratelab's limiters run on [`CoarseClock::shared`] (an atomic read,
//! refreshed every millisecond: decisions never admit more, see its docs),
//! governor on its default clock (quanta, a precise TSC read). GCRA and the
//! token bucket are measured on the precise [`SystemClock`] too
//! (`<name>-system-clock`, backend `memory-system-clock`), so the table shows
//! what the clock costs.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use governor::clock::{Clock as _, FakeRelativeClock};
use ratelab::{
    Algorithm, AlgorithmKind, Clock, CoarseClock, Direct, Gcra, Keyed, KnownAlgorithm, ManualClock,
    SystemClock, TokenBucket,
};
use ratelab_benches::algorithms::{admitted_share, assert_mostly_admits, governor_quota, quota};
use ratelab_benches::keys::KeySet;
use ratelab_benches::{Metric, Mode, Recorder, Setting, Visit, each_algorithm};

/// Observes a check's whole result where it lies, by reference: every field
/// must be computed, and nothing is copied. Passing a 72-byte `Decision` by
/// value to `black_box` (or through `.ok()`) adds a copy that, on this
/// machine, costs about 11 ns of store-forwarding stalls, which would measure
/// the harness rather than the limiter; governor's small result gets the same
/// treatment.
#[inline(always)]
fn observe<T>(result: T) {
    black_box(&result);
}

/// The bound on keys tracked: well above the largest key set, so no shard
/// (each gets an equal share) fills up with random keys.
const MAX_KEYS: usize = 4_000_000;

fn main() {
    let mode = Mode::from_args();
    let mut c = ratelab_benches::criterion(&mode);
    let mut rec = Recorder::new("memory", &mode);
    one_key(&mut c, &mut rec, &mode);
    two_threads(&mut c, &mut rec, &mode);
    clocks(&mut c, &mut rec);
    manual_clock(&mut c, &mut rec, &mode);
    keyed(
        &mut c,
        &mut rec,
        &mode,
        "memory-keyed-100k",
        mode.size(100_000, 100_000, 1_000),
    );
    keyed(
        &mut c,
        &mut rec,
        &mode,
        "memory-keyed-1m",
        mode.size(1_000_000, 1_000_000, 2_000),
    );
    c.final_summary();
    rec.finish();
}

/// Fewer checks before measuring in test mode (everything runs once there).
fn precheck(mode: &Mode) -> u32 {
    mode.size(10_000, 10_000, 100)
}

struct OneKey<'a, 'c> {
    group: &'a mut BenchmarkGroup<'c, WallTime>,
    rec: &'a mut Recorder,
    mode: &'a Mode,
}

const DIRECT: &str = "memory-direct";

impl Visit for OneKey<'_, '_> {
    fn visit<A: KnownAlgorithm>(&mut self, algorithm: A) {
        let name = algorithm.name();
        if with_system_clock(name) {
            let limiter = Direct::with_clock(algorithm.clone(), SystemClock);
            let function = format!("{name}-system-clock");
            self.group.bench_function(&function, |b| {
                b.iter(|| observe(limiter.check(black_box(1))));
            });
            self.rec.criterion(
                DIRECT,
                &function,
                (name, SYSTEM_CLOCK),
                Metric::NsPerCheck,
                1.0,
            );
        }
        let limiter = Direct::with_clock(algorithm, CoarseClock::shared());
        let share = admitted_share(precheck(self.mode), || {
            limiter.check(1).ok().map(|d| d.allowed)
        });
        assert_mostly_admits(name, share);
        self.group
            .bench_function(name, |b| b.iter(|| observe(limiter.check(black_box(1)))));
        self.rec
            .criterion(DIRECT, name, (name, "memory"), Metric::NsPerCheck, 1.0);
    }
}

/// The backend of the rows measured on the precise [`SystemClock`], for
/// comparison with the main rows, which run on [`CoarseClock::shared`].
const SYSTEM_CLOCK: &str = "memory-system-clock";

/// The algorithms also measured on the precise clock.
fn with_system_clock(name: &str) -> bool {
    matches!(name, "gcra" | "token-bucket")
}

fn one_key(c: &mut Criterion, rec: &mut Recorder, mode: &Mode) {
    let mut group = c.benchmark_group(DIRECT);
    group.throughput(Throughput::Elements(1));
    let governor = governor::RateLimiter::direct(governor_quota(Setting::OneKey));
    let share = admitted_share(precheck(mode), || Some(governor.check().is_ok()));
    assert_mostly_admits("governor", share);
    group.bench_function("governor", |b| b.iter(|| observe(governor.check())));
    rec.criterion(
        DIRECT,
        "governor",
        ("gcra", "governor"),
        Metric::NsPerCheck,
        1.0,
    );
    each_algorithm(
        Setting::OneKey,
        &mut OneKey {
            group: &mut group,
            rec,
            mode,
        },
    );
    group.finish();
}

/// Two threads call `check` `iters` times each, released together; the time
/// is the slower thread's.
fn two_at_once(iters: u64, check: impl Fn() + Sync) -> Duration {
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let run = || {
            barrier.wait();
            let started = Instant::now();
            for _ in 0..iters {
                check();
            }
            started.elapsed()
        };
        let other = s.spawn(run);
        let mine = run();
        mine.max(other.join().expect("the bench thread panicked"))
    })
}

const TWO_THREADS: &str = "memory-two-threads";

struct TwoThreads<'a, 'c> {
    group: &'a mut BenchmarkGroup<'c, WallTime>,
    rec: &'a mut Recorder,
    mode: &'a Mode,
}

impl Visit for TwoThreads<'_, '_> {
    fn visit<A: KnownAlgorithm>(&mut self, algorithm: A) {
        let name = algorithm.name();
        if with_system_clock(name) {
            let limiter = Direct::with_clock(algorithm.clone(), SystemClock);
            let function = format!("{name}-system-clock");
            self.group.bench_function(&function, |b| {
                b.iter_custom(|iters| {
                    two_at_once(iters, || {
                        observe(limiter.check(black_box(1)));
                    })
                });
            });
            self.rec.criterion(
                TWO_THREADS,
                &function,
                (name, SYSTEM_CLOCK),
                Metric::ChecksPerSec,
                2.0,
            );
        }
        let limiter = Direct::with_clock(algorithm, CoarseClock::shared());
        let share = admitted_share(precheck(self.mode), || {
            limiter.check(1).ok().map(|d| d.allowed)
        });
        assert_mostly_admits(name, share);
        self.group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                two_at_once(iters, || {
                    observe(limiter.check(black_box(1)));
                })
            });
        });
        self.rec.criterion(
            TWO_THREADS,
            name,
            (name, "memory"),
            Metric::ChecksPerSec,
            2.0,
        );
    }
}

fn two_threads(c: &mut Criterion, rec: &mut Recorder, mode: &Mode) {
    let mut group = c.benchmark_group(TWO_THREADS);
    // One iteration is one check on each thread.
    group.throughput(Throughput::Elements(2));
    let governor = governor::RateLimiter::direct(governor_quota(Setting::OneKey));
    group.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            two_at_once(iters, || {
                observe(governor.check());
            })
        });
    });
    rec.criterion(
        TWO_THREADS,
        "governor",
        ("gcra", "governor"),
        Metric::ChecksPerSec,
        2.0,
    );
    each_algorithm(
        Setting::OneKey,
        &mut TwoThreads {
            group: &mut group,
            rec,
            mode,
        },
    );
    group.finish();
}

struct ManyKeys<'a, 'c> {
    group: &'a mut BenchmarkGroup<'c, WallTime>,
    group_name: &'static str,
    rec: &'a mut Recorder,
    keys: &'a KeySet,
}

impl Visit for ManyKeys<'_, '_> {
    fn visit<A: KnownAlgorithm>(&mut self, algorithm: A) {
        let name = algorithm.name();
        if with_system_clock(name) {
            let limiter = Keyed::builder(algorithm.clone())
                .clock(SystemClock)
                .keys()
                .max_keys(MAX_KEYS)
                .build();
            let function = format!("{name}-system-clock");
            bench_keyed(self.group, &function, self.keys, &limiter);
            self.rec.criterion(
                self.group_name,
                &function,
                (name, SYSTEM_CLOCK),
                Metric::NsPerCheck,
                1.0,
            );
        }
        let limiter = Keyed::builder(algorithm)
            .clock(CoarseClock::shared())
            .keys()
            .max_keys(MAX_KEYS)
            .build();
        bench_keyed(self.group, name, self.keys, &limiter);
        self.rec.criterion(
            self.group_name,
            name,
            (name, "memory"),
            Metric::NsPerCheck,
            1.0,
        );
    }
}

/// Inserts every key, then times `check_key` over the random accesses: the
/// bench measures lookups, as governor's does.
fn bench_keyed<A: Algorithm, C: Clock>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    keys: &KeySet,
    limiter: &Keyed<A, C, u64>,
) {
    let share = admitted_share(u32::try_from(keys.keys.len()).unwrap_or(u32::MAX), {
        let mut all = keys.keys.iter();
        move || {
            let key = all.next()?;
            limiter.check_key(key, 1).ok().map(|d| d.allowed)
        }
    });
    assert_mostly_admits(name, share);
    assert_eq!(
        limiter.len(),
        keys.keys.len(),
        "{name}: every key is tracked"
    );
    let mut cursor = keys.cursor();
    group.bench_function(name, |b| {
        b.iter(|| observe(limiter.check_key(&cursor.next_key(), 1)));
    });
}

fn keyed(c: &mut Criterion, rec: &mut Recorder, mode: &Mode, group_name: &'static str, n: usize) {
    let functions = ratelab_benches::NAMES
        .into_iter()
        .chain(["governor", "governor-foldhash"]);
    if !mode.wants_any(group_name, functions) && !mode.criterion_only() {
        // Skip building a million keys for nothing (criterion would skip
        // every function of the group anyway).
        return;
    }
    let keys = KeySet::new(n, mode.size(22, 22, 12));
    let mut group = c.benchmark_group(group_name);
    group.throughput(Throughput::Elements(1));

    let governor = governor::RateLimiter::keyed(governor_quota(Setting::ManyKeys));
    bench_governor(&mut group, "governor", &keys, |k| governor.check_key(k));
    rec.criterion(
        group_name,
        "governor",
        ("gcra", "governor"),
        Metric::NsPerCheck,
        1.0,
    );
    drop(governor);

    let governor = governor::RateLimiter::dashmap_with_hasher(
        governor_quota(Setting::ManyKeys),
        foldhash::fast::RandomState::default(),
    );
    bench_governor(&mut group, "governor-foldhash", &keys, |k| {
        governor.check_key(k)
    });
    rec.criterion(
        group_name,
        "governor-foldhash",
        ("gcra-foldhash", "governor"),
        Metric::NsPerCheck,
        1.0,
    );
    drop(governor);

    each_algorithm(
        Setting::ManyKeys,
        &mut ManyKeys {
            group: &mut group,
            group_name,
            rec,
            keys: &keys,
        },
    );
    group.finish();
}

fn bench_governor<E>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    function: &str,
    keys: &KeySet,
    check: impl Fn(&u64) -> Result<(), E>,
) {
    let share = admitted_share(u32::try_from(keys.keys.len()).unwrap_or(u32::MAX), {
        let (mut all, check) = (keys.keys.iter(), &check);
        move || all.next().map(|k| check(k).is_ok())
    });
    assert_mostly_admits(function, share);
    let mut cursor = keys.cursor();
    group.bench_function(function, |b| {
        b.iter(|| observe(check(&cursor.next_key())));
    });
}

const CLOCK: &str = "memory-clock";

/// The clock reads alone: `Instant::now`, ratelab's `SystemClock` (µs since
/// the process's first read) and governor's default clock (quanta).
fn clocks(c: &mut Criterion, rec: &mut Recorder) {
    let mut group = c.benchmark_group(CLOCK);
    group.throughput(Throughput::Elements(1));
    group.bench_function("instant", |b| b.iter(Instant::now));
    rec.criterion(
        CLOCK,
        "instant",
        ("instant", "memory"),
        Metric::NsPerCheck,
        1.0,
    );
    group.bench_function("system-clock", |b| b.iter(|| SystemClock.now_micros()));
    rec.criterion(
        CLOCK,
        "system-clock",
        ("system-clock", "memory"),
        Metric::NsPerCheck,
        1.0,
    );
    let coarse = CoarseClock::shared();
    group.bench_function("coarse-clock", |b| b.iter(|| coarse.now_micros()));
    rec.criterion(
        CLOCK,
        "coarse-clock",
        ("coarse-clock", "memory"),
        Metric::NsPerCheck,
        1.0,
    );
    let quanta = governor::clock::DefaultClock::default();
    group.bench_function("quanta", |b| b.iter(|| quanta.now()));
    rec.criterion(
        CLOCK,
        "quanta",
        ("quanta", "governor"),
        Metric::NsPerCheck,
        1.0,
    );
    group.finish();
}

const DIRECT_MANUAL: &str = "memory-direct-manual-clock";
const KEYED_MANUAL: &str = "memory-keyed-100k-manual-clock";

/// GCRA, token bucket and governor again, on clocks that never move
/// (ratelab's `ManualClock`, governor's `FakeRelativeClock`): everything but
/// the clock read. With the groups above, this splits a check into its clock
/// and the rest.
fn manual_clock(c: &mut Criterion, rec: &mut Recorder, mode: &Mode) {
    let start = || ManualClock::starting_at(1_000_000);
    let mut group = c.benchmark_group(DIRECT_MANUAL);
    group.throughput(Throughput::Elements(1));
    let governor = governor::RateLimiter::direct_with_clock(
        governor_quota(Setting::OneKey),
        FakeRelativeClock::default(),
    );
    group.bench_function("governor", |b| b.iter(|| observe(governor.check())));
    rec.criterion(
        DIRECT_MANUAL,
        "governor",
        ("gcra", "governor"),
        Metric::NsPerCheck,
        1.0,
    );
    let gcra = Direct::with_clock(
        Gcra::new(quota(Setting::OneKey, AlgorithmKind::Gcra)),
        start(),
    );
    group.bench_function("gcra", |b| b.iter(|| observe(gcra.check(black_box(1)))));
    rec.criterion(
        DIRECT_MANUAL,
        "gcra",
        ("gcra", "memory"),
        Metric::NsPerCheck,
        1.0,
    );
    let bucket = Direct::with_clock(
        TokenBucket::new(quota(Setting::OneKey, AlgorithmKind::TokenBucket)),
        start(),
    );
    group.bench_function("token-bucket", |b| {
        b.iter(|| observe(bucket.check(black_box(1))));
    });
    rec.criterion(
        DIRECT_MANUAL,
        "token-bucket",
        ("token-bucket", "memory"),
        Metric::NsPerCheck,
        1.0,
    );
    group.finish();

    let functions = ["governor", "governor-foldhash", "gcra", "token-bucket"];
    if !mode.wants_any(KEYED_MANUAL, functions) && !mode.criterion_only() {
        return;
    }
    let keys = KeySet::new(mode.size(100_000, 100_000, 1_000), mode.size(22, 22, 12));
    let mut group = c.benchmark_group(KEYED_MANUAL);
    group.throughput(Throughput::Elements(1));
    let q = governor_quota(Setting::ManyKeys);
    let governor = governor::RateLimiter::dashmap_with_clock(q, FakeRelativeClock::default());
    bench_governor(&mut group, "governor", &keys, |k| governor.check_key(k));
    rec.criterion(
        KEYED_MANUAL,
        "governor",
        ("gcra", "governor"),
        Metric::NsPerCheck,
        1.0,
    );
    drop(governor);
    let store = governor::state::keyed::DashMapStateStore::with_hasher(
        foldhash::fast::RandomState::default(),
    );
    let governor: governor::RateLimiter<u64, _, _, governor::middleware::NoOpMiddleware<_>> =
        governor::RateLimiter::new(q, store, FakeRelativeClock::default());
    bench_governor(&mut group, "governor-foldhash", &keys, |k| {
        governor.check_key(k)
    });
    rec.criterion(
        KEYED_MANUAL,
        "governor-foldhash",
        ("gcra-foldhash", "governor"),
        Metric::NsPerCheck,
        1.0,
    );
    drop(governor);
    let gcra = Keyed::builder(Gcra::new(quota(Setting::ManyKeys, AlgorithmKind::Gcra)))
        .clock(start())
        .keys()
        .max_keys(MAX_KEYS)
        .build();
    bench_keyed(&mut group, "gcra", &keys, &gcra);
    rec.criterion(
        KEYED_MANUAL,
        "gcra",
        ("gcra", "memory"),
        Metric::NsPerCheck,
        1.0,
    );
    drop(gcra);
    let bucket = Keyed::builder(TokenBucket::new(quota(
        Setting::ManyKeys,
        AlgorithmKind::TokenBucket,
    )))
    .clock(start())
    .keys()
    .max_keys(MAX_KEYS)
    .build();
    bench_keyed(&mut group, "token-bucket", &keys, &bucket);
    rec.criterion(
        KEYED_MANUAL,
        "token-bucket",
        ("token-bucket", "memory"),
        Metric::NsPerCheck,
        1.0,
    );
    group.finish();
}
