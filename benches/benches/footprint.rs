//! Heap bytes per key of every algorithm's `Keyed` store and of governor's
//! keyed store, measured with a counting global allocator: bytes allocated
//! after one check on each of N keys, minus before, divided by N.
//!
//! Not a criterion bench (nothing is timed). Groups `memory-footprint-100k`
//! and `memory-footprint-1m` (every algorithm, `max_keys` 4,000,000), and
//! for GCRA `memory-footprint-100k-bound-n`, `-bound-2n` (and `-1m-`): the
//! bound at the number of keys and at twice it. Metric `bytes_per_key`.
//!
//! Terms: `u64` keys drawn at random, one check each; ours with
//! `Keyed::builder(..).keys::<u64>()` and its defaults otherwise (foldhash,
//! the default shard count, the default flood policy); governor's
//! `RateLimiter::keyed` (a `DashMap` with its default shard count and
//! hasher). The hasher changes no byte.

use ratelab::{AlgorithmKind, Keyed, KnownAlgorithm, SystemClock};
use ratelab_benches::algorithms::{governor_quota, quota};
use ratelab_benches::alloc::CountingAlloc;
use ratelab_benches::keys::KeySet;
use ratelab_benches::{Metric, Mode, Recorder, Row, Setting, Visit, each_algorithm};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc::new();

fn main() {
    let mode = Mode::from_args();
    if mode.criterion_only() {
        return;
    }
    let mut rec = Recorder::new("footprint", &mode);
    for (group, n) in [
        ("memory-footprint-100k", mode.size(100_000, 100_000, 1_000)),
        (
            "memory-footprint-1m",
            mode.size(1_000_000, 1_000_000, 2_000),
        ),
    ] {
        if !mode.wants_any(
            group,
            ratelab_benches::NAMES.into_iter().chain(["governor"]),
        ) {
            continue;
        }
        let keys = KeySet::new(n, 1);
        println!(
            "{group}: {n} u64 keys; ours: foldhash, {} shards (the default), max_keys 4,000,000, n and 2n; governor: RateLimiter::keyed",
            Keyed::builder(ratelab_gcra::Gcra::new(quota(
                Setting::ManyKeys,
                AlgorithmKind::Gcra
            )))
            .keys::<u64>()
            .max_keys(4_000_000)
            .build()
            .shards(),
        );
        let governor = per_key(n, || {
            let limiter = governor::RateLimiter::keyed(governor_quota(Setting::ManyKeys));
            for key in &keys.keys {
                assert!(limiter.check_key(key).is_ok(), "governor admits");
            }
            assert_eq!(limiter.len(), n);
            limiter
        });
        rec.push(Row::new(
            group,
            "gcra",
            "governor",
            Metric::BytesPerKey,
            governor,
        ));
        each_algorithm(
            Setting::ManyKeys,
            &mut Footprint {
                rec: &mut rec,
                group,
                keys: &keys,
                max_keys: 4_000_000,
            },
        );
        // GCRA, the algorithm governor implements, with the bound at the
        // number of keys and at twice it.
        for (bound_group, max_keys) in [("bound-n", n), ("bound-2n", 2 * n)] {
            let bound_group = format!("{group}-{bound_group}");
            if !mode.wants_any(&bound_group, ["gcra"]) {
                continue;
            }
            let mut footprint = Footprint {
                rec: &mut rec,
                group: &bound_group,
                keys: &keys,
                max_keys,
            };
            footprint.visit(ratelab_gcra::Gcra::new(quota(
                Setting::ManyKeys,
                AlgorithmKind::Gcra,
            )));
            rec.push(Row::new(
                &bound_group,
                "gcra",
                "governor",
                Metric::BytesPerKey,
                governor,
            ));
        }
    }
    if mode.is_test() {
        println!("footprint: ok (test mode, nothing recorded)");
    }
    rec.finish();
}

/// Heap bytes per key that `build` leaves allocated in what it returns, over
/// `n` keys; the result is dropped after it is measured.
fn per_key<T>(n: usize, build: impl FnOnce() -> T) -> f64 {
    let before = ALLOCATOR.live_bytes();
    let store = build();
    let after = ALLOCATOR.live_bytes();
    drop(store);
    after.saturating_sub(before) as f64 / n as f64
}

struct Footprint<'a> {
    rec: &'a mut Recorder,
    group: &'a str,
    keys: &'a KeySet,
    max_keys: usize,
}

impl Visit for Footprint<'_> {
    fn visit<A: KnownAlgorithm>(&mut self, algorithm: A) {
        let name = algorithm.name();
        let n = self.keys.keys.len();
        let bytes = per_key(n, || {
            let limiter = Keyed::builder(algorithm)
                .clock(SystemClock)
                .keys()
                .max_keys(self.max_keys)
                .build();
            for key in &self.keys.keys {
                let decision = limiter.check_key(key, 1).expect("room for every key");
                assert!(decision.allowed, "{name} admits");
            }
            assert_eq!(limiter.len(), n, "{name}: every key is tracked");
            limiter
        });
        self.rec.push(Row::new(
            self.group,
            name,
            "memory",
            Metric::BytesPerKey,
            bytes,
        ));
    }
}
