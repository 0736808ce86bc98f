//! The multi-policy decision engine: given the policies that apply to one
//! request, each with its key and cost, which limiters to ask, in what order
//! and with what cost, what to give back, and what the answer is; then,
//! after the response, what to count, refund or settle. No HTTP here but
//! the response head a settlement reads: the request is matched to policies
//! before, and the response written after.
//!
//! One policy is asked once. With several, every policy whose limiter
//! issues receipts takes the request's cost with a receipt while the others
//! peek, all at once; then the others are asked with the cost (those
//! predicted to refuse first). A request refused, or failed closed,
//! anywhere gives every receipt back before it is answered: it leaves every
//! policy that can give back as if it never came. (ratelab-http's guide,
//! "Several policies on one request", says the same to users.)
//!
//! The pieces, each depending only on those above it: [`refill`] (how a
//! quota comes back: `t`), [`check`] (the input), [`report`] (where a
//! policy stands), [`tally`] (the output), [`call`] (one bounded limiter
//! call), [`next`] (peeks for `t`), [`decide`] (the rounds), [`settle`]
//! (after the response).

mod call;
mod check;
mod decide;
mod next;
mod refill;
mod report;
mod settle;
mod tally;
#[cfg(test)]
mod tests;

pub(crate) use check::{Check, LimiterKey};
pub(crate) use decide::Engine;
pub(crate) use next::now as next_now;
pub(crate) use refill::Refill;
pub use refill::wait_for_next_unit;
pub(crate) use report::State;
pub(crate) use settle::{pending, settle};
pub(crate) use tally::{Outcome, Tally, record_gauges};
