//! Every algorithm built by kind (through [`AlgorithmKind`], the one
//! registry), in memory and on Redis, and a shared runtime and server for the
//! tests of one file.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use ratelab::redis::{
    Connection, FailurePolicy, RedisLimiter, RedisLimiterBuilder, RedisStore, TimeSource,
};
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, Clock, Decision, Direct, Error,
    KnownAlgorithm, ManualClock, Quota, RateLimiter,
};
use ratelab_testkit::redis::RedisServer;

/// An algorithm named by kind or by name (tables of expected results name
/// them as the reports do).
pub(crate) trait Named: Copy {
    fn kind(self) -> AlgorithmKind;
}

impl Named for AlgorithmKind {
    fn kind(self) -> AlgorithmKind {
        self
    }
}

impl Named for &str {
    fn kind(self) -> AlgorithmKind {
        self.parse().unwrap_or_else(|e| panic!("{e}"))
    }
}

/// A keyed in-memory limiter of `kind`.
pub(crate) fn keyed(kind: impl Named, quota: Quota, clock: ManualClock) -> Box<dyn RateLimiter> {
    kind.kind().keyed(quota, clock)
}

/// A single-bucket limiter, erased to a closure `cost -> decision`.
pub(crate) type DirectCheck = Box<dyn Fn(u32) -> Result<Decision, Error> + Send + Sync>;

/// A single-bucket in-memory limiter of `kind`.
pub(crate) fn direct<C: Clock + 'static>(kind: impl Named, quota: Quota, clock: C) -> DirectCheck {
    struct BuildDirect<C>(C);
    impl<C: Clock + 'static> AlgorithmVisitor for BuildDirect<C> {
        type Output = DirectCheck;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> DirectCheck {
            let limiter = Direct::with_clock(algorithm, self.0);
            Box::new(move |cost| limiter.check(cost))
        }
    }
    kind.kind().visit(quota, BuildDirect(clock))
}

/// The timeout of a limiter whose test is not about timeouts: no healthy
/// call reaches it, however loaded the machine (the default, 100 ms, is
/// what a service wants, and a loaded test machine exceeds it).
pub(crate) const PATIENT: std::time::Duration = std::time::Duration::from_secs(30);

/// How to configure each Redis limiter a test builds.
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
            timeout: PATIENT,
        }
    }

    pub(crate) fn apply<A: ratelab::toolkit::RemoteForm>(
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

/// A Redis limiter of `kind`.
pub(crate) fn redis(
    kind: impl Named,
    quota: Quota,
    connection: &Connection,
    options: &Options,
) -> Box<dyn AsyncRateLimiter> {
    struct BuildRedis<'a>(&'a Connection, &'a Options);
    impl AlgorithmVisitor for BuildRedis<'_> {
        type Output = Box<dyn AsyncRateLimiter>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            Box::new(self.1.apply(RedisStore::builder(self.0.clone(), algorithm)))
        }
    }
    kind.kind().visit(quota, BuildRedis(connection, options))
}

/// A client time source on `clock`.
pub(crate) fn client_time(clock: &ManualClock) -> TimeSource {
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
