//! The store's and the wait helpers' tests, on toy algorithms: one test
//! binary, one module a file.

#[path = "../common/mod.rs"]
mod common;

mod expiry_waves;
mod keyed_flood;
mod legit_client;
mod long_keys_memory;
mod returning;
mod rewind;
mod waits;
