//! ratelab's cross-algorithm integration tests, apart from the crates they
//! test and never published. The library is empty; the tests are four
//! binaries under `tests/`, one module a file:
//!
//! - `memory`: every algorithm in memory (conformance, reference table,
//!   concurrency, bad input, peeks, receipts, waits, the keyed store, the
//!   lagging clock, the fixed window's edge);
//! - `redis`: every algorithm on Redis and Redis Cluster, by script and by
//!   module, against memory (equivalence, operations, settlements, state,
//!   keys, expiry, the refusal cache, the flaws of read-then-write);
//! - `faults`: servers killed, paused and flushed mid-run, outages, and the
//!   test servers' guards themselves;
//! - `protocol`: each algorithm's remote form, and the files the other
//!   languages read (`just regenerate` rewrites them from here).
