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

/// The group whose figures a path is judged and shown on: its paired rounds
/// when they ran (the bench's docs), else criterion's.
fn figures(rows: &[Row], group: &str) -> String {
    let paired = format!("{group}-paired");
    if rows.iter().any(|r| r.group == paired) {
        paired
    } else {
        group.to_owned()
    }
}

/// This part's targets.
pub(super) fn targets(rows: &[Row], out: &mut Vec<Target>) {
    for (group, _) in PATHS {
        let group = &figures(rows, group);
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
         time per request over paired rounds: the stacks in turn, the order \
         rotating) and the ratios; higher is better.\n\n",
    );
    out.push_str(
        "| path | stack | ns per request | requests/s | / bare | / tower_governor | / its equal-output peer |\n",
    );
    out.push_str("|---|---|---:|---:|---:|---:|---:|\n");
    for (group, path) in PATHS {
        let group = &figures(&summary.rows, group);
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
its default clock (ratelab's `Keyed::new`, tower_governor's quanta).
Admitted: 1,000/s with a burst of `u32::MAX`, never exhausted in a run.
Refused: 1 per hour, burst 1, consumed before measuring. Before timing, in
every mode (`cargo test --bench http` too), each stack's responses are
checked: status, body, and which rate limit fields are there.

**Output, and the pairs judged.** The two layers do not do the same work as
they come: ratelab-http sends `RateLimit-Policy` and `RateLimit` on every
response, puts `Client` and `RateLimitInfo` into each admitted request's
extensions for the handler, and answers a refusal with `Retry-After` and an
RFC 9457 problem body; tower_governor adds nothing to an admitted request
and sends `x-ratelimit-after` and `retry-after` on a refusal. So each is
also measured as the other sends: *ratelab-http, lean*
(`.headers(HeaderStyle::None).request_extensions(false)`: nothing added to
an admitted request, `Retry-After` and the problem body on a refusal)
against tower_governor as it comes, and ratelab-http as it comes against
*tower_governor, `use_headers`* (`x-ratelimit-limit` and
`x-ratelimit-remaining` on every response). Each of the three pairs is a
target (`/ its equal-output peer` in the table: ratelab-http against
tower_governor `use_headers`, and the lean one against tower_governor).
";

/// What the layer cost, and what removed it.
const COSTS: &str = "
**Where ratelab-http's time went, and what removed it.** Profiled with
`perf` and callgrind (`examples/http_path.rs` runs one stack in a loop,
with this bench's apps) and counted allocations through the same router:
the limiter's check itself is a few percent; the rest was the layer's own
work around it, on every request.

- *The `RateLimit-Policy` and `RateLimit` fields, serialized with `sfv`'s
  `ListSerializer` on every response* (about a sixth of the time). Each
  policy's item is now serialized once with `sfv` when the layer is built;
  a response writes only separators, the quoted name, `;r=`/`;t=` and
  digits into a stack buffer. A unit test holds the bytes equal to
  `sfv`'s for names and integers up to the clamp.
- *The metrics*: each `counter!`/`histogram!` with a `policy` label built
  a label list and cloned the policy's name on every call, whether or not
  a recorder was installed. The keys are now built once per policy.
- *A tokio timer per limiter call* for a limiter that had answered already,
  *`join_all` and index lists for a single policy*: gone; a pending
  (Redis) call is bounded by the policy's timeout as before.
- *The engine's future and the limiter's boxed call*
  (`AsyncRateLimiter::check_async`), two boxes and a clock read for the
  deadlines on every request, and a response future of about 1.2 KB. A
  limiter that needs no waiting now says so
  (`AsyncRateLimiter::check_now`: every in-memory `RateLimiter` answers at
  once; Redis answers `None` and consumes nothing), and one such policy is
  decided in `Service::call` with no future, no box and no deadline; the
  latency metric times it on quanta's clock. About 300 ns a request, 13 %
  of ratelab-http's time, on the admitted path (quick criterion runs
  before and after 68cfc35).
- *The client's identity*: the address was formatted twice through `fmt`,
  then the client cloned, three `String`s, into `RateLimitInfo`. The key
  is now written once (an IPv4 address by hand), in place: a key up to 46
  bytes (every IP's) allocates nothing; a longer one is shared. The
  limiter key (`<policy>:<client key>`) is built in place too.

The figures below are not from this run: they were counted once with
callgrind on `examples/http_path.rs` at 2b326ff (allocations: calls to
`malloc`; instructions: the difference between 30,000 and 10,000
requests, which moves by about 100 from one build to the next).
Allocations per request through the router, admitted: the bare handler 16,
ratelab-http 26 (52 before this work), tower_governor 20, tower_governor
`use_headers` 24, ratelab-http lean 21; refused: ratelab-http 32,
tower_governor 25. What ratelab-http as it comes adds over the lean one is
what it promises: the `RateLimit` value, the `Client` and `RateLimitInfo`
extensions (two boxes, the policies' statuses, and the extension map
growing past its first size). Both ratelab-http stacks also pay one box
tower_governor does not: their response body is `Either<inner body,
problem body>`, which axum boxes again. Instructions per admitted
request: bare 7,962, tower_governor 9,904, tower_governor `use_headers` 12,822,
ratelab-http lean 12,523, ratelab-http 15,556. The lean stack's
remaining 2,600 over tower_governor are spread over the
layer's general machinery, none above a fifth of it: identifying the
client (policies may key by API key or user), matching policies to the
request, the engine's report for each policy, two quanta reads for the
latency histogram, the decision counters and `Stats`.
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
    fn paired_rounds_are_judged_when_they_ran() {
        let mut rows = rows(0.4e6, 0.5e6);
        for (group, _) in PATHS {
            for backend in ["ratelab-http", "ratelab-http-lean"] {
                for (metric, value) in [(Metric::ChecksPerSec, 0.5e6), (Metric::NsPerCheck, 2e3)] {
                    let group = format!("{group}-paired");
                    rows.push(Row::new(&group, "gcra", backend, metric, value));
                }
            }
            for backend in ["tower-governor", "tower-governor-headers"] {
                for (metric, value) in [(Metric::ChecksPerSec, 0.5e6), (Metric::NsPerCheck, 2e3)] {
                    let group = format!("{group}-paired");
                    rows.push(Row::new(&group, "gcra", backend, metric, value));
                }
            }
        }
        let mut out = Vec::new();
        targets(&rows, &mut out);
        assert_eq!(out.len(), 2 * PAIRS.len());
        assert!(out.iter().all(|t| t.pass && t.group.ends_with("-paired")));
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
