//! The quota registry: two services that use one user key with different
//! quotas do not share a bucket (the fingerprint in the key names another
//! Redis key), so each caller silently gets both quotas. Every client of
//! the script protocol (Rust, Python, Node) therefore records its quota
//! beside the key, and says so loudly when it finds another one there.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ratelab_core::toolkit::{LogGate, RemoteForm};

use crate::connection::Connection;
use crate::key::redis_key;

/// How often a check records its quota by default: the first check, then
/// every 100th.
pub const DEFAULT_QUOTA_CHECK_EVERY: NonZeroU32 = NonZeroU32::new(100).unwrap();

/// The shortest time a registry entry is kept, ms: long enough that a
/// service checking a key now and then still meets the other's entry.
const MIN_REGISTRY_TTL_MS: u64 = 60_000;

/// Another quota found in the registry of a user key: two limiters (of
/// any language) use one key and one algorithm with different quotas, so
/// each of them keeps its own state and a caller gets both quotas.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuotaMismatch {
    /// The user key.
    pub key: Vec<u8>,
    /// This limiter's fingerprint input (`v3:gcra:200000,2000000,10`).
    pub ours: String,
    /// The one found in the registry, written by another limiter.
    pub theirs: String,
}

impl fmt::Display for QuotaMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "another limiter uses key {:?} with another quota ({}; this one {}): \
             they keep separate state, so each caller gets both quotas",
            String::from_utf8_lossy(&self.key[..self.key.len().min(64)]),
            self.theirs,
            self.ours
        )
    }
}

pub(crate) type MismatchCallback = Arc<dyn Fn(&QuotaMismatch) + Send + Sync>;

/// One store's side of the registry: which checks record the quota, and
/// what a mismatch does.
pub(crate) struct QuotaRegistry {
    every: Option<NonZeroU32>,
    checks: AtomicU64,
    mismatches: AtomicU64,
    /// `v3:<code>:<params>`, as every client writes it.
    ours: String,
    code: &'static str,
    ttl_ms: u64,
    callback: Option<MismatchCallback>,
    log_gate: LogGate,
}

impl QuotaRegistry {
    pub(crate) fn new<A: RemoteForm>(
        algorithm: &A,
        every: Option<NonZeroU32>,
        callback: Option<MismatchCallback>,
    ) -> Self {
        QuotaRegistry {
            every,
            checks: AtomicU64::new(0),
            mismatches: AtomicU64::new(0),
            ours: algorithm.fingerprint_input(),
            code: A::CODE,
            ttl_ms: MIN_REGISTRY_TTL_MS.max(algorithm.max_wait_micros().div_ceil(1000)),
            callback,
            log_gate: LogGate::default(),
        }
    }

    /// Whether this check records the quota: the first, then every
    /// `every`-th.
    pub(crate) fn due(&self) -> bool {
        match self.every {
            None => false,
            Some(every) => self
                .checks
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(u64::from(every.get())),
        }
    }

    /// Mismatches found so far.
    pub(crate) fn mismatches(&self) -> u64 {
        self.mismatches.load(Ordering::Relaxed)
    }

    /// `<prefix>:{<key>}:<code>:quota`: in the user key's slot.
    pub(crate) fn key(&self, prefix: &str, key: &[u8]) -> Vec<u8> {
        redis_key(prefix, key, format!("{}:quota", self.code))
    }

    /// Records this limiter's quota for `key` (`SET ... PX ... GET`) and
    /// reports another one found there. It never fails a decision: an
    /// error of the registry's command (a Redis before 6.2, an outage the
    /// check itself will meet) is ignored.
    pub(crate) async fn record(&self, connection: &Connection, prefix: &str, key: &[u8]) {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(prefix, key))
            .arg(&self.ours)
            .arg("PX")
            .arg(self.ttl_ms)
            .arg("GET");
        let Ok(theirs) = connection.query::<Option<Vec<u8>>>(&cmd).await else {
            return;
        };
        let Some(theirs) = theirs else { return };
        if theirs == self.ours.as_bytes() {
            return;
        }
        self.mismatches.fetch_add(1, Ordering::Relaxed);
        let mismatch = QuotaMismatch {
            key: key.to_vec(),
            ours: self.ours.clone(),
            theirs: String::from_utf8_lossy(&theirs).into_owned(),
        };
        if let Some(callback) = &self.callback {
            callback(&mismatch);
        }
        if let Some(suppressed) = self.log_gate.admit() {
            tracing::warn!(suppressed, "ratelab: {mismatch}");
        }
    }
}
