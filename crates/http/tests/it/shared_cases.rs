//! The HTTP cases every ratelab middleware runs (`lua/clients/http/cases.json`:
//! the ASGI middleware's and the Express middleware's tests run the same
//! file), here against `ratelab-http`: each suite builds its layer (its
//! policies on Redis limiters, on a manual clock at `t0_us + at_us`; its
//! client identification) in front of an app that answers the client's key,
//! serves it on a dual-stack socket (`[::]`, as the other two tests serve),
//! and sends every step from the peer address the case names. Status,
//! `Retry-After`, `RateLimit-Policy`, `RateLimit`, the body and the problem's
//! members (in order) must be what the file says, byte for byte.
//!
//! Every suite runs twice: through the tower layer on axum, and through the
//! core alone (`ratelab-http-core`'s `Limits`) driven by a plain hyper
//! `service_fn`, no tower in the way: the core is enough to answer every
//! case, byte for byte.
//!
//! Every step of every suite is run and every disagreement reported at
//! once, so that the file can be compared with all three implementations
//! in one go.

use crate::common;
// The core's own driver, shared rather than written again.
#[path = "../../../http-core/tests/common/bare.rs"]
mod bare;

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Request};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use common::{send, serve_on};
use http::{HeaderName, Method, StatusCode};
use http_body_util::Full;
use ratelab_core::toolkit::RemoteForm;
use ratelab_core::{Clock, ManualClock, Quota};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_http::{
    Client, Count, ForwardedHeader, Identify, Limits, Policy, RateLimitLayer, TrustedProxies,
};
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
use ratelab_redis::{Connection, RedisStore, TimeSource};
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_testkit::redis::RedisServer;
use ratelab_token_bucket::TokenBucket;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;

const CASES: &str = include_str!("../../../../lua/clients/http/cases.json");

/// A limiter call on a loaded machine may be slow: not what is tested.
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Deserialize)]
struct Cases {
    t0_us: u64,
    suites: Vec<Suite>,
}

#[derive(Debug, Deserialize)]
struct Suite {
    name: String,
    #[serde(default)]
    identify: IdentifySpec,
    policies: Vec<PolicySpec>,
    steps: Vec<Step>,
}

#[derive(Debug, Default, Deserialize)]
struct IdentifySpec {
    #[serde(default)]
    trusted_proxies: Vec<String>,
    header: Option<String>,
}

#[derive(Debug, Deserialize)]
struct PolicySpec {
    name: String,
    algorithm: String,
    quota: QuotaSpec,
    #[serde(default)]
    routes: Vec<(Option<String>, String)>,
    key: Option<KeySpec>,
    cost: Option<u32>,
    failure: Option<String>,
    redis: Option<String>,
    count: Option<String>,
}

#[derive(Debug, Deserialize)]
struct QuotaSpec {
    limit: u32,
    period_us: u64,
    burst: u32,
}

#[derive(Debug, Deserialize)]
struct KeySpec {
    header: String,
}

#[derive(Debug, Deserialize)]
struct Step {
    at_us: u64,
    #[serde(default)]
    note: String,
    request: RequestSpec,
    response: ResponseSpec,
}

#[derive(Debug, Deserialize)]
struct RequestSpec {
    method: String,
    path: String,
    peer: IpAddr,
    headers: Vec<(String, String)>,
}

#[derive(Debug, Deserialize)]
struct ResponseSpec {
    status: u16,
    headers: BTreeMap<String, Option<String>>,
    body: Option<String>,
    problem: Option<Ordered>,
}

/// A JSON object's members in the order written: the problem's members are
/// compared in order, as `ratelab-http` (serde_json) writes them.
#[derive(Debug, PartialEq)]
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Ordered;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordered, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Value>()? {
                    members.push(member);
                }
                Ok(Ordered(members))
            }
        }
        deserializer.deserialize_map(Members)
    }
}

/// The Redis limiter of `spec`, as a policy's limiter, on `clock`.
fn policy(
    spec: &PolicySpec,
    up: &Connection,
    down: &Connection,
    prefix: &str,
    clock: &ManualClock,
) -> Policy {
    let q = &spec.quota;
    let quota = Quota::new(q.limit, Duration::from_micros(q.period_us))
        .and_then(|quota| quota.with_burst(q.burst))
        .unwrap_or_else(|e| panic!("policy {}: {e}", spec.name));
    let connection = if spec.redis.as_deref() == Some("down") {
        down
    } else {
        up
    };
    fn on_redis<A: RemoteForm>(
        name: &str,
        algorithm: A,
        connection: &Connection,
        prefix: &str,
        clock: &ManualClock,
    ) -> Policy {
        let limiter = RedisStore::builder(connection.clone(), algorithm)
            .prefix(prefix)
            .time_source(TimeSource::Client(Arc::new(clock.clone()) as Arc<dyn Clock>))
            .timeout(TIMEOUT)
            .build();
        Policy::new(name, limiter)
    }
    let name = spec.name.as_str();
    let mut policy = match spec.algorithm.as_str() {
        "gcra" => on_redis(name, Gcra::new(quota), connection, prefix, clock),
        "token-bucket" => on_redis(name, TokenBucket::new(quota), connection, prefix, clock),
        "leaky-meter" => on_redis(name, LeakyMeter::new(quota), connection, prefix, clock),
        "leaky-queue" => on_redis(name, LeakyQueue::new(quota), connection, prefix, clock),
        "fixed-window" => on_redis(name, FixedWindow::new(quota), connection, prefix, clock),
        "sliding-log" => on_redis(name, SlidingLog::new(quota), connection, prefix, clock),
        "sliding-counter" => on_redis(name, SlidingCounter::new(quota), connection, prefix, clock),
        other => panic!("policy {name}: unknown algorithm {other}"),
    };
    for (method, pattern) in &spec.routes {
        policy = match method {
            Some(method) => policy.route(Method::from_bytes(method.as_bytes()).unwrap(), pattern),
            None => policy.path(pattern),
        };
    }
    if let Some(key) = &spec.key {
        let header = HeaderName::from_bytes(key.header.as_bytes()).unwrap();
        policy =
            policy.key(move |parts, _| Some(parts.headers.get(&header)?.to_str().ok()?.to_owned()));
    }
    if let Some(cost) = spec.cost {
        policy = policy.cost(cost);
    }
    policy = match spec.failure.as_deref() {
        None | Some("open") => policy.fail_open(),
        Some("closed") => policy.fail_closed(),
        Some(other) => panic!("policy {name}: failure {other}"),
    };
    policy = match spec.count.as_deref() {
        None | Some("all") => policy,
        Some("failures") => policy.count(Count::Failures),
        Some("successes") => policy.count(Count::Successes),
        Some(other) => panic!("policy {name}: count {other}"),
    };
    policy.timeout(TIMEOUT)
}

/// The status the request asks for in `x-respond-status` (200 by default).
fn asked_status(headers: &http::HeaderMap) -> StatusCode {
    headers
        .get("x-respond-status")
        .and_then(|v| v.to_str().ok()?.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK)
}

/// The app of every suite: the client's key as text, with the status the
/// request asks for.
async fn respond(Extension(client): Extension<Client>, request: Request) -> Response {
    (asked_status(request.headers()), client.key().to_owned()).into_response()
}

/// The same app for the bare hyper server.
async fn respond_bare(
    request: http::Request<hyper::body::Incoming>,
) -> http::Response<Full<Bytes>> {
    let client = request.extensions().get::<Client>().unwrap();
    let mut response = http::Response::new(Full::new(Bytes::from(client.key().to_owned())));
    *response.status_mut() = asked_status(request.headers());
    response
}

fn identify(suite: &Suite) -> Identify {
    let header = match suite.identify.header.as_deref() {
        None | Some("x-forwarded-for") => ForwardedHeader::XForwardedFor,
        Some("forwarded") => ForwardedHeader::Forwarded,
        Some(other) => panic!("suite {}: header {other}", suite.name),
    };
    let proxies = TrustedProxies::parse(&suite.identify.trusted_proxies)
        .unwrap()
        .header(header);
    Identify::new().trusted_proxies(proxies)
}

/// What serves a suite.
#[derive(Debug, Clone, Copy)]
enum Driver {
    /// `RateLimitLayer` on axum.
    Layer,
    /// The core's `Limits`, driven by a plain hyper `service_fn`.
    Core,
}

/// Serves the app behind `policies` as `driver` does, on a dual-stack
/// socket (`[::]` takes IPv4 peers too, as ::ffff:a.b.c.d, as the ASGI and
/// Express tests' servers do); the port.
async fn serve(driver: Driver, suite: &Suite, policies: Vec<Policy>) -> u16 {
    match driver {
        Driver::Layer => {
            let mut builder = RateLimitLayer::builder().identify(identify(suite));
            for policy in policies {
                builder = builder.policy(policy);
            }
            let app = Router::new()
                .fallback(respond)
                .layer(builder.build().unwrap());
            serve_on(app, IpAddr::V6(Ipv6Addr::UNSPECIFIED))
                .await
                .port()
        }
        Driver::Core => {
            let mut builder = Limits::builder().identify(identify(suite));
            for policy in policies {
                builder = builder.policy(policy);
            }
            let listener = tokio::net::TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0))
                .await
                .unwrap();
            let port = listener.local_addr().unwrap().port();
            bare::serve(listener, Arc::new(builder.build().unwrap()), respond_bare);
            port
        }
    }
}

/// What one step got, set against what the file says; `None` when they agree.
fn compare(step: &Step, reply: &common::Reply) -> Option<String> {
    let expected = &step.response;
    let mut wrong = Vec::new();
    if reply.status != expected.status {
        wrong.push(format!(
            "status {} (expected {})",
            reply.status, expected.status
        ));
    }
    for (name, value) in &expected.headers {
        let got = reply.all(name);
        let got = (!got.is_empty()).then(|| got.join(", "));
        if got.as_deref() != value.as_deref() {
            wrong.push(format!("{name}: {got:?} (expected {value:?})"));
        }
    }
    if let Some(body) = &expected.body
        && reply.text() != *body
    {
        wrong.push(format!("body {:?} (expected {body:?})", reply.text()));
    }
    if let Some(problem) = &expected.problem {
        if reply.all("content-type") != ["application/problem+json"] {
            wrong.push(format!("content-type {:?}", reply.all("content-type")));
        }
        match serde_json::from_slice::<Ordered>(&reply.body) {
            Ok(got) if got == *problem => {}
            Ok(got) => wrong.push(format!(
                "problem {:?}\n      (expected {:?})",
                got.0, problem.0
            )),
            Err(e) => wrong.push(format!("problem not JSON ({e}): {:?}", reply.text())),
        }
    }
    (!wrong.is_empty()).then(|| wrong.join("\n    "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelab_http_answers_the_shared_cases() {
    let cases: Cases = serde_json::from_str(CASES).expect("cases.json");
    let redis = RedisServer::start();
    let up = Connection::single(&redis.url()).await.unwrap();
    // A port where nothing listens: every call of a "down" limiter fails.
    let nothing = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down_url = format!("redis://{}/", nothing.local_addr().unwrap());
    drop(nothing);
    let down = Connection::single_lazy(&down_url).unwrap();

    let mut disagreements = Vec::new();
    let mut steps = 0;
    for (n, suite) in cases.suites.iter().enumerate() {
        for driver in [Driver::Layer, Driver::Core] {
            // Each driver on keys of its own: the two runs never meet.
            let clock = ManualClock::new();
            let prefix = format!("shared-cases-{driver:?}-{n}");
            let policies = suite
                .policies
                .iter()
                .map(|spec| policy(spec, &up, &down, &prefix, &clock))
                .collect();
            let port = serve(driver, suite, policies).await;
            for (i, step) in suite.steps.iter().enumerate() {
                clock.set(cases.t0_us + step.at_us);
                let request = &step.request;
                let to = match request.peer {
                    IpAddr::V4(_) => SocketAddr::from(([127, 0, 0, 1], port)),
                    IpAddr::V6(_) => SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
                };
                let headers: Vec<(&str, &[u8])> = request
                    .headers
                    .iter()
                    .map(|(name, value)| (name.as_str(), value.as_bytes()))
                    .collect();
                let reply = send(to, request.peer, &request.method, &request.path, &headers).await;
                steps += 1;
                if let Some(wrong) = compare(step, &reply) {
                    disagreements.push(format!(
                        "{} ({driver:?}), step {} ({}): {} {}\n    {wrong}",
                        suite.name,
                        i + 1,
                        step.note,
                        request.method,
                        request.path
                    ));
                }
            }
        }
    }
    assert!(steps > 0, "no step ran");
    let in_the_file: usize = cases.suites.iter().map(|suite| suite.steps.len()).sum();
    assert_eq!(steps, 2 * in_the_file, "every step, through both drivers");
    assert!(
        disagreements.is_empty(),
        "ratelab-http disagrees with lua/clients/http/cases.json on {} of {steps} steps:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );
}
