//! The layer's tests that share a process: one test binary, one module a
//! file. `failure.rs` (a process-wide tracing subscriber), `missing_peer.rs`
//! (which needs none) and `breaker_metrics.rs` (a process-wide metrics
//! recorder) stay binaries of their own.

#[path = "../common/mod.rs"]
mod common;

mod all_or_nothing;
mod concurrency;
mod counting;
mod example_server;
mod example_server_redis;
mod headers;
mod hyper;
mod identity;
mod in_place;
mod login_guard;
mod login_guard_redis;
mod next_after;
mod policies;
mod redis;
mod responses;
mod routing;
mod settle;
mod shared_cases;
