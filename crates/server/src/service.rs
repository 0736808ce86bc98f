//! `ShouldRateLimit`: each descriptor matched against the configuration,
//! counted by its limit's algorithm with a receipt, all or nothing (a
//! request that is refused or fails gives every admission back), and
//! answered as Envoy expects.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use futures::FutureExt;
use futures::future::join_all;
use parking_lot::Mutex;
use ratelab::http_core::wait_for_next_unit;
use ratelab::redis::{Connection, FailurePolicy, RedisStore};
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, Decision, ErrorKind, Keyed, KnownAlgorithm,
    Receipt, ReceiptFuture, SystemClock, ceil_secs,
};
use tonic::{Request, Response, Status};

use crate::SharedConfig;
use crate::config::{Limit, Rule, Unit};

/// Where the counts are kept.
#[derive(Debug, Clone)]
pub enum Backend {
    /// In this process: one replica only.
    Memory,
    /// On Redis (one node, a Cluster, Sentinel), shared by every replica.
    Redis {
        /// The connection.
        connection: Connection,
        /// What a check answers while Redis fails.
        on_failure: FailurePolicy,
        /// Each call's timeout.
        timeout: Duration,
        /// The prefix of every key.
        prefix: String,
    },
}

/// A limiter of any algorithm, in memory or on Redis.
type Counter = Arc<dyn AsyncRateLimiter + Send + Sync>;

/// The `RateLimitService`: the configuration (swapped whole on reload) and
/// one limiter per algorithm and quota.
pub struct Service {
    config: SharedConfig,
    backend: Backend,
    headers: bool,
    limiters: Mutex<HashMap<(AlgorithmKind, u32, Unit), Counter>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("backend", &self.backend)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

struct BuildMemory;

impl AlgorithmVisitor for BuildMemory {
    type Output = Counter;
    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Counter {
        Arc::new(Keyed::with_clock(algorithm, SystemClock))
    }
}

struct BuildRedis<'a>(&'a Backend);

impl AlgorithmVisitor for BuildRedis<'_> {
    type Output = Counter;
    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Counter {
        let Backend::Redis {
            connection,
            on_failure,
            timeout,
            prefix,
        } = self.0
        else {
            unreachable!("only built for Redis")
        };
        Arc::new(
            RedisStore::builder(connection.clone(), algorithm)
                .on_failure(*on_failure)
                .timeout(*timeout)
                .prefix(prefix.clone())
                .build(),
        )
    }
}

/// One descriptor's limit, from the configuration or the request's
/// override.
pub(crate) struct Applied {
    pub(crate) limit: Limit,
    pub(crate) entries: Vec<(String, String)>,
}

/// A limited descriptor being counted: where it is in the request, its
/// limit, cost, limiter, counter key and metric labels.
struct Counted<'a> {
    index: usize,
    applied: &'a Applied,
    cost: u32,
    limiter: Counter,
    key: Vec<u8>,
    metric: crate::metrics::Labels,
}

/// Gives back, all at once, what the admissions of a request that is not
/// served took. A refund that fails leaves its units taken (logged and
/// counted as an error): nothing retries it.
async fn give_back(domain: &str, receipts: Vec<(&Counted<'_>, Receipt)>) {
    if receipts.is_empty() {
        return;
    }
    let refunds = receipts
        .into_iter()
        .map(|(c, receipt)| async move { (c, c.limiter.refund_async(receipt).await) });
    for (c, result) in join_all(refunds).await {
        if let Err(e) = result {
            c.metric.error(e.kind());
            tracing::warn!(domain = %domain, limit = %c.applied.limit.name, error = %e, "cannot give back what a refused or failed request took: it stays taken");
        }
    }
}

/// What applies to one descriptor.
enum Outcome {
    /// No configured limit.
    None,
    /// `unlimited: true`.
    Unlimited,
    /// A limit.
    Limited(Applied),
}

impl Service {
    /// A service answering from `config` (which a reloader may swap), its
    /// counts on `backend`; `headers` adds the `RateLimit-Policy`,
    /// `RateLimit` and `Retry-After` fields to the answers.
    pub fn new(config: SharedConfig, backend: Backend, headers: bool) -> Self {
        Service {
            config,
            backend,
            headers,
            limiters: Mutex::new(HashMap::new()),
        }
    }

    fn limiter(&self, limit: &Limit) -> Result<Counter, Status> {
        let key = (limit.algorithm, limit.requests_per_unit, limit.unit);
        let mut limiters = self.limiters.lock();
        if let Some(limiter) = limiters.get(&key) {
            return Ok(limiter.clone());
        }
        let quota = limit
            .quota()
            .map_err(|e| Status::invalid_argument(format!("{}: {e}", limit.name)))?;
        let limiter = match &self.backend {
            Backend::Memory => limit.algorithm.visit(quota, BuildMemory),
            redis => limit.algorithm.visit(quota, BuildRedis(redis)),
        };
        limiters.insert(key, limiter.clone());
        Ok(limiter)
    }

    /// The answer to `request`, or the status Envoy's `failure_mode_deny`
    /// applies to.
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            return Err(Status::invalid_argument("the domain is empty"));
        }
        if request.descriptors.is_empty() {
            return Err(Status::invalid_argument("no descriptors"));
        }
        let config = self.config.read().clone();
        let domain = config.domain(&request.domain);
        // Proto3 cannot tell 0 from unset: 0 is Envoy's default of 1.
        let request_cost = request.hits_addend.max(1);

        // Each descriptor's limit (or none), and its cost.
        let mut applied = Vec::with_capacity(request.descriptors.len());
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            applied.push(self.applied(&request.domain, domain, i, descriptor, request_cost)?);
        }
        // A limit whose name another applied limit replaces does not apply.
        let replaced: HashSet<&str> = applied
            .iter()
            .filter_map(|(a, _)| match a {
                Outcome::Limited(a) => Some(a.limit.replaces.iter().map(String::as_str)),
                _ => None,
            })
            .flatten()
            .collect();

        // A domain only a limit override knows is not a metric label.
        let label = if domain.is_some() {
            request.domain.as_str()
        } else {
            ""
        };
        // Every limiter first: nothing is counted before the request is
        // known to be countable.
        let mut counted = Vec::new();
        for (i, (outcome, cost)) in applied.iter().enumerate() {
            if let Outcome::Limited(a) = outcome
                && !replaced.contains(a.limit.name.as_str())
            {
                counted.push(Counted {
                    index: i,
                    applied: a,
                    cost: *cost,
                    limiter: self.limiter(&a.limit)?,
                    key: counter_key(&request.domain, &a.entries),
                    metric: crate::metrics::Labels::new(label, a),
                });
            }
        }

        // Every limited descriptor takes its cost with a receipt, all at
        // once (in memory, one after another in the request's order). Alone,
        // nothing else can refuse the request: a refusal takes nothing, so
        // there is nothing to give back, and no receipt is kept for it.
        let several = counted.len() > 1;
        let answers = join_all(counted.iter().map(|c| -> ReceiptFuture<'_> {
            if several {
                c.limiter.check_with_receipt_async(&c.key, c.cost)
            } else {
                Box::pin(
                    c.limiter
                        .check_async(&c.key, c.cost)
                        .map(|answer| answer.map(|decision| (decision, None))),
                )
            }
        }))
        .await;
        let mut receipts = Vec::new();
        let mut decisions = Vec::with_capacity(counted.len());
        let mut failure = None;
        for (c, answer) in counted.iter().zip(answers) {
            match answer {
                Ok((decision, receipt)) => {
                    if let Some(receipt) = receipt {
                        receipts.push((c, receipt));
                    }
                    decisions.push(decision);
                }
                // More than the limit at once: over it, as a window would say.
                Err(e) if e.kind() == ErrorKind::CostTooHigh => {
                    decisions.push(refused_whole(&c.applied.limit));
                }
                Err(e) => {
                    c.metric.error(e.kind());
                    tracing::warn!(domain = %request.domain, limit = %c.applied.limit.name, error = %e, "cannot decide");
                    failure.get_or_insert(if e.is_unavailable() {
                        Status::unavailable(e.to_string())
                    } else {
                        Status::internal(e.to_string())
                    });
                }
            }
        }
        if let Some(status) = failure {
            // Undecided: what the others took goes back.
            give_back(&request.domain, receipts).await;
            return Err(status);
        }

        let mut response = RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..Default::default()
        };
        let mut policy_items = Vec::new();
        let mut limit_items = Vec::new();
        let mut retry_after: Option<Duration> = None;
        let mut counted = counted.iter().zip(decisions).peekable();
        for (i, (outcome, _)) in applied.iter().enumerate() {
            let Some((c, decision)) = counted.next_if(|(c, _)| c.index == i) else {
                response.statuses.push(match outcome {
                    // What the reference answers for an unlimited descriptor.
                    Outcome::Unlimited => status(Code::Ok, None, u32::MAX, None),
                    // No limit, or one another limit replaces.
                    Outcome::Limited(_) | Outcome::None => status(Code::Ok, None, 0, None),
                });
                continue;
            };
            let limit = &c.applied.limit;
            if decision.degraded {
                c.metric.error(ErrorKind::Backend);
                tracing::warn!(domain = %request.domain, limit = %limit.name, allowed = decision.allowed, "the backend is failing: answered by the failure policy");
            }
            c.metric.record(limit, c.cost, &decision);
            let code = if decision.allowed || limit.shadow {
                Code::Ok
            } else {
                Code::OverLimit
            };
            if !decision.allowed && !limit.shadow {
                response.overall_code = Code::OverLimit as i32;
                let wait = decision.retry_after();
                retry_after = Some(retry_after.map_or(wait, |w| w.max(wait)));
            }
            // Each descriptor's own check, as it decided: a refund below
            // does not change what it said.
            let remaining = u32::try_from(decision.remaining).unwrap_or(u32::MAX);
            response.statuses.push(status(
                code,
                Some(RateLimit {
                    name: limit.name.clone(),
                    requests_per_unit: limit.requests_per_unit,
                    unit: limit.unit.to_proto(),
                }),
                remaining,
                Some(decision.reset_after()),
            ));
            let name = sf_string(&limit.name);
            policy_items.push(format!(
                "{name};q={};w={}",
                limit.requests_per_unit,
                limit.unit.duration().as_secs()
            ));
            let t = wait_for_next_unit(&decision, c.limiter.bound(), c.cost);
            limit_items.push(format!(
                "{name};r={};t={}",
                decision.remaining,
                ceil_secs(t)
            ));
        }
        if response.overall_code == Code::OverLimit as i32 {
            // Refused: all or nothing, every admission goes back.
            give_back(&request.domain, receipts).await;
        }
        if self.headers && !policy_items.is_empty() {
            let mut add = |key: &str, value: String| {
                response.response_headers_to_add.push(HeaderValue {
                    key: key.to_owned(),
                    value,
                    ..Default::default()
                });
            };
            add("RateLimit-Policy", policy_items.join(", "));
            add("RateLimit", limit_items.join(", "));
            if let Some(wait) = retry_after {
                add("Retry-After", ceil_secs(wait).max(1).to_string());
            }
        }
        Ok(response)
    }

    /// What applies to descriptor `i`, and its cost.
    fn applied(
        &self,
        domain_name: &str,
        domain: Option<&crate::config::Domain>,
        i: usize,
        descriptor: &RateLimitDescriptor,
        request_cost: u32,
    ) -> Result<(Outcome, u32), Status> {
        // Units go back only with the receipt of the request that took
        // them: on a caller's word, any caller could raise its own quota.
        if descriptor.is_negative_hits {
            return Err(Status::invalid_argument(format!(
                "descriptor {i}: is_negative_hits (giving units back) is refused: units go back \
                 only with the receipt of the request that took them"
            )));
        }
        let cost = match &descriptor.hits_addend {
            Some(hits) => u32::try_from(hits.value).map_err(|_| {
                Status::invalid_argument(format!(
                    "descriptor {i}: hits_addend {} is more than {}",
                    hits.value,
                    u32::MAX
                ))
            })?,
            None => request_cost,
        };
        if descriptor.entries.is_empty() {
            return Err(Status::invalid_argument(format!(
                "descriptor {i} has no entries"
            )));
        }
        let entries: Vec<(&str, &str)> = descriptor
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        let found = domain.and_then(|d| d.find(&entries)).map(|m| m.rule);
        let owned = || {
            entries
                .iter()
                .map(|&(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        };
        if let Some(over) = &descriptor.limit {
            let unit = Unit::from_proto(over.unit).ok_or_else(|| {
                Status::invalid_argument(format!("descriptor {i}: unknown unit {}", over.unit))
            })?;
            crate::config::quota(over.requests_per_unit, unit).map_err(|e| {
                Status::invalid_argument(format!("descriptor {i}: the limit override: {e}"))
            })?;
            let configured = match found {
                Some(Rule::Limited(limit)) => Some(limit),
                _ => None,
            };
            // Named by the keys alone (or the configured limit's name): the
            // values a client sends do not make new metric series.
            let keys: Vec<&str> = entries.iter().map(|(k, _)| *k).collect();
            let limit = Limit {
                name: configured.map_or_else(
                    || format!("{domain_name}.{}", keys.join(".")),
                    |l| l.name.clone(),
                ),
                requests_per_unit: over.requests_per_unit,
                unit,
                algorithm: configured.map_or(AlgorithmKind::Gcra, |l| l.algorithm),
                shadow: configured.is_some_and(|l| l.shadow),
                replaces: Vec::new(),
                detailed_metric: configured.is_some_and(|l| l.detailed_metric),
            };
            return Ok((
                Outcome::Limited(Applied {
                    limit,
                    entries: owned(),
                }),
                cost,
            ));
        }
        Ok(match found {
            Some(Rule::Limited(limit)) => (
                Outcome::Limited(Applied {
                    limit: limit.clone(),
                    entries: owned(),
                }),
                cost,
            ),
            Some(Rule::Unlimited { .. }) => (Outcome::Unlimited, cost),
            Some(Rule::None) | None => (Outcome::None, cost),
        })
    }
}

/// A cost beyond the whole limit: refused, retried never sooner than a
/// whole unit.
fn refused_whole(limit: &Limit) -> Decision {
    let unit = limit.unit.duration().as_secs() * 1_000_000;
    Decision::refused(u64::from(limit.requests_per_unit))
        .with_retry_after_micros(unit)
        .with_reset_after_micros(unit)
}

fn status(
    code: Code,
    current_limit: Option<RateLimit>,
    limit_remaining: u32,
    until_reset: Option<Duration>,
) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        current_limit,
        limit_remaining,
        duration_until_reset: until_reset.map(|d| envoy_types::pb::google::protobuf::Duration {
            seconds: d.as_secs() as i64,
            nanos: d.subsec_nanos() as i32,
        }),
        ..Default::default()
    }
}

/// The counter's key: the domain and every entry, unambiguous whatever the
/// values hold.
fn counter_key(domain: &str, entries: &[(String, String)]) -> Vec<u8> {
    let mut key = Vec::with_capacity(64);
    let mut push = |s: &str| {
        key.extend_from_slice(&(s.len() as u64).to_be_bytes());
        key.extend_from_slice(s.as_bytes());
    };
    push(domain);
    for (k, v) in entries {
        push(k);
        push(v);
    }
    key
}

/// `name` as a structured-field String: printable ASCII, `"` and `\`
/// escaped, anything else `?`.
fn sf_string(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let start = Instant::now();
        let request = request.into_inner();
        let answer = self.decide(&request).await;
        // Only configured domains name a series: a client cannot make the
        // metrics grow without bound.
        let known = self.config.read().domain(&request.domain).is_some();
        let label = if known { request.domain.as_str() } else { "" };
        crate::metrics::latency(label, start.elapsed(), answer.is_ok());
        match &answer {
            Ok(response) => tracing::debug!(
                domain = %request.domain,
                descriptors = request.descriptors.len(),
                overall = ?Code::try_from(response.overall_code).unwrap_or(Code::Unknown),
                "decided"
            ),
            Err(status) => {
                tracing::info!(domain = %request.domain, code = ?status.code(), message = status.message(), "refused to decide");
            }
        }
        answer.map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
        use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
        RateLimitRequest {
            domain: "d".into(),
            descriptors: descriptors
                .iter()
                .map(|entries| RateLimitDescriptor {
                    entries: entries
                        .iter()
                        .map(|&(key, value)| Entry {
                            key: key.into(),
                            value: value.into(),
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            hits_addend: 0,
        }
    }

    #[tokio::test]
    async fn a_limit_replaces_the_one_it_names() {
        let yaml = "\
domain: d
descriptors:
  - key: user
    rate_limit: {name: per-user, unit: minute, requests_per_unit: 1}
  - key: user
    value: vip
    descriptors:
      - key: tier
        rate_limit:
          unit: minute
          requests_per_unit: 3
          replaces: [{name: per-user}]
";
        let (name, domain) = crate::config::parse("d.yaml".as_ref(), yaml).unwrap();
        let config = crate::config::Config::from_domains([(name, domain)]);
        let service = Service::new(crate::shared(config), Backend::Memory, false);
        let vip = request(&[&[("user", "vip")], &[("user", "vip"), ("tier", "gold")]]);
        for remaining in [2, 1, 0] {
            let answer = service.decide(&vip).await.unwrap();
            assert_eq!(answer.overall_code, Code::Ok as i32);
            // The replaced limit neither counts nor refuses.
            assert_eq!(answer.statuses[0].current_limit, None);
            assert_eq!(answer.statuses[1].limit_remaining, remaining);
        }
        assert_eq!(
            service.decide(&vip).await.unwrap().overall_code,
            Code::OverLimit as i32
        );
        // Another user: the per-user limit applies. (`user: vip` alone
        // matches its own node, which has no limit, as in the reference.)
        let plain = request(&[&[("user", "ann")]]);
        let answers = [
            service.decide(&plain).await.unwrap().overall_code,
            service.decide(&plain).await.unwrap().overall_code,
        ];
        assert_eq!(answers, [Code::Ok as i32, Code::OverLimit as i32]);
        assert!(
            service
                .decide(&plain)
                .await
                .unwrap()
                .response_headers_to_add
                .is_empty()
        );
    }

    #[test]
    fn names_are_structured_field_strings() {
        assert_eq!(sf_string("a.b_c"), "\"a.b_c\"");
        assert_eq!(sf_string("a\"b\\é"), "\"a\\\"b\\\\?\"");
    }

    #[test]
    fn keys_do_not_collide_across_boundaries() {
        let a = counter_key("d", &[("a_b".into(), "c".into())]);
        let b = counter_key("d", &[("a".into(), "b_c".into())]);
        assert_ne!(a, b);
    }
}
