//! Leases, on simulated time: 1, 4 and 16 instances of
//! `ratelab::lease::Leased` on one hot key of a shared limiter,
//! Poisson checks at several offered rates, each sent to an instance drawn
//! at random. The shared limiter is the algorithm in memory on the run's
//! clock (it decides as the Redis scripts do), behind a wrapper that counts
//! the calls reaching it: a plain shared limiter takes one per check.
//!
//! Over-admission: the most checks admitted in any second, against the
//! algorithm's own bound and against [`Bound::leased`]. Under-admission: a
//! refusal that the shared limiter alone would have admitted, asked of a
//! shadow limiter charged with every check the leases admitted.

pub mod report;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp};
use ratelab::lease::{LeaseConfig, Leased};
use ratelab::{
    AlgorithmKind, AsyncRateLimiter, Bound, Decision, Error, Limiter, ManualClock, Quota,
    RateLimiter, Receipt,
};
use serde::Serialize;

use super::traffic::micros;
use crate::{CompareError, Context};

const KEY: &[u8] = b"tenant-hot";
/// The interval over-admission is counted in: one second, as a closed
/// interval of 999,999 µs (a check at `t` and one at `t + 1 s` are two
/// seconds apart).
const SECOND: u64 = 999_999;

/// The setup.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setup {
    /// The hot key's quota per second (also its burst).
    pub per_second: u32,
    /// A low-rate limit, per second (also its burst), measured beside.
    pub low_per_second: u32,
    /// Offered checks per second, as multiples of the quota.
    pub offered: Vec<f64>,
    /// Instance counts.
    pub instances: Vec<usize>,
    /// Simulated seconds per row.
    pub seconds: u64,
    /// The leases' longest lifetime, µs.
    pub lifetime_micros: u64,
    /// The most units one lease holds.
    pub max_units: u32,
}

/// One (algorithm, quota, instances, offered rate).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The algorithm.
    pub algorithm: String,
    /// The quota per second.
    pub per_second: u32,
    /// Instances leasing the key.
    pub instances: usize,
    /// Checks offered per second, over all instances.
    pub offered_per_second: u64,
    /// Checks sent.
    pub checks: u64,
    /// Admitted through the leases.
    pub admitted: u64,
    /// Admitted by the plain shared limiter on the same checks.
    pub plain_admitted: u64,
    /// Calls that reached the shared limiter.
    pub shared_calls: u64,
    /// Those per check (the plain limiter: 1).
    pub calls_per_check: f64,
    /// The most admitted in any second.
    pub worst_second: u64,
    /// The algorithm's own bound for a second.
    pub own_bound: u64,
    /// [`Bound::leased`] for a second.
    pub leased_bound: u64,
    /// Refusals the shared limiter alone would have admitted.
    pub under_admitted: u64,
    /// All refusals.
    pub refused: u64,
}

impl Row {
    /// How many times fewer calls than checks.
    pub fn fewer_calls(&self) -> f64 {
        self.checks as f64 / self.shared_calls.max(1) as f64
    }

    /// Admitted beyond the algorithm's own bound in the worst second.
    pub fn beyond_own(&self) -> u64 {
        self.worst_second.saturating_sub(self.own_bound)
    }
}

/// The scenario's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Leases {
    /// The setup.
    pub setup: Setup,
    /// Every algorithm × instances × offered rate on the hot quota, then
    /// every algorithm × instances at the low-rate quota, offered its
    /// quota.
    pub rows: Vec<Row>,
}

impl Leases {
    /// The hot quota's rows.
    pub fn hot(&self) -> impl Iterator<Item = &Row> {
        self.rows
            .iter()
            .filter(|r| r.per_second == self.setup.per_second)
    }

    /// The low-rate quota's rows.
    pub fn low(&self) -> impl Iterator<Item = &Row> {
        self.rows
            .iter()
            .filter(|r| r.per_second == self.setup.low_per_second)
    }
}

/// The setup at full size or quick.
pub fn setup(quick: bool) -> Setup {
    Setup {
        per_second: 1_000,
        low_per_second: 5,
        offered: vec![0.5, 1.0, 4.0],
        instances: vec![1, 4, 16],
        seconds: if quick { 3 } else { 20 },
        lifetime_micros: 100_000,
        max_units: 1_000,
    }
}

/// The shared limiter, counting the calls that reach it.
struct Counting {
    inner: Box<dyn RateLimiter>,
    calls: Arc<AtomicU64>,
}

impl Counting {
    fn count(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }
}

impl Limiter for Counting {
    fn quota(&self) -> Quota {
        self.inner.quota()
    }
    fn algorithm_name(&self) -> &'static str {
        self.inner.algorithm_name()
    }
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    fn bound(&self) -> Bound {
        self.inner.bound()
    }
    fn refunds(&self) -> bool {
        self.inner.refunds()
    }
}

impl RateLimiter for Counting {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.count();
        self.inner.check(key, cost)
    }
    fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.count();
        self.inner.peek(key, cost)
    }
    fn check_with_receipt(
        &self,
        key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        self.count();
        self.inner.check_with_receipt(key, cost)
    }
    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        self.count();
        self.inner.settle(receipt, actual)
    }
    fn refund(&self, receipt: Receipt) -> Result<Decision, Error> {
        self.count();
        self.inner.refund(receipt)
    }
    fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.count();
        self.inner.reset(key)
    }
}

/// The checks: (instant µs, instance), Poisson at `rate` per second.
fn arrivals(rate: f64, instances: usize, seconds: u64, seed: u64) -> Vec<(u64, usize)> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x1ea5_e000);
    let gap = Exp::new(rate).expect("a positive rate");
    let end = seconds as f64;
    let mut t = gap.sample(&mut rng);
    let mut out = Vec::new();
    while t < end {
        // Two checks never share a microsecond: the order is the draw's.
        let at = micros(t).max(out.last().map_or(0, |&(at, _)| at + 1));
        out.push((at, rng.random_range(0..instances)));
        t += gap.sample(&mut rng);
    }
    out
}

/// One row.
async fn measure(
    kind: AlgorithmKind,
    per_second: u32,
    instances: usize,
    offered: f64,
    setup: &Setup,
    seed: u64,
) -> Result<Row, CompareError> {
    let quota = Quota::per_second(per_second).expect("a valid quota");
    let clock = ManualClock::new();
    let shared: Arc<dyn RateLimiter> = Arc::from(kind.keyed(quota, clock.clone()));
    let calls = Arc::new(AtomicU64::new(0));
    let config = LeaseConfig::default()
        .max_units(setup.max_units)
        .max_lifetime(std::time::Duration::from_micros(setup.lifetime_micros));
    let leases = (0..instances)
        .map(|_| {
            let counting = Counting {
                inner: Box::new(Arc::clone(&shared)),
                calls: Arc::clone(&calls),
            };
            Leased::with_clock(counting, config, clock.clone())
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CompareError::Unavailable(format!("lease config: {e}")))?;
    let plain_clock = ManualClock::new();
    let plain = kind.keyed(quota, plain_clock.clone());
    let shadow_clock = ManualClock::new();
    let shadow = kind.keyed(quota, shadow_clock.clone());
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let offered_per_second = (f64::from(per_second) * offered).round() as u64;
    let checks = arrivals(
        offered_per_second as f64,
        instances,
        setup.seconds,
        seed ^ (instances as u64) << 8 ^ offered_per_second << 16 ^ u64::from(per_second) << 40,
    );
    let (mut admitted_at, mut plain_admitted, mut under_admitted) = (Vec::new(), 0, 0);
    for &(at, instance) in &checks {
        clock.set(at);
        plain_clock.set(at);
        shadow_clock.set(at);
        let leased = &leases[instance];
        let decision = match leased.check_now(KEY, 1) {
            Some(decision) => decision?,
            None => leased.check(KEY, 1).await?,
        };
        if decision.allowed {
            admitted_at.push(at);
            shadow.check(KEY, 1)?;
        } else if shadow.peek(KEY, 1)?.allowed {
            under_admitted += 1;
        }
        plain_admitted += u64::from(plain.check(KEY, 1)?.allowed);
    }
    for leased in &leases {
        leased.release_all().await?;
    }
    let own = shared.bound();
    let shared_calls = calls.load(Ordering::Relaxed);
    let checks_sent = checks.len() as u64;
    Ok(Row {
        algorithm: kind.name().into(),
        per_second,
        instances,
        offered_per_second,
        checks: checks_sent,
        admitted: admitted_at.len() as u64,
        plain_admitted,
        shared_calls,
        calls_per_check: shared_calls as f64 / checks_sent.max(1) as f64,
        worst_second: most_within(&admitted_at, SECOND),
        own_bound: own.most_within(SECOND),
        leased_bound: own.leased(setup.lifetime_micros).most_within(SECOND),
        under_admitted,
        refused: checks_sent - admitted_at.len() as u64,
    })
}

/// The most instants of `sorted` within any closed interval of length `t`.
fn most_within(sorted: &[u64], t: u64) -> u64 {
    let (mut start, mut worst) = (0, 0);
    for (end, &at) in sorted.iter().enumerate() {
        while sorted[start] + t < at {
            start += 1;
        }
        worst = worst.max(end + 1 - start);
    }
    worst as u64
}

/// Runs the scenario.
pub fn run(ctx: &Context<'_>) -> Result<Leases, CompareError> {
    let setup = setup(ctx.config.quick);
    let per_kind = setup.instances.len() * (setup.offered.len() + 1);
    ctx.bar
        .set_length((AlgorithmKind::ALL.len() * per_kind) as u64);
    let seed = ctx.config.seed;
    let rows = super::on_own_runtime("leases", || async {
        let mut rows = Vec::new();
        for kind in AlgorithmKind::ALL {
            for &instances in &setup.instances {
                for &offered in &setup.offered {
                    rows.push(
                        measure(kind, setup.per_second, instances, offered, &setup, seed).await?,
                    );
                    ctx.tick();
                }
            }
        }
        for kind in AlgorithmKind::ALL {
            for &instances in &setup.instances {
                rows.push(measure(kind, setup.low_per_second, instances, 1.0, &setup, seed).await?);
                ctx.tick();
            }
        }
        Ok(rows)
    })?;
    Ok(Leases { setup, rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn most_within_counts_a_closed_interval() {
        assert_eq!(most_within(&[0, 10, 20, 21], 10), 2);
        assert_eq!(most_within(&[0, 10, 20, 21], 11), 3);
        assert_eq!(most_within(&[0, 11, 22], 10), 1);
        assert_eq!(most_within(&[], 10), 0);
    }

    #[test]
    fn leases_save_calls_and_stay_within_the_leased_bound() {
        let setup = Setup {
            seconds: 2,
            ..setup(true)
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for kind in AlgorithmKind::ALL {
            for instances in [1, 16] {
                let row = rt
                    .block_on(measure(kind, setup.per_second, instances, 1.0, &setup, 3))
                    .unwrap();
                assert!(row.worst_second <= row.leased_bound, "{row:?}");
                assert!(row.own_bound <= row.leased_bound, "{row:?}");
                assert!(row.admitted > 0 && row.checks > 1_000, "{row:?}");
                // Offered the quota, a lease serves several checks.
                assert!(row.fewer_calls() > 2.0, "{row:?}");
            }
        }
    }
}
