//! In memory: every algorithm and governor on one key (one thread, then two
//! threads at once) and keyed over 100,000 and 1,000,000 random keys, each
//! side on its default clock; then GCRA, the token bucket and governor on
//! the same clock, frozen and upkept, with the same hasher when keyed.
//!
//! Groups (criterion ids `<group>/<function>`, the function being the
//! algorithm's name, `governor` or `governor-foldhash`):
//!
//! - default against default: `memory-direct`, `memory-two-threads`,
//!   `memory-keyed-100k`, `memory-keyed-1m`. ratelab on its default clock
//!   (the precise [`SystemClock`]), governor on its default clock (quanta,
//!   a TSC read) and its default hasher (std's SipHash; `governor-foldhash`
//!   has ratelab's). GCRA and the token bucket are measured on the opt-in
//!   [`CoarseClock::shared`] too (an atomic read, refreshed every
//!   millisecond; `<name>-coarse-clock`, backend `memory-coarse-clock`).
//! - the same clock, frozen: `memory-direct-manual-clock`,
//!   `memory-keyed-100k-manual-clock`, `memory-keyed-1m-manual-clock`
//!   (ratelab's `ManualClock`, governor's `FakeRelativeClock`; both never
//!   move).
//! - the same clock, upkept: `memory-direct-upkeep`,
//!   `memory-keyed-100k-upkeep`, `memory-keyed-1m-upkeep`, and contention:
//!   `memory-two-threads-upkeep` (two threads, one key) and
//!   `memory-two-threads-keyed-upkeep` (two threads, each on its own half of
//!   100,000 keys, one keyed limiter). One governor `QuantaUpkeepClock`
//!   (quanta's `Instant::recent`, refreshed every millisecond) is read by
//!   both: ratelab through [`GovernorClock::monotonic`] (quanta's readings
//!   never go back, as ratelab's own `CoarseClock`'s, which says so too).
//!
//! Keyed groups on the same clock compare ratelab with governor on foldhash,
//! ratelab's hasher. Quotas and fairness: see `ratelab_benches::algorithms`.
//!
//! The returning client, in paired rounds only
//! (`memory-keyed-100k-returning-paired`, `memory-keyed-1m-returning-paired`):
//! 1,000/s, each side on its default clock, foldhash on both, the keys
//! visited once per round, so that every key comes back after its unit
//! refilled; governor's DashMap store and its `HashMapStateStore` against
//! our GCRA's `check` and lean check.
//!
//! The one-key, keyed (GCRA, the token bucket and governor) and two-thread
//! groups are measured once more in paired rounds (`<group>-paired`, the
//! targets' figures): the sides of a
//! comparison (governor, GCRA, the token bucket) run in turn, the order
//! rotating each round, the same checks each, and each side's figure is its
//! median over the rounds. GCRA's lean check (`check_lean`, read only for
//! `allowed`: function `gcra-lean`) is a side of every paired group, beside
//! its `check`. Criterion measures one side after another, half
//! a minute apart across a group, and on this machine a figure moves by a
//! third over that time with no change to the code; in turn, the drift
//! falls on every side.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use governor::clock::{Clock as _, FakeRelativeClock, QuantaUpkeepClock};
use governor::middleware::NoOpMiddleware;
use ratelab::{
    Algorithm, AlgorithmKind, Clock, CoarseClock, Direct, Gcra, Keyed, KnownAlgorithm, ManualClock,
    SystemClock, TokenBucket, Verdict,
};
use ratelab_benches::algorithms::{admitted_share, assert_mostly_admits, governor_quota, quota};
use ratelab_benches::governor_clock::GovernorClock;
use ratelab_benches::keys::{Cursor, KeySet};
use ratelab_benches::{
    Metric, Mode, Recorder, Row, Setting, Spread, Visit, each_algorithm, median, paired_rounds,
};

/// Observes a check's whole result where it lies, by reference: every field
/// must be computed, and nothing is copied. Passing a `Decision` (48 bytes)
/// by value to `black_box` (or through `.ok()`) adds a copy that, on this
/// machine, cost about 11 ns of store-forwarding stalls when it was 72
/// bytes, which would measure the harness rather than the limiter;
/// governor's small result gets the same treatment.
///
/// Every closure that checks is marked `#[inline(always)]`, on every side:
/// left to the compiler, a larger check (ratelab's, which builds a whole
/// decision) stayed a call from the timing loop while governor's smaller
/// one was inlined, and the call and its frame cost ratelab's GCRA about
/// 4 ns a check in the paired rounds (frozen clock: 11.0 ns called, 7 to
/// 10 inlined). A caller's own `check(1)` is inlined (`Direct::check` is
/// `#[inline(always)]`), as both are here.
#[inline(always)]
fn observe<T>(result: T) {
    black_box(&result);
}

/// The row of GCRA's lean check (`check_lean`, `check_key_lean`), read only
/// for `allowed`, as a gate in front of work reads it: the whole decision is
/// never asked for, so it is never computed. governor's result is observed
/// whole, as everywhere in this file (admitted, it is `Ok(())`).
const LEAN: &str = "gcra-lean";

/// What a caller of a lean check reads: whether the request passed.
#[inline(always)]
fn allowed<A: Algorithm>(verdict: Result<Verdict<'_, A>, ratelab::Error>) -> bool {
    verdict.is_ok_and(|v| v.allowed())
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
    same_clock(
        &mut c,
        &mut rec,
        &mode,
        "manual-clock",
        FakeRelativeClock::default,
        || ManualClock::starting_at(1_000_000),
    );
    // One upkeep thread for the whole process (quanta runs at most one).
    let upkeep = QuantaUpkeepClock::from_interval(Duration::from_millis(1))
        .expect("quanta's upkeep thread starts");
    same_clock(
        &mut c,
        &mut rec,
        &mode,
        "upkeep",
        || upkeep.clone(),
        || GovernorClock::monotonic(upkeep.clone()),
    );
    contention(&mut c, &mut rec, &mode, &upkeep);
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
    for (group, n) in [
        (RETURNING_100K, mode.size(100_000, 100_000, 1_000)),
        (RETURNING_1M, mode.size(1_000_000, 1_000_000, 2_000)),
    ] {
        returning(&mut rec, &mode, group, n);
    }
    c.final_summary();
    rec.finish();
}

/// One side of a paired measurement: its row (function and backend), and
/// a run of `n` iterations that answers the time it took.
struct Side<'a> {
    function: &'static str,
    backend: &'static str,
    run: &'a mut dyn FnMut(u64) -> Duration,
}

/// Paired rounds (see the crate docs) of `sides`, recorded in
/// `<group>-paired`: ns per check, or, with `checks_per_iteration` above
/// one (the two-thread groups), checks per second.
fn paired(
    rec: &mut Recorder,
    mode: &Mode,
    group: &str,
    checks_per_iteration: u32,
    sides: &mut [Side<'_>],
) {
    if mode.criterion_only() {
        return;
    }
    let rounds = mode.size(21, 7, 3);
    let iterations: u64 = mode.size(400_000, 150_000, 1_000);
    #[allow(clippy::cast_precision_loss)]
    let per_run = iterations as f64;
    let mut times = paired_rounds(rounds, sides.len(), |i| {
        (sides[i].run)(iterations).as_secs_f64() * 1e9 / per_run
    });
    let paired_group = format!("{group}-paired");
    // The spread of each side against the first (governor), round by round:
    // time / governor's time, or its throughput / governor's.
    for (k, side) in sides.iter().enumerate().skip(1) {
        let spread = if checks_per_iteration > 1 {
            Spread::of_ratios(&times[0], &times[k])
        } else {
            Spread::of_ratios(&times[k], &times[0])
        };
        eprintln!(
            "{paired_group}/{}/{}: per round / {}: {spread}",
            side.function, side.backend, sides[0].backend,
        );
    }
    for (side, times) in sides.iter().zip(&mut times) {
        let ns_per_iteration = median(times);
        let (metric, value) = if checks_per_iteration > 1 {
            let per_sec = f64::from(checks_per_iteration) * 1e9 / ns_per_iteration;
            (Metric::ChecksPerSec, per_sec)
        } else {
            (Metric::NsPerCheck, ns_per_iteration)
        };
        eprintln!(
            "{paired_group}/{}/{}: median of {rounds} rounds: {value:.1}",
            side.function, side.backend
        );
        rec.push(Row::new(
            &paired_group,
            side.function,
            side.backend,
            metric,
            value,
        ));
    }
}

/// Paired rounds of governor's GCRA, ours (`check`, and `check_lean` read
/// only for `allowed`: `gcra-lean`) and our token bucket on one key, each a
/// check of its own closure: `threads` (one or two) each make `n` checks per
/// run, in a loop compiled for that closure.
fn paired_one_key<G, R, L, B>(
    rec: &mut Recorder,
    mode: &Mode,
    group: &str,
    threads: u32,
    (governor, gcra, lean, bucket): (G, R, L, B),
) where
    G: Fn() + Sync,
    R: Fn() + Sync,
    L: Fn() + Sync,
    B: Fn() + Sync,
{
    fn run<F: Fn() + Sync>(threads: u32, n: u64, check: &F) -> Duration {
        if threads == 2 {
            two_at_once(n, check)
        } else {
            timed(n, check)
        }
    }
    paired(
        rec,
        mode,
        group,
        threads,
        &mut [
            Side {
                function: "gcra",
                backend: "governor",
                run: &mut |n| run(threads, n, &governor),
            },
            Side {
                function: "gcra",
                backend: "memory",
                run: &mut |n| run(threads, n, &gcra),
            },
            Side {
                function: LEAN,
                backend: "memory",
                run: &mut |n| run(threads, n, &lean),
            },
            Side {
                function: "token-bucket",
                backend: "memory",
                run: &mut |n| run(threads, n, &bucket),
            },
        ],
    );
}

/// Paired rounds of governor's keyed GCRA (`check`, its limiter already
/// holding every key; `governor_function`: `gcra` on its default hasher,
/// `gcra-foldhash` on ratelab's), our GCRA and our token bucket on `clock`,
/// built and filled here, over the same accesses, each side with a cursor of
/// its own; a loop compiled for each side's closure, as in
/// [`paired_one_key`].
fn paired_keyed<C: Clock>(
    rec: &mut Recorder,
    mode: &Mode,
    group: &str,
    keys: &KeySet,
    (governor_function, governor): (&'static str, impl Fn(&u64)),
    clock: impl Fn() -> C,
) {
    fn run<F: Fn(&u64)>(cursor: &mut Cursor<'_>, n: u64, check: &F) -> Duration {
        timed(n, || check(&cursor.next_key()))
    }
    let gcra = Keyed::builder(Gcra::new(quota(Setting::ManyKeys, AlgorithmKind::Gcra)))
        .clock(clock())
        .keys()
        .max_keys(MAX_KEYS)
        .build();
    fill_keyed(keys, &gcra);
    let bucket = Keyed::builder(TokenBucket::new(quota(
        Setting::ManyKeys,
        AlgorithmKind::TokenBucket,
    )))
    .clock(clock())
    .keys()
    .max_keys(MAX_KEYS)
    .build();
    fill_keyed(keys, &bucket);
    let ours = (
        #[inline(always)]
        |k: &u64| observe(gcra.check_key(k, black_box(1))),
        #[inline(always)]
        |k: &u64| observe(bucket.check_key(k, black_box(1))),
        #[inline(always)]
        |k: &u64| observe(allowed(gcra.check_key_lean(k, black_box(1)))),
    );
    let mut cursors = [keys.cursor(), keys.cursor(), keys.cursor(), keys.cursor()];
    let [first, second, third, fourth] = &mut cursors;
    paired(
        rec,
        mode,
        group,
        1,
        &mut [
            Side {
                function: governor_function,
                backend: "governor",
                run: &mut |n| run(first, n, &governor),
            },
            Side {
                function: "gcra",
                backend: "memory",
                run: &mut |n| run(second, n, &ours.0),
            },
            Side {
                function: LEAN,
                backend: "memory",
                run: &mut |n| run(fourth, n, &ours.2),
            },
            Side {
                function: "token-bucket",
                backend: "memory",
                run: &mut |n| run(third, n, &ours.1),
            },
        ],
    );
}

/// What each key is charged before paired rounds, in units of the keyed
/// quota (1/s): ten minutes of debt, longer than the whole paired run.
///
/// Charged one unit, a key is back to full capacity a second later, and a
/// key waits several seconds between two of its checks on one side (the
/// other sides run in between). Ratelab's limiter then forgets it and
/// tracks it afresh at its next check, a heap operation and an insert (a
/// microsecond at a million keys), while governor keeps every key it ever
/// saw: the sides would not be measured doing the same work. The stated
/// terms are that no key is back to full capacity between two of its
/// checks.
const FILL_COST: u32 = 600;

/// Charges every key [`FILL_COST`] on a governor keyed limiter
/// (`check(key, FILL_COST)`): the keys are tracked before measuring, and
/// the quota is seen to admit.
fn fill_governor<T, E, F>(
    keys: &KeySet,
    check: impl Fn(&u64, NonZeroU32) -> Result<Result<T, E>, F>,
) {
    let cost = NonZeroU32::new(FILL_COST).expect("non-zero");
    for key in &keys.keys {
        assert!(
            matches!(check(key, cost), Ok(Ok(_))),
            "the bench quota admits"
        );
    }
}

/// [`fill_governor`] for ours.
fn fill_keyed<A: Algorithm, C: Clock>(keys: &KeySet, limiter: &Keyed<A, C, u64>) {
    for key in &keys.keys {
        assert!(
            limiter.check_key(key, FILL_COST).is_ok_and(|d| d.allowed),
            "the bench quota admits"
        );
    }
}

/// Times `iterations` calls of `check`, in a loop of its own.
fn timed(iterations: u64, mut check: impl FnMut()) -> Duration {
    let started = Instant::now();
    for _ in 0..iterations {
        check();
    }
    started.elapsed()
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
        if with_coarse_clock(name) {
            let limiter = Direct::with_clock(algorithm.clone(), CoarseClock::shared());
            let function = format!("{name}-coarse-clock");
            self.group.bench_function(&function, |b| {
                b.iter(
                    #[inline(always)]
                    || observe(limiter.check(black_box(1))),
                );
            });
            self.rec.criterion(
                DIRECT,
                &function,
                (name, COARSE_CLOCK),
                Metric::NsPerCheck,
                1.0,
            );
        }
        // The default clock.
        let limiter = Direct::new(algorithm);
        let share = admitted_share(precheck(self.mode), || {
            limiter.check(1).ok().map(|d| d.allowed)
        });
        assert_mostly_admits(name, share);
        self.group.bench_function(name, |b| {
            b.iter(
                #[inline(always)]
                || observe(limiter.check(black_box(1))),
            );
        });
        self.rec
            .criterion(DIRECT, name, (name, "memory"), Metric::NsPerCheck, 1.0);
    }
}

/// The backend of the rows measured on the opt-in [`CoarseClock::shared`],
/// for comparison with the main rows, which run on the default, precise
/// [`SystemClock`].
const COARSE_CLOCK: &str = "memory-coarse-clock";

/// The algorithms also measured on the coarse clock.
fn with_coarse_clock(name: &str) -> bool {
    matches!(name, "gcra" | "token-bucket")
}

fn one_key(c: &mut Criterion, rec: &mut Recorder, mode: &Mode) {
    let mut group = c.benchmark_group(DIRECT);
    group.throughput(Throughput::Elements(1));
    let governor = governor::RateLimiter::direct(governor_quota(Setting::OneKey));
    let share = admitted_share(precheck(mode), || Some(governor.check().is_ok()));
    assert_mostly_admits("governor", share);
    group.bench_function("governor", |b| {
        b.iter(
            #[inline(always)]
            || observe(governor.check()),
        );
    });
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
    let gcra = Direct::new(Gcra::new(quota(Setting::OneKey, AlgorithmKind::Gcra)));
    let bucket = Direct::new(TokenBucket::new(quota(
        Setting::OneKey,
        AlgorithmKind::TokenBucket,
    )));
    paired_one_key(
        rec,
        mode,
        DIRECT,
        1,
        (
            #[inline(always)]
            || observe(governor.check()),
            #[inline(always)]
            || observe(gcra.check(black_box(1))),
            #[inline(always)]
            || observe(allowed(gcra.check_lean(black_box(1)))),
            #[inline(always)]
            || observe(bucket.check(black_box(1))),
        ),
    );
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
        if with_coarse_clock(name) {
            let limiter = Direct::with_clock(algorithm.clone(), CoarseClock::shared());
            let function = format!("{name}-coarse-clock");
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
                (name, COARSE_CLOCK),
                Metric::ChecksPerSec,
                2.0,
            );
        }
        let limiter = Direct::new(algorithm);
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
    let gcra = Direct::new(Gcra::new(quota(Setting::OneKey, AlgorithmKind::Gcra)));
    let bucket = Direct::new(TokenBucket::new(quota(
        Setting::OneKey,
        AlgorithmKind::TokenBucket,
    )));
    paired_one_key(
        rec,
        mode,
        TWO_THREADS,
        2,
        (
            #[inline(always)]
            || observe(governor.check()),
            #[inline(always)]
            || observe(gcra.check(black_box(1))),
            #[inline(always)]
            || observe(allowed(gcra.check_lean(black_box(1)))),
            #[inline(always)]
            || observe(bucket.check(black_box(1))),
        ),
    );
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
        if with_coarse_clock(name) {
            let limiter = Keyed::builder(algorithm.clone())
                .clock(CoarseClock::shared())
                .keys()
                .max_keys(MAX_KEYS)
                .build();
            let function = format!("{name}-coarse-clock");
            bench_keyed(self.group, &function, self.keys, &limiter);
            self.rec.criterion(
                self.group_name,
                &function,
                (name, COARSE_CLOCK),
                Metric::NsPerCheck,
                1.0,
            );
        }
        // The default clock.
        let limiter = Keyed::builder(algorithm).keys().max_keys(MAX_KEYS).build();
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
        b.iter(
            #[inline(always)]
            || observe(limiter.check_key(&cursor.next_key(), 1)),
        );
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

    // Paired, the three limiters live, every key charged `FILL_COST`.
    let governor = governor::RateLimiter::keyed(governor_quota(Setting::ManyKeys));
    fill_governor(&keys, |k, n| governor.check_key_n(k, n));
    paired_keyed(
        rec,
        mode,
        group_name,
        &keys,
        (
            "gcra",
            #[inline(always)]
            |k: &u64| observe(governor.check_key(k)),
        ),
        || SystemClock,
    );
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
        b.iter(
            #[inline(always)]
            || observe(check(&cursor.next_key())),
        );
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

/// GCRA, token bucket and governor on the same clock (`suffix`: which one):
/// one key, keyed 100k and keyed 1M, governor keyed on foldhash (ratelab's
/// hasher).
fn same_clock<GC, RC>(
    c: &mut Criterion,
    rec: &mut Recorder,
    mode: &Mode,
    suffix: &str,
    governor_clock: impl Fn() -> GC,
    ratelab_clock: impl Fn() -> RC,
) where
    GC: governor::clock::Clock + Sync,
    GC::Instant: governor::clock::Reference,
    RC: Clock,
{
    let functions = ["governor", "governor-foldhash", "gcra", "token-bucket"];
    let group_name = format!("memory-direct-{suffix}");
    if mode.wants_any(&group_name, functions) || mode.criterion_only() {
        let mut group = c.benchmark_group(&group_name);
        group.throughput(Throughput::Elements(1));
        let governor = governor::RateLimiter::direct_with_clock(
            governor_quota(Setting::OneKey),
            governor_clock(),
        );
        group.bench_function("governor", |b| {
            b.iter(
                #[inline(always)]
                || observe(governor.check()),
            );
        });
        rec.criterion(
            &group_name,
            "governor",
            ("gcra", "governor"),
            Metric::NsPerCheck,
            1.0,
        );
        let gcra = Direct::with_clock(
            Gcra::new(quota(Setting::OneKey, AlgorithmKind::Gcra)),
            ratelab_clock(),
        );
        group.bench_function("gcra", |b| {
            b.iter(
                #[inline(always)]
                || observe(gcra.check(black_box(1))),
            );
        });
        rec.criterion(
            &group_name,
            "gcra",
            ("gcra", "memory"),
            Metric::NsPerCheck,
            1.0,
        );
        let bucket = Direct::with_clock(
            TokenBucket::new(quota(Setting::OneKey, AlgorithmKind::TokenBucket)),
            ratelab_clock(),
        );
        group.bench_function("token-bucket", |b| {
            b.iter(
                #[inline(always)]
                || observe(bucket.check(black_box(1))),
            );
        });
        rec.criterion(
            &group_name,
            "token-bucket",
            ("token-bucket", "memory"),
            Metric::NsPerCheck,
            1.0,
        );
        group.finish();
        paired_one_key(
            rec,
            mode,
            &group_name,
            1,
            (
                #[inline(always)]
                || observe(governor.check()),
                #[inline(always)]
                || observe(gcra.check(black_box(1))),
                #[inline(always)]
                || observe(allowed(gcra.check_lean(black_box(1)))),
                #[inline(always)]
                || observe(bucket.check(black_box(1))),
            ),
        );
    }

    for (size, n) in [
        ("100k", mode.size(100_000, 100_000, 1_000)),
        ("1m", mode.size(1_000_000, 1_000_000, 2_000)),
    ] {
        let group_name = format!("memory-keyed-{size}-{suffix}");
        if !mode.wants_any(&group_name, functions) && !mode.criterion_only() {
            continue;
        }
        let keys = KeySet::new(n, mode.size(22, 22, 12));
        let mut group = c.benchmark_group(&group_name);
        group.throughput(Throughput::Elements(1));
        let store = governor::state::keyed::DashMapStateStore::with_hasher(
            foldhash::fast::RandomState::default(),
        );
        let governor: governor::RateLimiter<u64, _, _, NoOpMiddleware<GC::Instant>> =
            governor::RateLimiter::new(governor_quota(Setting::ManyKeys), store, governor_clock());
        bench_governor(&mut group, "governor-foldhash", &keys, |k| {
            governor.check_key(k)
        });
        rec.criterion(
            &group_name,
            "governor-foldhash",
            ("gcra-foldhash", "governor"),
            Metric::NsPerCheck,
            1.0,
        );
        drop(governor);
        let gcra = Keyed::builder(Gcra::new(quota(Setting::ManyKeys, AlgorithmKind::Gcra)))
            .clock(ratelab_clock())
            .keys()
            .max_keys(MAX_KEYS)
            .build();
        bench_keyed(&mut group, "gcra", &keys, &gcra);
        rec.criterion(
            &group_name,
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
        .clock(ratelab_clock())
        .keys()
        .max_keys(MAX_KEYS)
        .build();
        bench_keyed(&mut group, "token-bucket", &keys, &bucket);
        rec.criterion(
            &group_name,
            "token-bucket",
            ("token-bucket", "memory"),
            Metric::NsPerCheck,
            1.0,
        );
        group.finish();
        drop(bucket);

        // Paired, the three limiters live, every key charged `FILL_COST`.
        let store = governor::state::keyed::DashMapStateStore::with_hasher(
            foldhash::fast::RandomState::default(),
        );
        let governor: governor::RateLimiter<u64, _, _, NoOpMiddleware<GC::Instant>> =
            governor::RateLimiter::new(governor_quota(Setting::ManyKeys), store, governor_clock());
        fill_governor(&keys, |k, n| governor.check_key_n(k, n));
        paired_keyed(
            rec,
            mode,
            &group_name,
            &keys,
            (
                "gcra-foldhash",
                #[inline(always)]
                |k: &u64| observe(governor.check_key(k)),
            ),
            &ratelab_clock,
        );
    }
}

const TWO_THREADS_UPKEEP: &str = "memory-two-threads-upkeep";
const TWO_THREADS_KEYED_UPKEEP: &str = "memory-two-threads-keyed-upkeep";

/// Two threads, each running `run(thread, iters)` (its own loop), released
/// together; the time is the slower thread's.
fn two_loops(iters: u64, run: impl Fn(usize, u64) + Sync) -> Duration {
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let timed = |thread| {
            barrier.wait();
            let started = Instant::now();
            run(thread, iters);
            started.elapsed()
        };
        let other = s.spawn(move || timed(1));
        let mine = timed(0);
        mine.max(other.join().expect("the bench thread panicked"))
    })
}

/// Two threads, thread `t` checking the keys of `halves[t]` in turn, `iters`
/// each; the time is the slower thread's.
fn two_halves(iters: u64, halves: &[Vec<u64>; 2], check: impl Fn(&u64) + Sync) -> Duration {
    two_loops(iters, |thread, iters| {
        let mine = &halves[thread];
        let mut next = 0;
        for _ in 0..iters {
            check(&mine[next]);
            next += 1;
            if next == mine.len() {
                next = 0;
            }
        }
    })
}

/// Contention on the same (upkept) clock: two threads on one key, and two
/// threads each on its own half of 100,000 keys in one keyed limiter
/// (governor keyed on foldhash, ratelab's hasher).
fn contention(c: &mut Criterion, rec: &mut Recorder, mode: &Mode, upkeep: &QuantaUpkeepClock) {
    let functions = ["governor", "governor-foldhash", "gcra", "token-bucket"];
    if mode.wants_any(TWO_THREADS_UPKEEP, functions) || mode.criterion_only() {
        let mut group = c.benchmark_group(TWO_THREADS_UPKEEP);
        // One iteration is one check on each thread.
        group.throughput(Throughput::Elements(2));
        let governor = governor::RateLimiter::direct_with_clock(
            governor_quota(Setting::OneKey),
            upkeep.clone(),
        );
        group.bench_function("governor", |b| {
            b.iter_custom(|iters| {
                two_at_once(
                    iters,
                    #[inline(always)]
                    || observe(governor.check()),
                )
            });
        });
        rec.criterion(
            TWO_THREADS_UPKEEP,
            "governor",
            ("gcra", "governor"),
            Metric::ChecksPerSec,
            2.0,
        );
        let clock = || GovernorClock::monotonic(upkeep.clone());
        let gcra = Direct::with_clock(
            Gcra::new(quota(Setting::OneKey, AlgorithmKind::Gcra)),
            clock(),
        );
        group.bench_function("gcra", |b| {
            b.iter_custom(|iters| {
                two_at_once(
                    iters,
                    #[inline(always)]
                    || observe(gcra.check(black_box(1))),
                )
            });
        });
        rec.criterion(
            TWO_THREADS_UPKEEP,
            "gcra",
            ("gcra", "memory"),
            Metric::ChecksPerSec,
            2.0,
        );
        let bucket = Direct::with_clock(
            TokenBucket::new(quota(Setting::OneKey, AlgorithmKind::TokenBucket)),
            clock(),
        );
        group.bench_function("token-bucket", |b| {
            b.iter_custom(|iters| {
                two_at_once(
                    iters,
                    #[inline(always)]
                    || observe(bucket.check(black_box(1))),
                )
            });
        });
        rec.criterion(
            TWO_THREADS_UPKEEP,
            "token-bucket",
            ("token-bucket", "memory"),
            Metric::ChecksPerSec,
            2.0,
        );
        group.finish();
        paired_one_key(
            rec,
            mode,
            TWO_THREADS_UPKEEP,
            2,
            (
                #[inline(always)]
                || observe(governor.check()),
                #[inline(always)]
                || observe(gcra.check(black_box(1))),
                #[inline(always)]
                || observe(allowed(gcra.check_lean(black_box(1)))),
                #[inline(always)]
                || observe(bucket.check(black_box(1))),
            ),
        );
    }

    if !mode.wants_any(TWO_THREADS_KEYED_UPKEEP, functions) && !mode.criterion_only() {
        return;
    }
    let keys = KeySet::new(mode.size(100_000, 100_000, 1_000), mode.size(22, 22, 12));
    // Each thread's keys: its half of the key set, in the access order.
    let halves: [Vec<u64>; 2] = [0, 1].map(|half| {
        keys.accesses
            .iter()
            .copied()
            .filter(|k| k % 2 == half)
            .collect()
    });
    let mut group = c.benchmark_group(TWO_THREADS_KEYED_UPKEEP);
    group.throughput(Throughput::Elements(2));
    let store = governor::state::keyed::DashMapStateStore::with_hasher(
        foldhash::fast::RandomState::default(),
    );
    let governor: governor::RateLimiter<u64, _, _, NoOpMiddleware<_>> =
        governor::RateLimiter::new(governor_quota(Setting::ManyKeys), store, upkeep.clone());
    for key in &keys.keys {
        assert!(governor.check_key(key).is_ok(), "the bench quota admits");
    }
    group.bench_function("governor-foldhash", |b| {
        b.iter_custom(|iters| {
            two_halves(
                iters,
                &halves,
                #[inline(always)]
                |k| observe(governor.check_key(k)),
            )
        });
    });
    rec.criterion(
        TWO_THREADS_KEYED_UPKEEP,
        "governor-foldhash",
        ("gcra-foldhash", "governor"),
        Metric::ChecksPerSec,
        2.0,
    );
    drop(governor);
    let gcra = Keyed::builder(Gcra::new(quota(Setting::ManyKeys, AlgorithmKind::Gcra)))
        .clock(GovernorClock::monotonic(upkeep.clone()))
        .keys()
        .max_keys(MAX_KEYS)
        .build();
    for key in &keys.keys {
        assert!(
            gcra.check_key(key, 1).is_ok_and(|d| d.allowed),
            "the bench quota admits"
        );
    }
    group.bench_function("gcra", |b| {
        b.iter_custom(|iters| {
            two_halves(
                iters,
                &halves,
                #[inline(always)]
                |k| observe(gcra.check_key(k, 1)),
            )
        });
    });
    rec.criterion(
        TWO_THREADS_KEYED_UPKEEP,
        "gcra",
        ("gcra", "memory"),
        Metric::ChecksPerSec,
        2.0,
    );
    drop(gcra);
    let bucket = Keyed::builder(TokenBucket::new(quota(
        Setting::ManyKeys,
        AlgorithmKind::TokenBucket,
    )))
    .clock(GovernorClock::monotonic(upkeep.clone()))
    .keys()
    .max_keys(MAX_KEYS)
    .build();
    for key in &keys.keys {
        assert!(
            bucket.check_key(key, 1).is_ok_and(|d| d.allowed),
            "the bench quota admits"
        );
    }
    group.bench_function("token-bucket", |b| {
        b.iter_custom(|iters| {
            two_halves(
                iters,
                &halves,
                #[inline(always)]
                |k| observe(bucket.check_key(k, 1)),
            )
        });
    });
    rec.criterion(
        TWO_THREADS_KEYED_UPKEEP,
        "token-bucket",
        ("token-bucket", "memory"),
        Metric::ChecksPerSec,
        2.0,
    );
    group.finish();
    drop(bucket);
    // Paired, both limiters live, each with every key seen once.
    let store = governor::state::keyed::DashMapStateStore::with_hasher(
        foldhash::fast::RandomState::default(),
    );
    let governor: governor::RateLimiter<u64, _, _, NoOpMiddleware<_>> =
        governor::RateLimiter::new(governor_quota(Setting::ManyKeys), store, upkeep.clone());
    let gcra = Keyed::builder(Gcra::new(quota(Setting::ManyKeys, AlgorithmKind::Gcra)))
        .clock(GovernorClock::monotonic(upkeep.clone()))
        .keys()
        .max_keys(MAX_KEYS)
        .build();
    for key in &keys.keys {
        assert!(governor.check_key(key).is_ok(), "the bench quota admits");
        assert!(
            gcra.check_key(key, 1).is_ok_and(|d| d.allowed),
            "the bench quota admits"
        );
    }
    paired(
        rec,
        mode,
        TWO_THREADS_KEYED_UPKEEP,
        2,
        &mut [
            Side {
                function: "gcra-foldhash",
                backend: "governor",
                run: &mut |n| {
                    two_halves(
                        n,
                        &halves,
                        #[inline(always)]
                        |k| observe(governor.check_key(k)),
                    )
                },
            },
            Side {
                function: "gcra",
                backend: "memory",
                run: &mut |n| {
                    two_halves(
                        n,
                        &halves,
                        #[inline(always)]
                        |k| observe(gcra.check_key(k, 1)),
                    )
                },
            },
            Side {
                function: LEAN,
                backend: "memory",
                run: &mut |n| {
                    two_halves(
                        n,
                        &halves,
                        #[inline(always)]
                        |k| observe(allowed(gcra.check_key_lean(k, 1))),
                    )
                },
            },
        ],
    );
}

const RETURNING_100K: &str = "memory-keyed-100k-returning";
const RETURNING_1M: &str = "memory-keyed-1m-returning";

/// The returning client, in paired rounds (`<group>-paired`): 1,000 per
/// second (burst 1,000), each side on its default clock (ratelab's
/// `SystemClock`, governor's `QuantaClock`), foldhash on both, the keys
/// visited in a random order that visits each once per round. A round
/// takes milliseconds (100k keys) to a tenth of a second (1M), so every
/// key comes back after the millisecond that refills its one unit: the
/// common case of a per-client limit. governor's DashMap store
/// (`gcra-foldhash`) and its `HashMapStateStore` (`gcra-hashmap-foldhash`)
/// against our GCRA's `check` and lean check.
fn returning(rec: &mut Recorder, mode: &Mode, group: &str, n: usize) {
    let functions = ["gcra", LEAN, "gcra-foldhash", "gcra-hashmap-foldhash"];
    if !mode.wants_any(group, functions) || mode.criterion_only() {
        return;
    }
    let keys = ratelab_benches::keys::visiting_order(n);
    let per_second = NonZeroU32::new(1_000).expect("non-zero");
    let governor_quota = governor::Quota::per_second(per_second);
    let quota = ratelab::Quota::per_second(1_000).expect("a valid quota");
    let hasher = foldhash::fast::RandomState::default;
    let dashmap: governor::RateLimiter<u64, _, _, NoOpMiddleware<_>> = governor::RateLimiter::new(
        governor_quota,
        governor::state::keyed::DashMapStateStore::with_hasher(hasher()),
        governor::clock::QuantaClock::default(),
    );
    let hashmap: governor::RateLimiter<u64, _, _, NoOpMiddleware<_>> = governor::RateLimiter::new(
        governor_quota,
        governor::state::keyed::HashMapStateStore::new(std::collections::HashMap::with_hasher(
            hasher(),
        )),
        governor::clock::QuantaClock::default(),
    );
    let gcra = Keyed::builder(Gcra::new(quota))
        .keys()
        .max_keys(MAX_KEYS)
        .build();
    for key in &keys {
        assert!(dashmap.check_key(key).is_ok(), "the bench quota admits");
        assert!(hashmap.check_key(key).is_ok(), "the bench quota admits");
        assert!(
            gcra.check_key(key, 1).is_ok_and(|d| d.allowed),
            "the bench quota admits"
        );
    }
    /// `n` checks over the keys in turn, from `next`.
    fn run(keys: &[u64], next: &mut usize, n: u64, check: impl Fn(&u64)) -> Duration {
        timed(n, || {
            check(&keys[*next]);
            *next += 1;
            if *next == keys.len() {
                *next = 0;
            }
        })
    }
    let mut next = [0; 4];
    let [a, b, c, d] = &mut next;
    paired(
        rec,
        mode,
        group,
        1,
        &mut [
            Side {
                function: "gcra-foldhash",
                backend: "governor",
                run: &mut |n| {
                    run(
                        &keys,
                        a,
                        n,
                        #[inline(always)]
                        |k| observe(dashmap.check_key(k)),
                    )
                },
            },
            Side {
                function: "gcra-hashmap-foldhash",
                backend: "governor",
                run: &mut |n| {
                    run(
                        &keys,
                        b,
                        n,
                        #[inline(always)]
                        |k| observe(hashmap.check_key(k)),
                    )
                },
            },
            Side {
                function: "gcra",
                backend: "memory",
                run: &mut |n| {
                    run(
                        &keys,
                        c,
                        n,
                        #[inline(always)]
                        |k| observe(gcra.check_key(k, 1)),
                    )
                },
            },
            Side {
                function: LEAN,
                backend: "memory",
                run: &mut |n| {
                    run(
                        &keys,
                        d,
                        n,
                        #[inline(always)]
                        |k| observe(allowed(gcra.check_key_lean(k, 1))),
                    )
                },
            },
        ],
    );
}
