//! `ShouldRateLimit`, answered as envoyproxy/ratelimit answers it, with
//! ratelab's algorithms where the configuration asks for them.
//!
//! Each descriptor's limit is found in the configuration (or the request's
//! own `limit` override, for a configured domain); limits another applied
//! limit `replaces` are dropped; `unlimited` ones answer `OK` with
//! `limit_remaining` 4294967295. Limits counted `envoy-fixed-window` (the
//! default) are counted as the reference counts them ([`crate::window`]);
//! those with one of ratelab's algorithms are counted all or nothing: each
//! takes its cost with a receipt, and every admission is given back when
//! the request is answered `OVER_LIMIT`. The overall code is `OVER_LIMIT`
//! when a descriptor outside shadow and quota mode is over its limit, or
//! when every quota-mode descriptor is; global shadow mode answers `OK`
//! whatever happens.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{
    ListValue, Struct, Value as ProtoValue, value::Kind as ProtoKind,
};
use futures::{FutureExt, StreamExt};
use parking_lot::Mutex;
use ratelab::http_core::wait_for_next_unit;
use ratelab::redis::{Connection, FailurePolicy, RedisStore, TimeSource};
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, Clock, Decision, Error as LimitError,
    ErrorKind, Keyed, KnownAlgorithm, Receipt, ceil_secs,
};
use tonic::{Request, Response, Status};

use crate::SharedConfig;
use crate::breaker::{Breaker, Permit};
use crate::clock::WallClock;
use crate::config::{Algorithm, Found, Limit, Unit};
use crate::lease::{self, Holder};
use crate::stats::{LimitStats, Stats};
use crate::window::{self, Hit, Jitter, StoreError};
use ratelab::lease::{LeaseConfig, Leased};

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
        /// Each call's timeout (a request of many descriptors gets more:
        /// see [`ServiceBuilder::timeout_per_descriptor`]).
        timeout: Duration,
        /// The prefix of the keys of ratelab's algorithms (the
        /// reference's counters use [`ServiceBuilder::cache_key_prefix`]).
        prefix: String,
    },
}

/// The headers added to answers (`response_headers_to_add`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseHeaders {
    /// None: the reference's default.
    None,
    /// The reference's, when `LIMIT_RESPONSE_HEADERS_ENABLED`: the limit,
    /// what remains and the seconds to the window's end of the descriptor
    /// nearest its limit (or the last one over it), under these names
    /// (`RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` by
    /// default).
    Reference {
        /// `LIMIT_LIMIT_HEADER`.
        limit: String,
        /// `LIMIT_REMAINING_HEADER`.
        remaining: String,
        /// `LIMIT_RESET_HEADER`.
        reset: String,
    },
    /// ratelab's: `RateLimit-Policy` and `RateLimit` (the IETF draft, one
    /// item per limit) and `Retry-After` on `OVER_LIMIT`.
    Ietf,
}

impl ResponseHeaders {
    /// The reference's headers under their default names.
    pub fn reference() -> Self {
        ResponseHeaders::Reference {
            limit: "RateLimit-Limit".to_owned(),
            remaining: "RateLimit-Remaining".to_owned(),
            reset: "RateLimit-Reset".to_owned(),
        }
    }
}

/// A limiter of any of ratelab's algorithms, in memory or on Redis.
type Counter = Arc<dyn AsyncRateLimiter + Send + Sync>;

/// Distinct quotas of ratelab's algorithms at most (each a limiter with
/// its own state): configured limits are few, and a request's overrides
/// may not add more than this.
const MAX_LIMITERS: usize = 4096;

/// Descriptors of one request checked at once against ratelab's
/// algorithms on Redis: enough to fill a round trip, few enough that one
/// request's calls do not queue far behind each other.
const CONCURRENT_CHECKS: usize = 64;

/// The `RateLimitService`. Build it with [`Service::builder`].
pub struct Service {
    config: SharedConfig,
    stats: Arc<Stats>,
    clock: Arc<dyn Clock>,
    /// The client's clock given to Redis scripts, when the clock is not
    /// the wall clock (tests).
    client_time: bool,
    default_algorithm: Algorithm,
    global_shadow_mode: bool,
    global_quota_mode: bool,
    headers: ResponseHeaders,
    dynamic_metadata: bool,
    max_descriptors: usize,
    envoy: window::Settings,
    jitter: Jitter,
    store: window::Store,
    redis: Option<RedisSide>,
    limiters: Mutex<HashMap<LimiterKey, Counter>>,
    /// How hot descriptors are leased, when they are (on Redis only).
    leases: Option<LeaseConfig>,
    /// Every leased limiter, to settle and release their leases.
    holders: Mutex<Vec<Arc<dyn Holder>>>,
    /// In memory, for `fallback` while Redis fails.
    fallback: Fallback,
}

/// A limiter per algorithm, quota, and whether it leases.
type LimiterKey = (AlgorithmKind, u32, Unit, bool);

#[derive(Debug)]
struct RedisSide {
    connection: Connection,
    per_second: Option<Connection>,
    on_failure: FailurePolicy,
    timeout: Duration,
    per_descriptor: Duration,
    prefix: String,
    breaker: Breaker,
    cache_refusals: usize,
}

struct Fallback {
    store: window::Store,
    limiters: Mutex<HashMap<LimiterKey, Counter>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("default_algorithm", &self.default_algorithm)
            .field("global_shadow_mode", &self.global_shadow_mode)
            .field("headers", &self.headers)
            .field("redis", &self.redis)
            .finish_non_exhaustive()
    }
}

/// How a [`Service`] counts and answers. Every setting has the reference's
/// default.
pub struct ServiceBuilder {
    config: SharedConfig,
    backend: Backend,
    per_second: Option<Connection>,
    stats: Arc<Stats>,
    clock: Option<Arc<dyn Clock>>,
    default_algorithm: Algorithm,
    global_shadow_mode: bool,
    global_quota_mode: bool,
    headers: ResponseHeaders,
    dynamic_metadata: bool,
    max_descriptors: usize,
    envoy: window::Settings,
    local_cache_bytes: usize,
    max_keys: usize,
    per_descriptor: Duration,
    leases: Option<LeaseConfig>,
}

impl std::fmt::Debug for ServiceBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceBuilder")
            .field("backend", &self.backend)
            .field("default_algorithm", &self.default_algorithm)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// Descriptors one request may have, by default: far beyond what Envoy
/// sends, low enough that one request cannot hold Redis for long.
pub const DEFAULT_MAX_DESCRIPTORS: usize = 10_000;

impl ServiceBuilder {
    /// Where the counts are kept (memory by default).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// A second Redis for the limits per second (the reference's
    /// `REDIS_PERSECOND_*`).
    pub fn per_second_redis(mut self, connection: Connection) -> Self {
        self.per_second = Some(connection);
        self
    }

    /// The statistics to count in (shared with the endpoints that serve
    /// them).
    pub fn stats(mut self, stats: Arc<Stats>) -> Self {
        self.stats = stats;
        self
    }

    /// The clock, in microseconds since the Unix epoch ([`WallClock`] by
    /// default). With another clock (a `ManualClock` in tests), ratelab's
    /// algorithms on Redis take their time from it too, rather than from
    /// Redis `TIME`.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The algorithm of limits that name none (`envoy-fixed-window`).
    pub fn default_algorithm(mut self, algorithm: Algorithm) -> Self {
        self.default_algorithm = algorithm;
        self
    }

    /// Global shadow mode (`SHADOW_MODE`): every answer `OK`, the
    /// refusals counted in `ratelimit.service.global_shadow_mode`.
    pub fn global_shadow_mode(mut self, on: bool) -> Self {
        self.global_shadow_mode = on;
        self
    }

    /// Global quota mode (`QUOTA_MODE`): every descriptor in quota mode.
    pub fn global_quota_mode(mut self, on: bool) -> Self {
        self.global_quota_mode = on;
        self
    }

    /// The headers added to answers (none by default).
    pub fn headers(mut self, headers: ResponseHeaders) -> Self {
        self.headers = headers;
        self
    }

    /// `RESPONSE_DYNAMIC_METADATA`: the domain, descriptors, hits and the
    /// admitted limits' `metadata` in each answer's `dynamic_metadata`.
    pub fn dynamic_metadata(mut self, on: bool) -> Self {
        self.dynamic_metadata = on;
        self
    }

    /// At most this many descriptors in one request (0: no bound);
    /// [`DEFAULT_MAX_DESCRIPTORS`] by default. More is `INVALID_ARGUMENT`.
    pub fn max_descriptors(mut self, max: usize) -> Self {
        self.max_descriptors = max;
        self
    }

    /// `CACHE_KEY_PREFIX` of the reference's counters ("").
    pub fn cache_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.envoy.prefix = prefix.into();
        self
    }

    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    pub fn stop_increment_when_over_limit(mut self, on: bool) -> Self {
        self.envoy.stop_increment_when_over_limit = on;
        self
    }

    /// `NEAR_LIMIT_RATIO` (0.8).
    pub fn near_limit_ratio(mut self, ratio: f32) -> Self {
        self.envoy.near_limit_ratio = ratio;
        self
    }

    /// `EXPIRATION_JITTER_MAX_SECONDS` (300).
    pub fn expiration_jitter_max_seconds(mut self, seconds: u64) -> Self {
        self.envoy.expiration_jitter_max_seconds = seconds;
        self
    }

    /// `LOCAL_CACHE_SIZE_IN_BYTES` (0: none): keys over their limit are
    /// answered from this process until their window ends (on Redis).
    pub fn local_cache_bytes(mut self, bytes: usize) -> Self {
        self.local_cache_bytes = bytes;
        self
    }

    /// Counters kept in memory at most (1,000,000).
    pub fn max_keys(mut self, max: usize) -> Self {
        self.max_keys = max;
        self
    }

    /// What each descriptor beyond the first adds to a request's Redis
    /// timeout (20 µs): a request of 10,000 descriptors gets 200 ms more,
    /// so that its size alone never makes it time out.
    pub fn timeout_per_descriptor(mut self, extra: Duration) -> Self {
        self.per_descriptor = extra;
        self
    }

    /// Lease hot descriptors (none by default): each limit counted by one
    /// of ratelab's algorithms on Redis, unless its YAML says
    /// `lease: false`, is admitted from blocks of units this replica
    /// leases from Redis, within [`Bound::leased`](ratelab::Bound::leased)
    /// for `config`'s lifetime. Ignored in memory (one replica: nothing to
    /// share); the binary refuses that at startup. Call
    /// [`Service::settle_leases`] now and then and
    /// [`Service::release_leases`] before stopping.
    pub fn leases(mut self, config: LeaseConfig) -> Result<Self, ratelab::lease::ConfigError> {
        config.validate()?;
        self.leases = Some(config);
        Ok(self)
    }

    /// The service.
    pub fn build(self) -> Service {
        let client_time = self.clock.is_some();
        let clock = self.clock.unwrap_or_else(|| Arc::new(WallClock));
        let memory = || window::Store::Memory(window::Memory::new(self.max_keys));
        let (store, redis) = match self.backend {
            Backend::Memory => (memory(), None),
            Backend::Redis {
                connection,
                on_failure,
                timeout,
                prefix,
            } => {
                let local = (self.local_cache_bytes > 0)
                    .then(|| window::LocalCache::new(self.local_cache_bytes));
                let store = window::Store::Redis {
                    redis: window::Redis {
                        main: connection.clone(),
                        per_second: self.per_second.clone(),
                    },
                    local,
                };
                let timeout = timeout.max(Duration::from_millis(1));
                let redis = RedisSide {
                    connection,
                    per_second: self.per_second,
                    on_failure,
                    timeout,
                    per_descriptor: self.per_descriptor,
                    prefix,
                    breaker: Breaker::new(
                        5,
                        (timeout * 2).max(Duration::from_secs(1)),
                        Duration::from_millis(500),
                        timeout * 2,
                    ),
                    // Roughly what the same bytes hold in the reference's cache.
                    cache_refusals: self.local_cache_bytes / 100,
                };
                (store, Some(redis))
            }
        };
        Service {
            config: self.config,
            stats: self.stats,
            clock,
            client_time,
            default_algorithm: self.default_algorithm,
            global_shadow_mode: self.global_shadow_mode,
            global_quota_mode: self.global_quota_mode,
            headers: self.headers,
            dynamic_metadata: self.dynamic_metadata,
            max_descriptors: self.max_descriptors,
            envoy: self.envoy,
            jitter: Jitter::new(),
            store,
            leases: if redis.is_some() { self.leases } else { None },
            redis,
            limiters: Mutex::new(HashMap::new()),
            holders: Mutex::new(Vec::new()),
            fallback: Fallback {
                store: window::Store::Memory(window::Memory::new(self.max_keys)),
                limiters: Mutex::new(HashMap::new()),
            },
        }
    }
}

struct BuildMemory(Arc<dyn Clock>);

impl AlgorithmVisitor for BuildMemory {
    type Output = Counter;
    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Counter {
        Arc::new(Keyed::with_clock(algorithm, self.0))
    }
}

struct BuildRedis<'a> {
    connection: Connection,
    redis: &'a RedisSide,
    time: TimeSource,
    /// Leased, on this clock.
    lease: Option<(LeaseConfig, Arc<dyn Clock>)>,
}

impl AlgorithmVisitor for BuildRedis<'_> {
    type Output = (Counter, Option<Arc<dyn Holder>>);
    fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
        let mut builder = RedisStore::builder(self.connection, algorithm)
            // The service applies its policy and its breaker itself, once
            // a request: see `crate::breaker`.
            .on_failure(FailurePolicy::Error)
            .breaker(0, Duration::ZERO)
            .timeout(self.redis.timeout)
            .prefix(self.redis.prefix.clone())
            .time_source(self.time);
        if self.redis.cache_refusals > 0 {
            builder = builder.cache_refusals(self.redis.cache_refusals);
        }
        let limiter = builder.build();
        let Some((config, clock)) = self.lease else {
            return (Arc::new(limiter), None);
        };
        if !A::REFUNDS {
            // Refused at startup (`lease::check`) where a limit requires a
            // lease: a lease could never give back what it did not use.
            return (Arc::new(limiter), None);
        }
        let leased = Leased::with_clock(limiter, config, clock)
            .expect("a configuration validated by ServiceBuilder::leases, on receipts");
        let leased = Arc::new(leased);
        (leased.clone(), Some(leased))
    }
}

/// One descriptor's limit, and how it is counted.
enum Applied {
    /// No limit: not configured, or replaced by another.
    None,
    /// `unlimited: true`.
    Unlimited,
    /// Counted as the reference counts.
    Envoy(Found, Unit),
    /// Counted by one of ratelab's algorithms.
    Ratelab(Found, AlgorithmKind, Unit),
}

/// One descriptor's outcome.
struct Outcome {
    code: Code,
    limit: Option<Arc<Limit>>,
    remaining: u32,
    /// `duration_until_reset`.
    reset: Option<Duration>,
    /// For ratelab's headers: the item's `t`, and the wait before a retry.
    next_unit: Duration,
    retry_after: Duration,
}

impl Outcome {
    fn plain(remaining: u32) -> Outcome {
        Outcome {
            code: Code::Ok,
            limit: None,
            remaining,
            reset: None,
            next_unit: Duration::ZERO,
            retry_after: Duration::ZERO,
        }
    }
}

/// A failed request: the status to answer.
type Failed = Status;

impl Service {
    /// A service on `config` and `backend` with the reference's defaults;
    /// `ietf_headers` adds ratelab's `RateLimit-Policy`, `RateLimit` and
    /// `Retry-After` to the answers (the reference adds none).
    pub fn new(config: SharedConfig, backend: Backend, ietf_headers: bool) -> Self {
        Service::builder(config)
            .backend(backend)
            .headers(if ietf_headers {
                ResponseHeaders::Ietf
            } else {
                ResponseHeaders::None
            })
            .build()
    }

    /// A service answering from `config`, which a reloader may swap.
    pub fn builder(config: SharedConfig) -> ServiceBuilder {
        ServiceBuilder {
            config,
            backend: Backend::Memory,
            per_second: None,
            stats: Arc::new(Stats::default()),
            clock: None,
            default_algorithm: Algorithm::EnvoyFixedWindow,
            global_shadow_mode: false,
            global_quota_mode: false,
            headers: ResponseHeaders::None,
            dynamic_metadata: false,
            max_descriptors: DEFAULT_MAX_DESCRIPTORS,
            envoy: window::Settings::default(),
            local_cache_bytes: 0,
            max_keys: ratelab::DEFAULT_MAX_KEYS,
            per_descriptor: Duration::from_micros(20),
            leases: None,
        }
    }

    /// Its statistics.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// The configuration it answers from.
    pub fn config(&self) -> &SharedConfig {
        &self.config
    }

    /// Sets the gauges of the local cache of keys over their limit
    /// (`ratelimit.localcache.*`), for the next export.
    pub fn refresh_gauges(&self) {
        if let window::Store::Redis {
            local: Some(local), ..
        } = &self.store
        {
            local.report(&self.stats);
        }
    }

    /// The lease settings `limit` is counted with, if leased.
    fn lease_of(&self, limit: &Limit, kind: AlgorithmKind) -> Option<LeaseConfig> {
        self.leases
            .filter(|_| lease::wanted(limit, Algorithm::Ratelab(kind)))
    }

    fn limiter(
        &self,
        kind: AlgorithmKind,
        limit: &Limit,
        unit: Unit,
        fallback: bool,
    ) -> Result<Counter, Status> {
        let leased = if fallback {
            None
        } else {
            self.lease_of(limit, kind)
        };
        let key = (kind, limit.requests_per_unit, unit, leased.is_some());
        let map = if fallback {
            &self.fallback.limiters
        } else {
            &self.limiters
        };
        {
            let limiters = map.lock();
            if let Some(limiter) = limiters.get(&key) {
                return Ok(limiter.clone());
            }
            // Each quota a request's override names is a limiter of its
            // own: a client cannot make them grow without bound.
            if limiters.len() >= MAX_LIMITERS {
                return Err(Status::resource_exhausted(format!(
                    "{}: more than {MAX_LIMITERS} distinct quotas of ratelab's algorithms (limit overrides?)",
                    limit.full_key
                )));
            }
        }
        let quota = crate::config::quota(limit.requests_per_unit, unit).map_err(|e| {
            Status::invalid_argument(format!("{}: {kind} cannot count {e}", limit.full_key))
        })?;
        let limiter = match (&self.redis, fallback) {
            (Some(redis), false) => {
                let connection = match (&redis.per_second, unit) {
                    (Some(c), Unit::Second) => c.clone(),
                    _ => redis.connection.clone(),
                };
                let time = if self.client_time {
                    TimeSource::Client(self.clock.clone())
                } else {
                    TimeSource::Redis
                };
                let (limiter, holder) = kind.visit(
                    quota,
                    BuildRedis {
                        connection,
                        redis,
                        time,
                        lease: leased.map(|config| (config, self.clock.clone())),
                    },
                );
                let mut map = map.lock();
                if let Some(existing) = map.get(&key) {
                    // Built meanwhile by another request: that one counts.
                    return Ok(existing.clone());
                }
                if let Some(holder) = holder {
                    self.holders.lock().push(holder);
                }
                map.insert(key, limiter.clone());
                return Ok(limiter);
            }
            _ => kind.visit(quota, BuildMemory(self.clock.clone())),
        };
        Ok(map.lock().entry(key).or_insert(limiter).clone())
    }

    /// The lease settings, when this service leases hot descriptors.
    pub fn leasing(&self) -> Option<LeaseConfig> {
        self.leases
    }

    /// Settles every lease past its lifetime: what it did not use goes
    /// back to Redis. The binary calls it every lease lifetime, so that a
    /// descriptor gone quiet does not hold its units until its next
    /// check. Answers the settlements sent; a failed one is logged and
    /// its units stay charged (the safe side).
    pub async fn settle_leases(&self) -> usize {
        self.each_holder(|h| h.settle_expired()).await
    }

    /// Ends every lease and gives back what each did not use: call it
    /// before the replica stops (the binary does on SIGTERM and ctrl-c).
    /// A replica stopped without it leaves its leases' unused units
    /// charged until the algorithm frees them on its own (a debt within
    /// its burst's time, a window when it ends). Answers the settlements
    /// sent.
    pub async fn release_leases(&self) -> usize {
        self.each_holder(|h| h.release_all()).await
    }

    async fn each_holder<F>(&self, call: F) -> usize
    where
        F: for<'h> Fn(&'h dyn Holder) -> futures::future::BoxFuture<'h, Result<usize, LimitError>>,
    {
        let holders: Vec<Arc<dyn Holder>> = self.holders.lock().clone();
        let mut settled = 0;
        for holder in &holders {
            match call(holder.as_ref()).await {
                Ok(n) => settled += n,
                Err(error) => {
                    tracing::warn!(%error, "cannot give back what a lease did not use: it stays charged until the limit frees it");
                }
            }
        }
        settled
    }

    /// The answer to `request`, or the status to fail it with.
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let service_error = |message: String| {
            self.stats
                .counter("ratelimit.service.call.should_rate_limit.service_error")
                .inc();
            Status::invalid_argument(message)
        };
        if request.domain.is_empty() {
            return Err(service_error("rate limit domain must not be empty".into()));
        }
        if request.descriptors.is_empty() {
            return Err(service_error(
                "rate limit descriptor list must not be empty".into(),
            ));
        }
        if self.max_descriptors > 0 && request.descriptors.len() > self.max_descriptors {
            return Err(service_error(format!(
                "{} descriptors in one request: at most {} (--max-descriptors)",
                request.descriptors.len(),
                self.max_descriptors
            )));
        }
        let config = self.config.read().clone();
        if let Some(why) = config.refusal() {
            self.stats
                .counter("ratelimit.service.call.should_rate_limit.service_error")
                .inc();
            return Err(Status::unavailable(format!(
                "no rate limit configuration loaded: {why}"
            )));
        }
        let now_micros = self.clock.now_micros();
        let now = now_micros / 1_000_000;

        // Each descriptor's limit.
        let known_domain = config.domain(&request.domain).is_some();
        let mut found = Vec::with_capacity(request.descriptors.len());
        for (i, descriptor) in request.descriptors.iter().enumerate() {
            if !known_domain {
                self.stats.domain_not_found(&request.domain);
                found.push(None);
                continue;
            }
            let entries = entries(descriptor);
            found.push(match &descriptor.limit {
                Some(over) => {
                    let unit = Unit::from_proto(over.unit).ok_or_else(|| {
                        service_error(format!(
                            "descriptor {i}: the limit override has no valid unit ({})",
                            over.unit
                        ))
                    })?;
                    let key = descriptor_key(&request.domain, &entries);
                    Some(Found {
                        limit: Arc::new(Limit::from_override(
                            key.clone(),
                            over.requests_per_unit,
                            unit,
                        )),
                        stats_key: key,
                        share_patterns: None,
                        metadata: None,
                    })
                }
                None => config.find(&request.domain, &entries),
            });
        }
        // Every name a found limit replaces (unlimited ones too).
        let replacing: HashSet<String> = found
            .iter()
            .flatten()
            .flat_map(|f| f.limit.replaces.iter().cloned())
            .collect();
        let applied: Vec<Applied> = found
            .into_iter()
            .map(|found| match found {
                None => Applied::None,
                Some(f) if f.limit.unlimited => Applied::Unlimited,
                Some(f) if !f.limit.name.is_empty() && replacing.contains(&f.limit.name) => {
                    Applied::None
                }
                Some(f) => {
                    let unit = f.limit.unit.expect("a limited limit has a unit");
                    match f.limit.algorithm.unwrap_or(self.default_algorithm) {
                        Algorithm::EnvoyFixedWindow => Applied::Envoy(f, unit),
                        Algorithm::Ratelab(kind) => Applied::Ratelab(f, kind, unit),
                    }
                }
            })
            .collect();
        let mut hits: Vec<u64> = Vec::with_capacity(request.descriptors.len());
        for (i, d) in request.descriptors.iter().enumerate() {
            hits.push(match &d.hits_addend {
                // Redis adds signed 64-bit numbers: more would wrap to a
                // negative increment and lower the counter.
                Some(h) if i64::try_from(h.value).is_err() => {
                    return Err(service_error(format!(
                        "descriptor {i}: hits_addend {} is above {}",
                        h.value,
                        i64::MAX
                    )));
                }
                Some(h) => h.value,
                None => u64::from(request.hits_addend.max(1)),
            });
        }

        let (envoy, ratelab) = futures::join!(
            self.envoy_pass(request, &applied, &hits, now),
            self.ratelab_pass(request, &applied, &hits)
        );
        let mut outcomes: Vec<Option<Outcome>> = (0..applied.len()).map(|_| None).collect();
        let receipts = match ratelab {
            Ok((answers, receipts)) => {
                for (i, outcome) in answers {
                    outcomes[i] = Some(outcome);
                }
                receipts
            }
            Err((status, receipts)) => {
                self.give_back(&request.domain, receipts).await;
                return Err(status);
            }
        };
        match envoy {
            Ok(answers) => {
                for (i, outcome) in answers {
                    outcomes[i] = Some(outcome);
                }
            }
            Err(status) => {
                self.give_back(&request.domain, receipts).await;
                return Err(status);
            }
        }
        let outcomes: Vec<Outcome> = outcomes
            .into_iter()
            .zip(&applied)
            .map(|(outcome, applied)| match applied {
                Applied::Unlimited => Outcome::plain(u32::MAX),
                _ => outcome.unwrap_or_else(|| Outcome::plain(0)),
            })
            .collect();

        let response = self.respond(request, &applied, &outcomes, now);
        if response.overall_code == Code::OverLimit as i32 {
            // All or nothing: what ratelab's algorithms took goes back.
            self.give_back(&request.domain, receipts).await;
        }
        Ok(response)
    }

    /// The overall code, the statuses and the headers, from each
    /// descriptor's outcome, as the reference's `shouldRateLimitWorker`.
    fn respond(
        &self,
        request: &RateLimitRequest,
        applied: &[Applied],
        outcomes: &[Outcome],
        now: u64,
    ) -> RateLimitResponse {
        let mut response = RateLimitResponse::default();
        let mut nearest: Option<usize> = None;
        let mut min_remaining = u32::MAX;
        let mut passed = Vec::new();
        let (mut refused, mut quota_refused, mut quota_total) = (0, 0, 0);
        let reference_headers = matches!(self.headers, ResponseHeaders::Reference { .. });
        for (i, (outcome, applied)) in outcomes.iter().zip(applied).enumerate() {
            if reference_headers && outcome.limit.is_some() && outcome.remaining < min_remaining {
                nearest = Some(i);
                min_remaining = outcome.remaining;
            }
            if matches!(applied, Applied::Unlimited) {
                continue;
            }
            let quota =
                self.global_quota_mode || outcome.limit.as_ref().is_some_and(|l| l.quota_mode);
            if outcome.code == Code::OverLimit {
                if quota {
                    quota_refused += 1;
                } else {
                    refused += 1;
                    nearest = Some(i);
                    min_remaining = 0;
                }
            } else {
                passed.push(i);
            }
            if quota {
                quota_total += 1;
            }
        }
        let mut code = if refused > 0 || (quota_total > 0 && quota_total == quota_refused) {
            Code::OverLimit
        } else {
            Code::Ok
        };
        response.statuses = outcomes.iter().map(status).collect();
        match &self.headers {
            ResponseHeaders::Reference {
                limit,
                remaining,
                reset,
            } => {
                if let Some(i) = nearest
                    && let Some(current) = &outcomes[i].limit
                {
                    let unit = current.unit.expect("a limit with a unit");
                    let now = self.clock.now_micros() / 1_000_000;
                    response.response_headers_to_add = vec![
                        header(limit, current.requests_per_unit.to_string()),
                        header(remaining, outcomes[i].remaining.to_string()),
                        header(reset, window::until_reset(unit, now).to_string()),
                    ];
                }
            }
            ResponseHeaders::Ietf => {
                response.response_headers_to_add = ietf_headers(outcomes, code, now);
            }
            ResponseHeaders::None => {}
        }
        if code == Code::OverLimit && self.global_shadow_mode {
            code = Code::Ok;
            self.stats
                .counter("ratelimit.service.global_shadow_mode")
                .inc();
        }
        if self.dynamic_metadata {
            response.dynamic_metadata = Some(dynamic_metadata(request, &passed, applied));
        }
        response.overall_code = code as i32;
        response
    }

    /// The descriptors counted as the reference counts.
    async fn envoy_pass(
        &self,
        request: &RateLimitRequest,
        applied: &[Applied],
        hits: &[u64],
        now: u64,
    ) -> Result<Vec<(usize, Outcome)>, Failed> {
        let mut indexes = Vec::new();
        let mut batch = Vec::new();
        for (i, applied) in applied.iter().enumerate() {
            if let Applied::Envoy(found, unit) = applied {
                let entries = entries(&request.descriptors[i]);
                indexes.push(i);
                batch.push(Hit {
                    key: window::cache_key(
                        &self.envoy.prefix,
                        &request.domain,
                        &entries,
                        found.share_patterns.as_deref(),
                        *unit,
                        now,
                    ),
                    hits: hits[i],
                    limit: found.limit.clone(),
                    unit: *unit,
                    stats: self.stats.limit(&found.stats_key),
                });
            }
        }
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let answers = match &self.redis {
            None => {
                window::check(
                    &self.store,
                    &self.envoy,
                    &self.jitter,
                    &batch,
                    now,
                    Duration::MAX,
                )
                .await
            }
            Some(redis) => {
                let extra = u32::try_from(batch.len() - 1).unwrap_or(u32::MAX);
                let timeout = redis
                    .timeout
                    .saturating_add(redis.per_descriptor.saturating_mul(extra));
                self.on_redis(redis, |_| {
                    window::check(&self.store, &self.envoy, &self.jitter, &batch, now, timeout)
                })
                .await
            }
        };
        let answers = match answers {
            Ok(answers) => answers,
            Err(StoreError::Data(why)) => {
                tracing::warn!(domain = %request.domain, error = %why, "cannot decide");
                return Err(Status::internal(why));
            }
            Err(StoreError::Outage(why)) => {
                let policy = self
                    .redis
                    .as_ref()
                    .map_or(FailurePolicy::Error, |r| r.on_failure);
                tracing::warn!(domain = %request.domain, error = %why, policy = ?policy, "Redis is failing: answered by the failure policy");
                match policy {
                    FailurePolicy::Error => {
                        return Err(Status::unavailable(format!(
                            "the backend is unavailable: {why}"
                        )));
                    }
                    FailurePolicy::Fallback => window::check(
                        &self.fallback.store,
                        &self.envoy,
                        &self.jitter,
                        &batch,
                        now,
                        Duration::MAX,
                    )
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?,
                    FailurePolicy::Allow | FailurePolicy::Deny => batch
                        .iter()
                        .map(|hit| {
                            let allow = policy == FailurePolicy::Allow;
                            window::Answer {
                                over: !allow,
                                ok: allow || hit.limit.shadow,
                                remaining: if allow {
                                    u32::try_from(
                                        u64::from(hit.limit.requests_per_unit)
                                            .saturating_sub(hit.hits),
                                    )
                                    .unwrap_or(0)
                                } else {
                                    0
                                },
                            }
                        })
                        .collect(),
                }
            }
        };
        Ok(indexes
            .into_iter()
            .zip(answers)
            .zip(&batch)
            .map(|((i, answer), hit)| {
                let reset = window::until_reset(hit.unit, now);
                (
                    i,
                    Outcome {
                        code: if answer.ok { Code::Ok } else { Code::OverLimit },
                        limit: Some(hit.limit.clone()),
                        remaining: answer.remaining,
                        reset: Some(Duration::from_secs(reset)),
                        next_unit: if answer.remaining > 0 {
                            Duration::ZERO
                        } else {
                            Duration::from_secs(reset)
                        },
                        retry_after: Duration::from_secs(reset),
                    },
                )
            })
            .collect())
    }

    /// Runs `call` against Redis through the breaker: an open breaker
    /// answers at once as an outage, without calling.
    async fn on_redis<T, F, Fut>(&self, redis: &RedisSide, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(()) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let permit = redis.breaker.permit();
        if permit == Permit::Open {
            self.redis_error();
            return Err(StoreError::Outage("the circuit breaker is open".into()));
        }
        let result = call(()).await;
        match &result {
            Err(StoreError::Outage(_)) => {
                self.redis_error();
                redis.breaker.failure(permit == Permit::Probe);
            }
            Err(StoreError::Data(_)) => {
                self.redis_error();
                redis.breaker.success();
            }
            Ok(_) => redis.breaker.success(),
        }
        result
    }

    fn redis_error(&self) {
        self.stats
            .counter("ratelimit.service.call.should_rate_limit.redis_error")
            .inc();
    }

    /// The descriptors counted by ratelab's algorithms: each check with a
    /// receipt when there are several, so that a refused request can give
    /// back what the others took.
    async fn ratelab_pass(
        &self,
        request: &RateLimitRequest,
        applied: &[Applied],
        hits: &[u64],
    ) -> Result<(Vec<(usize, Outcome)>, Vec<(Counter, Receipt)>), (Failed, Vec<(Counter, Receipt)>)>
    {
        let mut work = Vec::new();
        for (i, applied) in applied.iter().enumerate() {
            if let Applied::Ratelab(found, kind, unit) = applied {
                let mut entries = entries(&request.descriptors[i]);
                let shared;
                if let Some(patterns) = &found.share_patterns {
                    shared = patterns.clone();
                    for (entry, pattern) in entries.iter_mut().zip(&shared) {
                        if !pattern.is_empty() {
                            entry.1 = pattern;
                        }
                    }
                }
                let key = counter_key(&request.domain, &entries);
                work.push((i, found, *kind, *unit, key));
            }
        }
        if work.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let several = work.len() > 1;
        let mut limiters = Vec::with_capacity(work.len());
        for (_, found, kind, unit, _) in &work {
            limiters.push(if found.limit.requests_per_unit == 0 {
                None
            } else {
                Some(
                    self.limiter(*kind, &found.limit, *unit, false)
                        .map_err(|s| (s, Vec::new()))?,
                )
            });
        }

        let permit = match &self.redis {
            Some(redis) => redis.breaker.permit(),
            None => Permit::Call,
        };
        type Checked = Result<Option<(Counter, (Decision, Option<Receipt>))>, LimitError>;
        let checks: Vec<futures::future::BoxFuture<'_, Checked>> = work
            .iter()
            .zip(&limiters)
            .map(|((i, _, _, _, key), limiter)| {
                let cost = hits[*i];
                let limiter = limiter.clone();
                async move {
                    let Some(limiter) = limiter else {
                        return Ok(None);
                    };
                    let Ok(cost) = u32::try_from(cost) else {
                        return Ok(None);
                    };
                    if permit == Permit::Open {
                        return Err(LimitError::CircuitOpen(Duration::from_millis(500)));
                    }
                    let answer = if several {
                        limiter.check_with_receipt_async(key, cost).await
                    } else {
                        limiter
                            .check_async(key, cost)
                            .map(|a| a.map(|d| (d, None)))
                            .await
                    };
                    answer.map(|a| Some((limiter, a)))
                }
                .boxed()
            })
            .collect();
        let answers: Vec<_> = futures::stream::iter(checks)
            .buffered(CONCURRENT_CHECKS)
            .collect()
            .await;

        let mut receipts = Vec::new();
        let mut outcomes = Vec::with_capacity(work.len());
        let mut outage = None;
        let mut data_error = None;
        let mut answered = false;
        for ((i, found, kind, unit, key), answer) in work.iter().zip(answers) {
            let limit = &found.limit;
            let stats = self.stats.limit(&found.stats_key);
            let cost = hits[*i];
            let decision = match answer {
                Ok(Some((limiter, (decision, receipt)))) => {
                    answered = true;
                    if let Some(receipt) = receipt {
                        receipts.push((limiter.clone(), receipt));
                    }
                    Some((decision, Some(limiter)))
                }
                // A limit of 0, or a cost no quota can hold.
                Ok(None) => None,
                Err(e) if e.kind() == ErrorKind::CostTooHigh => {
                    answered = true;
                    None
                }
                Err(e) if e.is_unavailable() => {
                    outage.get_or_insert(e.to_string());
                    let policy = self
                        .redis
                        .as_ref()
                        .map_or(FailurePolicy::Error, |r| r.on_failure);
                    match policy {
                        FailurePolicy::Error => continue,
                        FailurePolicy::Allow => Some((
                            Decision::admitted(u64::from(limit.requests_per_unit)).with_remaining(
                                u64::from(limit.requests_per_unit).saturating_sub(cost),
                            ),
                            None,
                        )),
                        FailurePolicy::Deny => None,
                        FailurePolicy::Fallback => {
                            let fallback = self
                                .limiter(*kind, limit, *unit, true)
                                .map_err(|s| (s, std::mem::take(&mut receipts)))?;
                            let cost = u32::try_from(cost).unwrap_or(u32::MAX);
                            match fallback.check_with_receipt_async(key, cost).await {
                                Ok((decision, receipt)) => {
                                    if let Some(receipt) = receipt {
                                        receipts.push((fallback.clone(), receipt));
                                    }
                                    Some((decision, Some(fallback)))
                                }
                                Err(_) => None,
                            }
                        }
                    }
                }
                Err(e) => {
                    answered = true;
                    data_error.get_or_insert(e.to_string());
                    continue;
                }
            };
            let outcome = match decision {
                Some((decision, limiter)) => {
                    record(&stats, limit, cost, &decision, self.envoy.near_limit_ratio);
                    let code = if decision.allowed || limit.shadow {
                        Code::Ok
                    } else {
                        Code::OverLimit
                    };
                    let next_unit = match &limiter {
                        Some(l) => wait_for_next_unit(
                            &decision,
                            l.bound(),
                            u32::try_from(cost).unwrap_or(u32::MAX),
                        ),
                        None => Duration::ZERO,
                    };
                    Outcome {
                        code,
                        limit: Some(limit.clone()),
                        remaining: u32::try_from(decision.remaining).unwrap_or(u32::MAX),
                        reset: Some(decision.reset_after()),
                        next_unit,
                        retry_after: decision.retry_after(),
                    }
                }
                None => {
                    // Refused whole: over the limit, retried never sooner
                    // than a unit.
                    let unit_length = unit.duration();
                    let refused = Decision::refused(u64::from(limit.requests_per_unit));
                    record(&stats, limit, cost, &refused, self.envoy.near_limit_ratio);
                    Outcome {
                        code: if limit.shadow {
                            Code::Ok
                        } else {
                            Code::OverLimit
                        },
                        limit: Some(limit.clone()),
                        remaining: 0,
                        reset: Some(unit_length),
                        next_unit: unit_length,
                        retry_after: unit_length,
                    }
                }
            };
            outcomes.push((*i, outcome));
        }
        if let Some(redis) = &self.redis {
            if outage.is_some() {
                self.redis_error();
                redis.breaker.failure(permit == Permit::Probe);
            } else if answered {
                redis.breaker.success();
            }
        }
        let policy = self
            .redis
            .as_ref()
            .map_or(FailurePolicy::Error, |r| r.on_failure);
        if let Some(why) = data_error {
            tracing::warn!(domain = %request.domain, error = %why, "cannot decide");
            return Err((Status::internal(why), receipts));
        }
        if let Some(why) = outage {
            tracing::warn!(domain = %request.domain, error = %why, policy = ?policy, "Redis is failing: answered by the failure policy");
            if policy == FailurePolicy::Error {
                return Err((
                    Status::unavailable(format!("the backend is unavailable: {why}")),
                    receipts,
                ));
            }
        }
        Ok((outcomes, receipts))
    }

    /// Gives back, all at once, what the admissions of a request that is
    /// not served took. A refund that fails leaves its units taken.
    async fn give_back(&self, domain: &str, receipts: Vec<(Counter, Receipt)>) {
        if receipts.is_empty() {
            return;
        }
        let refunds = receipts
            .into_iter()
            .map(|(limiter, receipt)| async move { limiter.refund_async(receipt).await });
        for result in futures::future::join_all(refunds).await {
            if let Err(e) = result {
                tracing::warn!(domain = %domain, error = %e, "cannot give back what a refused or failed request took: it stays taken");
            }
        }
    }
}

/// A descriptor's entries as (key, value).
fn entries(descriptor: &RateLimitDescriptor) -> Vec<(&str, &str)> {
    descriptor
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect()
}

/// The reference's `descriptorKey`: the statistics key of a limit override.
fn descriptor_key(domain: &str, entries: &[(&str, &str)]) -> String {
    let parts: Vec<String> = entries
        .iter()
        .map(|(k, v)| {
            if v.is_empty() {
                (*k).to_owned()
            } else {
                format!("{k}_{v}")
            }
        })
        .collect();
    format!("{domain}.{}", parts.join("."))
}

/// The counter key of ratelab's algorithms: the domain and every entry,
/// unambiguous whatever the values hold.
fn counter_key(domain: &str, entries: &[(&str, &str)]) -> Vec<u8> {
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

/// A decision of ratelab's algorithms in the reference's statistics.
fn record(stats: &LimitStats, limit: &Limit, cost: u64, decision: &Decision, near_ratio: f32) {
    stats.total_hits.add(cost);
    if decision.allowed {
        stats.within_limit.add(cost);
        let rpu = u64::from(limit.requests_per_unit);
        let near = window::near_threshold(rpu, near_ratio);
        let used = rpu.saturating_sub(decision.remaining);
        if used > near {
            stats.near_limit.add(cost.min(used - near));
        }
    } else {
        stats.over_limit.add(cost);
        if limit.shadow {
            stats.shadow_mode.add(cost);
        }
    }
}

fn status(outcome: &Outcome) -> DescriptorStatus {
    DescriptorStatus {
        code: outcome.code as i32,
        current_limit: outcome.limit.as_ref().map(|l| RateLimit {
            name: l.name.clone(),
            requests_per_unit: l.requests_per_unit,
            unit: l.unit.map_or(0, Unit::to_proto),
        }),
        limit_remaining: outcome.remaining,
        duration_until_reset: outcome
            .reset
            .map(|d| envoy_types::pb::google::protobuf::Duration {
                seconds: d.as_secs() as i64,
                nanos: d.subsec_nanos() as i32,
            }),
        ..Default::default()
    }
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..Default::default()
    }
}

/// ratelab's headers: `RateLimit-Policy` and `RateLimit` (one item per
/// limit, its name a structured-field string), and `Retry-After` on
/// `OVER_LIMIT`.
fn ietf_headers(outcomes: &[Outcome], code: Code, _now: u64) -> Vec<HeaderValue> {
    let mut policy = Vec::new();
    let mut items = Vec::new();
    let mut retry_after: Option<Duration> = None;
    for outcome in outcomes {
        let Some(limit) = &outcome.limit else {
            continue;
        };
        let name = sf_string(if limit.name.is_empty() {
            &limit.full_key
        } else {
            &limit.name
        });
        let window = limit.unit.map_or(0, Unit::seconds);
        policy.push(format!("{name};q={};w={window}", limit.requests_per_unit));
        items.push(format!(
            "{name};r={};t={}",
            outcome.remaining,
            ceil_secs(outcome.next_unit)
        ));
        if outcome.code == Code::OverLimit {
            retry_after =
                Some(retry_after.map_or(outcome.retry_after, |w| w.max(outcome.retry_after)));
        }
    }
    if policy.is_empty() {
        return Vec::new();
    }
    let mut headers = vec![
        header("RateLimit-Policy", policy.join(", ")),
        header("RateLimit", items.join(", ")),
    ];
    if code == Code::OverLimit
        && let Some(wait) = retry_after
    {
        headers.push(header("Retry-After", ceil_secs(wait).max(1).to_string()));
    }
    headers
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

fn string_value(s: String) -> ProtoValue {
    ProtoValue {
        kind: Some(ProtoKind::StringValue(s)),
    }
}

/// The reference's `ratelimitToMetadata`: the domain, the descriptors
/// (their entries as `key=value`, limit override and hits), the request's
/// hits, and the metadata of the limits of the descriptors that passed.
/// A limit override in protobuf's text form, as the reference's metadata
/// gives it: fields at zero left out, a unit by its name (by its number
/// when it has none).
fn override_text(limit: &RateLimitOverride) -> String {
    let mut parts = Vec::new();
    if limit.requests_per_unit != 0 {
        parts.push(format!("requests_per_unit:{}", limit.requests_per_unit));
    }
    if limit.unit != 0 {
        parts.push(match Unit::from_proto(limit.unit) {
            Some(unit) => format!("unit:{}", unit.proto_name()),
            None => format!("unit:{}", limit.unit),
        });
    }
    parts.join(" ")
}

fn dynamic_metadata(request: &RateLimitRequest, passed: &[usize], applied: &[Applied]) -> Struct {
    let mut fields = HashMap::new();
    fields.insert("domain".to_owned(), string_value(request.domain.clone()));
    let descriptors = request
        .descriptors
        .iter()
        .map(|d| {
            let mut f = HashMap::new();
            let entries = d
                .entries
                .iter()
                .map(|e| string_value(format!("{}={}", e.key, e.value)))
                .collect();
            f.insert(
                "entries".to_owned(),
                ProtoValue {
                    kind: Some(ProtoKind::ListValue(ListValue { values: entries })),
                },
            );
            if let Some(limit) = &d.limit {
                f.insert("limit".to_owned(), string_value(override_text(limit)));
            }
            if let Some(hits) = &d.hits_addend {
                f.insert(
                    "hitsAddend".to_owned(),
                    ProtoValue {
                        kind: Some(ProtoKind::NumberValue(hits.value as f64)),
                    },
                );
            }
            ProtoValue {
                kind: Some(ProtoKind::StructValue(Struct { fields: f })),
            }
        })
        .collect();
    fields.insert(
        "descriptors".to_owned(),
        ProtoValue {
            kind: Some(ProtoKind::ListValue(ListValue {
                values: descriptors,
            })),
        },
    );
    if request.hits_addend != 0 {
        fields.insert(
            "hitsAddend".to_owned(),
            ProtoValue {
                kind: Some(ProtoKind::NumberValue(f64::from(request.hits_addend))),
            },
        );
    }
    let mut metadata = Struct::default();
    for &i in passed {
        let found = match &applied[i] {
            Applied::Envoy(f, _) | Applied::Ratelab(f, _, _) => f,
            _ => continue,
        };
        if let Some(m) = &found.metadata {
            merge(&mut metadata, m);
        }
    }
    if !metadata.fields.is_empty() {
        fields.insert(
            "metadata".to_owned(),
            ProtoValue {
                kind: Some(ProtoKind::StructValue(metadata)),
            },
        );
    }
    Struct { fields }
}

/// The reference's `mergeMetadata`: nested structures merged, the first
/// value of any other field kept.
fn merge(into: &mut Struct, from: &Struct) {
    for (key, value) in &from.fields {
        match into.fields.get_mut(key) {
            Some(ProtoValue {
                kind: Some(ProtoKind::StructValue(existing)),
            }) => {
                if let Some(ProtoKind::StructValue(other)) = &value.kind {
                    merge(existing, other);
                }
            }
            Some(_) => {}
            None => {
                into.fields.insert(key.clone(), value.clone());
            }
        }
    }
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
        self.stats.call(start.elapsed());
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
mod tests;
