//! The core's tests: one test binary, one module a file.

#[path = "../common/mod.rs"]
mod common;

mod forwarded_chain;
mod hyper;
