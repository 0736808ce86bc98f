//! A shared rate limit checked at memory speed, with a stated bound.
//!
//! A check on a shared limiter (Redis) costs a round trip; a service with
//! many instances on one hot key pays it on every request. [`Leased`] wraps
//! any [`AsyncRateLimiter`] that issues receipts: per key, it takes a
//! *lease* of N units from the shared limiter (one check of cost N, with a
//! receipt), admits checks from it locally (a lock and a few additions),
//! and when the lease ends (used up, past its lifetime, replaced,
//! [`release_all`](Leased::release_all)) settles the receipt to the units it
//! used: the shared limiter gives back what it can prove unused.
//!
//! ```
//! use ratelab_core::{AsyncRateLimiter, Keyed, ManualClock, Quota};
//! use ratelab_gcra::Gcra;
//! use ratelab_lease::{LeaseConfig, Leased};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! # futures::executor::block_on(async {
//! let clock = ManualClock::new();
//! // The shared limit (Redis in production): 100 per second, bursts of 100.
//! let shared = Arc::new(Keyed::with_clock(Gcra::new(Quota::per_second(100)?), clock.clone()));
//! let config = LeaseConfig::default().max_units(50).max_lifetime(Duration::from_millis(100));
//! let a = Leased::with_clock(Arc::clone(&shared), config, clock.clone())?;
//! let b = Leased::with_clock(Arc::clone(&shared), config, clock.clone())?;
//!
//! // Two instances share one quota; most checks never reach it.
//! let mut admitted = 0;
//! for i in 0..60 {
//!     let instance = if i % 2 == 0 { &a } else { &b };
//!     admitted += usize::from(instance.check(b"tenant-7", 1).await?.allowed);
//! }
//! assert_eq!(admitted, 60);
//! // A hot check is decided from the lease, with no future at all.
//! assert!(a.check_now(b"tenant-7", 1).is_some());
//!
//! // Stopping: what the leases hold unused goes back to the shared limit.
//! a.release_all().await?;
//! b.release_all().await?;
//! assert_eq!(shared.peek(b"tenant-7", 0)?.remaining, 100 - 61);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # The bound
//!
//! A lease's units are charged on the shared limiter at one instant and
//! admitted here until its lifetime ends, counted from the instant its
//! request was *sent* (a late reply cannot lengthen it), on this
//! instance's clock. So the units admitted in an interval, over every
//! instance, were charged in that interval lengthened by the lifetime `L`
//! ([`LeaseConfig::max_lifetime`]); [`Bound::leased`] says what that allows,
//! and [`Leased`]'s [`bound`](ratelab_core::Limiter::bound) is it:
//!
//! - **Debts** (GCRA, token bucket, leaky meter and queue): at most
//!   `ceil(L / T)` units beyond the algorithm's own bound in any interval
//!   (the rate times the lifetime), over all instances together. Giving
//!   back unused units does not change it: the units a lease admits late
//!   were charged early.
//! - **Aligned windows** (fixed window, sliding counter): no more than the
//!   algorithm's own bound. A lease ends with the window it was charged in
//!   (read from the grant's `reset_after`), so a window's units are
//!   admitted in that window alone.
//! - **Sliding log**: `limit × (1 + ceil(L / window))` in any trailing
//!   window: a log's units leave it a window after they were charged, not
//!   after they were admitted here.
//!
//! Clocks: lifetimes are durations on each instance's own clock, so an
//! offset between instances' clocks changes nothing, and a clock that jumps
//! forward only ends leases early. A clock seen going back (a reading below
//! the one before) ends every lease of the instance; but a clock that goes
//! back between two readings cannot be told from a slow one, and lengthens
//! the leases it reaches by as much, as a clock that runs slow lengthens
//! `L` by its drift. The default [`SystemClock`](ratelab_core::SystemClock)
//! never goes back.
//!
//! **What it refuses that the shared limiter alone would admit**: the
//! units other instances' leases hold unused (at most their lease size
//! each, capped by the configured share of what was left), and until the
//! shared limiter gives them back on its own, the units of leases whose
//! instance stopped without [`release_all`](Leased::release_all) (for a
//! debt, at most its burst's time; for a window, until it ends). A
//! renewal's refusal is answered locally, for checks at least as costly,
//! until the retry instant the shared limiter gave, even if other
//! instances give units back meanwhile. Nothing else refuses: a renewal
//! refused for a lease larger than the check asks again for what is left,
//! or for the check alone.
//!
//! # When to lease
//!
//! Lease a hot shared key checked far more often than a round trip is
//! worth: each instance then sends one command per lease instead of one
//! per check. Do not lease a low-rate limit (a lease of a few units saves
//! nothing, and `ceil(L / T)` is large against its burst), a hard billing
//! quota that must never be passed by one unit (a debt's bound grows by the
//! rate times the lifetime), or a key whose every check must see the
//! others' (login failures). A key offered more than its quota saves
//! little: once a debt is spent its units come back one at a time, so each
//! admission is a lease of one unit, and each refusal not answered from the
//! cached one is a call (about one call per check, as without leases; a
//! window's refusal is cached until the window ends).
//!
//! # Leases
//!
//! A key's first lease is the cost of its first check; a lease used up
//! before its end is renewed ×[`growth`](LeaseConfig::growth) larger, up to
//! [`max_units`](LeaseConfig::max_units), the quota's capacity, and the
//! configured [share](LeaseConfig::share_percent) of what the shared limiter
//! reported left; a lease that ended unused asks next for what it used.
//! One renewal per key is in flight at once; the key's other checks wait
//! for it. A key beyond [`max_keys`](LeaseConfig::max_keys) (rounded up to
//! a multiple of the 32 shards) is checked on the shared limiter directly.
//! Leases past their lifetime end at the next renewal of a key in their
//! shard (of 32), and are settled by the renewal that ended them or the
//! next one (a renewal settles what ended before it sends its request), or
//! by [`settle_expired`](Leased::settle_expired), which a quiet instance
//! calls now and then.
//!
//! Receipts: an admission from a lease gets a receipt of [`Leased`]'s own.
//! Settled while its lease lives, its unused units go back to the lease
//! (and to the shared limiter with the lease's settlement); once the lease
//! ended, a give-back is dropped and a charge beyond the cost goes into
//! the key's next lease. Decisions from a lease report `remaining` as what
//! the shared limiter had left when the lease was granted plus the units
//! the lease holds unused: what this instance could still admit if no
//! other took any (their admissions since the grant are not seen).

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod config;
mod leased;
mod sizing;
mod table;

pub use config::{ConfigError, LeaseConfig};
pub use leased::Leased;

#[cfg(doc)]
use ratelab_core::{AsyncRateLimiter, Bound};
