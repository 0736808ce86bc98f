//! The guide by use case: the questions users bring (API quotas shared by
//! servers, a login endpoint, a client-side throttle, a cost known after the
//! response), each answered with the types to use, this run's figures where
//! the run measures them, and the tests that prove the rest. A figure the
//! run did not measure is never quoted: the answer points to a test instead.

use std::fmt::Write as _;

use ratelab::AlgorithmKind;

use crate::Results;
use crate::markdown::num;

/// Where the report's links to the sources start (the report is written to
/// `reports/`, one folder below the workspace).
const SRC: &str = "../crates";

/// A link to a test file of the workspace, `crate_dir/tests/name.rs`.
fn test(crate_dir: &str, name: &str) -> String {
    format!("[`{crate_dir}/tests/{name}.rs`]({SRC}/{crate_dir}/tests/{name}.rs)")
}

/// One use case: its question and its answer, in Markdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UseCase {
    /// The question, as a heading.
    pub question: &'static str,
    /// The answer: a few sentences.
    pub answer: String,
}

/// The four use cases, answered from `results`.
pub fn use_cases(results: &Results) -> Vec<UseCase> {
    vec![
        api_quotas(results),
        login(results),
        client_throttle(results),
        settled_cost(),
    ]
}

fn api_quotas(results: &Results) -> UseCase {
    let mut a = String::from(
        "Put the count on Redis: `RedisStore::builder(connection, Gcra::new(quota))` (crate `ratelab-redis`), one per policy, behind `RateLimitLayer` with a `Policy` each (`Policy::new(\"pro-minute\", limiter).plan(\"pro\")`); every policy that matches a request applies, and a refusal by one consumes nothing from the others (",
    );
    a += &test("http", "it/policies");
    a += ").";
    if let Some(b) = &results.load_balancer {
        let worst = b.rows.iter().map(|r| r.per_instance_memory).max();
        let shared = b
            .rows
            .iter()
            .filter_map(|r| r.shared_redis.map(|s| s.max))
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        if let Some(worst) = worst {
            let _ = write!(
                a,
                " Why Redis: with {} instances behind a balancer, a count in each one's memory admitted {worst} requests for a limit of {}",
                b.instances, b.limit
            );
            match shared {
                Some(s) => {
                    let _ = write!(a, ", one count on Redis at most {}", num(s, 0));
                }
                None => a += " (the shared-Redis rows were skipped in this run)",
            }
            a += " [Load balancer].";
        }
    }
    a += " Per-minute and per-day windows: two policies on the same key, e.g. `Quota::per_minute(600)` and `Quota::new(100_000, Duration::from_secs(86_400))` (periods up to 35 years are exact).";
    if let Some(w) = &results.window_edge
        && let Some(fixed) = w
            .rows
            .iter()
            .find(|r| r.algorithm == AlgorithmKind::FixedWindow.name() && r.backend == "memory")
    {
        let _ = write!(
            a,
            " `FixedWindow` counts in windows with fixed edges, and either side of an edge it admitted {} for a limit of {} [Window edge]: a daily fixed window can let a client spend two days' quota within minutes of an edge.",
            fixed.total, w.limit
        );
    }
    if let Some(t) = &results.traffic
        && let Some(g) = t
            .outcomes
            .iter()
            .find(|o| o.algorithm == AlgorithmKind::Gcra.name())
    {
        let _ = write!(
            a,
            " `Gcra` and `TokenBucket` have no edge but admit up to burst + rate over any span (worst client {} in a trailing second for a limit of {} [Realistic traffic]); `SlidingCounter` approximates a trailing window in constant memory; `SlidingLog` is exact but keeps every admission in the window, too much for 100,000 a day.",
            g.max_in_window, t.limit
        );
    }
    a += " The module or the scripts: `RedisLimiter` uses the native module where the server loaded it and the Lua scripts otherwise (`ScriptBackend::Auto`); both decide alike, decision for decision (";
    a += &test("tests", "redis/redis_module");
    a += ").";
    if let Some(c) = &results.cost {
        let pick = |backend: &str| {
            c.backends
                .iter()
                .find(|b| b.algorithm == AlgorithmKind::Gcra.name() && b.backend == backend)
                .and_then(|b| b.server_us_hot)
        };
        match (pick("Lua script"), pick("native module"), &c.bench) {
            (Some(lua), Some(module), Some(bench)) => {
                let _ = write!(
                    a,
                    " GCRA took {} µs of server time per call through the module against {} µs through the script on a hot key [Cost; from `just bench` at commit {}{}].",
                    num(module, 2),
                    num(lua, 2),
                    bench.commit,
                    if bench.is_this_commit {
                        ""
                    } else {
                        ", not this run's"
                    }
                );
            }
            _ => {
                a += " This run did not measure the module against the scripts (`just bench` does; `just compare` then shows it).";
            }
        }
    }
    if let Some(o) = &results.outage
        && let Some(w) = o.runs.iter().find(|r| !r.opened_ms.is_empty())
    {
        let _ = write!(
            a,
            " When Redis stalls, keep the breaker (`.breaker(threshold, cool_down)`) and choose per policy whether to pass or refuse (`Policy::fail_open` / `fail_closed`, {}): with it, {} of {} checks during a {} ms stall answered within 1 ms [Redis outage; one stall, not repeated].",
            test("http", "failure"),
            w.stall_fast,
            w.stall_checks,
            num(o.stall_ms.1 - o.stall_ms.0, 0)
        );
    }
    UseCase {
        question: "Per-customer API quotas on several servers (plans, per-minute and per-day windows, module or scripts)",
        answer: a,
    }
}

fn login(results: &Results) -> UseCase {
    let mut a = format!(
        "Use `LoginGuard` (crate `ratelab-http`): `LoginGuard::builder(secret).per_network(policy).per_account(policy)`. It counts failed attempts only (`Count::Failures`: a good password costs nothing), per account and client network (an IPv6 /64 is one network) and per account from all networks, and fails closed (`FailureMode::Closed`): when the limiter is down, attempts are refused rather than let through unlimited. A browser that logged in before carries a signed device cookie and is limited on its own, so attackers guessing an account never lock its owner out: the owner kept logging in while 10 and 100 networks guessed, in memory ({}) and on Redis ({}); this run does not measure it.",
        test("http", "it/login_guard"),
        test("http", "it/login_guard_redis")
    );
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
            let _ = write!(
                a,
                " In memory, addresses are keys anyone can mint: keep the default `FloodPolicy` (the sketch), which kept {} % of legitimate clients' requests under a flood of {} new keys per second against `FloodPolicy::Refuse`'s {} % [Key flood].",
                num(s.admitted_pct, 1),
                s.keys_per_sec,
                num(r.admitted_pct, 1)
            );
        }
    }
    UseCase {
        question: "A login endpoint",
        answer: a,
    }
}

fn client_throttle(results: &Results) -> UseCase {
    let mut a = format!(
        "To stay under someone else's limit (a scraper, an API client), wait for a turn instead of being refused: `BlockingThrottle::new(limiter).timeout(..)` and `throttle.call(|| ..)` in blocking code, or once with `wait_and_consume(&limiter, key, cost, timeout)` (both in `ratelab`); in async code `ratelab::throttle::Throttle::new(Arc::new(limiter), timeout)` and `throttle.run(request).await`, or `ThrottleLayer` around a tower client. A call that would wait past the timeout gives up without being sent. A throttled client stayed under a server's quota where an unthrottled one was refused ({}); waits sleep until the limiter says a retry passes ({}).",
        test("throttle", "client"),
        test("tests", "memory/wait")
    );
    if let Some(s) = &results.smoothness {
        let find = |kind: AlgorithmKind| s.outputs.iter().find(|o| o.algorithm == kind.name());
        if let (Some(q), Some(tb)) = (
            find(AlgorithmKind::LeakyQueue),
            find(AlgorithmKind::TokenBucket),
        ) {
            let _ = write!(
                a,
                " How evenly calls go out follows the limiter: in the smoothness scenario `LeakyQueue`'s output peaked at {} per second and `TokenBucket`'s at {}, for a rate of {} per second [Smoothness].",
                num(q.peak_per_sec_100ms, 0),
                num(tb.peak_per_sec_100ms, 0),
                num(s.rate_per_sec, 0)
            );
        }
    }
    UseCase {
        question: "A client-side throttle",
        answer: a,
    }
}

fn settled_cost() -> UseCase {
    let a = format!(
        "When the cost is known only after the response (LLM tokens per minute, bytes served), reserve an estimate and settle it: `let (decision, receipt) = limiter.check_with_receipt(key, estimate)?`, then `limiter.settle(receipt, actual)`; less gives the difference back, more becomes a debt the next requests wait out. Over HTTP, `Policy::settle_from_header(header)` (or `settle_with`) settles from the response ({}). The limiter decides from its own state and the receipt, never from a number the caller computed, so no order of refunds and settlements gets more than the quota, in memory ({}) and on Redis ({}). This run does not measure settling.",
        test("http", "it/settle"),
        test("tests", "memory/receipts"),
        test("tests", "redis/settle_bound")
    );
    UseCase {
        question: "A cost known only after the response",
        answer: a,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn every_test_linked_exists() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let config = crate::Config {
            scenarios: Vec::new(),
            ..crate::Config::quick(1)
        };
        let results = crate::run_blocking(&config, None).unwrap();
        for case in super::use_cases(&results) {
            for link in case.answer.split("](../crates/").skip(1) {
                let path = link.split(')').next().unwrap();
                assert!(workspace.join(path).is_file(), "{path} ({})", case.question);
            }
        }
    }
}
