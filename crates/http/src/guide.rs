//! The guide: what [`RateLimitLayer`](crate::RateLimitLayer) does, exactly.
//!
//! # One request, step by step
//!
//! 1. **Identify the client** with the [`Identify`](crate::Identify) chain:
//!    a known API key, else an authenticated user from the request
//!    extensions, else the IP address. The address is the peer's, unless the
//!    peer is a [trusted proxy](crate::TrustedProxies): then it is the
//!    rightmost address in the forwarding header that is not itself a
//!    trusted proxy. A client connecting directly cannot choose its address
//!    with a forged `X-Forwarded-For`; garbage in the header never crashes
//!    the layer and never yields an address no trusted proxy vouched for.
//! 2. **Select the policies** that apply: route, plan, predicate and key
//!    all say yes ([`Policy`](crate::Policy)). None: the request passes
//!    untouched, without headers.
//! 3. **Decide** them (next section). Each policy's limiter calls for this
//!    request are bounded together by the policy's
//!    [timeout](crate::Policy::timeout) (100 ms by default); the policies are
//!    asked concurrently, so a request is held at most as long as the longest
//!    timeout among them.
//! 4. **Answer**: the inner service's response, or `429`, or `503`, with the
//!    headers below on every one of them. Passed requests carry the
//!    [`Client`](crate::Client) and the [`RateLimitInfo`](crate::RateLimitInfo)
//!    in their extensions (unless the layer is built with
//!    [`request_extensions(false)`](crate::RateLimitLayerBuilder::request_extensions)).
//!    A request admitted by a
//!    queueing policy (the leaky bucket queue, whose decisions carry a
//!    `delay`) first waits for its slot, at most the queue's depth: that is
//!    the shaping such a policy is for.
//!
//! # Several policies on one request
//!
//! A request may fall under several policies (a global limit and a login
//! limit). It passes only if every one of them admits it, and **a refusal by
//! one must not consume from the others**: a client hammering the login
//! route should not also burn its global quota with requests that were never
//! served. Limiters only have one operation, "check and consume if it fits"
//! (cost 0 checks without consuming; a refusal consumes nothing), so the
//! layer proceeds in rounds:
//!
//! 1. **Peek** every policy (cost 0), concurrently. Nothing is consumed.
//! 2. If some policy has less room than the request costs (`remaining <
//!    cost`), ask **only those** with the real cost. If one refuses (the usual
//!    case), the request is refused, and since a refusal consumes nothing,
//!    nothing was consumed anywhere.
//! 3. Otherwise ask **all the others** with the real cost, concurrently. If
//!    all admit, the request passes.
//!
//! With one policy, there is no peek: one call. With several, two rounds of
//! calls (each round concurrent across the policies): on Redis, two round
//! trips instead of one, the price of not consuming on refusal.
//!
//! **What can still consume without serving** (the races): between the peek
//! and the real call, other requests of the same key run too. If the room a
//! peek saw is taken meanwhile, a policy of step 3 refuses while the others
//! of step 3 admitted and keep what they consumed; likewise if room freed in
//! step 2 lets one of several predicted refusals admit while another refuses.
//! Either way the request is refused, the policies that admitted it keep its
//! cost (it is not given back: limiters have no refund), and nothing is ever
//! admitted beyond any quota, since every admission went through the
//! limiter's own atomic check. The window is one round trip of the limiter,
//! and only a client racing itself on the same keys can hit it. The same
//! holds for any algorithm, in memory or on Redis, because all of them
//! implement cost-0 peeks and all-or-nothing refusals; the leaky bucket
//! queue's `remaining` counts free slots in its queue, which is what the
//! prediction needs.
//!
//! A limiter that fails during these rounds follows its policy's
//! [`FailureMode`](crate::FailureMode) (below): a fail-open policy drops out
//! of the later rounds; a fail-closed one makes the answer `503`. A refusal
//! wins over a failure (`429` rather than `503`: the client is over a quota
//! whatever the broken limiter would have said), and a fail-closed failure at
//! the peek stops before step 3, so nothing is consumed for a request that
//! is not served. A failure in step 3 itself comes after the other policies
//! of step 3 consumed: like a lost race, they keep it.
//!
//! # The headers
//!
//! Every response, passed or refused, carries (for the policies that
//! applied, in the order they were added):
//!
//! ```text
//! RateLimit-Policy: "default";q=100;w=60, "login";q=5;w=900
//! RateLimit: "default";r=42;t=1, "login";r=4;t=180
//! ```
//!
//! Both are structured-field lists serialized with `sfv`. They are appended,
//! so layers nested around one service each add their items (a list may span
//! several field lines).
//!
//! - `q` is the quota's **burst**: the most units that pass at once from
//!   full, which is what `r` counts down from (`Decision::limit`). With the
//!   default burst this is the quota's limit.
//! - `w` is the **window** in which `q` units are allowed,
//!   [`Quota::window`](ratelab_core::Quota::window) = `period × burst /
//!   limit`, in whole seconds rounded up, at least 1: with the default burst,
//!   the quota's period. Rounding up can only advertise a slower rate than
//!   the real one (5 per second, burst 10: `q=10;w=2`).
//! - `r` is `Decision::remaining`: unit requests that would pass right now.
//! - `t` is the seconds until **more quota is available** than `r`
//!   (draft-ietf-httpapi-ratelimit-headers-11; draft-10 read
//!   "until the quota resets", which clients took for "until full"). After
//!   `r=0;t=6`, a unit request passes 6 s later, not before; after
//!   `r=5;t=6`, the sixth unit is back 6 s later. `t=0` when the policy is
//!   full. It is exact when the limiter says so (a refused unit request: its
//!   `Decision::retry_after`) or when the algorithm refills steadily (GCRA,
//!   token bucket, leaky meter: the next unit is back `(q - r - 1)` emission
//!   intervals before the key is full, `Decision::reset_after`). For the
//!   other algorithms (windows, logs, the queue) it is the wait until the key
//!   is full again, when more is surely available: never early, sometimes
//!   late. Whole seconds, rounded up: a client that waits `t` is never early.
//! - `qu` is not sent (the default unit, requests): with a cost, `q` and `r`
//!   count cost units (an SMS to 3 numbers uses 3). `pk` (partition key) is
//!   not sent: it would disclose the client's key.
//!
//! A policy whose limiter failed has its `RateLimit-Policy` item but no
//! `RateLimit` item (there is no decision to report). A policy whose limiter
//! was never asked is not listed.
//!
//! ## Legacy headers
//!
//! With [`legacy_headers(true)`](crate::RateLimitLayerBuilder::legacy_headers),
//! responses also carry `X-RateLimit-Limit` (`q`), `X-RateLimit-Remaining`
//! (`r`) and `X-RateLimit-Reset` for one policy: on a refusal, the violated
//! policy with the longest wait; otherwise the policy with the least
//! remaining. `X-RateLimit-Reset` means the same on every response, a
//! refusal included: the seconds until that policy's key is full again
//! (`Decision::reset_after`, rounded up), or with
//! [`LegacyReset::Epoch`](crate::LegacyReset::Epoch) the Unix time it will
//! be. The wait before a retry is `Retry-After`.

//! # Refusals: `429`
//!
//! ```text
//! HTTP/1.1 429 Too Many Requests
//! content-type: application/problem+json
//! retry-after: 12
//! ratelimit-policy: "default";q=100;w=60, "login";q=5;w=900
//! ratelimit: "default";r=42;t=1, "login";r=0;t=12
//!
//! {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//!  "title":"Request cannot be satisfied as assigned quota has been exceeded",
//!  "status":429,"detail":"policy \"login\" allows 5 per 900 s; retry in 12 s.",
//!  "violated-policies":["login"]}
//! ```
//!
//! `Retry-After` is the longest wait among the violated policies for a
//! request of this cost (at least 1 s): never earlier than the `t` any
//! violated policy advertises, and exactly
//! when the limiter says the same request would pass (rounded up to the
//! second). The other policies' `t` say when they are full again, which the
//! client does not need to wait for. The problem type and its
//! `violated-policies` member are the ones the draft defines.
//!
//! A request whose cost is above a policy's burst can never pass: it is
//! refused with `429` and a detail that says so, without `Retry-After`, since
//! no wait would help.
//!
//! # Limiter failures: fail open or closed
//!
//! When a limiter cannot decide (Redis down, too slow for the policy's
//! timeout, a keyed in-memory limiter out of room for new keys, any error
//! but a cost that can never fit), the policy's
//! [`FailureMode`](crate::FailureMode) applies:
//!
//! - **open** (the default): the request passes unchecked by that policy
//!   (the others still apply). Alerts: a `tracing` `WARN` event naming the
//!   policy, client and error (at most one a second per policy, with the
//!   count of those `suppressed` since the last, so that an outage does not
//!   flood the log); [`Stats::failed_open`](crate::Stats::failed_open)
//!   counts it; the [`on_limiter_failure`](crate::RateLimitLayerBuilder::on_limiter_failure)
//!   callback runs.
//! - **closed**: the request is refused with `503 Service Unavailable` and a
//!   problem body naming the policies in `unavailable-policies` (the error
//!   itself is logged, not sent to the client). Alerts: a `tracing` `ERROR`
//!   event, [`Stats::failed_closed`](crate::Stats::failed_closed), the
//!   callback.
//!
//! Fail closed where letting requests through unchecked is worse than
//! refusing them for a while: login attempts (password guessing), SMS and
//! e-mail sends (they cost money and can be abused).
//!
//! One error always fails closed, whatever the mode:
//! [`Error::TooManyKeys`](ratelab_core::Error::TooManyKeys), a keyed
//! in-memory limiter holding its maximum of keys, none back to full. That is
//! not an outage but a flood of new clients (addresses are cheap: an IPv6 /32
//! holds 2^32 /64 networks), and failing open would let the flood through
//! unlimited. The new client gets `503` with `Retry-After` set to when the
//! limiter expects a slot to free; clients already tracked are still limited
//! as usual.
//!
//! # Examples
//!
//! Login attempts per account, whoever makes them (an attacker rotating IP
//! addresses still gets 5 guesses per account per 15 minutes), on top of a
//! per-client limit; and SMS sends costing one unit per recipient:
//!
//! ```
//! use http::Method;
//! use ratelab_core::{Keyed, Quota};
//! use ratelab_gcra::Gcra;
//! use ratelab_http::{Identify, Policy, RateLimitLayer, TrustedProxies};
//! use std::time::Duration;
//!
//! let layer = RateLimitLayer::builder()
//!     .identify(Identify::new().trusted_proxies(TrustedProxies::parse(["10.0.0.0/8"])?))
//!     .policy(Policy::new("default", Keyed::new(Gcra::new(Quota::per_minute(100)?))))
//!     .policy(
//!         Policy::new("login", Keyed::new(Gcra::new(Quota::new(5, Duration::from_secs(900))?)))
//!             .route(Method::POST, "/login")
//!             // The account being logged into, from a header here; parse a body
//!             // field in an earlier layer and read it from the extensions.
//!             .key(|request, _| Some(request.headers.get("x-account")?.to_str().ok()?.to_lowercase()))
//!             .fail_closed(),
//!     )
//!     .policy(
//!         Policy::new("sms", Keyed::new(Gcra::new(Quota::per_hour(10)?)))
//!             .route(Method::POST, "/sms")
//!             .cost_with(|request, _| {
//!                 let recipients = request.headers.get_all("x-recipient").iter().count();
//!                 u32::try_from(recipients).unwrap_or(u32::MAX)
//!             })
//!             .fail_closed(),
//!     )
//!     .legacy_headers(true)
//!     .build()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! With axum, add the layer to the router and serve with connect info:
//!
//! ```no_run
//! # async fn run(layer: ratelab_http::RateLimitLayer) -> std::io::Result<()> {
//! use axum::{Router, routing::get};
//! use std::net::SocketAddr;
//!
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(layer);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await
//! # }
//! ```
//!
//! With plain hyper, wrap each connection's service in
//! [`SetPeerAddr`](crate::SetPeerAddr) and the layer (see the crate's
//! `tests/hyper.rs`). On Redis, build the policy's limiter with
//! `ratelab_redis::RedisLimiter` instead of `Keyed`: everything else is the
//! same, and every instance of the application shares the quota.
//!
//! # The client side
//!
//! [`Throttle`](crate::Throttle) (a decorator for any future) and
//! [`ThrottleLayer`](crate::ThrottleLayer) (a tower layer for HTTP clients)
//! make outgoing calls wait for their turn on any limiter, with a timeout:
//! see [`ratelab_core::wait_and_consume_async`] for the waiting rule.
//!
//! # Responses the application chooses
//!
//! - [`refusal_response`](crate::RateLimitLayerBuilder::refusal_response) and
//!   [`unavailable_response`](crate::RateLimitLayerBuilder::unavailable_response)
//!   replace the `429` and `503` problem bodies with any response built from
//!   the [`RateLimitInfo`](crate::RateLimitInfo); the layer still adds
//!   `Retry-After` when the response has none, and the rate limit fields.
//! - [`headers`](crate::RateLimitLayerBuilder::headers) picks the fields
//!   ([`HeaderStyle`](crate::HeaderStyle): the draft's, legacy, both, none);
//!   [`legacy_reset`](crate::RateLimitLayerBuilder::legacy_reset) sends
//!   `X-RateLimit-Reset` as a Unix time from the layer's
//!   [`wall_clock`](crate::RateLimitLayerBuilder::wall_clock).
//! - Handlers read the decision from the request's extensions:
//!   `Extension<RateLimitInfo>` in axum (express-rate-limit's
//!   `req.rateLimit`). A layer whose handlers never read it can leave it
//!   out: [`request_extensions(false)`](crate::RateLimitLayerBuilder::request_extensions).
//! - [`skip`](crate::RateLimitLayerBuilder::skip) lets health checks,
//!   `OPTIONS` preflights and metrics scrapes through untouched.
//! - Every `503` carries `Retry-After`: the limiter's hint when it gives one
//!   (an open circuit breaker, a full table of keys), at least 1 s.
//!
//! # Counting only failures, or only successes
//!
//! [`Policy::count`](crate::Policy::count) with
//! [`Count::Failures`](crate::Count::Failures) counts only the requests whose
//! response is a failure (a failed login), [`Count::Successes`](crate::Count::Successes)
//! only the others. With a limiter that can give units back
//! (every ratelab limiter, through [`Policy::new`](crate::Policy::new); any
//! other through [`Refund`](crate::Refund) and
//! [`Policy::refundable`](crate::Policy::refundable))
//! the request consumes first and is refunded after (what its admission
//! still holds: a success slower than its window gets nothing back, so that
//! the next window's failures all count); with a limiter that cannot give
//! units back it is peeked first and consumed after (see [`Count`](crate::Count) for
//! the difference under concurrency).
//!
//! Login protection a stranger cannot turn against the owner (the crate's
//! `examples/server.rs`): count failures only, keyed by account *and*
//! address, so a stranger's failures use up the stranger's allowance for the
//! account, not the owner's; and a second policy caps failures per account
//! from any address, much higher, against guessing spread over many
//! addresses.
//!
//! # Metrics
//!
//! Through the [`metrics`] facade, into whatever recorder the application
//! installs (with `metrics-exporter-prometheus`, the example server's
//! `/metrics`); the names are in [`telemetry`](crate::telemetry):
//! requests by outcome, decisions by policy and outcome, limiter call
//! latency by policy, limiter failures by policy, mode and kind, calls after
//! the response, and keys tracked where the policy says
//! ([`Policy::keys_tracked`](crate::Policy::keys_tracked)). The [`Stats`](crate::Stats)
//! counters remain, for code that reads them directly.
