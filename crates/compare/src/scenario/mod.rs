//! The scenarios. Each runs every algorithm on the same quota, in memory and
//! on Redis where it applies, and returns plain data for the report.

pub mod balancer;
pub mod concurrency;
pub mod cost;
pub mod failover;
pub mod flood;
pub mod lease;
pub mod light;
pub mod outage;
pub mod reference;
pub mod server;
pub mod settle;
pub mod smoothness;
pub mod traffic;
pub mod window_edge;

use std::sync::Arc;

use ratelab::{AsyncRateLimiter, Decision};

use crate::CompareError;

/// The scenarios, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum ScenarioName {
    /// The reference article's table: capacity 10, 5 per second; a burst of
    /// 20 simultaneous requests, 10 more one second later, the wait a
    /// refusal indicates. Every algorithm, in memory and on Redis.
    Reference,
    /// 10 per second; 10 requests at 0.95 s and 10 at 1.05 s: how many pass
    /// within 0.11 s (the fixed window's flaw). Then the same edge through
    /// ratelab-server over gRPC, on the real clock: fixed window and GCRA.
    WindowEdge,
    /// 20 simultaneous requests for a limit of 10 on a real Redis: each
    /// algorithm's atomic script against a read-then-write (GET, decide, SET)
    /// version of it; repeated, with the spread.
    Concurrency,
    /// 30 requests round-robin over 2 app instances, limit 10: a limiter in
    /// each instance's memory against one shared on Redis.
    LoadBalancer,
    /// Simulated time: hundreds of clients with Poisson arrivals, on/off
    /// bursts and a few heavy hitters. The most each algorithm admits in any
    /// trailing window, its false admissions and refusals against the exact
    /// sliding log, and how a heavy hitter and a light client fare. Also one
    /// client's burst, admitted against offered over time.
    Traffic,
    /// Simulated time: the same simulation on a light population (most
    /// clients well under the limit, as on a typical API): the sliding
    /// counter's error at the other end, beside Cloudflare's figure.
    LightTraffic,
    /// Simulated time: one bursty client; the leaky bucket queue against the
    /// token bucket (and the rest) downstream: peak output rate, spread of
    /// gaps between admitted requests, added delay.
    Smoothness,
    /// Simulated time: tokens per minute charged after the response (an
    /// LLM endpoint): estimates reserved, settled to the actual above and
    /// below, many requests in flight; tokens used against the quota, debt
    /// charged, refunds given back; the same through `ratelab-http`.
    Settle,
    /// Simulated time: 1, 4 and 16 instances leasing one hot key of a
    /// shared limiter at several offered rates: shared calls per check,
    /// over-admission against the stated bounds, under-admission.
    Leases,
    /// Time per check in memory, microseconds per call and checks per second
    /// on Redis, bytes per key in both: from the benchmark summary when
    /// present, else a short measurement of its own.
    Cost,
    /// Simulated time: a flood of distinct keys against the bounded
    /// in-memory store: a light client's admitted share and heap bytes per
    /// key slot, default sketch against `Refuse`.
    Flood,
    /// A redis-server frozen for 3 s: per-check latency before, during and
    /// after, with the circuit breaker and without.
    Outage,
    /// Real masters and replicas: what every algorithm admits beyond its
    /// bound after a failover (healthy replica, lagging replica, strict
    /// mode), the latency strict mode costs, and redis-cell beside GCRA.
    Failover,
    /// ratelab-server beside envoyproxy/ratelimit: the committed
    /// measurements of `just bench-server` and the differential test's
    /// last run (not measured by this run).
    ServerReference,
}

impl ScenarioName {
    /// Every scenario, in report order.
    pub const ALL: [ScenarioName; 14] = [
        ScenarioName::Reference,
        ScenarioName::WindowEdge,
        ScenarioName::Concurrency,
        ScenarioName::LoadBalancer,
        ScenarioName::Traffic,
        ScenarioName::LightTraffic,
        ScenarioName::Smoothness,
        ScenarioName::Settle,
        ScenarioName::Leases,
        ScenarioName::Cost,
        ScenarioName::Flood,
        ScenarioName::Outage,
        ScenarioName::Failover,
        ScenarioName::ServerReference,
    ];

    /// The name on the command line and in file names.
    pub fn slug(self) -> &'static str {
        match self {
            ScenarioName::Reference => "reference",
            ScenarioName::WindowEdge => "window-edge",
            ScenarioName::Concurrency => "concurrency",
            ScenarioName::LoadBalancer => "load-balancer",
            ScenarioName::Traffic => "traffic",
            ScenarioName::LightTraffic => "light-traffic",
            ScenarioName::Smoothness => "smoothness",
            ScenarioName::Settle => "settle",
            ScenarioName::Leases => "leases",
            ScenarioName::Cost => "cost",
            ScenarioName::Flood => "flood",
            ScenarioName::Outage => "outage",
            ScenarioName::Failover => "failover",
            ScenarioName::ServerReference => "server-vs-reference",
        }
    }

    /// The section title.
    pub fn title(self) -> &'static str {
        match self {
            ScenarioName::Reference => "Reference table",
            ScenarioName::WindowEdge => "Window edge",
            ScenarioName::Concurrency => "Concurrency",
            ScenarioName::LoadBalancer => "Load balancer",
            ScenarioName::Traffic => "Realistic traffic",
            ScenarioName::LightTraffic => "Light traffic",
            ScenarioName::Smoothness => "Smoothness",
            ScenarioName::Settle => "Settling",
            ScenarioName::Leases => "Leases",
            ScenarioName::Cost => "Cost",
            ScenarioName::Flood => "Key flood",
            ScenarioName::Outage => "Redis outage",
            ScenarioName::Failover => "Failover",
            ScenarioName::ServerReference => "ratelab-server beside envoyproxy/ratelimit",
        }
    }
}

/// Sends `n` requests for `key` at once, each on its own task (tasks wait on
/// a barrier, then all call), on the limiter of task `i % limiters.len()`;
/// returns the decisions in task order.
pub async fn release_together(
    limiters: &[Arc<dyn AsyncRateLimiter>],
    n: usize,
    key: &str,
) -> Result<Vec<Decision>, CompareError> {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let limiter = Arc::clone(&limiters[i % limiters.len()]);
        let barrier = Arc::clone(&barrier);
        let key = key.to_owned();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            limiter.check_async(key.as_bytes(), 1).await
        }));
    }
    let mut decisions = Vec::with_capacity(n);
    for task in tasks {
        let decision = task
            .await
            .map_err(|e| CompareError::Unavailable(format!("a request task failed: {e}")))??;
        decisions.push(decision);
    }
    Ok(decisions)
}

/// How many of `decisions` passed.
pub fn admitted(decisions: &[Decision]) -> usize {
    decisions.iter().filter(|d| d.allowed).count()
}

/// `work` on a tokio runtime of its own, on a thread of its own (the
/// scenarios run inside the report's runtime), its clock paused: whatever
/// the run sleeps (a queue slot's wait) passes without the run waiting it
/// out. `what` names the run in the error if it panics.
pub(crate) fn on_own_runtime<T, F>(
    what: &str,
    work: impl FnOnce() -> F + Send,
) -> Result<T, CompareError>
where
    T: Send,
    F: Future<Output = Result<T, CompareError>>,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .start_paused(true)
                    .build()
                    .map_err(|e| CompareError::Unavailable(format!("a tokio runtime: {e}")))?;
                runtime.block_on(work())
            })
            .join()
            .map_err(|_| CompareError::Unavailable(format!("the {what} run panicked")))?
    })
}
