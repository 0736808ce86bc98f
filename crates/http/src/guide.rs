//! The guide: what [`RateLimitLayer`](crate::RateLimitLayer) does, exactly.
//!
//! The layer drives the [`Limits`](crate::Limits) of `ratelab-http-core`,
//! where everything below is decided; another server drives the same
//! [`Limits`](crate::Limits) without tower (see [below](#without-tower)),
//! and does exactly this.
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
//!    timeout among them while it is decided. A call made after that (a
//!    refund for a refused request, a peek for `t`, a settlement after the
//!    response) is bounded by its policy's timeout on its own.
//! 4. **Answer**: the inner service's response, or `429`, or `503`, with the
//!    headers below on every one of them. A policy that decides something
//!    from the response ([counting](#counting-only-failures-or-only-successes),
//!    [settling](#settling-from-the-response)) makes its call first, and a
//!    successful login on a [guarded route](#login-protection) gets its
//!    device cookie. Passed requests carry the
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
//! limit). It passes only if every one of them admits it, and it is **all
//! or nothing**: units one policy took for a request that another refused
//! (or failed closed on) are given back, so that a refused request leaves
//! every policy as if it never came. A client hammering the login route does
//! not burn its global quota with requests that were never served; an
//! attacker's burst refused by a narrow policy does not fill a wide one.
//!
//! Every ratelab limiter, in memory or on Redis, issues **receipts**
//! ([`RateLimiter::check_with_receipt`](ratelab_core::RateLimiter::check_with_receipt)):
//! an admission hands back a receipt, and a refund of it gives back what the
//! limiter can prove the admission still holds, decided from the limiter's
//! own state. So the layer proceeds in one round:
//!
//! 1. Ask **every policy at once**, each with the request's cost and a
//!    receipt (a policy on a limiter without receipts only peeks, cost 0).
//! 2. If one refused, can never fit the cost, or failed closed: **refund
//!    every receipt** (concurrently), then answer `429` (or `503`). The
//!    response's `RateLimit` fields show each refunded policy as the refund
//!    left it.
//! 3. Else, the policies that only peeked are asked with the cost, those the
//!    peek predicted to refuse first (a refusal consumes nothing); if one
//!    refuses, every receipt is refunded as in step 2.
//!
//! With one policy, there is one call and no receipt, unless the policy
//! decides something from the response (next sections). On Redis a request
//! under several policies costs one round trip when it passes, two when it
//! is refused (the check, then the refunds).
//!
//! **Under concurrency.** Requests of the same keys run at once. A unit
//! taken for a request that is then refused is held until its refund, a
//! moment later: a request checked in that moment may be refused for want
//! of it (never admitted beyond a quota: every admission went through the
//! limiter's own atomic check). After the refunds, every policy holds
//! exactly the cost of the requests that passed (the crate's
//! `tests/it/all_or_nothing.rs` checks it against such an oracle, with
//! requests sent all at once). What cannot be given back:
//!
//! - a limiter without receipts: it is charged last, only once every policy
//!   with receipts admitted; with two or more such limiters on one request,
//!   one may admit while another refuses, and keeps what it took;
//! - a keyed in-memory limiter full of keys decides new keys by shared
//!   cells, whose admissions give nothing back (they may only over-count);
//! - a refund that fails (Redis gone at that moment): its units stay taken,
//!   with a warning.
//!
//! A limiter that fails follows its policy's
//! [`FailureMode`](crate::FailureMode) (below): a fail-open policy drops
//! out; a fail-closed one makes the answer `503`, after the others gave
//! back. A refusal wins over a failure (`429` rather than `503`: the client
//! is over a quota whatever the broken limiter would have said).
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
//!   (draft-ietf-httpapi-ratelimit-headers: "the number of seconds until
//!   additional quota ... is made available"; earlier drafts read "until the
//!   quota resets", which clients took for "until full"). After `r=0;t=6`, a
//!   unit request passes 6 s later, not before; after `r=5;t=6`, the sixth
//!   unit is back 6 s later. `t=0` when the policy is full. Exact for every
//!   algorithm, rounded up to whole seconds (a client that waits `t` is never
//!   early): a refused unit request's `Decision::retry_after`; for the steady
//!   refills (GCRA, token bucket, leaky meter and queue) the next unit is
//!   back `(q - r - 1)` emission intervals before the key is full
//!   (`Decision::reset_after`); the fixed window gives everything back at
//!   its end (`reset_after`). The sliding log and counter give units back
//!   one by one on a schedule only their state knows (a 4 per 20 s counter
//!   is full 40 s after a burst, yet a unit is back after 25 s), so the
//!   layer asks the limiter: a peek of `r + 1` units, whose `retry_after` is
//!   when more than `r` is available (one more limiter call per response; on
//!   Redis, a round trip, bounded by the policy's timeout; if it fails, `t`
//!   is the wait until full: late, never early). An algorithm this crate
//!   does not know gets the wait until full too.
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
//! With [`headers(HeaderStyle::DraftAndLegacy)`](crate::RateLimitLayerBuilder::headers),
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
//! per-client limit; and SMS sends costing one unit per recipient. (A login
//! limit per account alone lets a stranger lock the owner out: see
//! [`LoginGuard`](crate::LoginGuard) for one that cannot.)
//!
//! ```
//! use http::Method;
//! use ratelab_core::{Keyed, Quota};
//! use ratelab_gcra::Gcra;
//! use ratelab_http::{HeaderStyle, Identify, Policy, RateLimitLayer, TrustedProxies};
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
//!     .headers(HeaderStyle::DraftAndLegacy)
//!     .build()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! With axum, enable the crate's `axum` feature (it reads the peer address
//! from axum's `ConnectInfo`), add the layer to the router and serve with
//! connect info:
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
//! `tests/it/hyper.rs`). On Redis, build the policy's limiter with
//! `ratelab_redis::RedisLimiter` instead of `Keyed`: everything else is the
//! same, and every instance of the application shares the quota.
//!
//! # Without tower
//!
//! A server that is not a tower stack drives the core's four steps itself
//! (`ratelab-http-core`'s crate docs show them on a plain function):
//! [`Limits::start`](crate::Limits::start) with the request head (and the
//! connection's peer address), `Pending::decide` (or `decide_now`, at once
//! for one in-memory policy), [`Limits::conclude`](crate::Limits::conclude),
//! then for a refusal `Refused::finish` on the response it sends
//! ([`RateLimitInfo::problem_response`](crate::RateLimitInfo::problem_response)
//! by default), and for a request that passes, once the response head is
//! known, `Admitted::settle`. A server that holds the request whole can
//! start it with [`Limits::start_in_place`](crate::Limits::start_in_place)
//! and conclude it with
//! [`Limits::conclude_in_place`](crate::Limits::conclude_in_place) instead,
//! which read its headers and extensions without taking it apart, when the
//! limits need no more of it (the layer does: no skip, login guard, peer
//! resolver, or policy with routes, a predicate, a key or a cost function),
//! and [`Limits::decide_in_place`](crate::Limits::decide_in_place) passes
//! a request its one in-memory policy admits at once in one step.
//! The crate's `tests/it/shared_cases.rs` runs the
//! shared cases through a plain hyper `service_fn` driving the core this
//! way, beside the layer, and requires the same bytes from both.
//!
//! # The client side
//!
//! `ratelab-throttle` (`Throttle`, a decorator for any future, and
//! `ThrottleLayer`, a tower layer for HTTP clients) makes outgoing calls
//! wait for their turn on any limiter, with a timeout: see
//! `ratelab_core::wait_and_consume_async` for the waiting rule.
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
//! only the others. On a limiter with receipts (every ratelab limiter,
//! through [`Policy::new`](crate::Policy::new); a limiter of your own that
//! implements the receipt API of `ratelab-core` and says so with
//! [`Limiter::refunds`](ratelab_core::Limiter::refunds)) the request takes
//! its cost with a receipt before it runs, and the receipt is refunded when
//! its response does not count: requests in flight together never pass
//! beyond the quota, and the refund gives back only what the admission
//! still holds (a success slower than its window gets nothing back, so that
//! the next window's failures all count). On a limiter without receipts the
//! request is peeked first and charged after, if it counts: requests in
//! flight together all see the same peek (see [`Count`](crate::Count)).
//!
//! # Settling from the response
//!
//! Some costs are known only once the response is: the tokens an LLM
//! produced, the bytes served. [`Policy::settle_with`](crate::Policy::settle_with)
//! reads what the request finally cost from the response head
//! ([`Policy::settle_from_header`](crate::Policy::settle_from_header): from
//! a header). The request is charged its [cost](crate::Policy::cost_with)
//! up front (a reservation: `max_tokens`), with a receipt, and settled once
//! the response head is known: less than charged gives back what the
//! limiter can prove the admission still holds; more charges the difference
//! as debt, whatever the room, which the client's next requests wait out.
//! The layer waits for the settlement (bounded by the policy's timeout)
//! before it returns the response, whose `RateLimit` fields show the key as
//! it left it. A response that does not say keeps the charge; a request
//! whose response never comes (the client went away) keeps the charge too.
//! The crate's example server limits `POST /complete` in tokens per minute
//! this way.
//!
//! # Login protection
//!
//! [`LoginGuard`](crate::LoginGuard), added with
//! [`login_guard`](crate::RateLimitLayerBuilder::login_guard), protects a
//! login route on the device-cookie scheme OWASP recommends: a successful
//! login sets a signed device cookie; attempts that carry a valid one for
//! their account are limited per account and device only, so failures from
//! elsewhere never refuse the owner on a device she logged in from; other
//! attempts are limited per account and client network, and per account
//! across all of them. Only failures count (receipts), and an attempt one of
//! these policies refuses gives back what the other took. A stranger cannot
//! lock the owner out of her known devices, and attackers on any number of
//! networks get the per-account quota of evaluated guesses; the owner's new
//! device waits with them (see the type's docs for why that is the
//! trade-off).
//!
//! # Metrics
//!
//! Through the `metrics` facade, into whatever recorder the application
//! installs (with `metrics-exporter-prometheus`, the example server's
//! `/metrics`); the names are in [`telemetry`](crate::telemetry):
//! requests by outcome, decisions by policy and outcome, limiter call
//! latency by policy, limiter failures by policy, mode and kind, the calls
//! that give back or settle after the decision, and keys tracked where the policy says
//! ([`Policy::keys_tracked`](crate::Policy::keys_tracked)). The [`Stats`](crate::Stats)
//! counters remain, for code that reads them directly.
