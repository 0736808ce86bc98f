//! The window edge through `ratelab-server`: Envoy's `ShouldRateLimit` over
//! real gRPC (envoy-types' tonic client, a loopback TCP port, the server
//! started in this process from its library), on the real clock.
//!
//! Fixed window (what envoyproxy/ratelimit counts): a probe's
//! `duration_until_reset` says where the next window edge is; a burst of
//! two more requests than the limit goes out at once [`LEAD`] before the
//! edge (all its answers in before the edge), and another at the edge.
//! GCRA: the same two bursts, as far apart, on a key of its own (it has no
//! edge). Bursts sent at once, not one request after another: a loaded
//! machine answers them later, but still decides each on its side of the
//! edge. Each row is what the server admitted and the span from the first
//! request sent to the last answer, which holds every decision: the bound
//! is computed from that span, never assumed.

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

/// How long before the edge the first burst goes out: its answers must all
/// be in before the edge, or the attempt is made again at the next edge.
pub const LEAD: Duration = Duration::from_millis(400);
/// Attempts before the fixed window's bursts are kept as they are: a
/// machine too loaded to answer a burst within [`LEAD`], or both within a
/// second, tries again.
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
    /// Requests sent, in two bursts.
    pub requests: usize,
    /// Requests the server admitted (`OK`).
    pub admitted: usize,
    /// Seconds from the first request sent to the last answer: every
    /// decision fell within them.
    pub span_secs: f64,
    /// What the algorithm's own bound allows within that span.
    pub own_bound: u64,
    /// Whether the bursts spent the limit on both sides of a window edge
    /// (refusals in the one answered before the edge and in the one sent
    /// after it): always false for GCRA, which has no edge.
    pub spent_both_windows: bool,
    /// Attempts it took (the fixed window tries again when the machine was
    /// too slow to answer a burst before the edge, or both within a
    /// second).
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

/// `n` requests for `key` = `value` sent at once: each outcome (admitted or
/// not), when they went out and when the last answer came in.
async fn at_once(
    client: &Client,
    key: &str,
    value: &str,
    n: usize,
) -> Result<(Vec<bool>, Instant, Instant), CompareError> {
    let sent = Instant::now();
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (mut client, key, value) = (client.clone(), key.to_owned(), value.to_owned());
        requests.spawn(async move { ask(&mut client, &key, &value).await.map(|(ok, _)| ok) });
    }
    let mut outcomes = Vec::with_capacity(n);
    while let Some(answer) = requests.join_next().await {
        let answer = answer.map_err(|e| unavailable("a request's task failed")(e.to_string()))?;
        outcomes.push(answer?);
    }
    Ok((outcomes, sent, Instant::now()))
}

/// Two bursts: one at once, the next once `apart` has passed since the
/// first went out; every outcome, and the span from the first request sent
/// to the last answer.
struct Bursts {
    first: Vec<bool>,
    second: Vec<bool>,
    span: Duration,
}

impl Bursts {
    fn outcomes(&self) -> (Vec<bool>, Duration) {
        let mut all = self.first.clone();
        all.extend(&self.second);
        (all, self.span)
    }
}

/// A burst refused some: it spent what was left of the limit.
fn spent(burst: &[bool]) -> bool {
    burst.iter().any(|&admitted| !admitted)
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

/// The fixed window's bursts across an edge, whether both windows were
/// spent, and the attempts it took.
async fn fixed_at_edge(
    client: &mut Client,
    quota: Quota,
) -> Result<(Bursts, bool, usize), CompareError> {
    let window = Duration::from_micros(quota.window_micros());
    let n = quota.limit() as usize + 2;
    let mut last = None;
    for attempt in 1..=ATTEMPTS {
        // Where the next edge is: a probe's duration_until_reset (windows
        // of one length line up across keys). The server read its clock
        // between the probe's sending and its answer: the edge lies
        // between those instants plus that duration.
        let asked = Instant::now();
        let (_, probe) = ask(client, "fixed-window", &format!("probe-{attempt}")).await?;
        let answered = Instant::now();
        let until_edge = probe
            .duration_until_reset
            .map(|d| {
                Duration::from_secs(u64::try_from(d.seconds).unwrap_or(0))
                    + Duration::from_nanos(u64::try_from(d.nanos).unwrap_or(0))
            })
            .ok_or_else(|| {
                unavailable("the fixed window's probe")("no duration_until_reset".into())
            })?;
        let (mut earliest, mut latest) = (asked + until_edge, answered + until_edge);
        if earliest < Instant::now() + LEAD + Duration::from_millis(50) {
            (earliest, latest) = (earliest + window, latest + window);
        }
        tokio::time::sleep_until(earliest - LEAD).await;
        let key = format!("k-{attempt}");
        let (first, first_sent, first_in) = at_once(client, "fixed-window", &key, n).await?;
        // All decided before the edge, or the burst cannot tell the
        // windows apart.
        let before_edge = first_in < earliest;
        tokio::time::sleep_until(latest).await;
        let (second, _, second_in) = at_once(client, "fixed-window", &key, n).await?;
        let span = second_in - first_sent;
        // The second burst decided before the edge after: within one window.
        let next_window = second_in < earliest + window;
        let both = before_edge && next_window && spent(&first) && spent(&second) && span < window;
        let bursts = Bursts {
            first,
            second,
            span,
        };
        if both {
            return Ok((bursts, true, attempt));
        }
        last = Some(bursts);
    }
    let bursts = last.expect("at least one attempt");
    Ok((bursts, false, ATTEMPTS))
}

/// GCRA's two bursts, [`LEAD`] apart (it has no edge to aim at).
async fn gcra_bursts(client: &mut Client, quota: Quota) -> Result<Bursts, CompareError> {
    let n = quota.limit() as usize + 2;
    let (first, first_sent, _) = at_once(client, "gcra", "k", n).await?;
    tokio::time::sleep_until(first_sent + LEAD).await;
    let (second, _, second_in) = at_once(client, "gcra", "k", n).await?;
    Ok(Bursts {
        first,
        second,
        span: second_in - first_sent,
    })
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
        let gcra = gcra_bursts(&mut client, quota).await?;
        Ok::<_, CompareError>(vec![
            row(
                AlgorithmKind::FixedWindow,
                name,
                quota,
                fixed.outcomes(),
                spent,
                attempts,
            ),
            row(AlgorithmKind::Gcra, name, quota, gcra.outcomes(), false, 1),
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
    use super::spent;

    #[test]
    fn a_burst_spent_what_was_left_when_it_refused_some() {
        let (a, r) = (true, false);
        assert!(spent(&[a, a, r]));
        assert!(spent(&[r, r]));
        assert!(!spent(&[a, a, a]));
        assert!(!spent(&[]));
    }
}
