//! The window edge through `ratelab-server`: Envoy's `ShouldRateLimit` over
//! real gRPC (envoy-types' tonic client, a loopback TCP port, the server
//! started in this process from its library), on the real clock, as
//! `crates/server/tests/python/test_server_window_edge.py` runs it.
//!
//! Fixed window (what envoyproxy/ratelimit counts): a probe's
//! `duration_until_reset` says where the next window edge is; requests go
//! one after another, each sent when the last is answered, from [`HALF`]
//! before the edge to [`HALF`] after it. GCRA: the same burst, as long, on a
//! key of its own (it has no edge). Each row is what the server admitted
//! and the span from the first request sent to the last answer, which holds
//! every decision: the bound is computed from that span, never assumed.

use std::path::Path;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratelab::redis::{Connection, FailurePolicy};
use ratelab::{AlgorithmKind, Quota};
use ratelab_server::{Backend, Service, config};
use serde::Serialize;
use tokio::time::Instant;

use crate::backend::RedisEnv;
use crate::stats::round;
use crate::{CompareError, Context};
use ratelab_testkit::oracle::Oracle;

/// How long each burst asks on each side of the edge.
pub const HALF: Duration = Duration::from_millis(100);
/// Bursts tried before the fixed window's is kept as it is: a machine too
/// loaded to spend both windows within a second tries again.
const ATTEMPTS: usize = 5;
/// The configuration's domain.
const DOMAIN: &str = "window-edge";

/// One algorithm through the server on one backend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerRow {
    /// The algorithm.
    pub algorithm: String,
    /// Where the server counted: `memory` or `redis`.
    pub backend: String,
    /// Requests sent, one after another.
    pub requests: usize,
    /// Requests the server admitted (`OK`).
    pub admitted: usize,
    /// Seconds from the first request sent to the last answer: every
    /// decision fell within them.
    pub span_secs: f64,
    /// What the algorithm's own bound allows within that span.
    pub own_bound: u64,
    /// Whether the burst spent the limit on both sides of a window edge
    /// (refusals before the edge and after it): always false for GCRA,
    /// which has no edge.
    pub spent_both_windows: bool,
    /// Bursts it took (the fixed window tries again when the machine was
    /// too slow to spend both windows within a second).
    pub attempts: usize,
}

/// The configuration the server reads: one descriptor per algorithm, both
/// at `quota`'s limit per second.
fn yaml(quota: Quota) -> String {
    let n = quota.limit();
    format!(
        "domain: {DOMAIN}\ndescriptors:\n  - key: fixed-window\n    rate_limit: {{unit: second, requests_per_unit: {n}, algorithm: fixed-window}}\n  - key: gcra\n    rate_limit: {{unit: second, requests_per_unit: {n}, algorithm: gcra}}\n"
    )
}

fn unavailable(what: &str) -> impl FnOnce(String) -> CompareError + '_ {
    move |why| {
        CompareError::Unavailable(format!("window edge through ratelab-server: {what}: {why}"))
    }
}

type Client = RateLimitServiceClient<tonic::transport::Channel>;

/// One `ShouldRateLimit` call for `key` = `value`: its overall code and
/// its descriptor's status.
async fn ask(
    client: &mut Client,
    key: &str,
    value: &str,
) -> Result<(bool, DescriptorStatus), CompareError> {
    let request = RateLimitRequest {
        domain: DOMAIN.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let answer = client
        .should_rate_limit(request)
        .await
        .map_err(|status| unavailable("ShouldRateLimit failed")(status.to_string()))?
        .into_inner();
    let status = answer.statuses.into_iter().next().unwrap_or_default();
    Ok((answer.overall_code == Code::Ok as i32, status))
}

/// Asks for `key` = `value` as fast as the answers come until `until`:
/// each outcome (admitted or not) and the span from the first request
/// sent to the last answer.
async fn burst(
    client: &mut Client,
    key: &str,
    value: &str,
    until: Instant,
) -> Result<(Vec<bool>, Duration), CompareError> {
    let mut outcomes = Vec::new();
    let first = Instant::now();
    while Instant::now() < until {
        outcomes.push(ask(client, key, value).await?.0);
    }
    Ok((outcomes, first.elapsed()))
}

/// Refusals, then admissions, then refusals: the limit was all taken on
/// both sides of the edge.
fn spent_twice(outcomes: &[bool]) -> bool {
    let Some(first_refusal) = outcomes.iter().position(|&a| !a) else {
        return false;
    };
    let rest = &outcomes[first_refusal..];
    let Some(readmitted) = rest.iter().position(|&a| a) else {
        return false;
    };
    rest[readmitted..].iter().any(|&a| !a)
}

fn row(
    kind: AlgorithmKind,
    backend: &str,
    quota: Quota,
    (outcomes, span): (Vec<bool>, Duration),
    spent_both_windows: bool,
    attempts: usize,
) -> ServerRow {
    let micros = u64::try_from(span.as_micros()).unwrap_or(u64::MAX);
    ServerRow {
        algorithm: kind.name().into(),
        backend: backend.into(),
        requests: outcomes.len(),
        admitted: outcomes.iter().filter(|&&a| a).count(),
        span_secs: round(span.as_secs_f64(), 3),
        own_bound: kind.bound(quota).allowed_within(micros).unwrap_or(u64::MAX),
        spent_both_windows,
        attempts,
    }
}

/// The fixed window's burst across an edge, and the attempts it took.
async fn fixed_at_edge(
    client: &mut Client,
    quota: Quota,
) -> Result<((Vec<bool>, Duration), bool, usize), CompareError> {
    let window = Duration::from_micros(quota.window_micros());
    let mut last = None;
    for attempt in 1..=ATTEMPTS {
        // Where the next edge is: a probe's duration_until_reset (windows
        // of one length line up across keys).
        let (_, probe) = ask(client, "fixed-window", &format!("probe-{attempt}")).await?;
        let until_edge = probe
            .duration_until_reset
            .map(|d| {
                Duration::from_secs(u64::try_from(d.seconds).unwrap_or(0))
                    + Duration::from_nanos(u64::try_from(d.nanos).unwrap_or(0))
            })
            .ok_or_else(|| {
                unavailable("the fixed window's probe")("no duration_until_reset".into())
            })?;
        let now = Instant::now();
        let edge = if until_edge > HALF + Duration::from_millis(50) {
            now + until_edge
        } else {
            now + until_edge + window
        };
        tokio::time::sleep_until(edge - HALF).await;
        let (outcomes, span) =
            burst(client, "fixed-window", &format!("k-{attempt}"), edge + HALF).await?;
        let spent = spent_twice(&outcomes);
        if spent && span < window {
            return Ok(((outcomes, span), true, attempt));
        }
        last = Some(((outcomes, span), spent));
    }
    let (burst, spent) = last.expect("at least one attempt");
    Ok((burst, spent, ATTEMPTS))
}

/// Both algorithms through a server counting on `backend`.
async fn through(
    backend: Backend,
    name: &str,
    quota: Quota,
) -> Result<Vec<ServerRow>, CompareError> {
    let (file, domain) = config::parse(Path::new("window-edge.yaml"), &yaml(quota))
        .map_err(|e| unavailable("its configuration")(e.to_string()))?;
    let shared = ratelab_server::shared(config::Config::from_domains([(file, domain)]));
    let service = Service::new(shared, backend, false);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| unavailable("cannot listen on a loopback port")(e.to_string()))?;
    let addr = listener
        .local_addr()
        .map_err(|e| unavailable("its port")(e.to_string()))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(ratelab_server::serve(listener, service, async {
        let _ = stopped.await;
    }));
    let measured = async {
        let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .map_err(|e| unavailable("cannot connect to it")(e.to_string()))?;
        let (fixed, spent, attempts) = fixed_at_edge(&mut client, quota).await?;
        let until = Instant::now() + 2 * HALF;
        let gcra = burst(&mut client, "gcra", "k", until).await?;
        Ok::<_, CompareError>(vec![
            row(
                AlgorithmKind::FixedWindow,
                name,
                quota,
                fixed,
                spent,
                attempts,
            ),
            row(AlgorithmKind::Gcra, name, quota, gcra, false, 1),
        ])
    }
    .await;
    // The client is gone: the server finishes at once.
    let _ = stop.send(());
    match tokio::time::timeout(Duration::from_secs(5), server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => return Err(unavailable("the server failed")(e.to_string())),
        Ok(Err(e)) => return Err(unavailable("the server's task failed")(e.to_string())),
        Err(_) => return Err(unavailable("the server did not stop")("within 5 s".into())),
    }
    measured
}

/// The rows: in memory, and on `redis` when there is one.
pub async fn run(
    ctx: &Context<'_>,
    quota: Quota,
    redis: Option<&RedisEnv>,
) -> Result<Vec<ServerRow>, CompareError> {
    let mut rows = through(Backend::Memory, "memory", quota).await?;
    ctx.tick();
    if let Some(env) = redis {
        let connection = Connection::single(env.url()).await?;
        let backend = Backend::Redis {
            connection,
            on_failure: FailurePolicy::Error,
            timeout: Duration::from_secs(2),
            prefix: format!("{}:window-edge-server", ctx.nonce),
        };
        rows.extend(through(backend, "redis", quota).await?);
        ctx.tick();
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::spent_twice;

    #[test]
    fn both_windows_spent_means_refusals_either_side_of_admissions() {
        let (a, r) = (true, false);
        assert!(spent_twice(&[a, a, r, r, a, a, r]));
        assert!(!spent_twice(&[a, a, r, r, a, a]), "the second not spent");
        assert!(spent_twice(&[r, a, a, r]));
        assert!(!spent_twice(&[a, a, a]));
        assert!(!spent_twice(&[a, a, r, r]));
        assert!(!spent_twice(&[]));
    }
}
