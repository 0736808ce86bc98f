//! Every algorithm in memory: one test binary, one module a file.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod concurrency;
mod conformance;
mod keyed_store;
mod lagging_clock;
mod peek;
mod receipts;
mod reference;
mod store_budget;
mod store_flood;
mod store_rewind;
mod store_settle;
mod store_wait;
mod wait;
mod window_edge;
