//! Through HTTP: a bare handler, ratelab-http and tower_governor on the admitted and the refused path.

use std::fmt::Write as _;

use super::{GE, Summary, Target, cell, get, one, push_ratio, si, two};
use crate::run::Row;

/// The paths, as the groups name them and the README says them.
const PATHS: [(&str, &str); 2] = [
    ("http-admitted", "admitted (200)"),
    ("http-refused", "refused (429)"),
];

/// The stacks, as the rows name them (`backend`) and the README says them.
const STACKS: [(&str, &str); 5] = [
    ("axum", "bare axum handler"),
    ("ratelab-http", "ratelab-http"),
    ("tower-governor", "tower_governor"),
    ("ratelab-http-lean", "ratelab-http, lean"),
    ("tower-governor-headers", "tower_governor, `use_headers`"),
];

/// The pairs judged: ratelab-http's stack, tower_governor's, and what the
/// pair's terms are.
const PAIRS: [(&str, &str, &str); 3] = [
    (
        "ratelab-http",
        "tower-governor",
        "HTTP throughput: ratelab-http / tower_governor, each as it comes",
    ),
    (
        "ratelab-http",
        "tower-governor-headers",
        "HTTP throughput, equal output (rate limit fields on every response): ratelab-http / tower_governor use_headers",
    ),
    (
        "ratelab-http-lean",
        "tower-governor",
        "HTTP throughput, equal output (nothing added to an admitted request): ratelab-http lean / tower_governor",
    ),
];

/// This part's targets.
pub(super) fn targets(rows: &[Row], out: &mut Vec<Target>) {
    for (group, _) in PATHS {
        let per_sec = |backend| get(rows, group, "gcra", backend, "checks_per_sec");
        for (ours, theirs, what) in PAIRS {
            push_ratio(
                out,
                what,
                group,
                "gcra",
                per_sec(ours),
                per_sec(theirs),
                GE,
                0.95,
            );
        }
    }
}

/// This part's section of the README (empty until it has rows).
pub(super) fn section(summary: &Summary) -> String {
    let measured = PATHS
        .iter()
        .any(|(group, _)| summary.rows.iter().any(|r| r.group == *group));
    if !measured {
        return String::new();
    }
    let mut out = String::new();
    out.push_str("\n## Through HTTP\n\n");
    out.push_str(
        "The same axum handler (`GET /`, answering `hello`) bare, behind \
         ratelab-http and behind tower_governor 0.8, at equal policy: one \
         per-IP GCRA quota. Each layer as it comes, then each as the other \
         sends (equal output, below). Requests per second (from the median \
         time per request) and the ratios; higher is better.\n\n",
    );
    out.push_str(
        "| path | stack | ns per request | requests/s | / bare | / tower_governor | / its equal-output peer |\n",
    );
    out.push_str("|---|---|---:|---:|---:|---:|---:|\n");
    for (group, path) in PATHS {
        let g = |backend, metric| summary.get(group, "gcra", backend, metric);
        let bare = g("axum", "checks_per_sec");
        let governor = g("tower-governor", "checks_per_sec");
        for (backend, stack) in STACKS {
            let per_sec = g(backend, "checks_per_sec");
            let ratio = |reference: Option<f64>| per_sec.zip(reference).map(|(a, b)| a / b);
            let peer = PAIRS
                .iter()
                .skip(1)
                .find(|(ours, theirs, _)| *ours == backend || *theirs == backend)
                .map(|(ours, theirs, _)| if *ours == backend { *theirs } else { *ours })
                .and_then(|peer| g(peer, "checks_per_sec"));
            let _ = writeln!(
                out,
                "| {path} | {stack} | {} | {} | {} | {} | {} |",
                cell(g(backend, "ns_per_check"), one),
                cell(per_sec, si),
                cell(ratio(bare), two),
                cell(ratio(governor), two),
                cell(ratio(peer), two),
            );
        }
    }
    out.push('\n');
    out.push_str(TERMS);
    out.push_str(COSTS);
    out
}

/// How the HTTP figures are produced.
const TERMS: &str = "\
**Terms.** In process, one thread: each stack is an axum `Router` driven as
a tower `Service` on a current-thread tokio runtime (time enabled, as a
server's), one request at a time, each built afresh (`GET /`, no body,
`ConnectInfo<SocketAddr>` in its extensions, as
`into_make_service_with_connect_info` puts it), its response body read to
the end. No socket and no HTTP parsing, which cost the same behind either
layer: what is timed is the router, the layer and the handler. Each side on
its default clock (ratelab's `Keyed::new`, tower_governor's quanta) and
with its default headers: ratelab-http sends `RateLimit-Policy` and
`RateLimit` on every response (and `Retry-After` with an RFC 9457
problem body on a 429); tower_governor sends nothing on an admitted request
and `x-ratelimit-after` and `retry-after` on a refusal. Admitted: 1,000/s
with a burst of `u32::MAX`, never exhausted in a run. Refused: 1 per hour,
burst 1, consumed before measuring. Before timing, in every mode (`cargo
test --bench http` too), each stack's responses are checked: status, body
and headers.
";

/// What the layer cost, and what removed it.
const COSTS: &str = "
**Where ratelab-http's time went, and what removed it.** Profiled with
`perf` on this bench (`--profile-time`) and counted with a counting
allocator through the same router: the limiter's check itself was a few
percent; the rest was the layer's own work around it, on every request.

- *The `RateLimit-Policy` and `RateLimit` fields, serialized with `sfv`'s
  `ListSerializer` on every response* (about a sixth of the time: its
  formatting machinery for each Integer, a `String` and a copy per field).
  Each policy's item is now serialized once with `sfv` when the layer is
  built; a response writes only separators, the quoted name, `;r=`/`;t=`
  and digits into a stack buffer, and a request under one policy shares
  its `RateLimit-Policy` value. A unit test holds the bytes equal to
  `sfv`'s for names and integers up to the clamp.
- *The metrics*: each `counter!`/`histogram!` with a `policy` label built
  a label list and cloned the policy's name on every call, whether or not
  a recorder was installed. The keys are now built once per policy
  (static ones for the request outcome).
- *A tokio timer per limiter call* (`timeout_at`: a timer entry and a
  runtime handle) for a limiter that had answered already. The call is now
  polled once first: an in-memory limiter has answered and no timer is set
  up; a pending one (Redis) is bounded by the policy's timeout as before.
- *`join_all` and index lists for a single policy*, and a list of checks
  copied into the engine's own: one policy is now asked directly, and the
  checks go to the engine as an iterator.
- *The client's identity*: the address formatted twice through `fmt` (the
  id, then `ip:` and the id), then the client cloned, three `String`s, into
  `RateLimitInfo`. The key is now written once (an IPv4 address by hand)
  into a shared string: a clone is a reference count. The limiter key
  (`<policy>:<client key>`) is built in place, not on the heap.

- *The boxed response future* (about 1.2 KB, moved on every request): a
  limiter that answers at once (every in-memory one) is now decided in
  `Service::call` itself, and the inner service's future is held in place
  rather than boxed with the decision. This measured no gain: axum boxes a
  layer's future anyway (`Router::layer`), so the 1.2 KB box became axum's
  448-byte box of a larger future, and the decision keeps one box of its
  own so that a pending (Redis) decision can outlive `call()`.

Allocations per request through the router, admitted: 52 before, 29 after
(the bare handler 16, tower_governor 20); refused: 61 before, 38 after
(tower_governor 25). What is left: the decision's boxed call (the
limiter's `AsyncRateLimiter::check_async`), the
`Client` and `RateLimitInfo` request extensions the layer promises to
handlers (two boxes, and the extension map grows past its first size),
`RateLimitInfo`'s list of policy statuses, the `RateLimit` value, and on a
refusal the problem body. Per request, over the bare handler, ratelab-http
adds about 1,200 ns and tower_governor about 260 ns (a profile on a loaded
machine): the engine's async steps, the boxed check and the latency
metric's two clock reads about 230 ns (the GCRA check itself about 65),
the `RateLimit` field and its two headers about 215, the request
extensions about 200, identifying the client about 100. Most of it is
what the layer promises and tower_governor does not do: the `RateLimit`
header on every admitted response, `Client` and `RateLimitInfo` for the
handler, metrics. Closing the rest needs an in-memory check without a box
(`check_async` in ratelab-core) or those promises made opt-in.
";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Metric;

    fn rows(ratelab: f64, governor: f64) -> Vec<Row> {
        let mut rows = Vec::new();
        for (group, _) in PATHS {
            for (backend, per_sec) in [
                ("axum", 1e6),
                ("ratelab-http", ratelab),
                ("tower-governor", governor),
                ("ratelab-http-lean", ratelab),
                ("tower-governor-headers", governor),
            ] {
                rows.push(Row::new(
                    group,
                    "gcra",
                    backend,
                    Metric::ChecksPerSec,
                    per_sec,
                ));
                rows.push(Row::new(
                    group,
                    "gcra",
                    backend,
                    Metric::NsPerCheck,
                    1e9 / per_sec,
                ));
            }
        }
        rows
    }

    #[test]
    fn throughput_targets_on_both_paths() {
        let mut out = Vec::new();
        targets(&rows(0.5e6, 0.5e6), &mut out);
        assert_eq!(out.len(), 2 * PAIRS.len());
        assert!(out.iter().all(|t| t.pass && (t.value - 1.0).abs() < 1e-9));
        let mut out = Vec::new();
        targets(&rows(0.4e6, 0.5e6), &mut out);
        assert!(out.iter().all(|t| !t.pass && (t.value - 0.8).abs() < 1e-9));
        let mut out = Vec::new();
        targets(&[], &mut out);
        assert!(out.is_empty(), "nothing judged without figures");
    }
}
