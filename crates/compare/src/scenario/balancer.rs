//! The load balancer: 30 requests round-robin over 2 app instances, limit
//! 10. Each instance counting in its own memory
//! ([`crate::flawed::PerInstance`]) against both instances sharing one
//! Redis. Time is frozen, so the only difference is where the count lives.

use ratelab_core::{ManualClock, Quota};
use serde::Serialize;

use super::ScenarioName;
use crate::algorithms::{self, NAMES};
use crate::backend::Time;
use crate::flawed::PerInstance;
use crate::stats::Spread;
use crate::{CompareError, Context};

/// Requests sent.
pub const REQUESTS: usize = 30;
/// App instances behind the balancer.
pub const INSTANCES: usize = 2;
/// The frozen instant, µs: inside a window, far from its edges.
const FROZEN_AT: u64 = 1_000_500_000;

/// The quota: 10 per second.
pub fn quota() -> Quota {
    Quota::per_second(10).expect("a valid quota")
}

/// One algorithm.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The algorithm.
    pub algorithm: String,
    /// Admitted with a limiter in each instance's memory.
    pub per_instance_memory: usize,
    /// Admitted with one count on Redis shared by the instances, per repeat.
    pub shared_redis: Option<Spread>,
}

/// The scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct LoadBalancer {
    /// The limit.
    pub limit: u32,
    /// Requests sent.
    pub requests: usize,
    /// Instances.
    pub instances: usize,
    /// How the requests reach the instances.
    pub transport: String,
    /// Repeats of the Redis variant.
    pub repeats: usize,
    /// One row per algorithm.
    pub rows: Vec<Row>,
}

/// Runs the scenario.
pub async fn run(ctx: &Context<'_>) -> Result<LoadBalancer, CompareError> {
    let quota = quota();
    let redis = ctx.atomic_or_skip(ScenarioName::LoadBalancer, "the shared-Redis rows");
    let repeats = ctx.config.repeats.clamp(1, 10);
    ctx.bar.set_length(NAMES.len() as u64);
    let mut rows = Vec::new();
    for name in NAMES {
        let clock = ManualClock::starting_at(FROZEN_AT);
        let balancer = PerInstance::new(
            (0..INSTANCES)
                .map(|_| algorithms::keyed(name, quota, clock.clone()))
                .collect(),
        );
        let mut per_instance = 0;
        for _ in 0..REQUESTS {
            per_instance +=
                usize::from(ratelab_core::RateLimiter::check(&balancer, b"client", 1)?.allowed);
        }
        let shared_redis = match redis {
            Some(redis) => {
                let mut instances = Vec::new();
                for _ in 0..INSTANCES {
                    instances.push(
                        redis
                            .atomic(name, quota, &Time::Manual(clock.clone()))
                            .await?,
                    );
                }
                let mut counts = Vec::new();
                for repeat in 0..repeats {
                    let key = format!("{}:balancer:{name}:{repeat}", ctx.nonce);
                    let mut admitted = 0;
                    for i in 0..REQUESTS {
                        let instance = &instances[i % INSTANCES];
                        admitted +=
                            usize::from(instance.check_async(key.as_bytes(), 1).await?.allowed);
                    }
                    counts.push(admitted);
                }
                Some(Spread::of_counts(&counts))
            }
            None => None,
        };
        rows.push(Row {
            algorithm: name.into(),
            per_instance_memory: per_instance,
            shared_redis,
        });
        ctx.tick();
    }
    Ok(LoadBalancer {
        limit: quota.burst(),
        requests: REQUESTS,
        instances: INSTANCES,
        transport: "in-process calls (round-robin over the instances' limiters)".into(),
        repeats,
        rows,
    })
}
