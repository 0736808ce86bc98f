//! Leasing hot descriptors: the limits counted by ratelab's algorithms on
//! Redis, each replica admitting from blocks of units it leased (see
//! `ratelab::lease` for the bound), and what may not be leased.
//!
//! Not leased: limits counted as the reference counts
//! (`envoy-fixed-window`: its `INCRBY` counters cannot give back what a
//! lease did not use), limits whose YAML says `lease: false`, and a
//! request's own `limit` override (so that clients cannot grow the
//! leases' memory). [`check`] refuses a configuration whose `lease: true`
//! the server cannot honour.

use futures::future::BoxFuture;
use ratelab::lease::{LeaseConfig, Leased};
use ratelab::{AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, Error, KnownAlgorithm};

use crate::config::{Algorithm, Config, Limit};

/// The leases of one quota, whatever its algorithm: settled when they
/// expire, released when the server stops.
pub(crate) trait Holder: Send + Sync {
    fn settle_expired(&self) -> BoxFuture<'_, Result<usize, Error>>;
    fn release_all(&self) -> BoxFuture<'_, Result<usize, Error>>;
}

impl<L: AsyncRateLimiter + Send + Sync> Holder for Leased<L> {
    fn settle_expired(&self) -> BoxFuture<'_, Result<usize, Error>> {
        Box::pin(Leased::settle_expired(self))
    }

    fn release_all(&self) -> BoxFuture<'_, Result<usize, Error>> {
        Box::pin(Leased::release_all(self))
    }
}

/// Whether `limit` is leased when the server leases: a configured limit
/// counted by one of ratelab's algorithms, not marked `lease: false`.
pub(crate) fn wanted(limit: &Limit, algorithm: Algorithm) -> bool {
    limit.lease != Some(false)
        && !limit.unlimited
        && limit.requests_per_unit > 0
        && matches!(algorithm, Algorithm::Ratelab(_))
}

/// Whether `kind` issues receipts: a lease without one could never give
/// its unused units back.
fn gives_back(kind: AlgorithmKind) -> bool {
    struct Refunds;
    impl AlgorithmVisitor for Refunds {
        type Output = bool;
        fn visit<A: KnownAlgorithm>(self, _: A) -> bool {
            A::REFUNDS
        }
    }
    // Any valid quota: the answer is the algorithm's, not the quota's.
    let quota = ratelab::Quota::new(1, std::time::Duration::from_secs(1)).expect("a valid quota");
    kind.visit(quota, Refunds)
}

/// Why `config` cannot be served with `leases` (the server's lease
/// settings, none when it does not lease) and limits that name no
/// algorithm counted by `default`: a limit that requires a lease
/// (`lease: true`) the server cannot give it, with where it is written.
pub fn check(
    config: &Config,
    default: Algorithm,
    leases: Option<&LeaseConfig>,
) -> Result<(), String> {
    for limit in config.limits() {
        if limit.lease != Some(true) {
            continue;
        }
        let at = limit
            .origin
            .as_ref()
            .map(|(path, (line, col))| format!("{}:{line}:{col}: ", path.display()))
            .unwrap_or_default();
        let algorithm = limit.algorithm.unwrap_or(default);
        let why = match algorithm {
            _ if leases.is_none() => {
                "lease: true, but the server does not lease (--lease-lifetime-ms, RATELAB_LEASE_LIFETIME_MS)".to_owned()
            }
            Algorithm::EnvoyFixedWindow => format!(
                "lease: true needs one of ratelab's algorithms; it is counted {default} (--default-algorithm), whose INCRBY counters give nothing back"
            ),
            Algorithm::Ratelab(kind) if !gives_back(kind) => {
                format!("lease: true, but {kind} issues no receipts: a lease could never give back what it did not use")
            }
            Algorithm::Ratelab(_) => continue,
        };
        return Err(format!("{at}{}: {why}", limit.full_key));
    }
    Ok(())
}
