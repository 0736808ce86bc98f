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
//! Run: `cargo bench -p ratelab-benches --bench flood`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ratelab_core::{FloodPolicy, Keyed, ManualClock, Quota};
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

criterion_group!(benches, flood);
criterion_main!(benches);
