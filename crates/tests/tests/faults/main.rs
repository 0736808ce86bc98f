//! Servers killed, paused and flushed mid-run, and the guards that start
//! them: one test binary apart, so that no other test shares a server that
//! these ones break on purpose.

#[path = "../common/mod.rs"]
mod common;

mod faults;
mod redis_guards;
mod redis_outages;
