//! Every algorithm on Redis and in memory, built by name, and a shared
//! runtime and server for the tests of one file.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use ratelab_core::{AsyncRateLimiter, Clock, Quota};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_leaky_bucket::{LeakyMeter, LeakyQueue};
use ratelab_redis::{Connection, FailurePolicy, RedisLimiter, RedisLimiterBuilder, TimeSource};
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_testkit::redis::RedisServer;
use ratelab_token_bucket::TokenBucket;

/// The seven algorithms' names.
pub(crate) const NAMES: [&str; 7] = [
    "fixed-window",
    "sliding-log",
    "sliding-counter",
    "leaky-meter",
    "leaky-queue",
    "token-bucket",
    "gcra",
];

/// How to configure each limiter a test builds.
#[derive(Clone)]
pub(crate) struct Options {
    pub(crate) time: TimeSource,
    pub(crate) prefix: String,
    pub(crate) failure: FailurePolicy,
    pub(crate) timeout: std::time::Duration,
}

impl Options {
    pub(crate) fn new(time: TimeSource) -> Self {
        Options {
            time,
            prefix: unique_prefix(),
            failure: FailurePolicy::Error,
            timeout: std::time::Duration::from_secs(2),
        }
    }

    fn apply<A: ratelab_redis::RedisAlgorithm>(
        &self,
        b: RedisLimiterBuilder<A>,
    ) -> RedisLimiter<A> {
        b.time_source(self.time.clone())
            .prefix(self.prefix.clone())
            .on_failure(self.failure)
            .timeout(self.timeout)
            .build()
    }
}

/// A Redis limiter of the named algorithm.
pub(crate) fn redis(
    name: &str,
    quota: Quota,
    connection: &Connection,
    options: &Options,
) -> Box<dyn AsyncRateLimiter> {
    let c = connection.clone();
    match name {
        "fixed-window" => {
            Box::new(options.apply(RedisLimiter::builder(c, FixedWindow::new(quota))))
        }
        "sliding-log" => Box::new(options.apply(RedisLimiter::builder(c, SlidingLog::new(quota)))),
        "sliding-counter" => {
            Box::new(options.apply(RedisLimiter::builder(c, SlidingCounter::new(quota))))
        }
        "leaky-meter" => Box::new(options.apply(RedisLimiter::builder(c, LeakyMeter::new(quota)))),
        "leaky-queue" => Box::new(options.apply(RedisLimiter::builder(c, LeakyQueue::new(quota)))),
        "token-bucket" => {
            Box::new(options.apply(RedisLimiter::builder(c, TokenBucket::new(quota))))
        }
        "gcra" => Box::new(options.apply(RedisLimiter::builder(c, Gcra::new(quota)))),
        other => panic!("no algorithm named {other}"),
    }
}

/// A client time source on `clock`.
pub(crate) fn client_time(clock: &ratelab_core::ManualClock) -> TimeSource {
    TimeSource::Client(Arc::new(clock.clone()) as Arc<dyn Clock>)
}

/// A key prefix no other test of this process uses.
pub(crate) fn unique_prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "test{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// One server for every test of a file, and a runtime to drive it.
pub(crate) fn shared() -> &'static (RedisServer, tokio::runtime::Runtime, Connection) {
    static SHARED: OnceLock<(RedisServer, tokio::runtime::Runtime, Connection)> = OnceLock::new();
    SHARED.get_or_init(|| {
        let server = RedisServer::start();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let connection = runtime
            .block_on(Connection::single(&server.url()))
            .expect("connect to the test server");
        (server, runtime, connection)
    })
}
