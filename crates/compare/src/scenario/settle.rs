//! Settling, on simulated time: a cost known only after the response, as
//! an LLM endpoint's tokens per minute. Each request reserves an estimate
//! (`check_with_receipt`), runs for a while with others in flight, then
//! settles to the tokens it actually used (`settle`): less gives back what
//! the limiter can prove the admission still holds, more becomes debt the
//! next requests wait out. Every algorithm, in memory, on a clock moved to
//! each event, the same requests for each.

mod http;
pub mod report;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp};
use ratelab::{AlgorithmKind, ManualClock, Quota, RateLimiter, Receipt};
use serde::Serialize;

use super::traffic::micros;
use crate::{CompareError, Context};

/// The workload: one API key's requests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workload {
    /// Tokens per minute the quota allows (also the capacity).
    pub tokens_per_minute: u32,
    /// Simulated seconds.
    pub seconds: u64,
    /// Requests per second offered (Poisson).
    pub rate: f64,
    /// Tokens a response actually uses: uniform in this range.
    pub actual: (u32, u32),
    /// The estimate reserved, as a multiple of the actual: uniform in this
    /// range, so some estimates are above the actual and some below.
    pub estimate_factor: (f64, f64),
    /// Seconds from admission to the response: uniform in this range.
    pub latency_secs: (f64, f64),
}

/// One request of the workload.
#[derive(Debug, Clone, Copy)]
struct Request {
    at: u64,
    done: u64,
    estimate: u32,
    actual: u32,
}

/// One algorithm's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// The algorithm.
    pub algorithm: String,
    /// Requests admitted.
    pub admitted: u64,
    /// Tokens the admitted requests actually used.
    pub actual_tokens: u64,
    /// Those, per minute over the run.
    pub tokens_per_minute: f64,
    /// The most actual tokens admitted in any trailing minute (counted at
    /// admission).
    pub worst_minute_tokens: u64,
    /// The most requests in flight at once.
    pub max_in_flight: usize,
    /// Tokens charged beyond their estimate at settlement: the debt carried
    /// to later requests.
    pub debt_charged: u64,
    /// Tokens over-estimated, asked back at settlement.
    pub refund_asked: u64,
    /// Of those, what came back (the remaining capacity a peek saw rise).
    pub refund_given: u64,
    /// Settlements the limiter refused (none expected).
    pub settle_errors: u64,
    /// Through HTTP: the requests whose decision differs from the direct
    /// run's (none expected); empty for the direct run.
    pub decisions_differing: Option<u64>,
}

/// The scenario's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settle {
    /// The workload.
    pub workload: Workload,
    /// Requests offered.
    pub offered: u64,
    /// Requests whose estimate was below their actual, and above.
    pub under_estimated: u64,
    /// Requests whose estimate was above their actual.
    pub over_estimated: u64,
    /// One per algorithm, in [`AlgorithmKind::ALL`] order.
    pub outcomes: Vec<Outcome>,
    /// The same requests through `ratelab-http` (a real server on a
    /// loopback socket, each estimate reserved from the request and settled
    /// from the response's header), in the same order.
    pub through_http: Vec<Outcome>,
}

impl Settle {
    /// The algorithm that kept its worst minute nearest the quota without
    /// exceeding it by the most (the least worst minute), ties to the one
    /// that served more tokens; with the quota.
    pub fn best(&self) -> Option<(&Outcome, u32)> {
        self.outcomes
            .iter()
            .min_by(|a, b| {
                a.worst_minute_tokens
                    .cmp(&b.worst_minute_tokens)
                    .then(b.actual_tokens.cmp(&a.actual_tokens))
            })
            .map(|o| (o, self.workload.tokens_per_minute))
    }
}

/// The workload at full size or quick.
pub fn workload(quick: bool) -> Workload {
    Workload {
        tokens_per_minute: 20_000,
        seconds: if quick { 120 } else { 1_200 },
        rate: 1.0,
        actual: (100, 1_500),
        estimate_factor: (0.5, 2.0),
        latency_secs: (1.0, 20.0),
    }
}

fn requests(w: &Workload, seed: u64) -> Vec<Request> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5e77_1e00);
    let gap = Exp::new(w.rate).expect("a positive rate");
    let end = w.seconds as f64;
    let mut t = gap.sample(&mut rng);
    let mut out = Vec::new();
    while t < end {
        let actual = rng.random_range(w.actual.0..=w.actual.1);
        let factor = rng.random_range(w.estimate_factor.0..w.estimate_factor.1);
        // A whole token count, at most the capacity.
        let estimate = u32::try_from(micros(f64::from(actual) * factor) / 1_000_000)
            .unwrap_or(u32::MAX)
            .clamp(1, w.tokens_per_minute);
        let latency = rng.random_range(w.latency_secs.0..w.latency_secs.1);
        out.push(Request {
            at: micros(t),
            done: micros(t + latency),
            estimate,
            actual,
        });
        t += gap.sample(&mut rng);
    }
    out
}

/// One algorithm's figures as its run goes: the same for the direct run
/// and the one through HTTP.
struct Tally {
    out: Outcome,
    admitted_at: Vec<(u64, u32)>,
}

impl Tally {
    fn new(kind: AlgorithmKind) -> Self {
        Tally {
            out: Outcome {
                algorithm: kind.name().to_owned(),
                admitted: 0,
                actual_tokens: 0,
                tokens_per_minute: 0.0,
                worst_minute_tokens: 0,
                max_in_flight: 0,
                debt_charged: 0,
                refund_asked: 0,
                refund_given: 0,
                settle_errors: 0,
                decisions_differing: None,
            },
            admitted_at: Vec::new(),
        }
    }

    /// `r` admitted, `in_flight` requests in flight with it.
    fn admit(&mut self, r: &Request, in_flight: usize) {
        self.out.admitted += 1;
        self.out.actual_tokens += u64::from(r.actual);
        self.admitted_at.push((r.at, r.actual));
        self.out.max_in_flight = self.out.max_in_flight.max(in_flight);
    }

    /// `r` settled: the key's remaining capacity `before` and `after`.
    fn settled(&mut self, r: &Request, before: u64, after: u64) {
        if r.actual > r.estimate {
            self.out.debt_charged += u64::from(r.actual - r.estimate);
        } else if r.actual < r.estimate {
            self.out.refund_asked += u64::from(r.estimate - r.actual);
            self.out.refund_given += after.saturating_sub(before);
        }
    }

    fn finish(mut self, seconds: u64) -> Outcome {
        self.out.tokens_per_minute = self.out.actual_tokens as f64 * 60.0 / seconds as f64;
        self.out.worst_minute_tokens = worst_minute(&self.admitted_at);
        self.out
    }
}

/// One algorithm through the workload: admissions and settlements in time
/// order (a settlement first at the same instant); its outcome and, per
/// request, whether it was admitted.
fn simulate(
    kind: AlgorithmKind,
    quota: Quota,
    reqs: &[Request],
    seconds: u64,
) -> Result<(Outcome, Vec<bool>), CompareError> {
    const KEY: &[u8] = b"api-key";
    let clock = ManualClock::new();
    let limiter = kind.keyed(quota, clock.clone());
    // (done, index, receipt) of the requests in flight.
    let mut in_flight: Vec<(u64, usize, Receipt)> = Vec::new();
    let mut tally = Tally::new(kind);
    let mut admitted = vec![false; reqs.len()];
    let settle_until = |until: u64,
                        in_flight: &mut Vec<(u64, usize, Receipt)>,
                        tally: &mut Tally|
     -> Result<(), CompareError> {
        in_flight.sort_by_key(|f| (f.0, f.1));
        while in_flight.first().is_some_and(|f| f.0 <= until) {
            let (done, i, receipt) = in_flight.remove(0);
            clock.set(done);
            let r = reqs[i];
            let before = limiter.peek(KEY, 0)?.remaining;
            match limiter.settle(receipt, r.actual) {
                Ok(after) => tally.settled(&r, before, after.remaining),
                Err(_) => tally.out.settle_errors += 1,
            }
        }
        Ok(())
    };
    for (i, r) in reqs.iter().enumerate() {
        settle_until(r.at, &mut in_flight, &mut tally)?;
        clock.set(r.at);
        let (decision, receipt) = limiter.check_with_receipt(KEY, r.estimate)?;
        if decision.allowed {
            admitted[i] = true;
            if let Some(receipt) = receipt {
                in_flight.push((r.done, i, receipt));
            }
            tally.admit(r, in_flight.len());
        }
    }
    settle_until(u64::MAX, &mut in_flight, &mut tally)?;
    Ok((tally.finish(seconds), admitted))
}

/// The most tokens admitted in any trailing minute.
fn worst_minute(admitted: &[(u64, u32)]) -> u64 {
    const MINUTE: u64 = 60_000_000;
    let (mut start, mut sum, mut worst) = (0, 0u64, 0u64);
    for (end, &(at, tokens)) in admitted.iter().enumerate() {
        sum += u64::from(tokens);
        while admitted[start].0 + MINUTE <= at {
            sum -= u64::from(admitted[start].1);
            start += 1;
        }
        let _ = end;
        worst = worst.max(sum);
    }
    worst
}

/// Runs the scenario: every algorithm directly, then through HTTP.
pub fn run(ctx: &Context<'_>) -> Result<Settle, CompareError> {
    let w = workload(ctx.config.quick);
    let quota = Quota::per_minute(w.tokens_per_minute).expect("a valid quota");
    let reqs = requests(&w, ctx.config.seed);
    ctx.bar.set_length(2 * AlgorithmKind::ALL.len() as u64);
    let mut outcomes = Vec::new();
    let mut direct_decisions = Vec::new();
    for kind in AlgorithmKind::ALL {
        let (outcome, decisions) = simulate(kind, quota, &reqs, w.seconds)?;
        outcomes.push(outcome);
        direct_decisions.push(decisions);
        ctx.tick();
    }
    let through_http = crate::scenario::on_own_runtime("HTTP settle", || async {
        let mut through_http = Vec::new();
        for (kind, direct) in AlgorithmKind::ALL.into_iter().zip(&direct_decisions) {
            through_http.push(through_http_beside(kind, quota, &reqs, w.seconds, direct).await?);
            ctx.tick();
        }
        Ok(through_http)
    })?;
    Ok(Settle {
        offered: reqs.len() as u64,
        under_estimated: reqs.iter().filter(|r| r.estimate < r.actual).count() as u64,
        over_estimated: reqs.iter().filter(|r| r.estimate > r.actual).count() as u64,
        workload: w,
        outcomes,
        through_http,
    })
}

/// `kind` through HTTP, with how many of its decisions differ from
/// `direct`'s.
async fn through_http_beside(
    kind: AlgorithmKind,
    quota: Quota,
    reqs: &[Request],
    seconds: u64,
    direct: &[bool],
) -> Result<Outcome, CompareError> {
    let (mut outcome, decisions) = http::simulate(kind, quota, reqs, seconds).await?;
    outcome.decisions_differing =
        Some(decisions.iter().zip(direct).filter(|(a, b)| a != b).count() as u64);
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_minute_slides() {
        let s = 1_000_000;
        assert_eq!(
            worst_minute(&[(0, 5), (30 * s, 7), (60 * s, 11), (61 * s, 1)]),
            19
        );
        assert_eq!(worst_minute(&[]), 0);
    }

    #[test]
    fn every_algorithm_settles_every_receipt_and_keeps_its_long_run_rate() {
        let w = workload(true);
        let quota = Quota::per_minute(w.tokens_per_minute).unwrap();
        let reqs = requests(&w, 3);
        assert!(reqs.iter().any(|r| r.estimate < r.actual));
        assert!(reqs.iter().any(|r| r.estimate > r.actual));
        for kind in AlgorithmKind::ALL {
            let (o, _) = simulate(kind, quota, &reqs, w.seconds).unwrap();
            assert_eq!(o.settle_errors, 0, "{o:?}");
            assert!(o.admitted > 0 && o.max_in_flight > 1, "{o:?}");
            assert!(o.refund_given <= o.refund_asked, "{o:?}");
            // Debt is repaid before more is admitted: over the run, the
            // tokens used stay within a capacity plus the rate, and the
            // last requests' overrun, known only after the fact.
            let minutes = w.seconds as f64 / 60.0;
            let bound = f64::from(w.tokens_per_minute) * (minutes + 2.0)
                + f64::from(w.actual.1) * o.max_in_flight as f64;
            assert!((o.actual_tokens as f64) <= bound, "{o:?}");
        }
    }

    #[test]
    fn through_http_every_algorithm_decides_and_settles_as_directly() {
        let w = Workload {
            seconds: 60,
            ..workload(true)
        };
        let quota = Quota::per_minute(w.tokens_per_minute).unwrap();
        let reqs = requests(&w, 5);
        crate::scenario::on_own_runtime("HTTP settle", || async {
            for kind in AlgorithmKind::ALL {
                let (direct, decisions) = simulate(kind, quota, &reqs, w.seconds)?;
                let (over_http, http_decisions) =
                    http::simulate(kind, quota, &reqs, w.seconds).await?;
                assert_eq!(http_decisions, decisions, "{kind:?}");
                assert!(over_http.max_in_flight > 1, "{over_http:?}");
                assert!(over_http.debt_charged > 0 && over_http.refund_asked > 0);
                assert_eq!(over_http, direct, "{kind:?}");
            }
            Ok(())
        })
        .unwrap();
    }
}
