//! Several leasing instances over one shared limiter, against an oracle of
//! what they admitted: whatever the order of checks, settlements, sweeps,
//! releases, instances dying with leases outstanding and clocks jumping on
//! each instance, the units admitted over all instances stay within
//! `Bound::leased(lifetime)` of the shared limiter's bound, and every unit
//! comes back to the shared limiter in the end.

use futures::executor::block_on;
use proptest::prelude::*;
use ratelab_core::{
    AsyncRateLimiter, Bound, Clock, Decision, Error, Keyed, Limiter, ManualClock, Quota,
    RateLimiter, Receipt,
};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_lease::{LeaseConfig, Leased};
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_testkit::oracle::{Admitted, Oracle};
use ratelab_testkit::props;
use ratelab_token_bucket::TokenBucket;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

type Shared = Arc<dyn RateLimiter>;

/// Where the shared clock starts: room for an instance's clock to sit
/// behind it.
const ORIGIN: u64 = 1_000_000_000_000;
const KEY: &[u8] = b"tenant";

/// An instance's own clock: the shared one plus an offset the test moves
/// (a jump forward or back on that instance alone).
#[derive(Debug, Clone)]
struct InstanceClock {
    shared: ManualClock,
    offset: Arc<AtomicU64>,
}

impl InstanceClock {
    fn new(shared: &ManualClock) -> Self {
        InstanceClock {
            shared: shared.clone(),
            offset: Arc::new(AtomicU64::new(ORIGIN)),
        }
    }

    fn jump(&self, by: i64) {
        let offset = self.offset.load(Ordering::Relaxed);
        let moved = offset
            .saturating_add_signed(by)
            .clamp(ORIGIN / 2, ORIGIN * 2);
        self.offset.store(moved, Ordering::Relaxed);
    }
}

impl Clock for InstanceClock {
    fn now_micros(&self) -> u64 {
        self.shared.now_micros() + self.offset.load(Ordering::Relaxed) - ORIGIN
    }
}

/// The shared limiter as the instances see it: counts the checks that
/// reach it (lease requests, and checks decided directly).
struct Counted {
    shared: Shared,
    checks: Arc<AtomicU64>,
}

impl Limiter for Counted {
    fn quota(&self) -> Quota {
        self.shared.quota()
    }
    fn algorithm_name(&self) -> &'static str {
        self.shared.algorithm_name()
    }
    fn backend(&self) -> &'static str {
        self.shared.backend()
    }
    fn bound(&self) -> Bound {
        self.shared.bound()
    }
    fn refunds(&self) -> bool {
        self.shared.refunds()
    }
}

impl RateLimiter for Counted {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.checks.fetch_add(1, Ordering::Relaxed);
        self.shared.check(key, cost)
    }
    fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.shared.peek(key, cost)
    }
    fn check_with_receipt(
        &self,
        key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        self.checks.fetch_add(1, Ordering::Relaxed);
        self.shared.check_with_receipt(key, cost)
    }
    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        self.shared.settle(receipt, actual)
    }
    fn reset(&self, key: &[u8]) -> Result<(), Error> {
        self.shared.reset(key)
    }
}

#[derive(Debug, Clone, Copy)]
enum Algo {
    Gcra,
    TokenBucket,
    FixedWindow,
    SlidingLog,
    SlidingCounter,
}

fn shared(algo: Algo, quota: Quota, clock: &ManualClock) -> Shared {
    let clock = clock.clone();
    match algo {
        Algo::Gcra => Arc::new(Keyed::with_clock(Gcra::new(quota), clock)),
        Algo::TokenBucket => Arc::new(Keyed::with_clock(TokenBucket::new(quota), clock)),
        Algo::FixedWindow => Arc::new(Keyed::with_clock(FixedWindow::new(quota), clock)),
        Algo::SlidingLog => Arc::new(Keyed::with_clock(SlidingLog::new(quota), clock)),
        Algo::SlidingCounter => Arc::new(Keyed::with_clock(SlidingCounter::new(quota), clock)),
    }
}

#[derive(Debug, Clone)]
enum Op {
    Check {
        instance: usize,
        cost: u32,
        receipt: bool,
    },
    Settle {
        pick: usize,
        actual: u32,
    },
    Advance(u64),
    Jump {
        instance: usize,
        by: i64,
    },
    SettleExpired {
        instance: usize,
    },
    Release {
        instance: usize,
    },
    Die {
        instance: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (0..4usize, 1..=3u32, any::<bool>())
            .prop_map(|(instance, cost, receipt)| Op::Check { instance, cost, receipt }),
        3 => (any::<usize>(), 0..=5u32).prop_map(|(pick, actual)| Op::Settle { pick, actual }),
        4 => (0..400_000u64).prop_map(Op::Advance),
        1 => (0..4usize, -300_000..300_000i64).prop_map(|(instance, by)| Op::Jump { instance, by }),
        1 => (0..4usize).prop_map(|instance| Op::SettleExpired { instance }),
        1 => (0..4usize).prop_map(|instance| Op::Release { instance }),
        1 => (0..4usize).prop_map(|instance| Op::Die { instance }),
    ]
}

fn algo() -> impl Strategy<Value = Algo> {
    prop_oneof![
        Just(Algo::Gcra),
        Just(Algo::TokenBucket),
        Just(Algo::FixedWindow),
        Just(Algo::SlidingLog),
        Just(Algo::SlidingCounter),
    ]
}

fn config() -> impl Strategy<Value = LeaseConfig> {
    (1..=40u32, 1..=1_500_000u64, 1..=100u8, 2..=8u32).prop_map(|(units, life, share, growth)| {
        LeaseConfig::default()
            .max_units(units)
            .max_lifetime(Duration::from_micros(life))
            .share_percent(share)
            .growth(growth)
            .max_keys(4)
    })
}

struct Instance {
    leased: Leased<Shared>,
    clock: InstanceClock,
}

/// An admission the oracle counts, and what it still counts for.
struct Outstanding {
    instance: usize,
    incarnation: u64,
    receipt: Receipt,
    admitted: usize,
}

struct World {
    clock: ManualClock,
    shared: Shared,
    /// Checks that reached the shared limiter.
    checks: Arc<AtomicU64>,
    config: LeaseConfig,
    instances: Vec<Instance>,
    incarnations: Vec<u64>,
    admitted: Vec<Admitted>,
    outstanding: Vec<Outstanding>,
}

impl World {
    fn new(algo: Algo, quota: Quota, config: LeaseConfig, instances: usize) -> Self {
        let clock = ManualClock::starting_at(ORIGIN);
        let shared = shared(algo, quota, &clock);
        let mut world = World {
            clock,
            shared,
            checks: Arc::new(AtomicU64::new(0)),
            config,
            instances: Vec::new(),
            incarnations: vec![0; instances],
            admitted: Vec::new(),
            outstanding: Vec::new(),
        };
        world.instances = (0..instances).map(|_| world.instance()).collect();
        world
    }

    fn instance(&self) -> Instance {
        let clock = InstanceClock::new(&self.clock);
        let counted: Shared = Arc::new(Counted {
            shared: Arc::clone(&self.shared),
            checks: Arc::clone(&self.checks),
        });
        let leased =
            Leased::with_clock(counted, self.config, clock.clone()).expect("a valid config");
        Instance { leased, clock }
    }

    fn run(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let n = self.instances.len();
        match *op {
            Op::Check {
                instance,
                cost,
                receipt,
            } => {
                let i = instance % n;
                let leased = &self.instances[i].leased;
                let capacity = self.shared.bound().capacity();
                if u64::from(cost) > capacity {
                    let refused = block_on(leased.check(KEY, cost));
                    prop_assert!(
                        matches!(refused, Err(Error::CostTooHigh { .. })),
                        "{refused:?}"
                    );
                    return Ok(());
                }
                let checks = self.checks.load(Ordering::Relaxed);
                let (decision, got) = if receipt {
                    block_on(leased.check_with_receipt(KEY, cost))
                } else {
                    block_on(leased.check(KEY, cost)).map(|d| (d, None))
                }
                .map_err(|e| TestCaseError::fail(format!("check: {e}")))?;
                if decision.allowed {
                    self.admitted.push(Admitted {
                        at: self.clock.now_micros(),
                        units: u64::from(cost),
                    });
                    if let Some(receipt) = got {
                        self.outstanding.push(Outstanding {
                            instance: i,
                            incarnation: self.incarnations[i],
                            receipt,
                            admitted: self.admitted.len() - 1,
                        });
                    }
                } else {
                    prop_assert!(got.is_none());
                    // A refusal the shared limiter was asked for is its
                    // own refusal of this check, not of a larger lease:
                    // what a lease refuses beyond the shared limiter's is
                    // only what its cached refusals and other instances'
                    // leases hold.
                    if self.checks.load(Ordering::Relaxed) > checks {
                        let shared = self.shared.peek(KEY, cost).expect("a peek");
                        prop_assert!(
                            !shared.allowed,
                            "refused {} the shared limiter admits",
                            cost
                        );
                    }
                }
            }
            Op::Settle { pick, actual } => {
                if self.outstanding.is_empty() {
                    return Ok(());
                }
                let o = self.outstanding.swap_remove(pick % self.outstanding.len());
                if o.incarnation != self.incarnations[o.instance] {
                    // Its instance died; the new one's shared limiter sees
                    // another limiter's receipt.
                    let leased = &self.instances[o.instance].leased;
                    let foreign = block_on(leased.settle(o.receipt, actual));
                    prop_assert!(matches!(foreign, Err(Error::ForeignReceipt)), "{foreign:?}");
                    return Ok(());
                }
                let leased = &self.instances[o.instance].leased;
                let cost = o.receipt.cost();
                if u64::from(actual) > self.shared.bound().capacity() {
                    let refused = block_on(leased.settle(o.receipt, actual));
                    prop_assert!(
                        matches!(refused, Err(Error::CostTooHigh { .. })),
                        "{refused:?}"
                    );
                    return Ok(());
                }
                if leased.holds(&o.receipt) && actual < cost {
                    self.admitted[o.admitted].units = u64::from(actual);
                }
                block_on(leased.settle(o.receipt, actual))
                    .map_err(|e| TestCaseError::fail(format!("settle: {e}")))?;
            }
            Op::Advance(micros) => self.clock.advance(Duration::from_micros(micros)),
            Op::Jump { instance, by } => {
                // A busy instance reads its clock right before it jumps
                // (a jump back between readings cannot be told from a slow
                // clock: see the crate docs).
                let instance = &self.instances[instance % n];
                let _ = instance.leased.check_now(KEY, 0);
                instance.clock.jump(by);
            }
            Op::SettleExpired { instance } => {
                block_on(self.instances[instance % n].leased.settle_expired())
                    .map_err(|e| TestCaseError::fail(format!("settle_expired: {e}")))?;
            }
            Op::Release { instance } => {
                block_on(self.instances[instance % n].leased.release_all())
                    .map_err(|e| TestCaseError::fail(format!("release_all: {e}")))?;
            }
            Op::Die { instance } => {
                let i = instance % n;
                self.instances[i] = self.instance();
                self.incarnations[i] += 1;
            }
        }
        Ok(())
    }

    /// The units kept, in time order.
    fn kept(&self) -> Vec<Admitted> {
        self.admitted
            .iter()
            .copied()
            .filter(|a| a.units > 0)
            .collect()
    }
}

/// The most kept in one aligned window of `window` µs.
fn most_in_an_aligned_window(admitted: &[Admitted], window: u64) -> u64 {
    let mut most = 0;
    let mut current = (u64::MAX, 0);
    for a in admitted {
        let index = a.at / window;
        if index != current.0 {
            current = (index, 0);
        }
        current.1 += a.units;
        most = most.max(current.1);
    }
    most
}

fn quota() -> impl Strategy<Value = Quota> {
    (2..=40u32, 1..=40u32).prop_map(|(limit, burst)| {
        Quota::per_second(limit)
            .and_then(|q| q.with_burst(burst))
            .expect("a valid quota")
    })
}

proptest! {
    #![proptest_config(props::config(256))]

    #[test]
    fn instances_leasing_one_limit_keep_the_leased_bound(
        algo in algo(),
        quota in quota(),
        config in config(),
        instances in 1..=4usize,
        ops in prop::collection::vec(op(), 1..160),
    ) {
        let mut world = World::new(algo, quota, config, instances);
        for op in &ops {
            world.run(op)?;
        }
        let lifetime = u64::try_from(config.lifetime().as_micros()).expect("at most a day");
        let own = world.shared.bound();
        let leased = own.leased(lifetime);
        prop_assert_eq!(world.instances[0].leased.bound(), leased);
        let kept = world.kept();
        if let Some(v) = leased.violation(&kept) {
            return Err(TestCaseError::fail(format!("{algo:?} {own:?} leased for {lifetime} µs: {v}")));
        }
        if let Bound::AlignedWindow { limit, window } | Bound::WeightedWindows { limit, window, .. } = own {
            let most = most_in_an_aligned_window(&kept, window);
            prop_assert!(most <= limit, "{:?}: {} in one window of {}", algo, most, limit);
        }

        // Every unit comes back: the live instances release, the dead
        // ones' units are the shared limiter's to give back on its own.
        for instance in &world.instances {
            block_on(instance.leased.release_all()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        // Longer than any of these quotas takes to be full again (two windows
        // of a sliding counter, a burst of 40 at 2 per second).
        world.clock.advance(Duration::from_secs(100));
        let full = world.shared.check(KEY, 0).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(full.remaining, own.capacity());
    }
}
