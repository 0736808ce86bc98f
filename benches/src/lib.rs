//! ratelab's benchmarks: every algorithm in memory and on Redis, side by
//! side with governor (the Rust reference) and `redis-benchmark` (the
//! server's own ceiling), in one run.
//!
//! Three bench binaries (`benches/memory.rs`, `benches/footprint.rs`,
//! `benches/redis.rs`) measure; each leaves its figures as [`Row`]s in
//! criterion's home; the `bench-summary` binary turns them into
//! `reports/bench/summary.json` and `reports/bench/README.md`, with the
//! performance targets as ratios marked pass or miss ([`summary`]).
//!
//! ```text
//! cargo bench -p ratelab-benches                      # measure (starts its own Redis)
//! cargo run --release -p ratelab-benches --bin bench-summary   # write reports/bench, print the tables
//! RATELAB_BENCH_QUICK=1 cargo bench -p ratelab-benches # shorter, noisier
//! cargo test -p ratelab-benches --benches             # every bench once, small (test mode)
//! ```
//!
//! This library holds what the binaries share: the quotas of each algorithm
//! (the algorithms themselves are `ratelab::AlgorithmKind`; [`algorithms`]), pre-generated keys ([`keys`]), the run mode
//! and the rows ([`run`]), a counting allocator ([`alloc`]), the Redis probes
//! ([`redis_tools`]) and the report ([`summary`]).

#![deny(unsafe_code)]

pub mod algorithms;
pub mod alloc;
pub mod governor_clock;
pub mod keys;
pub mod redis_tools;
pub mod run;
pub mod summary;

pub use algorithms::{NAMES, Setting, Visit, each_algorithm, each_algorithm_on_redis};
pub use run::{Metric, Mode, Recorder, Row, Spread, criterion, median, paired_rounds};
