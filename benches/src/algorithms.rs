//! The quotas every bench runs each algorithm on (the algorithms themselves
//! are [`AlgorithmKind::ALL`]).
//!
//! **Fairness.** Each bench gives ratelab and governor the same quota, and a
//! quota under which the limiter admits (almost) every check: the admission
//! path is the one a limiter spends its life on, and it is the one that
//! writes state. The benches check this before they measure
//! ([`admitted_share`]); a limiter that refuses more than 1 % fails the bench
//! instead of being timed on its cheaper refusal path.
//!
//! - **One key** ([`Setting::OneKey`]): 1,000 per second, burst `u32::MAX`
//!   (about 4.3e9): a key hammered at ~10^8 checks per second takes over 40
//!   seconds to spend that burst, longer than any one measurement.
//! - **Many keys** ([`Setting::ManyKeys`], also Redis): 1 per second, burst
//!   1,000,000. Each key is checked far more often than once a second, so no
//!   key is ever back to full capacity between two checks: the keyed store
//!   never forgets (and re-inserts) a key during a measurement, and governor's
//!   store, which forgets nothing, sees the same set of keys.
//! - **The sliding log** keeps one entry per distinct microsecond within its
//!   window (O(limit) memory): on the quotas above its window is days long
//!   and its log would grow by gigabytes over a keyed run. With many keys it
//!   runs on 1,000 per second (a 1 s window): still every check admitted
//!   (no key sees 1,000 checks a second), the log bounded to the last second.
//!   With one key in memory it runs on the one-key quota; its log grows by
//!   one entry per microsecond of the run (tens of MB). On Redis, where a
//!   log keeps a member per unit and takes at most
//!   [`MAX_STORED_LOG_LIMIT`](ratelab::sliding_window::MAX_STORED_LOG_LIMIT)
//!   (10,000) units, one key runs on 10,000 per 25 ms
//!   ([`each_algorithm_on_redis`]): 400,000 a second, above what one
//!   connection sends, so every check is admitted and the log holds the last
//!   25 ms. It is not an O(1) algorithm, and no target compares it.

use std::num::NonZeroU32;

use ratelab::{AlgorithmKind, AlgorithmVisitor, KnownAlgorithm, Quota};

/// The algorithms' names, in [`AlgorithmKind::ALL`] order (for criterion's
/// function filters and the report's tables).
pub const NAMES: [&str; AlgorithmKind::ALL.len()] = {
    let mut names = [""; AlgorithmKind::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = AlgorithmKind::ALL[i].name();
        i += 1;
    }
    names
};

/// Whether `kind` has O(1) state and work per check (all but the sliding
/// log): those are held to "within 2x of our GCRA".
pub fn constant_time(kind: AlgorithmKind) -> bool {
    kind != AlgorithmKind::SlidingLog
}

/// Which quota a bench runs on (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// One bucket, checked as fast as the machine can.
    OneKey,
    /// Many keys (in memory or on Redis), each checked many times a second.
    ManyKeys,
}

/// The ratelab quota for `algorithm` in `setting`.
pub fn quota(setting: Setting, algorithm: AlgorithmKind) -> Quota {
    let quota = match (setting, algorithm) {
        (Setting::ManyKeys, AlgorithmKind::SlidingLog) => Quota::per_second(1_000),
        (Setting::OneKey, _) => Quota::per_second(1_000).and_then(|q| q.with_burst(u32::MAX)),
        (Setting::ManyKeys, _) => Quota::per_second(1).and_then(|q| q.with_burst(1_000_000)),
    };
    quota.expect("the bench quotas are valid")
}

/// governor's quota for `setting`: the same limit, period and burst as
/// [`quota`] gives GCRA.
pub fn governor_quota(setting: Setting) -> governor::Quota {
    let (per_second, burst) = match setting {
        Setting::OneKey => (1_000, u32::MAX),
        Setting::ManyKeys => (1, 1_000_000),
    };
    let nonzero = |n| NonZeroU32::new(n).expect("non-zero");
    governor::Quota::per_second(nonzero(per_second)).allow_burst(nonzero(burst))
}

/// Something done once per algorithm, whatever its type.
pub trait Visit {
    /// Called with each algorithm in turn, built on its quota.
    fn visit<A: KnownAlgorithm>(&mut self, algorithm: A);
}

/// The quota for `algorithm` in `setting` on Redis: [`quota`], but for the
/// sliding log on one key (see the module docs).
pub fn redis_quota(setting: Setting, algorithm: AlgorithmKind) -> Quota {
    match (setting, algorithm) {
        (Setting::OneKey, AlgorithmKind::SlidingLog) => {
            Quota::new(10_000, std::time::Duration::from_millis(25))
                .expect("the bench quotas are valid")
        }
        _ => quota(setting, algorithm),
    }
}

/// [`each_algorithm`] on the Redis quotas ([`redis_quota`]).
pub fn each_algorithm_on_redis(setting: Setting, visit: &mut impl Visit) {
    visit_each(setting, redis_quota, visit);
}

/// Calls `visit` with each algorithm, in [`AlgorithmKind::ALL`] order, each
/// on its quota for `setting`.
pub fn each_algorithm(setting: Setting, visit: &mut impl Visit) {
    visit_each(setting, quota, visit);
}

fn visit_each(
    setting: Setting,
    quota: fn(Setting, AlgorithmKind) -> Quota,
    visit: &mut impl Visit,
) {
    struct Once<'a, V>(&'a mut V);
    impl<V: Visit> AlgorithmVisitor for Once<'_, V> {
        type Output = ();
        fn visit<A: KnownAlgorithm>(self, algorithm: A) {
            self.0.visit(algorithm);
        }
    }
    for kind in AlgorithmKind::ALL {
        kind.visit(quota(setting, kind), Once(&mut *visit));
    }
}

/// The share of `checks` calls of `check` that were admitted (`Some(true)`);
/// an error (`None`) counts as a refusal.
pub fn admitted_share(checks: u32, mut check: impl FnMut() -> Option<bool>) -> f64 {
    let admitted = (0..checks).filter(|_| check() == Some(true)).count();
    admitted as f64 / f64::from(checks.max(1))
}

/// Panics unless at least 99 % of the checks were admitted: a bench that
/// would time a limiter on its refusal path is not the bench we meant.
pub fn assert_mostly_admits(what: &str, share: f64) {
    assert!(
        share >= 0.99,
        "{what}: only {:.1} % of the checks were admitted before measuring; the bench quota is \
         meant to admit nearly all of them (see ratelab_benches::algorithms)",
        share * 100.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab::{Direct, Keyed, SystemClock};

    struct Names(Vec<&'static str>);

    impl Visit for Names {
        fn visit<A: KnownAlgorithm>(&mut self, algorithm: A) {
            self.0.push(algorithm.name());
        }
    }

    #[test]
    fn every_algorithm_in_table_order() {
        for setting in [Setting::OneKey, Setting::ManyKeys] {
            let mut names = Names(Vec::new());
            each_algorithm(setting, &mut names);
            assert_eq!(names.0, NAMES);
        }
    }

    struct Admits(Setting);

    impl Visit for Admits {
        fn visit<A: KnownAlgorithm>(&mut self, algorithm: A) {
            let name = algorithm.name();
            match self.0 {
                Setting::OneKey => {
                    let limiter = Direct::new(algorithm);
                    let share =
                        admitted_share(100_000, || limiter.check(1).ok().map(|d| d.allowed));
                    assert_mostly_admits(name, share);
                }
                Setting::ManyKeys => {
                    let limiter = Keyed::typed(algorithm, SystemClock);
                    for round in 0..50 {
                        for key in 0..1_000_u64 {
                            let decision = limiter.check_key(&key, 1).unwrap();
                            assert!(decision.allowed, "{name}: key {key}, round {round}");
                        }
                    }
                    // No key is back to full capacity: nothing is forgotten.
                    limiter.sweep();
                    assert_eq!(limiter.len(), 1_000, "{name}");
                }
            }
        }
    }

    #[test]
    fn the_quotas_admit_what_the_benches_send() {
        each_algorithm(Setting::OneKey, &mut Admits(Setting::OneKey));
        each_algorithm(Setting::ManyKeys, &mut Admits(Setting::ManyKeys));
    }

    #[test]
    fn governor_admits_too() {
        let direct = governor::RateLimiter::direct(governor_quota(Setting::OneKey));
        assert_mostly_admits(
            "governor",
            admitted_share(100_000, || Some(direct.check().is_ok())),
        );
        let keyed = governor::RateLimiter::keyed(governor_quota(Setting::ManyKeys));
        for _ in 0..50 {
            for key in 0..1_000_u64 {
                assert!(keyed.check_key(&key).is_ok());
            }
        }
    }

    #[test]
    fn same_rate_and_burst_as_governor() {
        for setting in [Setting::OneKey, Setting::ManyKeys] {
            let ours = quota(setting, AlgorithmKind::Gcra);
            let theirs = governor_quota(setting);
            assert_eq!(ours.burst(), theirs.burst_size().get());
            assert_eq!(ours.emission_interval(), theirs.replenish_interval());
        }
    }
}
