//! Time: the [`Clock`] every limiter reads, and the bounds of the arithmetic.
//!
//! Every decision is made on integer microseconds. Instants are `u64`
//! microseconds on the clock's own timeline; only differences between them
//! matter, except for the fixed and sliding windows, which align to multiples
//! of their period on that timeline.
//!
//! The bounds below keep every intermediate value under 2^53, so that a Redis
//! Lua script (whose numbers are doubles) computes the same integers as Rust.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

/// The latest instant a decision uses, 2^52 µs (about 142 years after the
/// clock's origin; for Redis `TIME`, the year 2112). Later instants are
/// clamped to it: time stands still there, which can only refuse more, never
/// admit more.
pub const MAX_INSTANT_MICROS: u64 = 1 << 52;

/// A clock reading as the algorithms take it: at most
/// [`MAX_INSTANT_MICROS`]. Every runner (in memory, Redis client time) clamps
/// through this one function; the scripts do the same in their prologue.
#[inline]
pub const fn clamp_instant(micros: u64) -> u64 {
    if micros > MAX_INSTANT_MICROS {
        MAX_INSTANT_MICROS
    } else {
        micros
    }
}

/// The longest span a quota may involve (its period, or the time a full burst
/// takes to refill): 2^50 µs, about 35.7 years. A burst no larger than the
/// limit is accepted with any valid period, so its refill, `burst × ceil(period
/// / limit)`, may exceed this by the rounding: less than `limit` µs (2^32).
/// Instants plus spans stay under 2^53 all the same.
pub const MAX_SPAN_MICROS: u64 = 1 << 50;

/// A source of the current time, in microseconds.
///
/// No algorithm reads the time itself: the limiter asks its clock, so tests
/// and simulations can drive time by hand with [`ManualClock`].
pub trait Clock: Send + Sync {
    /// Now, in microseconds since this clock's origin.
    fn now_micros(&self) -> u64;

    /// Lets `duration` pass on this clock: the blocking waits sleep through
    /// their clock, so on a [`ManualClock`] (which moves itself forward
    /// instead) a wait of ten seconds takes none. The default sleeps the
    /// thread.
    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }

    /// Readings never go back, whichever thread reads: a reading taken
    /// after another is no earlier. The in-memory limiters then skip some
    /// bookkeeping that only a clock moved by hand needs. False by default;
    /// [`SystemClock`] and [`CoarseClock`] are.
    fn is_monotonic(&self) -> bool {
        false
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now_micros(&self) -> u64 {
        (**self).now_micros()
    }

    #[inline]
    fn is_monotonic(&self) -> bool {
        (**self).is_monotonic()
    }

    fn sleep(&self, duration: Duration) {
        (**self).sleep(duration);
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now_micros(&self) -> u64 {
        (**self).now_micros()
    }

    #[inline]
    fn is_monotonic(&self) -> bool {
        (**self).is_monotonic()
    }

    fn sleep(&self, duration: Duration) {
        (**self).sleep(duration);
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    #[inline]
    fn now_micros(&self) -> u64 {
        (**self).now_micros()
    }

    #[inline]
    fn is_monotonic(&self) -> bool {
        (**self).is_monotonic()
    }

    fn sleep(&self, duration: Duration) {
        (**self).sleep(duration);
    }
}

/// The precise system clock, in microseconds since the first time any
/// `SystemClock` was read in this process.
///
/// It reads the processor's time-stamp counter, calibrated once per process
/// against the monotonic system clock ([`quanta`], the clock governor reads
/// by default): exact to the nanosecond, at the cost of one counter read
/// (about ten nanoseconds, against tens for a system call through the vDSO).
/// Where the processor has no invariant counter, it reads the monotonic
/// system clock itself. Either way every reading is the time now, never a
/// copy made earlier, so a limiter on it keeps its quota over every
/// interval of real time (unlike [`CoarseClock`]).
///
/// Every `SystemClock` in a process shares one origin, so windows of the same
/// period line up across limiters.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

/// The process's clock and its origin, the raw reading it counts from.
#[inline]
fn process_clock() -> &'static (quanta::Clock, u64) {
    static CLOCK: OnceLock<(quanta::Clock, u64)> = OnceLock::new();
    CLOCK.get_or_init(|| {
        // Calibrates the counter the first time, once per process.
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        (clock, origin)
    })
}

impl SystemClock {
    /// The system clock.
    pub fn new() -> Self {
        SystemClock
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now_micros(&self) -> u64 {
        let (clock, origin) = process_clock();
        // A counter read on a core whose counter lags the origin's by a
        // few cycles saturates to the origin rather than wrapping.
        clock.delta_as_nanos(*origin, clock.raw()) / 1_000
    }

    #[inline]
    fn is_monotonic(&self) -> bool {
        true
    }
}

/// The system clock read ahead of time, opt-in for hot paths
/// (`Keyed::builder(..).clock(CoarseClock::shared())`,
/// [`Direct::with_clock`](crate::Direct::with_clock)): a background thread
/// stores [`SystemClock`]'s reading in an atomic every `resolution`, and
/// [`CoarseClock::now_micros`] is one atomic load (a fraction of a
/// nanosecond, against tens for a system clock read, about ten for a TSC
/// read). It is not the default, because of the trade below: the default
/// limiters keep the quota over every interval of real time.
///
/// **The trade.** A reading is the instant of the last refresh: behind the
/// system clock by less than the resolution (plus the background thread's
/// scheduling delay on a busy machine), never ahead of it, never going back,
/// on [`SystemClock`]'s timeline. A limiter on it decides exactly as a
/// precise limiter would at the readings, so its quota holds on the
/// readings' timeline. Real time differs from that timeline by a lag that is
/// not the same at both ends of an interval, so over an interval of real
/// time `t` the limiter admits at most what the quota allows over `t` plus
/// the lag: for a bucket (GCRA, token bucket, leaky bucket)
/// `burst + floor((t + lag) / T)` instead of `burst + floor(t / T)`, i.e. at
/// most `ceil(lag / T)` units more, and only when requests come within the lag of
/// the quota's spacing; a 100 per second quota on the default 1 ms
/// resolution: one unit, at most, in some windows. Waits it reports may be
/// up to the lag too short, so a client retrying at exactly `retry_after`
/// may be refused once more. `crates/tests/tests/memory/lagging_clock.rs` proves the
/// bound for every algorithm, and that the lag is needed in it.
///
/// Choose [`SystemClock`] (or any precise [`Clock`]) when the bound must hold
/// over every interval of real time to the microsecond, or when the quota's
/// emission interval is not well above the resolution, and the tens of
/// nanoseconds per check do not matter.
///
/// ```
/// use ratelab_core::{Clock, CoarseClock, SystemClock};
///
/// let coarse = CoarseClock::shared();
/// let (lagging, precise) = (coarse.now_micros(), SystemClock.now_micros());
/// assert!(lagging <= precise);
/// ```
#[derive(Debug, Clone)]
pub struct CoarseClock {
    micros: Arc<AtomicU64>,
}

impl CoarseClock {
    /// The shortest refresh period: below it the thread would spend its time
    /// refreshing (a system clock read takes tens of nanoseconds) for
    /// readings no one can tell apart.
    pub const MIN_RESOLUTION: Duration = Duration::from_micros(50);

    /// A clock refreshed every `resolution` by a thread of its own, which
    /// stops when the last clone is dropped.
    ///
    /// `resolution` is at least [`CoarseClock::MIN_RESOLUTION`]: a shorter
    /// one (zero included) is raised to it, so the thread never spins.
    ///
    /// # Panics
    ///
    /// If the operating system cannot start a thread.
    pub fn new(resolution: Duration) -> Self {
        let resolution = resolution.max(Self::MIN_RESOLUTION);
        let micros = Arc::new(AtomicU64::new(SystemClock.now_micros()));
        let weak: Weak<AtomicU64> = Arc::downgrade(&micros);
        let spawned = std::thread::Builder::new()
            .name("ratelab-coarse-clock".into())
            .spawn(move || {
                while let Some(micros) = weak.upgrade() {
                    micros.store(SystemClock.now_micros(), Ordering::Relaxed);
                    drop(micros);
                    std::thread::sleep(resolution);
                }
            });
        // Without a thread the clock would stand still: refuse to build one.
        if let Err(error) = spawned {
            panic!("cannot start the coarse clock's thread: {error}");
        }
        CoarseClock { micros }
    }

    /// One clock for the whole process, refreshed every millisecond.
    #[inline]
    pub fn shared() -> Self {
        static SHARED: OnceLock<CoarseClock> = OnceLock::new();
        SHARED
            .get_or_init(|| CoarseClock::new(Duration::from_millis(1)))
            .clone()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now_micros(&self) -> u64 {
        self.micros.load(Ordering::Relaxed)
    }

    #[inline]
    fn is_monotonic(&self) -> bool {
        true
    }
}

/// A clock moved by hand, for tests and simulations.
///
/// Clones share one time: advance any of them and all see it. It can go
/// backwards ([`ManualClock::rewind`], [`ManualClock::set`]) to test that
/// nothing breaks when a real clock does.
///
/// ```
/// use ratelab_core::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(shared.now_micros(), 1_500_000);
/// shared.rewind(Duration::from_secs(1));
/// assert_eq!(clock.now_micros(), 500_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    micros: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at instant 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock at `micros`.
    #[inline]
    pub fn starting_at(micros: u64) -> Self {
        let clock = Self::new();
        clock.set(micros);
        clock
    }

    /// Moves to `micros`, forwards or backwards.
    #[inline]
    pub fn set(&self, micros: u64) {
        self.micros.store(micros, Ordering::SeqCst);
    }

    /// Moves forwards by `by` (saturating at `u64::MAX` µs).
    #[inline]
    pub fn advance(&self, by: Duration) {
        let by = duration_to_micros(by);
        let _ = self
            .micros
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(by))
            });
    }

    /// Moves backwards by `by` (saturating at 0).
    #[inline]
    pub fn rewind(&self, by: Duration) {
        let by = duration_to_micros(by);
        let _ = self
            .micros
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_sub(by))
            });
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_micros(&self) -> u64 {
        self.micros.load(Ordering::SeqCst)
    }

    /// Moves the clock forward by `duration`, at once: a simulated wait.
    fn sleep(&self, duration: Duration) {
        self.advance(duration);
    }
}

/// Whole microseconds in `d`, rounded down, saturating at `u64::MAX`.
#[inline]
pub fn duration_to_micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_monotonic_and_shared() {
        let a = SystemClock::new().now_micros();
        std::thread::sleep(Duration::from_millis(2));
        let b = SystemClock.now_micros();
        assert!(b >= a + 2_000, "{a} then {b}");
    }

    #[test]
    fn coarse_clock_follows_the_system_clock_from_behind() {
        let coarse = CoarseClock::new(Duration::from_millis(1));
        let start = coarse.now_micros();
        let mut last = start;
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(2));
            let now = coarse.now_micros();
            assert!(now >= last, "went back from {last} to {now}");
            assert!(now <= SystemClock.now_micros());
            last = now;
        }
        assert!(moves(&coarse, start), "it never moved");
    }

    /// Whether `coarse` reads past `start` within 30 s: its thread runs
    /// when the scheduler lets it, which a loaded machine delays.
    fn moves(coarse: &CoarseClock, start: u64) -> bool {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while coarse.now_micros() <= start {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    #[test]
    fn a_zero_resolution_is_raised_to_the_minimum() {
        // Before the clamp, the thread slept zero and spun on a core.
        let coarse = CoarseClock::new(Duration::ZERO);
        // CPU ticks (utime + stime) of every coarse-clock thread of this
        // process (Linux only: elsewhere the test only checks it moves).
        let cpu = || -> Option<u64> {
            let mut ticks = 0;
            for task in std::fs::read_dir("/proc/self/task").ok()? {
                let stat = std::fs::read_to_string(task.ok()?.path().join("stat")).ok()?;
                let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
                if name.starts_with("ratelab-coarse") {
                    let fields: Vec<&str> = rest.split_whitespace().collect();
                    ticks += fields.get(11)?.parse::<u64>().ok()?
                        + fields.get(12)?.parse::<u64>().ok()?;
                }
            }
            Some(ticks)
        };
        let before = cpu();
        std::thread::sleep(Duration::from_millis(500));
        if let (Some(before), Some(after)) = (before, cpu()) {
            // A spinning thread burns about 50 ticks (100 Hz) in 500 ms.
            assert!(
                after - before < 20,
                "{} ticks of CPU while idle",
                after - before
            );
        }
        let start = coarse.now_micros();
        assert!(moves(&coarse, start), "it still moves");
    }

    #[test]
    fn manual_clock_saturates() {
        let clock = ManualClock::starting_at(u64::MAX - 1);
        clock.advance(Duration::MAX);
        assert_eq!(clock.now_micros(), u64::MAX);
        clock.set(3);
        clock.rewind(Duration::from_secs(1));
        assert_eq!(clock.now_micros(), 0);
    }
}
