//! Health, as envoyproxy/ratelimit reports it: healthy when every part it
//! watches is (Redis, when `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION` asks for
//! it; a configuration with a domain, when
//! `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` does; no SIGTERM received),
//! on `grpc.health.v1` (the services "", `ratelimit` and
//! `envoy.service.ratelimit.v3.RateLimitService`) and on HTTP
//! `/healthcheck`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};

/// The gRPC services whose status is reported.
const SERVICES: [&str; 3] = [
    "",
    "ratelimit",
    "envoy.service.ratelimit.v3.RateLimitService",
];

/// The server's health. Cloning shares it.
#[derive(Clone, Debug)]
pub struct Health {
    reporter: HealthReporter,
    components: Arc<Mutex<BTreeMap<&'static str, bool>>>,
    ok: Arc<AtomicBool>,
}

impl Health {
    /// Healthy, unless `require_config`: then not until a configuration
    /// with a domain is loaded.
    pub async fn new(require_config: bool) -> Health {
        let mut components = BTreeMap::from([("sigterm", true)]);
        if require_config {
            components.insert("config", false);
        }
        let health = Health {
            reporter: HealthReporter::new(),
            components: Arc::new(Mutex::new(components)),
            ok: Arc::new(AtomicBool::new(false)),
        };
        health.publish().await;
        health
    }

    /// The `grpc.health.v1.Health` service.
    pub fn grpc_service(&self) -> HealthServer<HealthService> {
        HealthServer::new(HealthService::from_health_reporter(self.reporter.clone()))
    }

    /// Whether every part is healthy.
    pub fn is_ok(&self) -> bool {
        self.ok.load(Ordering::Relaxed)
    }

    async fn set(&self, component: &'static str, healthy: bool) {
        let changed = self.components.lock().insert(component, healthy) != Some(healthy);
        if changed {
            self.publish().await;
        }
    }

    async fn publish(&self) {
        let ok = self.components.lock().values().all(|&h| h);
        self.ok.store(ok, Ordering::Relaxed);
        let status = if ok {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for service in SERVICES {
            self.reporter.set_service_status(service, status).await;
        }
    }

    /// A configuration was loaded; `with_domains` whether it has any (only
    /// heard when the health requires one).
    pub async fn config_loaded(&self, with_domains: bool) {
        if self.components.lock().contains_key("config") {
            self.set("config", with_domains).await;
        }
    }

    /// Whether Redis answers (watched when asked to).
    pub async fn redis(&self, up: bool) {
        self.set("redis", up).await;
    }

    /// SIGTERM came: not healthy any more, so that load balancers stop
    /// sending while the calls in flight finish.
    pub async fn sigterm(&self) {
        self.set("sigterm", false).await;
    }
}
