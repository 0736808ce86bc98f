//! A sustained flood of new keys against a full keyed store, through the
//! public API only: what a new or refused key costs, and what a tracked
//! key's check costs on the same shard while the flood goes on.
//!
//! Every group runs on one shard holding 1,000,000 keys (`u64`, GCRA at one
//! per second, burst 1: a key charged owes for one second), on a
//! [`ManualClock`] so that what is due is exactly known:
//!
//! - `flood/new-key-one-due`: the table is full and the clock moves 1 µs per
//!   arrival, so exactly one tracked key comes due between two arrivals and
//!   each new key takes its slot (the case that used to scan the shard);
//! - `flood/new-key-sketch`: the table is full and nothing is due: the new
//!   key is decided by the shared cells (the default flood policy);
//! - `flood/refused-key`: the same with [`FloodPolicy::Refuse`]: each new key
//!   gets `TooManyKeys` with the exact wait;
//! - `flood/tracked-key-no-flood`: a tracked key's check, table not full;
//! - `flood/tracked-key-during-flood`: one new key then one tracked key per
//!   iteration; the tracked key's cost during the flood is this figure minus
//!   `new-key-sketch`.
//!
//! - `flood/new-key-sketch-defaults`: the same flood with the settings a
//!   user gets from `Keyed::builder(gcra)`: byte-string keys (16 bytes,
//!   `client-` and the number in hex), the default shard count, the default
//!   bound (1,000,000) and flood policy; only the clock is a
//!   [`ManualClock`], standing still so that nothing comes due. Before it,
//!   the first 65,536 flood keys are timed by themselves, in batches of
//!   1,024 (printed: the mean, and the first, median and worst batch), to
//!   show what the sketch's first touches cost.
//! - `flood/refused-key-defaults`: the same with [`FloodPolicy::Refuse`]:
//!   each new key gets `TooManyKeys` with the exact wait, which looks beyond
//!   its own shard (the shards share one bound).
//!
//! The two `-defaults` groups and the first flood keys' mean and worst
//! batch are recorded for `bench-summary` (rows `flood`, `flood-first-keys`,
//! `flood-first-keys-worst-batch`: ns per key), which holds them to the
//! bound of 2 µs a new key.
//!
//! Run: `cargo bench -p ratelab-benches --bench flood`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use ratelab_benches::{Metric, Mode, Recorder, Row};
use ratelab_core::{Error, FloodPolicy, Keyed, ManualClock, Quota};
use ratelab_gcra::Gcra;

const TRACKED: u64 = 1_000_000;

/// A full store: `TRACKED` keys charged 1 µs apart, the last one just now.
fn full_store(
    policy: FloodPolicy,
    max_keys: usize,
) -> (Keyed<Gcra, ManualClock, u64>, ManualClock) {
    let clock = ManualClock::starting_at(1 << 40);
    let quota = Quota::per_second(1).unwrap().with_burst(1).unwrap();
    let limiter = Keyed::builder(Gcra::new(quota))
        .clock(clock.clone())
        .keys::<u64>()
        .max_keys(max_keys)
        .shards(1)
        .flood_policy(policy)
        .build();
    for key in 0..TRACKED {
        clock.advance(Duration::from_micros(1));
        assert!(limiter.check_key(&key, 1).unwrap().allowed);
    }
    (limiter, clock)
}

/// A 16-byte key: `client-` and `i` in hex.
fn byte_key(i: u64) -> [u8; 16] {
    let mut key = *b"client-000000000";
    for (slot, shift) in key[7..].iter_mut().rev().zip((0..).step_by(4)) {
        let digit = (i >> shift) & 0xf;
        // Fits: a hex digit.
        *slot = b"0123456789abcdef"[digit as usize];
    }
    key
}

/// A full store as `Keyed::builder(gcra)` makes it, on a manual clock, but
/// for `policy` when given.
fn full_default_store(policy: Option<FloodPolicy>) -> (Keyed<Gcra, ManualClock>, ManualClock) {
    let clock = ManualClock::starting_at(1 << 40);
    let quota = Quota::per_second(1).unwrap().with_burst(1).unwrap();
    let builder = Keyed::builder(Gcra::new(quota)).clock(clock.clone());
    let limiter = match policy {
        Some(policy) => builder.flood_policy(policy).build(),
        None => builder.build(),
    };
    for key in 0..TRACKED {
        clock.advance(Duration::from_micros(1));
        assert!(limiter.check(&byte_key(key), 1).unwrap().allowed);
    }
    assert_eq!(limiter.len() as u64, TRACKED, "every key is tracked");
    (limiter, clock)
}

fn flood_at_defaults(c: &mut Criterion, rec: &mut Recorder) {
    let mut group = c.benchmark_group("flood");
    group.sample_size(30);
    let (limiter, _clock) = full_default_store(None);
    println!(
        "flood/new-key-sketch-defaults: 16-byte keys, {} shards (the default), max_keys {}, {:?}",
        limiter.shards(),
        limiter.max_keys(),
        limiter.flood_policy(),
    );
    let mut next = TRACKED;
    let (mut total, mut worst, mut worst_at) = (Duration::ZERO, Duration::ZERO, 0);
    let mut batches = Vec::with_capacity(64);
    let mut first_batch = Duration::ZERO;
    for batch_index in 0..64 {
        let start = Instant::now();
        for _ in 0..1_024 {
            next += 1;
            black_box(&limiter.check(&byte_key(next), 1));
        }
        let batch = start.elapsed();
        if batch_index == 0 {
            first_batch = batch;
        }
        total += batch;
        batches.push(batch);
        if batch > worst {
            (worst, worst_at) = (batch, batch_index);
        }
    }
    batches.sort();
    // A worst batch far above the median and the first batches is the
    // scheduler taking the core away (a time slice is a few ms) on a loaded
    // machine, not the store.
    println!(
        "flood/new-key-sketch-defaults: first 65,536 flood keys: {:.2} µs each; batches of 1,024: first {:.2}, median {:.2}, worst {:.2} µs each (batch {worst_at})",
        total.as_secs_f64() * 1e6 / 65_536.0,
        first_batch.as_secs_f64() * 1e6 / 1_024.0,
        batches[32].as_secs_f64() * 1e6 / 1_024.0,
        worst.as_secs_f64() * 1e6 / 1_024.0,
    );
    for (row_group, ns) in [
        ("flood-first-keys", total.as_secs_f64() * 1e9 / 65_536.0),
        (
            "flood-first-keys-worst-batch",
            worst.as_secs_f64() * 1e9 / 1_024.0,
        ),
    ] {
        rec.push(Row::new(
            row_group,
            "gcra",
            "memory",
            Metric::NsPerCheck,
            ns,
        ));
    }
    group.bench_function("new-key-sketch-defaults", |b| {
        b.iter(|| {
            next += 1;
            black_box(&limiter.check(&byte_key(next), 1));
        });
    });
    rec.criterion(
        "flood",
        "new-key-sketch-defaults",
        ("gcra", "new-key-sketch-defaults"),
        Metric::NsPerCheck,
        1.0,
    );
    drop(limiter);

    let (limiter, _clock) = full_default_store(Some(FloodPolicy::Refuse));
    let mut next = TRACKED;
    assert!(matches!(
        limiter.check(&byte_key(next), 1),
        Err(Error::TooManyKeys { .. })
    ));
    group.bench_function("refused-key-defaults", |b| {
        b.iter(|| {
            next += 1;
            black_box(&limiter.check(&byte_key(next), 1));
        });
    });
    rec.criterion(
        "flood",
        "refused-key-defaults",
        ("gcra", "refused-key-defaults"),
        Metric::NsPerCheck,
        1.0,
    );
    group.finish();
}

fn flood(c: &mut Criterion) {
    let mut group = c.benchmark_group("flood");
    group.sample_size(30);
    let tracked = usize::try_from(TRACKED).expect("a key count fits in usize");

    let (limiter, clock) = full_store(FloodPolicy::default_for(tracked), tracked);
    let mut next = TRACKED;
    group.bench_function("new-key-one-due", |b| {
        b.iter(|| {
            clock.advance(Duration::from_micros(1));
            next += 1;
            black_box(&limiter.check_key(&next, 1));
        });
    });
    drop(limiter);

    let (limiter, _clock) = full_store(FloodPolicy::default_for(tracked), tracked);
    let mut next = TRACKED;
    group.bench_function("new-key-sketch", |b| {
        b.iter(|| {
            next += 1;
            black_box(&limiter.check_key(&next, 1));
        });
    });
    group.bench_function("tracked-key-during-flood", |b| {
        b.iter(|| {
            next += 1;
            black_box(&limiter.check_key(&next, 1));
            black_box(&limiter.check_key(&(next % TRACKED), 1));
        });
    });
    drop(limiter);

    let (limiter, _clock) = full_store(FloodPolicy::Refuse, tracked);
    let mut next = TRACKED;
    group.bench_function("refused-key", |b| {
        b.iter(|| {
            next += 1;
            black_box(&limiter.check_key(&next, 1));
        });
    });
    drop(limiter);

    let (limiter, _clock) = full_store(FloodPolicy::Refuse, 2 * tracked);
    let mut key = 0;
    group.bench_function("tracked-key-no-flood", |b| {
        b.iter(|| {
            key = (key + 7_919) % TRACKED;
            black_box(&limiter.check_key(&key, 1));
        });
    });
    group.finish();
}

fn main() {
    let mode = Mode::from_args();
    let mut c = ratelab_benches::criterion(&mode);
    let mut rec = Recorder::new("flood", &mode);
    // Each store takes seconds to fill: none for groups filtered out.
    if mode.wants_any("flood", ["new-key-sketch-defaults", "refused-key-defaults"]) {
        flood_at_defaults(&mut c, &mut rec);
    }
    if mode.wants_any(
        "flood",
        [
            "new-key-one-due",
            "new-key-sketch",
            "tracked-key-during-flood",
            "refused-key",
            "tracked-key-no-flood",
        ],
    ) {
        flood(&mut c);
    }
    c.final_summary();
    rec.finish();
}
