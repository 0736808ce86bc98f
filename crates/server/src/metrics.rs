//! The metrics (through the `metrics` facade; the binary exposes them in
//! Prometheus's text format on `/metrics`).
//!
//! Per domain and descriptor (`descriptor` is the limit's name, or with
//! `detailed_metric` the request's own keys and values):
//! `ratelab_server_total_hits` (units asked for), `_over_limit`,
//! `_near_limit` (admitted with less than a fifth of the limit left, as
//! envoyproxy/ratelimit counts it), `_within_limit`, `_shadow_mode`
//! (refusals a shadow limit did not enforce), `_errors` (by kind, a
//! degraded answer from the failure policy and a give-back that failed
//! included); and
//! `ratelab_server_request_duration_seconds`, the latency of each
//! `ShouldRateLimit` by domain (empty for a domain not configured) and
//! outcome (`ok`, or `error` for a gRPC error status). The reloads count as
//! `ratelab_server_config_load_success` and `_errors`.

use std::time::Duration;

use ratelab::{Decision, ErrorKind};

use crate::config::Limit;
use crate::service::Applied;

/// The labels of one descriptor's metrics.
pub(crate) struct Labels {
    domain: String,
    descriptor: String,
}

impl Labels {
    pub(crate) fn new(domain: &str, applied: &Applied) -> Self {
        let descriptor = if domain.is_empty() {
            // A domain not configured: one series for all of them.
            String::new()
        } else if applied.limit.detailed_metric {
            let path: Vec<String> = applied
                .entries
                .iter()
                .map(|(k, v)| format!("{k}_{v}"))
                .collect();
            format!("{domain}.{}", path.join("."))
        } else {
            applied.limit.name.clone()
        };
        Labels {
            domain: domain.to_owned(),
            descriptor,
        }
    }

    fn labels(&self) -> [(&'static str, String); 2] {
        [
            ("domain", self.domain.clone()),
            ("descriptor", self.descriptor.clone()),
        ]
    }

    pub(crate) fn record(&self, limit: &Limit, cost: u32, decision: &Decision) {
        let labels = self.labels();
        metrics::counter!("ratelab_server_total_hits", &labels).increment(u64::from(cost));
        if decision.allowed {
            metrics::counter!("ratelab_server_within_limit", &labels).increment(u64::from(cost));
            // Near: less than 20% left, envoyproxy/ratelimit's ratio.
            if decision.remaining * 5 < u64::from(limit.requests_per_unit) {
                metrics::counter!("ratelab_server_near_limit", &labels).increment(u64::from(cost));
            }
        } else {
            metrics::counter!("ratelab_server_over_limit", &labels).increment(u64::from(cost));
            if limit.shadow {
                metrics::counter!("ratelab_server_shadow_mode", &labels).increment(u64::from(cost));
            }
        }
    }

    pub(crate) fn error(&self, kind: ErrorKind) {
        let [domain, descriptor] = self.labels();
        metrics::counter!(
            "ratelab_server_errors",
            &[domain, descriptor, ("kind", format!("{kind:?}"))]
        )
        .increment(1);
    }
}

/// One `ShouldRateLimit`'s latency.
pub(crate) fn latency(domain: &str, elapsed: Duration, ok: bool) {
    metrics::histogram!(
        "ratelab_server_request_duration_seconds",
        "domain" => domain.to_owned(),
        "outcome" => if ok { "ok" } else { "error" },
    )
    .record(elapsed.as_secs_f64());
}

/// The buckets of the latency histogram, seconds.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];
