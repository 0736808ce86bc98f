//! One hot path in a loop, nothing else: for a profiler (`valgrind
//! --tool=callgrind`, `perf record`) or a quick timing without criterion.
//!
//! ```text
//! cargo build --release -p ratelab-benches --example hot_path
//! hot_path <setting> <limiter> [checks] [--manual-clock]
//!   setting:  direct | two-threads (direct, two threads at once) | keyed-100k | keyed-1m
//!   limiter:  gcra | token-bucket | ... | governor | governor-foldhash (keyed)
//!             | gcra-lean (GCRA's `check_lean`, read only for `allowed`)
//!             | clock-instant | clock-system | clock-quanta (the clock read alone)
//!   checks:   default 10,000,000; 0 runs the setup alone (to subtract it)
//!   --manual-clock: ratelab's ManualClock / governor's FakeRelativeClock, which
//!             never move: everything but the clock read
//!   --upkeep-clock: governor's QuantaUpkeepClock on both sides (ratelab
//!             through GovernorClock), as the memory bench's upkeep groups
//! ```
//!
//! Prints the time per check (wall time over all checks, with two threads). Under callgrind, run it twice (N checks and 0)
//! and divide the difference of the instruction counts by N. Valgrind does not
//! run the vDSO: `Instant::now` there is a real system call whose kernel time
//! callgrind does not see, so time the clock with this binary instead.

use std::hint::black_box;
use std::time::Instant;

use governor::clock::{Clock as _, DefaultClock, FakeRelativeClock, QuantaUpkeepClock};
use ratelab::KnownAlgorithm;
use ratelab::toolkit::RemoteForm;
use ratelab::{Clock, Direct, Keyed, ManualClock, SystemClock};
use ratelab_benches::algorithms::governor_quota;
use ratelab_benches::governor_clock::GovernorClock;
use ratelab_benches::keys::KeySet;
use ratelab_benches::{Setting, Visit, each_algorithm};

fn usage() -> ! {
    eprintln!(
        "usage: hot_path <direct|two-threads|keyed-100k|keyed-1m> <algorithm|gcra-lean|governor|governor-foldhash|clock-instant|clock-system|clock-quanta> [checks] [--manual-clock|--upkeep-clock]"
    );
    std::process::exit(2)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let manual = args.iter().any(|a| a == "--manual-clock");
    let upkeep = args
        .iter()
        .any(|a| a == "--upkeep-clock")
        .then(|| QuantaUpkeepClock::from_interval(std::time::Duration::from_millis(1)))
        .map(|clock| clock.expect("quanta's upkeep thread starts"));
    args.retain(|a| a != "--manual-clock" && a != "--upkeep-clock");
    let (Some(setting), Some(limiter)) = (args.first(), args.get(1)) else {
        usage()
    };
    let checks: u64 = args
        .get(2)
        .map_or(Ok(10_000_000), |s| s.parse())
        .unwrap_or_else(|_| usage());
    let keys = match setting.as_str() {
        "direct" | "two-threads" => None,
        "keyed-100k" => Some(KeySet::new(100_000, 22)),
        "keyed-1m" => Some(KeySet::new(1_000_000, 22)),
        _ => usage(),
    };
    let lean = limiter == "gcra-lean";
    let mut run = Run {
        threads: if setting == "two-threads" { 2 } else { 1 },
        wanted: if lean {
            "gcra".to_owned()
        } else {
            limiter.clone()
        },
        lean,
        keys,
        checks,
        manual,
        upkeep,
        ns: None,
    };
    match limiter.as_str() {
        "clock-instant" => run.ns = Some(time(checks, || sink(Instant::now()))),
        "clock-system" => {
            run.ns = Some(time(checks, || sink(SystemClock.now_micros())));
        }
        "clock-quanta" => {
            let clock = DefaultClock::default();
            run.ns = Some(time(checks, || sink(clock.now())));
        }
        "governor" | "governor-foldhash" => run.governor(),
        _ => {
            let setting = if run.keys.is_some() {
                Setting::ManyKeys
            } else {
                Setting::OneKey
            };
            each_algorithm(setting, &mut run);
        }
    }
    let Some(ns) = run.ns else { usage() };
    println!("{setting} {limiter}: {ns:.1} ns per check over {checks} checks");
}

/// Keeps `value` from being optimized away, observed where it lies (as the
/// criterion bench does: moving a `Decision` by value would time the copy).
#[inline(always)]
fn sink<T>(value: T) {
    black_box(&value);
}

/// Wall time per check, `threads` threads making `checks` checks each.
fn time_threads(threads: usize, checks: u64, f: impl Fn() + Sync) -> f64 {
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..checks {
                    f();
                }
            });
        }
    });
    started.elapsed().as_nanos() as f64 / (checks.max(1) as f64 * threads as f64)
}

fn time(checks: u64, mut f: impl FnMut()) -> f64 {
    let started = Instant::now();
    for _ in 0..checks {
        f();
    }
    started.elapsed().as_nanos() as f64 / checks.max(1) as f64
}

struct Run {
    /// Threads checking the one `Direct` limiter at once.
    threads: usize,
    wanted: String,
    /// The lean check (`check_lean`), read only for `allowed`.
    lean: bool,
    keys: Option<KeySet>,
    checks: u64,
    manual: bool,
    /// Governor's upkeep clock, on both sides.
    upkeep: Option<QuantaUpkeepClock>,
    ns: Option<f64>,
}

impl Run {
    fn keyed(&mut self, limiter: impl Fn(&u64) -> bool) {
        let keys = self.keys.as_ref().expect("keyed");
        for key in &keys.keys {
            assert!(limiter(key), "the bench quota admits");
        }
        let mut cursor = keys.cursor();
        self.ns = Some(time(self.checks, || {
            black_box(limiter(&cursor.next_key()));
        }));
    }

    fn governor(&mut self) {
        let setting = if self.keys.is_some() {
            Setting::ManyKeys
        } else {
            Setting::OneKey
        };
        let q = governor_quota(setting);
        let foldhash = self.wanted == "governor-foldhash";
        if let Some(upkeep) = self.upkeep.clone() {
            if self.keys.is_some() {
                let state = governor::state::keyed::DashMapStateStore::with_hasher(
                    foldhash::fast::RandomState::default(),
                );
                let l: governor::RateLimiter<u64, _, _, governor::middleware::NoOpMiddleware<_>> =
                    governor::RateLimiter::new(q, state, upkeep);
                self.keyed(|k| l.check_key(k).is_ok());
            } else {
                let l = governor::RateLimiter::direct_with_clock(q, upkeep);
                self.ns = Some(time_threads(self.threads, self.checks, || sink(l.check())));
            }
            return;
        }
        match (self.keys.is_some(), self.manual, foldhash) {
            (false, false, _) => {
                let l = governor::RateLimiter::direct(q);
                self.ns = Some(time_threads(self.threads, self.checks, || sink(l.check())));
            }
            (false, true, _) => {
                let l = governor::RateLimiter::direct_with_clock(q, FakeRelativeClock::default());
                self.ns = Some(time_threads(self.threads, self.checks, || sink(l.check())));
            }
            (true, false, false) => {
                let l = governor::RateLimiter::keyed(q);
                self.keyed(|k| l.check_key(k).is_ok());
            }
            (true, true, false) => {
                let l = governor::RateLimiter::dashmap_with_clock(q, FakeRelativeClock::default());
                self.keyed(|k| l.check_key(k).is_ok());
            }
            (true, false, true) => {
                let l = governor::RateLimiter::dashmap_with_hasher(
                    q,
                    foldhash::fast::RandomState::default(),
                );
                self.keyed(|k| l.check_key(k).is_ok());
            }
            (true, true, true) => {
                let state = governor::state::keyed::DashMapStateStore::with_hasher(
                    foldhash::fast::RandomState::default(),
                );
                let l: governor::RateLimiter<u64, _, _, governor::middleware::NoOpMiddleware<_>> =
                    governor::RateLimiter::new(q, state, FakeRelativeClock::default());
                self.keyed(|k| l.check_key(k).is_ok());
            }
        }
    }

    fn ours<A: RemoteForm, C: Clock>(&mut self, algorithm: A, clock: C) {
        if self.keys.is_some() {
            let limiter = Keyed::builder(algorithm)
                .clock(clock)
                .keys()
                .max_keys(4_000_000)
                .build();
            if self.lean {
                self.keyed(|k| limiter.check_key_lean(k, 1).is_ok_and(|v| v.allowed()));
            } else {
                self.keyed(|k| limiter.check_key(k, 1).is_ok_and(|d| d.allowed));
            }
        } else {
            let limiter = Direct::with_clock(algorithm, clock);
            if self.lean {
                self.ns = Some(time_threads(self.threads, self.checks, || {
                    sink(limiter.check_lean(black_box(1)).is_ok_and(|v| v.allowed()));
                }));
            } else {
                self.ns = Some(time_threads(self.threads, self.checks, || {
                    sink(limiter.check(black_box(1)));
                }));
            }
        }
    }
}

impl Visit for Run {
    fn visit<A: KnownAlgorithm>(&mut self, algorithm: A) {
        if algorithm.name() != self.wanted {
            return;
        }
        // The manual clock never moves: every check happens at the same
        // instant, which the bench quotas still admit for 10^7 checks.
        if let Some(upkeep) = self.upkeep.clone() {
            self.ours(algorithm, GovernorClock::monotonic(upkeep));
        } else if self.manual {
            self.ours(algorithm, ManualClock::starting_at(1_000_000));
        } else {
            self.ours(algorithm, SystemClock);
        }
    }
}
