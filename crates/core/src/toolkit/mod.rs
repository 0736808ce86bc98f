//! The toolkit for algorithm and store authors: what a new algorithm, or a
//! store that keeps state outside the process, builds on. A service that
//! limits requests needs none of it: the crate's root holds what it calls.
//!
//! - **Running state**: the cells a single bucket keeps its state in
//!   ([`AtomicCell`], [`LockedCell`], [`StateCell`]), the checks every
//!   decision and settlement starts with ([`ensure_fits`],
//!   [`ensure_settles`]), and [`forget_if_forgettable`].
//! - **Receipts**: what a check stamps ([`Stamp`]), what a settlement says
//!   ([`Settlement`]), who may redeem one ([`Issuer`], [`Redeemed`]), and the
//!   ledgers that keep every give-back within the algorithm's bound: a
//!   debt's [`Shifts`] (the four debts share their receipts through
//!   [`debt`] and [`debt_receipts!`](crate::debt_receipts)) and a window's
//!   [`Spent`]. The rule, and why it holds: [`Receipt`](crate::Receipt).
//! - **One schedule**: GCRA and the leaky queue decide by the same instant
//!   ([`Schedule`]); the queue adds the wait for its slot.
//! - **Remote forms**: an algorithm as a store outside the process runs it
//!   ([`remote`]: its key code, parameters, stored encoding and script).
//! - **Arithmetic**: exact division by a constant ([`Divisor`]), the sliding
//!   log's gate ([`LogGate`]), and the range of instants
//!   ([`MAX_INSTANT_MICROS`], [`clamp_instant`], [`duration_to_micros`]).
//!
//! `crates/ratelab/src/kind.rs` says how an algorithm joins ratelab.

pub mod debt;
pub mod remote;
mod schedule;

pub use crate::algorithm::{
    AtomicCell, LockedCell, StateCell, ensure_settles, forget_if_forgettable,
};
pub use crate::debt_receipts;
pub use crate::divisor::Divisor;
pub use crate::error::ensure_fits;
pub use crate::log_gate::LogGate;
pub use crate::receipt::{
    Issuer, LEDGER_CEILING, Ledger, MAX_RECENT_SHIFTS, Redeemed, Settlement, Shift, Shifts, Stamp,
};
pub use crate::spent::{MAX_GIVEN, MAX_MARK, MAX_SETTLED, Spent};
pub use crate::time::{MAX_INSTANT_MICROS, MAX_SPAN_MICROS, clamp_instant, duration_to_micros};
pub use debt::Debt;
pub use schedule::Schedule;
pub use remote::{RemoteForm, StringForm};
