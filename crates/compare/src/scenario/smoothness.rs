//! Smoothness downstream, on simulated time: one bursty client (on/off, 20
//! to 50 requests per second when on) through every algorithm. What the
//! service behind the limiter sees: an admitted request proceeds at once,
//! except in the leaky bucket queue, which gives it a later slot
//! (`Decision::delay`). The peak output rate and the spread of the gaps
//! between admitted requests show which algorithm shapes traffic and which
//! only polices it.

pub mod report;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp};
use ratelab::toolkit::duration_to_micros;
use ratelab::{AlgorithmKind, Quota};
use ratelab_testkit::oracle::{Admitted, max_within};
use serde::Serialize;

use super::traffic::{Arrival, poisson};
use crate::Context;
use crate::algorithms;
use crate::stats::{Spread, percentile_sorted, round};

/// The quota: 10 per second, bursts of 10.
pub fn quota() -> Quota {
    Quota::per_second(10).expect("a valid quota")
}

/// The window of the peak rate, µs.
pub const PEAK_WINDOW_MICROS: u64 = 100_000;
/// The excerpt of the output drawn in the chart, s.
pub const EXCERPT_SECS: (f64, f64) = (0.0, 20.0);
/// Bin width of the drawn output, ms.
pub const BIN_MS: u64 = 100;

/// One algorithm downstream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Output {
    /// The algorithm.
    pub algorithm: String,
    /// Requests admitted (of those offered).
    pub admitted: usize,
    /// The most admitted requests reaching the service within any 100 ms,
    /// scaled to per second.
    pub peak_per_sec_100ms: f64,
    /// The most reaching it within any second.
    pub peak_in_1s: u64,
    /// Gaps between consecutive admitted requests downstream, ms.
    pub gap_ms: Spread,
    /// The 5th percentile gap, ms.
    pub gap_p5_ms: f64,
    /// Gaps shorter than the quota's emission interval (1 / rate), % of
    /// gaps: requests closer together than the steady rate allows.
    pub short_gaps_pct: f64,
    /// Coefficient of variation of the gaps (stddev / mean): 0 is a
    /// metronome.
    pub gap_cv: f64,
    /// Added delay of admitted requests, ms: mean.
    pub delay_mean_ms: f64,
    /// Added delay, 99th percentile, ms.
    pub delay_p99_ms: f64,
    /// Added delay, largest, ms.
    pub delay_max_ms: f64,
}

/// The scenario's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Smoothness {
    /// The quota, as text.
    pub quota: String,
    /// The steady rate the quota allows, per second.
    pub rate_per_sec: f64,
    /// Simulated seconds.
    pub seconds: u64,
    /// Requests offered.
    pub offered: usize,
    /// One row per algorithm.
    pub outputs: Vec<Output>,
    /// Offered per second in each bin of the excerpt.
    pub excerpt_offered: Vec<f64>,
    /// Reaching the service per second in each bin of the excerpt, for the
    /// token bucket and the leaky bucket queue.
    pub excerpt_output: Vec<(String, Vec<f64>)>,
}

/// The bursty client's arrivals over `seconds`, µs.
pub fn arrivals(seconds: u64, seed: u64) -> Vec<u64> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5eed_5e0e);
    let end = seconds as f64;
    let on = Exp::new(1.0 / 2.0).expect("positive");
    let off = Exp::new(1.0 / 3.0).expect("positive");
    let mut out: Vec<Arrival> = Vec::new();
    let mut t = 0.0;
    let mut is_on = true;
    while t < end {
        if is_on {
            let until = (t + on.sample(&mut rng)).min(end);
            let rate = rng.random_range(20.0..50.0);
            poisson(&mut rng, rate, t, until, 0, &mut out);
            t = until;
        } else {
            t += off.sample(&mut rng);
        }
        is_on = !is_on;
    }
    out.into_iter().map(|a| a.at).collect()
}

fn output(kind: AlgorithmKind, quota: Quota, arrivals: &[u64]) -> (Output, Vec<u64>) {
    let interval_ms = quota.emission_interval_micros() as f64 / 1e3;
    let mut sim = algorithms::simulated(kind, quota, 1);
    let mut downstream = Vec::new();
    let mut delays = Vec::new();
    for &at in arrivals {
        let d = sim.decide(0, at, 1).expect("a unit cost fits");
        if d.allowed {
            let delay = duration_to_micros(d.delay());
            downstream.push(at + delay);
            delays.push(delay as f64 / 1e3);
        }
    }
    downstream.sort_unstable();
    let admitted: Vec<Admitted> = downstream
        .iter()
        .map(|&at| Admitted { at, units: 1 })
        .collect();
    let gaps: Vec<f64> = downstream
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1e3)
        .collect();
    let mut sorted_gaps = gaps.clone();
    sorted_gaps.sort_by(f64::total_cmp);
    let gap = Spread::of(&gaps);
    delays.sort_by(f64::total_cmp);
    let delay = Spread::of(&delays);
    let r = |x: f64| round(x, 3);
    let out = Output {
        algorithm: kind.name().into(),
        admitted: downstream.len(),
        peak_per_sec_100ms: max_within(&admitted, PEAK_WINDOW_MICROS) as f64
            * (1e6 / PEAK_WINDOW_MICROS as f64),
        peak_in_1s: max_within(&admitted, 1_000_000),
        gap_ms: Spread {
            runs: gap.runs,
            min: r(gap.min),
            median: r(gap.median),
            mean: r(gap.mean),
            max: r(gap.max),
            stddev: r(gap.stddev),
        },
        gap_p5_ms: r(percentile_sorted(&sorted_gaps, 5.0)),
        short_gaps_pct: r(
            100.0 * gaps.iter().filter(|&&g| g < interval_ms).count() as f64
                / gaps.len().max(1) as f64,
        ),
        gap_cv: if gap.mean > 0.0 {
            r(gap.stddev / gap.mean)
        } else {
            0.0
        },
        delay_mean_ms: r(delay.mean),
        delay_p99_ms: r(percentile_sorted(&delays, 99.0)),
        delay_max_ms: r(delay.max),
    };
    (out, downstream)
}

fn binned(times: &[u64]) -> Vec<f64> {
    let (from, to) = EXCERPT_SECS;
    let bin = BIN_MS * 1_000;
    let start = super::traffic::micros(from);
    let end = super::traffic::micros(to);
    let bins = usize::try_from((end - start).div_ceil(bin)).expect("a few bins");
    let per_sec = 1_000.0 / BIN_MS as f64;
    let mut out = vec![0.0; bins];
    for &t in times.iter().filter(|&&t| t >= start && t < end) {
        out[usize::try_from((t - start) / bin).expect("a few bins")] += per_sec;
    }
    out
}

/// Runs the scenario.
pub fn run(ctx: &Context<'_>) -> Smoothness {
    let seconds = if ctx.config.quick { 30 } else { 120 };
    ctx.bar.set_length(AlgorithmKind::ALL.len() as u64);
    simulate(seconds, ctx.config.seed, || ctx.tick())
}

/// The scenario over `seconds`, without a run context.
pub fn simulate(seconds: u64, seed: u64, tick: impl Fn()) -> Smoothness {
    let quota = quota();
    let arrivals = arrivals(seconds, seed);
    let mut outputs = Vec::new();
    let mut excerpt_output = Vec::new();
    for kind in AlgorithmKind::ALL {
        let (out, downstream) = output(kind, quota, &arrivals);
        if matches!(kind, AlgorithmKind::TokenBucket | AlgorithmKind::LeakyQueue) {
            excerpt_output.push((kind.name().to_owned(), binned(&downstream)));
        }
        outputs.push(out);
        tick();
    }
    Smoothness {
        quota: format!("{} per second, burst {}", quota.limit(), quota.burst()),
        rate_per_sec: 1e6 / quota.emission_interval_micros() as f64,
        seconds,
        offered: arrivals.len(),
        outputs,
        excerpt_offered: binned(&arrivals),
        excerpt_output,
    }
}
