//! Instructions per check, counted exactly by callgrind: the figure of
//! record for the CPU-bound targets. Time on this shared machine moves by a
//! third between two quiet runs; an instruction count does not move with
//! the load at all.
//!
//! **How a figure is counted.** Each case runs in a process of its own,
//! this binary started again under `valgrind --tool=callgrind
//! --collect-atstart=no --toggle-collect=*counted*`: only instructions
//! executed inside [`counted`] (the check itself, inlined there, and what
//! it calls) are counted; building the limiter, filling it, stepping the
//! clock and choosing the next key are not. The case makes N checks
//! (warming up), then N, then 2N, callgrind dumping its counts at the end
//! of each phase; the figure is (count of the 2N phase - count of the N
//! phase) / N, so that whatever a phase pays once cancels. `counted` is a
//! function of its own, called once per check on both sides alike: its
//! call, return and the observation of the result (a few instructions)
//! are in every figure.
//!
//! **Terms, the same on both sides.** The same clock: a counter moved by
//! hand, each library's own (ratelab's `ManualClock`, in microseconds,
//! governor's `FakeRelativeClock`, in nanoseconds), both stepped together,
//! outside the count; `u64` keys; foldhash on both; cost 1 as a literal on
//! both sides (`check(1)` beside governor's `check()`), and ratelab's cost
//! as an argument (`check(black_box(1))`) beside governor's
//! `check_n(black_box(1))`.
//!
//! Groups (function `<algorithm>`, `gcra-lean` for GCRA's lean check;
//! governor's rows `gcra` (no key), `gcra-foldhash` (its DashMap store) and
//! `gcra-hashmap-foldhash` (its `HashMapStateStore`, one lock over a std
//! `HashMap`)):
//!
//! - `instructions-direct`: one key, the clock frozen, the one-key quota
//!   (1,000/s, burst `u32::MAX`): every check admitted.
//! - `instructions-keyed-100k`, `instructions-keyed-1m`: keyed steady state,
//!   the clock frozen, the keyed quota (1/s, burst 1,000,000), every key
//!   checked once before: every check finds its key and is admitted.
//! - `instructions-returning-100k`, `instructions-returning-1m`: the
//!   returning client. 1,000/s (burst 1,000), the clock stepped 1 µs
//!   before each check, the keys visited in a random order that visits
//!   each once per round: a key comes back after 100 ms (1 s at a million
//!   keys), long after the millisecond that makes it full again. The
//!   common case of a per-client limit: a client that comes back after its
//!   bucket refilled. Every check admitted.
//!
//! - `instructions-lease`: one hot byte key, the clock frozen, the one-key
//!   quota: the in-memory keyed check (backend `memory`) against a check
//!   from a lease of that same limiter (`Leased::check_now`, backend
//!   `leased`), the lease taken before the count and large enough for it.
//!
//! In test mode every case runs once, small, without valgrind; in bench
//! mode a missing valgrind fails the bench with how to install it.

use std::hint::black_box;

#[path = "../src/http_apps.rs"]
mod http_apps;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::{DashMapStateStore, HashMapStateStore};
use ratelab::lease::{LeaseConfig, Leased};
use ratelab::{
    Algorithm, AlgorithmKind, AsyncRateLimiter, Direct, Gcra, Keyed, KnownAlgorithm, ManualClock,
    Quota,
};
use ratelab_benches::algorithms::{constant_time, governor_quota, quota};
use ratelab_benches::keys::visiting_order;
use ratelab_benches::{Metric, Mode, Recorder, Row, Setting, Visit, each_algorithm};

/// The argument that makes this binary one case's child under callgrind.
const CHILD: &str = "--count-instructions";

/// Callgrind processes at once (their counts do not depend on the load).
const WORKERS: usize = 2;

/// The bound on keys tracked: above the largest key set (as the memory bench).
const MAX_KEYS: usize = 4_000_000;

const DIRECT: &str = "instructions-direct";
const KEYED_100K: &str = "instructions-keyed-100k";
const KEYED_1M: &str = "instructions-keyed-1m";
const RETURNING_100K: &str = "instructions-returning-100k";
const RETURNING_1M: &str = "instructions-returning-1m";
const HTTP_ADMITTED: &str = "instructions-http-admitted";
const HTTP_REFUSED: &str = "instructions-http-refused";
const LEASE: &str = "instructions-lease";
/// The backend of a check from a lease.
const LEASED: &str = "leased";

/// governor's rows.
const GOVERNOR: &str = "governor";
const DASHMAP: &str = "gcra-foldhash";
const HASHMAP: &str = "gcra-hashmap-foldhash";
/// GCRA's lean check, read only for `allowed`.
const LEAN: &str = "gcra-lean";
/// Our GCRA with its cost as an argument, beside governor's `check_n`.
const COST_ARGUMENT: &str = "gcra-cost-argument";
const LEAN_COST_ARGUMENT: &str = "gcra-lean-cost-argument";
const CHECK_N: &str = "gcra-check-n";

/// One figure to count: its row.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Case {
    group: &'static str,
    function: String,
    backend: &'static str,
}

impl Case {
    fn new(group: &'static str, function: &str, backend: &'static str) -> Self {
        Case {
            group,
            function: function.to_owned(),
            backend,
        }
    }

    fn id(&self) -> String {
        format!("{}/{}/{}", self.group, self.function, self.backend)
    }

    fn parse(id: &str) -> Option<Self> {
        let mut parts = id.split('/');
        let (group, function, backend) = (parts.next()?, parts.next()?, parts.next()?);
        let group = GROUPS.into_iter().find(|g| *g == group)?;
        let backend = [GOVERNOR, "memory", HTTP, LEASED]
            .into_iter()
            .find(|b| *b == backend)?;
        Some(Case::new(group, function, backend))
    }
}

const GROUPS: [&str; 8] = [
    DIRECT,
    KEYED_100K,
    KEYED_1M,
    RETURNING_100K,
    RETURNING_1M,
    HTTP_ADMITTED,
    HTTP_REFUSED,
    LEASE,
];

/// The backend of the HTTP rows; the function is the stack.
const HTTP: &str = ratelab_benches::run::HTTP_BACKEND;

/// Every case, in the order they are counted.
fn cases() -> Vec<Case> {
    let mut out = vec![
        Case::new(DIRECT, "gcra", GOVERNOR),
        Case::new(DIRECT, CHECK_N, GOVERNOR),
        Case::new(DIRECT, LEAN, "memory"),
        Case::new(DIRECT, COST_ARGUMENT, "memory"),
        Case::new(DIRECT, LEAN_COST_ARGUMENT, "memory"),
    ];
    let o1 = AlgorithmKind::ALL.into_iter().filter(|&k| constant_time(k));
    for kind in o1.clone() {
        out.push(Case::new(DIRECT, kind.name(), "memory"));
    }
    for group in [KEYED_100K, KEYED_1M] {
        out.push(Case::new(group, DASHMAP, GOVERNOR));
        out.push(Case::new(group, HASHMAP, GOVERNOR));
        out.push(Case::new(group, "gcra", "memory"));
        out.push(Case::new(group, LEAN, "memory"));
    }
    // The other O(1) algorithms, held to our GCRA.
    for kind in o1.filter(|&k| k != AlgorithmKind::Gcra) {
        out.push(Case::new(KEYED_100K, kind.name(), "memory"));
    }
    for group in [RETURNING_100K, RETURNING_1M] {
        out.push(Case::new(group, DASHMAP, GOVERNOR));
        out.push(Case::new(group, HASHMAP, GOVERNOR));
        out.push(Case::new(group, "gcra", "memory"));
        out.push(Case::new(group, LEAN, "memory"));
    }
    for group in [HTTP_ADMITTED, HTTP_REFUSED] {
        for stack in http_apps::STACKS {
            out.push(Case::new(group, stack, HTTP));
        }
    }
    out.push(Case::new(LEASE, "gcra", "memory"));
    out.push(Case::new(LEASE, "gcra", LEASED));
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == CHILD) {
        let case = args
            .get(at + 1)
            .and_then(|id| Case::parse(id))
            .expect("a case to count");
        let n: u64 = args
            .get(at + 2)
            .and_then(|n| n.parse().ok())
            .expect("a number of checks");
        run_case(&case, &Plan::counted(&case, n));
        return;
    }
    let mode = Mode::from_args();
    if mode.criterion_only() {
        return;
    }
    let wanted: Vec<Case> = cases()
        .into_iter()
        .filter(|c| mode.wants(&c.id()))
        .collect();
    if mode.is_test() {
        for case in &wanted {
            run_case(case, &Plan::test(case));
        }
        println!("instructions: {} cases ran once, small", wanted.len());
        return;
    }
    let valgrind = valgrind_version().unwrap_or_else(|why| {
        panic!(
            "the instructions bench counts with valgrind's callgrind, which did not run ({why}): \
             install valgrind (Debian/Ubuntu: apt-get install valgrind; macOS: not supported)"
        )
    });
    let mut rec = Recorder::new("instructions", &mode);
    rec.meta("valgrind", valgrind);
    let dir = std::env::temp_dir().join(format!("ratelab-instructions-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    let queue = Mutex::new(wanted.iter());
    let rows = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                loop {
                    let Some(case) = queue.lock().expect("the queue").next() else {
                        return;
                    };
                    let figure = count(case, &dir);
                    eprintln!("{}: {figure:.1} instructions per check", case.id());
                    rows.lock().expect("the rows").push((case.clone(), figure));
                }
            });
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
    let mut rows = rows.into_inner().expect("the rows");
    // In the cases' order, whichever worker finished first.
    rows.sort_by_key(|(case, _)| wanted.iter().position(|c| c == case));
    for (case, figure) in rows {
        rec.push(Row::new(
            case.group,
            &case.function,
            case.backend,
            Metric::InstructionsPerCheck,
            figure,
        ));
    }
    rec.finish();
}

/// `valgrind --version`, or why it did not run.
fn valgrind_version() -> Result<String, String> {
    let output = Command::new("valgrind")
        .arg("--version")
        .output()
        .map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(format!("exit status {}", output.status));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Counts `case` under callgrind (see the crate docs): instructions per
/// check.
fn count(case: &Case, dir: &Path) -> f64 {
    let n = Plan::checks(case);
    let slug = case.id().replace('/', "_");
    let out = dir.join(format!("{slug}.callgrind"));
    let exe = std::env::current_exe().expect("this bench's path");
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .args([
            "--collect-atstart=no",
            "--toggle-collect=*counted*",
            "--dump-before=*phase_end*",
            "--compress-strings=no",
            "--compress-pos=no",
        ])
        .arg(&exe)
        .arg(CHILD)
        .arg(case.id())
        .arg(n.to_string())
        .output()
        .expect("valgrind runs");
    assert!(
        output.status.success(),
        "{}: callgrind failed: {}",
        case.id(),
        String::from_utf8_lossy(&output.stderr)
    );
    // One dump per phase: warm-up, N, 2N (and whatever ran after, at exit).
    let phase = |i: usize| -> f64 {
        let path = PathBuf::from(format!("{}.{i}", out.display()));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {}: {e}", case.id(), path.display()));
        total_instructions(&text)
            .unwrap_or_else(|| panic!("{}: no total in {}", case.id(), path.display()))
    };
    let (single, double) = (phase(2), phase(3));
    #[allow(clippy::cast_precision_loss)]
    let n = n as f64;
    (double - single) / n
}

/// The instructions a callgrind dump counted (its `totals:` or `summary:`
/// line).
fn total_instructions(dump: &str) -> Option<f64> {
    dump.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// How many checks each phase of a case makes.
#[derive(Debug, Clone)]
struct Plan {
    /// The phases, in checks; each ends with [`phase_end`].
    phases: Vec<u64>,
    /// Keys, for the keyed groups.
    keys: usize,
}

impl Plan {
    /// N for a case under callgrind: enough checks that every key is seen
    /// (keyed), few enough that a case takes seconds.
    fn checks(case: &Case) -> u64 {
        match case.group {
            DIRECT | LEASE => 50_000,
            HTTP_ADMITTED | HTTP_REFUSED => 5_000,
            KEYED_100K | RETURNING_100K => 100_000,
            _ => 250_000,
        }
    }

    fn counted(case: &Case, n: u64) -> Self {
        Plan {
            phases: vec![n, n, 2 * n],
            keys: Self::keys(case.group, false),
        }
    }

    fn test(case: &Case) -> Self {
        Plan {
            phases: vec![3_000],
            keys: Self::keys(case.group, true),
        }
    }

    fn keys(group: &str, test: bool) -> usize {
        match (group, test) {
            (DIRECT | HTTP_ADMITTED | HTTP_REFUSED | LEASE, _) => 0,
            (_, true) => 1_000,
            (KEYED_100K | RETURNING_100K, false) => 100_000,
            _ => 1_000_000,
        }
    }
}

/// The function callgrind counts in: one check, inlined here, and the
/// observation of its whole result (in memory, as the criterion benches
/// observe it). Answers whether it was admitted.
#[inline(never)]
fn counted<R>(check: impl FnOnce() -> R, admitted: impl FnOnce(&R) -> bool) -> bool {
    let result = check();
    black_box(&result);
    admitted(&result)
}

/// Where callgrind dumps its counts: the end of a phase.
#[inline(never)]
fn phase_end(phase: usize) {
    black_box(phase);
}

/// Runs the phases of `plan`: before each check `tick` (stepping the
/// clock, or nothing), then `check` of the next key, counted. Panics
/// unless every check was admitted: a refusal is another, cheaper path.
fn phases<R>(
    case: &Case,
    plan: &Plan,
    keys: &[u64],
    tick: impl Fn(),
    check: impl Fn(u64) -> R,
    admitted: impl Fn(&R) -> bool,
) {
    let mut next = 0;
    let mut refused = 0_u64;
    for (i, &checks) in plan.phases.iter().enumerate() {
        for _ in 0..checks {
            tick();
            let key = keys.get(next).copied().unwrap_or_default();
            next += 1;
            if next >= keys.len() {
                next = 0;
            }
            if !counted(
                #[inline(always)]
                || check(key),
                #[inline(always)]
                |r| admitted(r),
            ) {
                refused += 1;
            }
        }
        phase_end(i);
    }
    assert_eq!(refused, 0, "{}: checks refused while counting", case.id());
}

/// The clock of each side: a counter moved by hand, each library's own.
struct Clocks {
    ours: ManualClock,
    governor: FakeRelativeClock,
}

impl Clocks {
    /// Both at one second: no instant is the first one.
    fn new() -> Self {
        let clocks = Clocks {
            ours: ManualClock::new(),
            governor: FakeRelativeClock::default(),
        };
        clocks.advance(Duration::from_secs(1));
        clocks
    }

    fn advance(&self, by: Duration) {
        self.ours.advance(by);
        self.governor.advance(by);
    }
}

/// Builds and runs one case.
fn run_case(case: &Case, plan: &Plan) {
    let clocks = Clocks::new();
    match case.group {
        DIRECT => direct(case, plan, &clocks),
        HTTP_ADMITTED | HTTP_REFUSED => through_http(case, plan),
        LEASE => from_a_lease(case, plan, &clocks),
        KEYED_100K | KEYED_1M => keyed(case, plan, &clocks, Setting::ManyKeys, false),
        _ => keyed(case, plan, &clocks, Setting::ManyKeys, true),
    }
}

fn direct(case: &Case, plan: &Plan, clocks: &Clocks) {
    let no_key = [0];
    let none = || {};
    match (case.backend, case.function.as_str()) {
        (GOVERNOR, "gcra") => {
            let l = governor::RateLimiter::direct_with_clock(
                governor_quota(Setting::OneKey),
                clocks.governor.clone(),
            );
            phases(case, plan, &no_key, none, |_| l.check(), Result::is_ok);
        }
        (GOVERNOR, CHECK_N) => {
            let l = governor::RateLimiter::direct_with_clock(
                governor_quota(Setting::OneKey),
                clocks.governor.clone(),
            );
            let one = NonZeroU32::MIN;
            phases(
                case,
                plan,
                &no_key,
                none,
                |_| l.check_n(black_box(one)),
                |r| matches!(r, Ok(Ok(()))),
            );
        }
        (_, LEAN | COST_ARGUMENT | LEAN_COST_ARGUMENT) => {
            let gcra = Gcra::new(quota(Setting::OneKey, AlgorithmKind::Gcra));
            let l = Direct::with_clock(gcra, clocks.ours.clone());
            if case.function == LEAN {
                phases(
                    case,
                    plan,
                    &no_key,
                    none,
                    |_| l.check_lean(1).is_ok_and(|v| v.allowed()),
                    |allowed| *allowed,
                );
            } else if case.function == LEAN_COST_ARGUMENT {
                phases(
                    case,
                    plan,
                    &no_key,
                    none,
                    |_| l.check_lean(black_box(1)).is_ok_and(|v| v.allowed()),
                    |allowed| *allowed,
                );
            } else {
                phases(
                    case,
                    plan,
                    &no_key,
                    none,
                    |_| l.check(black_box(1)),
                    |r| r.as_ref().is_ok_and(|d| d.allowed),
                );
            }
        }
        _ => each_algorithm(
            Setting::OneKey,
            &mut OneKey {
                case,
                plan,
                clock: &clocks.ours,
            },
        ),
    }
}

/// One hot byte key: the in-memory keyed check, or a check from a lease of
/// that same limiter, decided in memory with no future (`check_now`).
fn from_a_lease(case: &Case, plan: &Plan, clocks: &Clocks) {
    const TENANT: &[u8] = b"tenant-hot";
    let quota = quota(Setting::OneKey, AlgorithmKind::Gcra);
    let memory = Keyed::with_clock(Gcra::new(quota), clocks.ours.clone());
    let no_key = [0];
    if case.backend != LEASED {
        phases(
            case,
            plan,
            &no_key,
            || {},
            |_| memory.check(TENANT, 1),
            |r| r.as_ref().is_ok_and(|d| d.allowed),
        );
        return;
    }
    let counted: u64 = plan.phases.iter().sum();
    let growth = 8;
    let config = LeaseConfig::default()
        .max_units(u32::try_from(counted * u64::from(growth)).expect("a lease that fits"))
        .max_lifetime(Duration::from_secs(3_600))
        .growth(growth);
    let leased = Leased::with_clock(memory, config, clocks.ours.clone()).expect("valid settings");
    // A lease used up grows ×8 at its renewal: use each one up until the
    // next holds every counted check, then take that one.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let mut size = 0_u64;
    loop {
        let renewal = runtime.block_on(leased.check(TENANT, 1)).expect("decided");
        assert!(renewal.allowed, "the shared limiter refused a lease");
        let mut used = 1;
        if size * u64::from(growth) > counted {
            break;
        }
        while leased
            .check_now(TENANT, 1)
            .is_some_and(|d| d.is_ok_and(|d| d.allowed))
        {
            used += 1;
        }
        size = used;
    }
    phases(
        case,
        plan,
        &no_key,
        || {},
        |_| leased.check_now(TENANT, 1),
        |d| matches!(d, Some(Ok(d)) if d.allowed),
    );
}

/// Our algorithm named by the case, on one key.
struct OneKey<'a> {
    case: &'a Case,
    plan: &'a Plan,
    clock: &'a ManualClock,
}

impl Visit for OneKey<'_> {
    fn visit<A: KnownAlgorithm>(&mut self, algorithm: A) {
        if algorithm.name() != self.case.function {
            return;
        }
        let l = Direct::with_clock(algorithm, self.clock.clone());
        phases(
            self.case,
            self.plan,
            &[0],
            || {},
            |_| l.check(1),
            |r| r.as_ref().is_ok_and(|d| d.allowed),
        );
    }
}

/// The returning client's quota: 1,000 per second, burst 1,000.
fn returning_quota() -> Quota {
    Quota::per_second(1_000).expect("a valid quota")
}

fn returning_governor_quota() -> governor::Quota {
    governor::Quota::per_second(NonZeroU32::new(1_000).expect("non-zero"))
}

fn keyed(case: &Case, plan: &Plan, clocks: &Clocks, setting: Setting, returning: bool) {
    let keys = visiting_order(plan.keys);
    let gq = if returning {
        returning_governor_quota()
    } else {
        governor_quota(setting)
    };
    // Returning: one microsecond per check (every key comes back after
    // `keys` µs, long after the millisecond that refills its one unit).
    let step = || {
        if returning {
            clocks.advance(Duration::from_micros(1));
        }
    };
    // Every key tracked before counting; returning, every key is full again
    // by the first counted check.
    let settle = || {
        if returning {
            clocks.advance(Duration::from_millis(10));
        }
    };
    match (case.backend, case.function.as_str()) {
        (GOVERNOR, DASHMAP) => {
            let store = DashMapStateStore::with_hasher(foldhash::fast::RandomState::default());
            let l: governor::RateLimiter<u64, _, _, NoOpMiddleware<_>> =
                governor::RateLimiter::new(gq, store, clocks.governor.clone());
            fill(&keys, |k| l.check_key(k).is_ok());
            settle();
            phases(case, plan, &keys, step, |k| l.check_key(&k), Result::is_ok);
        }
        (GOVERNOR, HASHMAP) => {
            let store: HashMapStateStore<u64, _> = HashMapStateStore::new(
                std::collections::HashMap::with_hasher(foldhash::fast::RandomState::default()),
            );
            let l: governor::RateLimiter<u64, _, _, NoOpMiddleware<_>> =
                governor::RateLimiter::new(gq, store, clocks.governor.clone());
            fill(&keys, |k| l.check_key(k).is_ok());
            settle();
            phases(case, plan, &keys, step, |k| l.check_key(&k), Result::is_ok);
        }
        (_, "gcra" | LEAN) => {
            let q = if returning {
                returning_quota()
            } else {
                quota(setting, AlgorithmKind::Gcra)
            };
            let l = ours_keyed(Gcra::new(q), &clocks.ours);
            fill(&keys, |k| l.check_key(k, 1).is_ok_and(|d| d.allowed));
            settle();
            if case.function == LEAN {
                phases(
                    case,
                    plan,
                    &keys,
                    step,
                    |k| l.check_key_lean(&k, 1).is_ok_and(|v| v.allowed()),
                    |allowed| *allowed,
                );
            } else {
                phases(
                    case,
                    plan,
                    &keys,
                    step,
                    |k| l.check_key(&k, 1),
                    |r| r.as_ref().is_ok_and(|d| d.allowed),
                );
            }
        }
        _ => each_algorithm(
            setting,
            &mut ManyKeys {
                case,
                plan,
                clock: &clocks.ours,
                keys: &keys,
            },
        ),
    }
}

fn ours_keyed<A: Algorithm>(algorithm: A, clock: &ManualClock) -> Keyed<A, ManualClock, u64> {
    Keyed::builder(algorithm)
        .clock(clock.clone())
        .keys()
        .max_keys(MAX_KEYS)
        .build()
}

/// Checks every key once, before counting; panics on a refusal.
fn fill(keys: &[u64], check: impl Fn(&u64) -> bool) {
    for key in keys {
        assert!(check(key), "the bench quota admits");
    }
}

/// Our algorithm named by the case, keyed, frozen.
struct ManyKeys<'a> {
    case: &'a Case,
    plan: &'a Plan,
    clock: &'a ManualClock,
    keys: &'a [u64],
}

impl Visit for ManyKeys<'_> {
    fn visit<A: KnownAlgorithm>(&mut self, algorithm: A) {
        if algorithm.name() != self.case.function {
            return;
        }
        let l = ours_keyed(algorithm, self.clock);
        fill(self.keys, |k| l.check_key(k, 1).is_ok_and(|d| d.allowed));
        phases(
            self.case,
            self.plan,
            self.keys,
            || {},
            |k| l.check_key(&k, 1),
            |r| r.as_ref().is_ok_and(|d| d.allowed),
        );
    }
}

/// One request through the router of a stack (`http_apps`, the HTTP
/// bench's apps: a bare axum handler, ratelab-http, tower_governor, each as
/// it comes and as the other sends), the response's body read to its end:
/// no socket and no HTTP parsing, which cost the same behind any layer.
/// Each stack on its own default clock, as a user builds it.
fn through_http(case: &Case, plan: &Plan) {
    let path = if case.group == HTTP_ADMITTED {
        http_apps::Path::Admitted
    } else {
        http_apps::Path::Refused
    };
    let mut app = http_apps::app(path, &case.function).expect("a stack");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let want = match (path, case.function.as_str()) {
        (http_apps::Path::Refused, "axum") => http::StatusCode::OK,
        (http_apps::Path::Refused, _) => {
            // The one request the refused path's quota holds.
            rt.block_on(http_apps::exchange(&mut app));
            http::StatusCode::TOO_MANY_REQUESTS
        }
        (http_apps::Path::Admitted, _) => http::StatusCode::OK,
    };
    let app = std::cell::RefCell::new(app);
    phases(
        case,
        plan,
        &[0],
        || {},
        |_| rt.block_on(http_apps::exchange(&mut app.borrow_mut())),
        |(response, _)| response.status() == want,
    );
}
