//! Every algorithm on Redis and Redis Cluster (scripts and the native
//! module), against memory: one test binary, one module a file.

#[path = "../common/mod.rs"]
mod common;

mod equivalence;
mod expiry;
mod flaws;
mod keys;
mod redis_conformance;
mod redis_module;
mod redis_ops;
mod redis_reference;
mod redis_state;
mod refusal_cache;
mod settle_bound;
