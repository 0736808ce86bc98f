//! The decision guide: one recommendation per line, each computed from the
//! results of several scenarios, and naming the section its numbers come
//! from.

use std::fmt::Write as _;

use ratelab::AlgorithmKind;

use crate::Results;
use crate::costs::{MemoryCost, MemoryCosts, and_list, ns_text};
use crate::markdown::{num, pct};

/// The decision guide: one line per recommendation, each computed from the
/// results (and naming the section its numbers come from).
pub fn guide(results: &Results) -> Vec<String> {
    let mut lines = Vec::new();
    let traffic = results.traffic.as_ref();
    let outcome = |kind: AlgorithmKind| {
        traffic.and_then(|t| t.outcomes.iter().find(|o| o.algorithm == kind.name()))
    };
    let costs = MemoryCosts::of(results);
    let cost_of = |kind: AlgorithmKind| costs.as_ref().and_then(|c| c.get(kind.name()));

    // Shared state behind a balancer.
    if let Some(b) = &results.load_balancer {
        let worst = b
            .rows
            .iter()
            .map(|r| r.per_instance_memory)
            .max()
            .unwrap_or(0);
        let shared = b
            .rows
            .iter()
            .filter_map(|r| r.shared_redis)
            .map(|s| s.max)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let limit = b.limit as usize;
        if worst > limit {
            let mut line = format!(
                "**Share the count when more than one instance serves a client.** Behind a round-robin balancer, a limiter in each instance's memory admitted {worst} of {} requests for a limit of {limit} with {} instances ({}× the limit)",
                b.requests,
                b.instances,
                num(worst as f64 / limit as f64, 2)
            );
            match shared {
                Some(s) if s <= limit as f64 => {
                    let _ = write!(
                        line,
                        "; one count on Redis admitted at most {} [Load balancer]. Use the Redis variants for several instances, memory for one.",
                        num(s, 0)
                    );
                }
                Some(s) => {
                    let _ = write!(
                        line,
                        "; one count on Redis admitted up to {} [Load balancer].",
                        num(s, 0)
                    );
                }
                None => line += " [Load balancer]; the shared-Redis rows were skipped in this run.",
            }
            lines.push(line);
        }
    }

    // Atomicity.
    if let Some(c) = &results.concurrency {
        let worst = c
            .rows
            .iter()
            .map(|r| r.read_then_write.max)
            .fold(0.0, f64::max);
        let over: usize = c
            .rows
            .iter()
            .map(|r| {
                r.read_then_write_runs
                    .iter()
                    .filter(|&&n| n > c.limit as usize)
                    .count()
            })
            .sum();
        let runs: usize = c.rows.iter().map(|r| r.read_then_write_runs.len()).sum();
        let atomic_max = c
            .rows
            .iter()
            .filter_map(|r| r.atomic.map(|a| a.max))
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        if worst > f64::from(c.limit) {
            let mut line = format!(
                "**Never read, decide and write in separate Redis commands.** With {} simultaneous requests for a limit of {}, GET-decide-SET admitted up to {} and went over the limit in {over} of {runs} runs",
                c.requests,
                c.limit,
                num(worst, 0)
            );
            match atomic_max {
                Some(a) => {
                    let _ = write!(
                        line,
                        "; the atomic scripts admitted at most {} in every run [Concurrency].",
                        num(a, 0)
                    );
                }
                None => line += " [Concurrency].",
            }
            lines.push(line);
        } else {
            lines.push(format!(
                "Read-then-write stayed within the limit in all {runs} runs of this machine [Concurrency]: the race needs more concurrency than this run produced, it is still a race."
            ));
        }
    }

    // Fixed window.
    if let Some(w) = &results.window_edge
        && let Some(fixed) = w
            .rows
            .iter()
            .find(|r| r.algorithm == AlgorithmKind::FixedWindow.name() && r.backend == "memory")
    {
        let limit = f64::from(w.limit);
        if fixed.total as f64 > limit {
            let mut line = format!(
                "**Avoid fixed-window when a burst at a window edge matters**: it admitted {} within 0.11 s for a limit of {} per second ({}×) [Window edge]",
                fixed.total,
                w.limit,
                num(fixed.total as f64 / limit, 2)
            );
            if let Some(o) = outcome(AlgorithmKind::FixedWindow) {
                let _ = write!(
                    line,
                    ", and on realistic traffic its worst client got {} in a trailing second, with {} % false admissions [Realistic traffic]",
                    o.max_in_window,
                    pct(o.false_admission_pct)
                );
            }
            if let (Some(costs), Some(fixed)) = (&costs, cost_of(AlgorithmKind::FixedWindow)) {
                line += &fixed_window_cost(costs, &fixed);
            }
            line += ".";
            lines.push(line);
        }
    }

    // Exact: sliding log.
    if let Some(o) = outcome(AlgorithmKind::SlidingLog) {
        let mut line = format!(
            "**Use sliding-log when the limit must hold in every trailing window**: {} false admissions, worst client {} for a limit of {} [Realistic traffic]",
            o.false_admissions,
            o.max_in_window,
            traffic.map_or(0, |t| t.limit)
        );
        if let (Some(costs), Some(log)) = (&costs, cost_of(AlgorithmKind::SlidingLog)) {
            let (fewest, names) = costs.fewest_bytes();
            let ratio = log.bytes / fewest.max(1.0);
            let verdict = if ratio >= 2.0 {
                "; **avoid it when keys are many**"
            } else {
                "; per key it stayed close to the cheapest in this run"
            };
            let _ = write!(
                line,
                "{verdict}: {} bytes per key against {} for {} ({}×), and its state grows with the limit [Cost: {}]",
                num(log.bytes, 0),
                num(fewest, 0),
                and_list(&names),
                num(ratio, 1),
                costs.source()
            );
        }
        line += ".";
        lines.push(line);
    }

    // Approximate: sliding counter.
    if let Some(o) = outcome(AlgorithmKind::SlidingCounter) {
        // "Nearly exact" only if the data says so.
        let verdict = if o.wrong_pct < 0.1 {
            "**Use sliding-counter for a nearly exact trailing window in O(1) memory**"
        } else {
            "**sliding-counter is an approximation: use it when O(1) memory matters more than exactness**"
        };
        let mut line = format!(
            "{verdict}. Two baselines, two figures. **Against the exact rule** (would one more, counting what the sliding counter itself admitted in the trailing second, stay within the limit?): {} % of its decisions were wrong ({} % of the light clients', {} % of the heavy hitters'; {} % false admissions, {} % false refusals), worst client {} in a trailing second [Realistic traffic]",
            pct(o.wrong_pct),
            pct(o.light.wrong_pct),
            pct(o.heavy.wrong_pct),
            pct(o.false_admission_pct),
            pct(o.false_refusal_pct),
            o.max_in_window
        );
        let light = results.light_traffic.as_ref().and_then(|l| {
            l.traffic
                .outcomes
                .iter()
                .find(|o| o.algorithm == AlgorithmKind::SlidingCounter.name())
        });
        let _ = write!(
            line,
            ". **Against the sliding log's own decisions** (the exact log run on the same arrivals; once one decision differs, the two histories differ): {} % of decisions differed on that limit-hugging traffic",
            pct(o.differs_from_log_pct)
        );
        if let Some(l) = light {
            let _ = write!(
                line,
                " and {} % on light traffic, most clients well under the limit (there {} % were wrong by the exact rule) [Light traffic]",
                pct(l.differs_from_log_pct),
                pct(l.wrong_pct)
            );
        }
        let _ = write!(
            line,
            ". Cloudflare published {} % wrongly allowed or refused for its own counter, on its own traffic",
            num(crate::scenario::light::CLOUDFLARE_WRONG_PCT, 3)
        );
        if let (Some(costs), Some(c)) = (&costs, cost_of(AlgorithmKind::SlidingCounter)) {
            let _ = write!(
                line,
                "; {} bytes per key [Cost: {}]",
                num(c.bytes, 0),
                costs.source()
            );
        }
        line += ".";
        lines.push(line);
    }

    // Bursty clients: token bucket and GCRA.
    if let (Some(tb), Some(g)) = (
        outcome(AlgorithmKind::TokenBucket),
        outcome(AlgorithmKind::Gcra),
    ) {
        let reference = results.reference.as_ref().and_then(|r| {
            r.rows.iter().find(|row| {
                row.algorithm == AlgorithmKind::TokenBucket.name() && row.backend == "memory"
            })
        });
        let mut line = String::from(
            "**Use token-bucket or gcra when clients may burst up to a capacity and then continue at the rate**",
        );
        if let Some(row) = reference {
            let _ = write!(
                line,
                ": they give the article's table ({}, {}, {}) [Reference table]",
                row.burst_admitted,
                row.later_admitted,
                row.wait_text()
            );
        }
        let same = tb.admitted == g.admitted && tb.false_admissions == g.false_admissions;
        let _ = write!(
            line,
            "; {} on realistic traffic ({} and {} admitted) [Realistic traffic]",
            if same {
                "they decided identically"
            } else {
                "they decided almost alike"
            },
            tb.admitted,
            g.admitted
        );
        let _ = write!(
            line,
            ". Within any second they admit up to burst + rate (worst client {}), so **avoid them when the contract is a hard per-window count**",
            tb.max_in_window.max(g.max_in_window)
        );
        if let (Some(costs), Some(t), Some(g)) = (
            &costs,
            cost_of(AlgorithmKind::TokenBucket),
            cost_of(AlgorithmKind::Gcra),
        ) {
            line += &pair_cost(costs, &g, &t);
        }
        line += ".";
        lines.push(line);
    }

    // The outside anchor: governor decides as ratelab gcra.
    {
        let mut parts = Vec::new();
        let mut differing = 0u64;
        if let Some(r) = &results.reference {
            for a in &r.agreement {
                differing += (a.differing + a.differing_waits) as u64;
                parts.push(format!(
                    "{}: {} of {} decisions and {} waits differ{} [Reference table]",
                    a.peer,
                    a.differing,
                    a.decisions,
                    a.differing_waits,
                    a.rounding.map_or(String::new(), |r| format!(
                        " (its whole-second waits against ratelab's exact wait {}, as it rounded in {} of {} refusals)",
                        r.text(),
                        if r.rounds_up() { r.up } else { r.down },
                        r.refusals
                    ))
                ));
            }
        }
        for (t, section) in [
            (traffic, "Realistic traffic"),
            (
                results.light_traffic.as_ref().map(|l| &l.traffic),
                "Light traffic",
            ),
        ] {
            if let Some(t) = t
                && !t.peers.is_empty()
            {
                differing += t.governor_differs_from_gcra;
                parts.push(format!(
                    "governor: {} of {} decisions differ [{section}]",
                    t.governor_differs_from_gcra, t.requests
                ));
            }
        }
        if !parts.is_empty() {
            lines.push(format!(
                "{}: at the same quota, against ratelab gcra, {}.",
                if differing == 0 {
                    "**ratelab gcra decides as its peers do**"
                } else {
                    "**ratelab gcra and a peer disagree somewhere: investigate before trusting either**"
                },
                parts.join("; ")
            ));
        }
    }

    // Leaky meter is the same policy as the token bucket.
    if let (Some(m), Some(tb)) = (
        outcome(AlgorithmKind::LeakyMeter),
        outcome(AlgorithmKind::TokenBucket),
    ) && m.admitted == tb.admitted
        && m.false_admissions == tb.false_admissions
        && m.false_refusals == tb.false_refusals
    {
        let mut line = format!(
            "leaky-meter admitted exactly what token-bucket admitted on realistic traffic ({} requests, same false admissions and refusals) [Realistic traffic]: the same policy, so choose between them by cost",
            m.admitted
        );
        if let (Some(costs), Some(lm), Some(tb)) = (
            &costs,
            cost_of(AlgorithmKind::LeakyMeter),
            cost_of(AlgorithmKind::TokenBucket),
        ) {
            line += &pair_cost(costs, &lm, &tb);
        }
        line += ".";
        lines.push(line);
    }

    // Smoothing: leaky queue.
    if let Some(s) = &results.smoothness {
        let find = |kind: AlgorithmKind| s.outputs.iter().find(|o| o.algorithm == kind.name());
        if let (Some(q), Some(tb)) = (
            find(AlgorithmKind::LeakyQueue),
            find(AlgorithmKind::TokenBucket),
        ) && q.peak_per_sec_100ms < tb.peak_per_sec_100ms
        {
            lines.push(format!(
                    "**Use leaky-queue when the service behind cannot absorb bursts**: its peak output was {} per second against {} for token-bucket (rate {} per second), and {} % of its gaps were shorter than 1/rate against {} % [Smoothness]. **Avoid it for requests that must answer at once**: admitted requests waited {} ms on average, {} ms at the 99th percentile.",
                    num(q.peak_per_sec_100ms, 0),
                    num(tb.peak_per_sec_100ms, 0),
                    num(s.rate_per_sec, 0),
                    num(q.short_gaps_pct, 1),
                    num(tb.short_gaps_pct, 1),
                    num(q.delay_mean_ms, 0),
                    num(q.delay_p99_ms, 1)
                ));
        }
    }

    // Settling a cost known after the response.
    if let Some(settle) = &results.settle
        && let (Some(best), Some(worst)) = (
            settle.outcomes.iter().min_by(|a, b| {
                a.worst_minute_tokens
                    .cmp(&b.worst_minute_tokens)
                    .then(b.actual_tokens.cmp(&a.actual_tokens))
            }),
            settle.outcomes.iter().max_by_key(|o| o.worst_minute_tokens),
        )
    {
        let quota = settle.workload.tokens_per_minute;
        lines.push(format!(
            "**For tokens settled after the response, reserve an estimate and settle it on {}**: with estimates {}–{}× the actual and up to {} requests in flight, its worst trailing minute held {} tokens for a quota of {quota} ({}×), against {} for {} ({}×), {}; debt carried past estimates was {} tokens, and {} % of what over-estimates asked back came back [Settling].",
            best.algorithm,
            num(settle.workload.estimate_factor.0, 2),
            num(settle.workload.estimate_factor.1, 2),
            best.max_in_flight,
            best.worst_minute_tokens,
            num(best.worst_minute_tokens as f64 / f64::from(quota), 2),
            worst.worst_minute_tokens,
            worst.algorithm,
            num(worst.worst_minute_tokens as f64 / f64::from(quota), 2),
            match worst.algorithm.parse::<AlgorithmKind>() {
                Ok(k) if k.debt() => "whose burst comes on top of the rate",
                Ok(AlgorithmKind::FixedWindow) => {
                    "whose window edges let two windows' worth close together"
                }
                _ => "its excess the overrun of requests admitted before their actual was known",
            },
            best.debt_charged,
            pct(100.0 * best.refund_given as f64 / best.refund_asked.max(1) as f64)
        ));
        if let Some(http) = settle
            .through_http
            .iter()
            .find(|h| h.algorithm == best.algorithm)
        {
            let differing: u64 = settle
                .through_http
                .iter()
                .map(|h| h.decisions_differing.unwrap_or_default())
                .sum();
            let last = lines.last_mut().expect("just pushed");
            last.truncate(last.len() - " [Settling].".len());
            last.push_str(&format!(
                "; over HTTP, `Policy::settle_from_header` settled from the response's header gave {} tokens in the worst minute and {} of {} given back ({} of {} decisions of all the algorithms differed from the direct run's) [Settling].",
                http.worst_minute_tokens,
                http.refund_given,
                http.refund_asked,
                differing,
                settle.offered * settle.through_http.len() as u64,
            ));
        }
    }

    if let Some(leases) = &results.leases {
        lines.push(lease_line(leases));
    }

    // Fairness.
    if let Some(t) = traffic {
        let heavy: Vec<f64> = t
            .outcomes
            .iter()
            .map(|o| o.heavy.admitted_per_sec)
            .collect();
        let light = t
            .outcomes
            .iter()
            .map(|o| (o.light.refused_pct, o.algorithm.as_str()))
            .collect::<Vec<_>>();
        let (lo, hi) = (
            heavy.iter().copied().fold(f64::INFINITY, f64::min),
            heavy.iter().copied().fold(0.0, f64::max),
        );
        let least = light.iter().copied().min_by(|a, b| a.0.total_cmp(&b.0));
        let most = light.iter().copied().max_by(|a, b| a.0.total_cmp(&b.0));
        if let (Some(least), Some(most)) = (least, most) {
            lines.push(format!(
                "Every algorithm held the heavy hitters ({} per second offered) to between {} and {} per second, for a quota of {}; light clients lost {} % of their requests with {} and {} % with {} [Realistic traffic].",
                num(t.population.heavy_rate, 0),
                num(lo, 2),
                num(hi, 2),
                t.quota,
                num(least.0, 2),
                least.1,
                num(most.0, 2),
                most.1
            ));
        }
    }

    // Key floods.
    if let Some(f) = &results.flood {
        let top = f.points.iter().map(|p| p.factor).max().unwrap_or(0);
        let find = |policy: &str| {
            f.points
                .iter()
                .find(|p| p.policy.starts_with(policy) && p.factor == top)
        };
        if let (Some(s), Some(r)) = (find("sketch"), find("refuse"))
            && top > 0
        {
            let verdict = if s.admitted_pct > r.admitted_pct {
                "**Keep the default flood policy (the sketch) for public keys such as client addresses**"
            } else {
                "**The sketch did not serve light clients better than `Refuse` in this run**"
            };
            lines.push(format!(
                "{verdict}: with {} tables' worth of new keys per second against a table of {}, light clients kept {} % of their requests with it and {} % with `FloodPolicy::Refuse`, for {} and {} heap bytes per key slot [Key flood].",
                top,
                f.max_keys,
                num(s.admitted_pct, 1),
                num(r.admitted_pct, 1),
                num(s.heap_bytes_per_slot, 0),
                num(r.heap_bytes_per_slot, 0)
            ));
        }
    }

    // Redis outages.
    if let Some(o) = &results.outage {
        let with = o.runs.iter().find(|r| !r.opened_ms.is_empty());
        let without = o.runs.iter().find(|r| r.limiter == "no breaker");
        if let (Some(w), Some(n)) = (with, without) {
            lines.push(format!(
                "**Keep the circuit breaker on for Redis limiters**: during a {} ms stall, {} of {} checks answered within 1 ms with it (it opened {} ms into the stall; 99th percentile {} ms), {} of {} without it (median {} ms, the timeout); Redis decided again {} after the thaw with it, {} without [Redis outage; one stall each way, not repeated: no spread].",
                num(o.stall_ms.1 - o.stall_ms.0, 0),
                w.stall_fast,
                w.stall_checks,
                num(w.opened_ms[0] - o.stall_ms.0, 0),
                num(w.stall_p99_ms, 1),
                n.stall_fast,
                n.stall_checks,
                num(n.stall_p50_ms, 0),
                w.recovered_after_ms.map_or("not within the run".into(), |m| format!("{} ms", num(m, 0))),
                n.recovered_after_ms.map_or("not within the run".into(), |m| format!("{} ms", num(m, 0)))
            ));
        }
    }

    // Failover.
    if let Some(f) = &results.failover
        && let [without, strict] = &f.latency[..]
    {
        use crate::scenario::failover::Case;
        lines.push(format!(
            "**With replicas, turn strict mode on (`.replicas(1, timeout)`) where admitting a lag's worth twice is not acceptable**: after a failover to a replica {} ms behind, the algorithms admitted up to {} beyond their bound ({} with a healthy replica, {} in strict mode); strict mode moved a sequential check's median from {} µs to {} µs [Failover; the counts are on a hand-moved clock, the latency over {} rounds].",
            f.lag_ms,
            f.worst(Case::Lagging),
            f.worst(Case::Healthy),
            f.worst(Case::Strict),
            num(without.p50.median, 1),
            num(strict.p50.median, 1),
            strict.p50.runs
        ));
    }

    // Which is cheapest in memory.
    if let Some(costs) = &costs {
        lines.push(cheapest(costs));
    }

    // Redis cost against memory.
    if let Some(c) = &results.cost {
        let pairs: Vec<(f64, f64, f64)> = c
            .rows
            .iter()
            .filter_map(|r| {
                Some((
                    r.memory_ns_per_check?.value,
                    r.redis_us_per_call?.value,
                    r.redis_checks_per_sec.map_or(0.0, |f| f.value),
                ))
            })
            .collect();
        if !pairs.is_empty() {
            let ns_max = pairs.iter().map(|p| p.0).fold(0.0, f64::max);
            let us_min = pairs.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
            let us_max = pairs.iter().map(|p| p.1).fold(0.0, f64::max);
            let cps_min = pairs.iter().map(|p| p.2).fold(f64::INFINITY, f64::min);
            lines.push(format!(
                "**Use memory for a single instance, Redis when instances share clients**: a Redis check took {}–{} µs per call (the medians of the {} algorithms, one task; at least {} checks per second from one connection), an in-memory one at most {} ns, {}× less [Cost].",
                num(us_min, 0),
                num(us_max, 0),
                pairs.len(),
                num(cps_min, 0),
                num(ns_max, 0),
                num(us_min * 1e3 / ns_max.max(1e-9), 0)
            ));
        }
    }
    if lines.is_empty() {
        lines.push(
            "Run more scenarios (`--scenario` was narrow): there is nothing to recommend from."
                .into(),
        );
    }
    lines
}

/// The fixed window's cost beside the cheapest: its one merit only when the
/// numbers make it one.
fn fixed_window_cost(costs: &MemoryCosts<'_>, fixed: &MemoryCost<'_>) -> String {
    let (fewest, fewest_names) = costs.fewest_bytes();
    let (_, fastest_names) = costs.fastest();
    let least_bytes = fixed.bytes <= fewest;
    let quickest = fastest_names.contains(&fixed.algorithm)
        || costs
            .get(fastest_names[0])
            .is_some_and(|f| !MemoryCosts::times_differ(fixed, &f));
    let verdict = match (least_bytes, quickest) {
        (true, true) => "Its one merit is cost",
        (false, false) => "Nor is it the cheapest",
        _ => "Its cost",
    };
    let bytes = if least_bytes {
        format!("{} bytes per key, the fewest", num(fixed.bytes, 0))
    } else {
        format!(
            "{} bytes per key against {} for {}",
            num(fixed.bytes, 0),
            num(fewest, 0),
            and_list(&fewest_names)
        )
    };
    let time = if fastest_names.contains(&fixed.algorithm) {
        format!("{} per check, the fastest", ns_text(fixed))
    } else {
        let f = costs.get(fastest_names[0]).expect("the fastest has a row");
        format!(
            "{} per check against {} for {}{}",
            ns_text(fixed),
            ns_text(&f),
            and_list(&fastest_names),
            if quickest {
                " (within each other's spread: no difference this run can tell)"
            } else {
                ""
            }
        )
    };
    format!(". {verdict}: {bytes}; {time} [Cost: {}]", costs.source())
}

/// Which of two algorithms of the same policy costs less, figure by figure.
fn pair_cost(costs: &MemoryCosts<'_>, a: &MemoryCost<'_>, b: &MemoryCost<'_>) -> String {
    let bytes = if a.bytes == b.bytes {
        format!("both keep {} bytes per key", num(a.bytes, 0))
    } else {
        let (less, more) = if a.bytes < b.bytes { (a, b) } else { (b, a) };
        format!(
            "{} keeps less per key: {} bytes against {} ({})",
            less.algorithm,
            num(less.bytes, 0),
            num(more.bytes, 0),
            more.algorithm
        )
    };
    let time = if !MemoryCosts::times_differ(a, b) {
        format!(
            "{} ({}) and {} ({}) per check, no difference this run can tell",
            ns_text(a),
            a.algorithm,
            ns_text(b),
            b.algorithm
        )
    } else {
        let (fast, slow) = if a.ns < b.ns { (a, b) } else { (b, a) };
        format!(
            "{} checks faster: {} against {} ({})",
            fast.algorithm,
            ns_text(fast),
            ns_text(slow),
            slow.algorithm
        )
    };
    format!(
        ". Between the two, {bytes}; {time} [Cost: {}]",
        costs.source()
    )
}

/// The cheapest algorithms in memory, by bytes per key and by time, and
/// how each was measured.
fn cheapest(costs: &MemoryCosts<'_>) -> String {
    let (fewest, fewest_names) = costs.fewest_bytes();
    let (most, most_names) = costs.most_bytes();
    let (_, fastest_names) = costs.fastest();
    let fastest = costs.get(fastest_names[0]).expect("the fastest has a row");
    let close: Vec<&str> = costs
        .rows
        .iter()
        .filter(|r| {
            !fastest_names.contains(&r.algorithm) && !MemoryCosts::times_differ(r, &fastest)
        })
        .map(|r| r.algorithm)
        .collect();
    let mut line = format!(
        "**When keys are many, choose by bytes per key: {} {} the fewest** ({} bytes per key; the most, {} for {}, {}× as many); the fastest check was {}'s, {}",
        and_list(&fewest_names),
        if fewest_names.len() == 1 {
            "keeps"
        } else {
            "keep"
        },
        num(fewest, 0),
        num(most, 0),
        and_list(&most_names),
        num(most / fewest.max(1.0), 1),
        and_list(&fastest_names),
        ns_text(&fastest)
    );
    if !close.is_empty() {
        let _ = write!(line, ", within the spread of {}", and_list(&close));
    }
    let _ = write!(
        line,
        " [Cost: {}; {}]. Instruction counts, which the machine's load does not move, judge CPU cost between algorithms more surely (reports/bench).",
        costs.bytes_method(),
        costs.ns_method()
    );
    line
}

/// When to lease and when not, from the leases' rows.
pub(crate) fn lease_line(leases: &crate::scenario::lease::Leases) -> String {
    use crate::scenario::lease::Row;
    let (within, all) = leases.within_leased();
    let (under, refused) = leases.under_admitted();
    let mut line = match leases.headline() {
        Some(h) => format!(
            "**Lease a hot shared key checked on many instances** (`ratelab::lease::Leased` over the Redis limiter): {} instances offered {} checks per second on a quota of {} per second sent {} calls per check to the shared limiter ({}× fewer than the plain limiter's one); gcra's worst second held {} against its own bound {} and the leased bound {}",
            h.instances,
            h.offered_per_second,
            h.per_second,
            num(h.calls_per_check, 4),
            num(h.fewer_calls(), 1),
            h.worst_second,
            h.own_bound,
            h.leased_bound,
        ),
        None => "**Leases**: the hot rows did not run".to_owned(),
    };
    let _ = write!(
        line,
        "; {within} of {all} rows of every algorithm stayed within the leased bound, and {under} of {refused} refusals were ones the shared limiter alone would have admitted [Leases]."
    );
    let low: Vec<&Row> = leases.low().collect();
    let debts_beyond = leases
        .hot()
        .filter(|r| {
            r.algorithm
                .parse::<AlgorithmKind>()
                .is_ok_and(AlgorithmKind::debt)
        })
        .map(Row::beyond_own)
        .max();
    if let Some(gcra) = low.iter().find(|r| r.algorithm == "gcra") {
        let most = low
            .iter()
            .filter(|r| r.algorithm == "gcra")
            .map(|r| r.fewer_calls())
            .fold(0.0_f64, f64::max);
        let _ = write!(
            line,
            " **Do not lease a low-rate limit**: at {} per second, gcra's leases saved at most {}× the calls while its bound for a second rose from {} to {} (+{} %)",
            gcra.per_second,
            num(most, 1),
            gcra.own_bound,
            gcra.leased_bound,
            num(
                100.0 * (gcra.leased_bound - gcra.own_bound) as f64 / gcra.own_bound.max(1) as f64,
                0
            ),
        );
        match debts_beyond {
            Some(d) if d > 0 => {
                let _ = write!(
                    line,
                    "; **nor a hard billing quota** on a debt (gcra, token bucket, leaky meter or queue): they admitted up to {d} beyond their own bound in a second on the hot key, within the rate times the lease lifetime"
                );
            }
            _ => {
                let _ = write!(
                    line,
                    "; a hard billing quota on a debt may see up to the rate times the lease lifetime beyond its own bound (none measured beyond it on the hot key this run)"
                );
            }
        }
        line.push_str(" [Leases].");
    }
    line
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use super::*;
    use crate::scenario::cost::Figure;
    use crate::stats::Spread;
    use crate::{Config, ScenarioName};

    /// One quick run of the scenarios the cost sentences read, shared.
    fn measured() -> Results {
        static RUN: OnceLock<Results> = OnceLock::new();
        RUN.get_or_init(|| {
            let config = Config {
                scenarios: vec![
                    ScenarioName::WindowEdge,
                    ScenarioName::Traffic,
                    ScenarioName::LightTraffic,
                    ScenarioName::Cost,
                ],
                ..Config::quick(5)
            };
            crate::run_blocking(&config, None).unwrap()
        })
        .clone()
    }

    /// Sets every algorithm's in-memory cost from `cost(algorithm)`:
    /// (bytes, ns, the ns spread's min and max over 5 repeats, if any),
    /// and whether the figures came from the benchmarks.
    fn with_costs(
        results: &mut Results,
        from_bench: bool,
        cost: impl Fn(&str) -> (f64, f64, Option<(f64, f64)>),
    ) {
        for row in &mut results.cost.as_mut().unwrap().rows {
            let (bytes, ns, spread) = cost(&row.algorithm);
            row.memory_bytes_per_key = Some(Figure {
                value: bytes,
                from_bench,
            });
            row.memory_ns_per_check = Some(Figure {
                value: ns,
                from_bench,
            });
            row.memory_ns_spread = spread.map(|(min, max)| Spread {
                runs: 5,
                min,
                median: ns,
                mean: ns,
                max,
                stddev: 1.0,
            });
        }
    }

    fn line<'a>(lines: &'a [String], containing: &str) -> &'a str {
        lines
            .iter()
            .find(|l| l.contains(containing))
            .unwrap_or_else(|| panic!("no line with {containing:?} in {lines:#?}"))
    }

    #[test]
    fn the_cheapest_is_the_one_the_numbers_name() {
        let mut results = measured();
        // The sliding counter cheapest, the fixed window dear.
        with_costs(&mut results, true, |a| match a {
            "sliding-counter" => (20.0, 30.0, None),
            "fixed-window" => (60.0, 70.0, None),
            "sliding-log" => (300.0, 200.0, None),
            _ => (40.0, 50.0, None),
        });
        let lines = guide(&results);
        let cheapest = line(&lines, "When keys are many");
        assert!(
            cheapest.contains("sliding-counter keeps the fewest** (20 bytes per key; the most, 300 for sliding-log, 15× as many); the fastest check was sliding-counter's, 30 ns"),
            "{cheapest}"
        );
        let fixed = line(&lines, "Avoid fixed-window");
        assert!(!fixed.contains("merit"), "{fixed}");
        assert!(
            fixed.contains("Nor is it the cheapest: 60 bytes per key against 20 for sliding-counter; 70 ns per check against 30 ns for sliding-counter"),
            "{fixed}"
        );
        let log = line(&lines, "Use sliding-log");
        assert!(
            log.contains("avoid it when keys are many**: 300 bytes per key against 20 for sliding-counter (15×)"),
            "{log}"
        );

        // Now the fixed window cheapest: the sentences follow.
        with_costs(&mut results, true, |a| match a {
            "fixed-window" => (10.0, 12.0, None),
            "sliding-log" => (15.0, 200.0, None),
            _ => (40.0, 50.0, None),
        });
        let lines = guide(&results);
        let fixed = line(&lines, "Avoid fixed-window");
        assert!(
            fixed.contains(
                "Its one merit is cost: 10 bytes per key, the fewest; 12 ns per check, the fastest"
            ),
            "{fixed}"
        );
        let log = line(&lines, "Use sliding-log");
        assert!(
            log.contains("close to the cheapest in this run: 15 bytes per key against 10 for fixed-window (1.5×)"),
            "{log}"
        );
        assert!(line(&lines, "When keys are many").contains("fixed-window keeps the fewest"));
    }

    #[test]
    fn ties_and_overlapping_spreads_are_said_as_such() {
        let mut results = measured();
        // Token bucket lighter than GCRA, its time within GCRA's spread.
        with_costs(&mut results, false, |a| match a {
            "token-bucket" => (20.0, 40.0, Some((35.0, 45.0))),
            "gcra" => (30.0, 38.0, Some((30.0, 44.0))),
            _ => (50.0, 90.0, Some((80.0, 100.0))),
        });
        let lines = guide(&results);
        let pair = line(&lines, "Use token-bucket or gcra");
        assert!(
            pair.contains("token-bucket keeps less per key: 20 bytes against 30 (gcra)"),
            "{pair}"
        );
        assert!(pair.contains("no difference this run can tell"), "{pair}");
        assert!(pair.contains("time the median of 5 repeats here"), "{pair}");
        assert!(pair.contains("bytes counted by this run"), "{pair}");
        let cheapest = line(&lines, "When keys are many");
        assert!(
            cheapest.contains("the fastest check was gcra's, 38 ns (30–44 over 5 repeats), within the spread of token-bucket"),
            "{cheapest}"
        );
        assert!(
            cheapest.contains("counted by this run's allocator"),
            "{cheapest}"
        );

        // Flipped, and apart: GCRA lighter and faster.
        with_costs(&mut results, true, |a| match a {
            "token-bucket" => (30.0, 60.0, None),
            "gcra" => (20.0, 30.0, None),
            _ => (50.0, 90.0, None),
        });
        let lines = guide(&results);
        let pair = line(&lines, "Use token-bucket or gcra");
        assert!(
            pair.contains("gcra keeps less per key: 20 bytes against 30 (token-bucket); gcra checks faster: 30 ns against 60 ns (token-bucket)"),
            "{pair}"
        );
        assert!(pair.contains("from the benchmark summary"), "{pair}");
        let cheapest = line(&lines, "When keys are many");
        assert!(cheapest.contains("gcra keeps the fewest"), "{cheapest}");
        assert!(
            cheapest.contains("one check of each of 100,000 integer keys"),
            "{cheapest}"
        );
    }

    #[test]
    fn the_sliding_counters_two_figures_keep_their_baselines() {
        let mut results = measured();
        for (wrong, differs) in [(11.1, 77.7), (77.7, 11.1)] {
            let t = results.traffic.as_mut().unwrap();
            let o = t
                .outcomes
                .iter_mut()
                .find(|o| o.algorithm == "sliding-counter")
                .unwrap();
            o.wrong_pct = wrong;
            o.differs_from_log_pct = differs;
            let lines = guide(&results);
            let counter = line(&lines, "sliding-counter is an approximation");
            assert!(
                counter.contains(&format!(
                    "stay within the limit?): {} % of its decisions were wrong",
                    pct(wrong)
                )),
                "{counter}"
            );
            assert!(
                counter.contains(&format!(
                    "the two histories differ): {} % of decisions differed",
                    pct(differs)
                )),
                "{counter}"
            );
        }
    }
}
