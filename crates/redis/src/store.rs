//! [`RedisStore`]: any [`RemoteForm`] on Redis, one script (or module)
//! call per operation: the backend the resilience wrapper puts a
//! [`RedisLimiter`](crate::RedisLimiter) around.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ratelab_core::toolkit::remote::Params;
use ratelab_core::toolkit::{RemoteForm, Settlement, Stamp, clamp_instant, duration_to_micros};
use ratelab_core::{Clock, Decision, Error, SystemClock};
use ratelab_resilience::{Alert, FailurePolicy, Resilience, Store};
use redis::Value;

use crate::backend::{
    Detection, Route, ScriptBackend, is_other_version, is_unknown_command, probe,
};
use crate::classify::classify;
use crate::connection::Connection;
use crate::key::redis_key;
use crate::limiter::RedisLimiter;
use crate::redis_clock::RedisClock;
use crate::registry::{DEFAULT_QUOTA_CHECK_EVERY, MismatchCallback, QuotaMismatch, QuotaRegistry};
use crate::reply::{Asked, Bounds, decision_from_reply};
use crate::script::{MAX_TTL_SLACK_MS, Op, Script, ScriptArgs};
use crate::settings::{DEFAULT_CLIENT_TTL_SLACK, DEFAULT_PREFIX, TimeSource};

#[cfg(doc)]
use ratelab_resilience::{DEFAULT_BREAKER_COOL_DOWN, DEFAULT_BREAKER_THRESHOLD, DEFAULT_TIMEOUT};

/// One algorithm's state on Redis: its keys, its script (or the native
/// module's command), its replies checked, its clock. Each operation is one
/// round trip: the native ratelab module's command where the server has it
/// ([`ScriptBackend`]: detected, or forced by the builder), else `EVALSHA`
/// (the script mirrors the in-memory decision exactly); after `NOSCRIPT`
/// (`SCRIPT FLUSH`, a restart, a failover, a cluster node that never saw
/// the script) it is loaded and the same call sent once more; the caller
/// never notices.
///
/// A store does not time out, retry or fail open by itself: it is a
/// [`Store`], and [`RedisLimiter`](crate::RedisLimiter) puts it behind
/// `ratelab-resilience`'s wrapper. The instant the wrapper's caller gives
/// up becomes each call's deadline, on Redis's clock (its offset from ours
/// measured with `TIME`, not guessed): a call Redis runs later charges
/// nothing.
pub struct RedisStore<A: RemoteForm> {
    connection: Connection,
    algorithm: A,
    params: Params,
    /// The algorithm's script, its SHA1 computed once.
    script: Script,
    /// The native module's command for the algorithm.
    module_command: String,
    /// Its read-only twin, for peeks: a replica answers it.
    peek_command: String,
    prefix: String,
    key_suffix: String,
    time: TimeSource,
    ttl_slack_ms: u64,
    bounds: Bounds,
    /// Where Redis's clock stands against ours: each call's deadline.
    redis_clock: RedisClock,
    backend: ScriptBackend,
    detection: Detection,
    /// Whether the module has the read-only twins (one older than them
    /// does not: its peeks go to the command itself).
    peek_twin: Detection,
    /// Where peeks go instead, if elsewhere (a replica).
    peeks: Option<Peeks>,
    /// Strict mode: the replicas every charge must reach, and how long to
    /// wait for them.
    replicas: Option<(u32, Duration)>,
    counters: Counters,
    registry: QuotaRegistry,
}

/// Counts of how a [`RedisStore`]'s calls went to Redis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStats {
    /// Calls sent to the native ratelab module (`RATELAB.<ALGORITHM>`),
    /// answered or not.
    pub module_calls: u64,
    /// Calls sent as a Lua script (`EVALSHA`), answered or not; a call the
    /// module did not know (`ERR unknown command`) and resent as a script
    /// counts in both.
    pub script_calls: u64,
    /// Scripts reloaded after `NOSCRIPT` (a flush, a restart, a failover).
    pub reloads: u64,
    /// Checks that found another quota recorded for their key
    /// ([`RedisStoreBuilder::quota_check_every`]).
    pub quota_mismatches: u64,
    /// In strict mode ([`RedisStoreBuilder::replicas`]), charges that
    /// fewer replicas than asked for acknowledged in time: each was
    /// answered as an outage ([`Error::Backend`]), its units left charged.
    pub unconfirmed: u64,
}

/// Where a store sends its peeks when not to its connection: what it knows
/// of that server's module.
struct Peeks {
    connection: Connection,
    detection: Detection,
    peek_twin: Detection,
}

/// A server calls go to, and what is known of its module.
#[derive(Clone, Copy)]
struct Target<'a> {
    connection: &'a Connection,
    detection: &'a Detection,
    peek_twin: &'a Detection,
}

#[derive(Default)]
struct Counters {
    module_calls: AtomicU64,
    script_calls: AtomicU64,
    reloads: AtomicU64,
    unconfirmed: AtomicU64,
}

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Builds a [`RedisStore`] and, around it, its [`RedisLimiter`]: the
/// store's options (prefix, time source, TTL slack, module or scripts,
/// quota registry, strict mode, peeks) and the wrapper's ([`Resilience`]:
/// timeout, breaker, failure policy, refusal cache, alerts).
pub struct RedisStoreBuilder<A: RemoteForm> {
    resilience: Resilience,
    connection: Connection,
    algorithm: A,
    prefix: String,
    time: TimeSource,
    ttl_slack: Option<Duration>,
    backend: ScriptBackend,
    quota_check_every: Option<NonZeroU32>,
    on_quota_mismatch: Option<MismatchCallback>,
    replicas: Option<(u32, Duration)>,
    peeks: Option<Connection>,
}

impl<A: RemoteForm + fmt::Debug> fmt::Debug for RedisStoreBuilder<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("algorithm", &self.algorithm)
            .field("prefix", &self.prefix)
            .field("time", &self.time)
            .field("backend", &self.backend)
            .field("quota_check_every", &self.quota_check_every)
            .field("replicas", &self.replicas)
            .field("resilience", &self.resilience)
            .finish_non_exhaustive()
    }
}

impl<A: RemoteForm> RedisStoreBuilder<A> {
    /// The prefix of every key (default [`DEFAULT_PREFIX`]).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Where "now" comes from (default [`TimeSource::Redis`]).
    pub fn time_source(mut self, time: TimeSource) -> Self {
        self.time = time;
        self
    }

    /// Extra time every written key is kept beyond the time its state needs
    /// (default: none with Redis time, [`DEFAULT_CLIENT_TTL_SLACK`] with a
    /// client clock, which Redis's own clock may not follow).
    ///
    /// It is also how far back a clock may step: the scripts take an instant
    /// the key was written at up to the slack plus one second ahead of now
    /// (Redis clocks differ a little after a failover), and report state
    /// further ahead as corrupt (no clock of this key's could have written
    /// it). A simulation whose client clock steps back anywhere sets it to
    /// [`MAX_INSTANT_MICROS`](ratelab_core::toolkit::MAX_INSTANT_MICROS), the most the
    /// scripts take ([`MAX_TTL_SLACK_MS`](crate::MAX_TTL_SLACK_MS): no clock
    /// steps back further than its whole range). A larger slack is refused:
    /// every call answers [`Error::Unsupported`] at once, before any round
    /// trip.
    pub fn ttl_slack(mut self, slack: Duration) -> Self {
        self.ttl_slack = Some(slack);
        self
    }

    /// What runs the decisions on Redis: the native ratelab module where the
    /// server has it, else the Lua scripts (default [`ScriptBackend::Auto`]),
    /// or always one of them. Both decide alike on the same keys.
    pub fn backend(mut self, backend: ScriptBackend) -> Self {
        self.backend = backend;
        self
    }

    /// How often a check records this limiter's quota in the key's quota
    /// registry (default [`DEFAULT_QUOTA_CHECK_EVERY`]: the first check,
    /// then every 100th; `None`: never).
    ///
    /// Two services that use one user key with different quotas do not
    /// share a bucket: the fingerprint in the key names another Redis key,
    /// and each caller silently gets both quotas. So a limiter writes its
    /// quota (`v3:gcra:200000,2000000,10`) to
    /// `<prefix>:{<key>}:<code>:quota` with `SET ... PX ... GET` (kept a
    /// minute, or the quota's longest wait if longer), as the Python and
    /// Node clients do. When the previous value was another quota, the
    /// [`on_quota_mismatch`](Self::on_quota_mismatch) callback is called, a
    /// `tracing` warning is logged (at most once a second) and
    /// [`RedisStats::quota_mismatches`] counts it. Decisions are never
    /// affected, and a failure of the registry's command is ignored. The
    /// command goes before the check, on the same connection: one more
    /// round trip every `every` checks.
    pub fn quota_check_every(mut self, every: Option<NonZeroU32>) -> Self {
        self.quota_check_every = every;
        self
    }

    /// Called when a check finds another quota recorded for its key
    /// ([`quota_check_every`](Self::quota_check_every)).
    pub fn on_quota_mismatch(
        mut self,
        callback: impl Fn(&QuotaMismatch) + Send + Sync + 'static,
    ) -> Self {
        self.on_quota_mismatch = Some(Arc::new(callback));
        self
    }

    /// Strict mode: a charge counts only once `replicas` replicas hold it.
    /// Off by default (`0` turns it off).
    ///
    /// Redis replicates asynchronously: a failover onto a replica forgets
    /// the admissions it had not received yet, and the limiter admits them
    /// again (the bound, per algorithm: [Replicas and
    /// failover](crate#replicas-and-failover)). In strict mode every check of a positive cost, and every
    /// settlement that charges more than its check did, is followed on the
    /// same connection by `WAIT replicas timeout` (a script cannot call
    /// `WAIT`; on a cluster it goes to the master of the key's slot). When
    /// fewer replicas acknowledge in time, the admission is not
    /// trustworthy: the call fails as an outage ([`Error::Backend`],
    /// counted in [`RedisStats::unconfirmed`]), so the limiter's failure
    /// policy decides what the check answers (returns the error, denies,
    /// admits, or asks the in-memory fallback) and an alert is raised; the
    /// units stay charged on the master, which errs toward refusing. A
    /// refusal needs no confirmation: it is answered as is (it still waits
    /// with the `WAIT` sent beside it, before its answer was known, for the
    /// connection's earlier writes). Peeks, settlements that give back and
    /// resets are not waited for: losing one in a failover only leaves
    /// more charged.
    ///
    /// The wait never outlasts the call's own deadline (the limiter's
    /// timeout): it is `timeout` or the time left, whichever is shorter,
    /// and at least 1 ms. Keep `timeout` below the limiter's timeout (and
    /// below the connection's own 500 ms): an unconfirmed admission is
    /// then told as one, and counted, rather than as a timeout. What it costs: a replica's acknowledgement per
    /// check, a round trip between master and replica; and since `WAIT`
    /// blocks its connection, checks sharing the connection wait their
    /// turn behind it.
    pub fn replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Sends peeks to `connection` instead (a replica, say): a peek writes
    /// nothing, so a replica answers it, through the module's read-only
    /// twins or the scripts, and the master is spared the reads. Its answer
    /// is as old as the replica's lag: a check on the master may decide
    /// otherwise. The module is detected there on its own (as for the
    /// store's connection), and a peek there carries no deadline (it
    /// charges nothing). Checks, settlements and resets still go to the
    /// store's connection.
    pub fn peek_from(mut self, connection: Connection) -> Self {
        self.peeks = Some(connection);
        self
    }

    /// The most a call waits for Redis, reconnecting included (default
    /// [`DEFAULT_TIMEOUT`]); then the failure policy applies. The script
    /// gets the instant the caller gives up as its deadline, on Redis's
    /// measured clock.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.resilience = self.resilience.timeout(timeout);
        self
    }

    /// What a check answers when Redis fails (default
    /// [`FailurePolicy::Error`]).
    pub fn on_failure(mut self, policy: FailurePolicy) -> Self {
        self.resilience = self.resilience.on_failure(policy);
        self
    }

    /// Applies the failure policy to data errors too
    /// ([`Resilience::policy_on_data_errors`]). Off by default.
    pub fn policy_on_data_errors(mut self, apply: bool) -> Self {
        self.resilience = self.resilience.policy_on_data_errors(apply);
        self
    }

    /// The circuit breaker ([`Resilience::breaker`]). Default
    /// [`DEFAULT_BREAKER_THRESHOLD`] and [`DEFAULT_BREAKER_COOL_DOWN`]; a
    /// threshold of 0 never opens.
    pub fn breaker(mut self, threshold: u32, cool_down: Duration) -> Self {
        self.resilience = self.resilience.breaker(threshold, cool_down);
        self
    }

    /// Called on every failure, whatever the policy (besides a `tracing`
    /// warning, logged at most once a second).
    pub fn on_alert(mut self, callback: impl Fn(&Alert<'_>) + Send + Sync + 'static) -> Self {
        self.resilience = self.resilience.on_alert(callback);
        self
    }

    /// Remembers refusals locally ([`Resilience::cache_refusals`]). Off by
    /// default.
    pub fn cache_refusals(mut self, max_keys: usize) -> Self {
        self.resilience = self.resilience.cache_refusals(max_keys);
        self
    }

    /// The limiter: the store behind the wrapper. The in-memory fallback
    /// and the refusal cache read the clock Redis is told.
    pub fn build(mut self) -> RedisLimiter<A> {
        let clock: Arc<dyn Clock> = match &self.time {
            TimeSource::Redis => Arc::new(SystemClock),
            TimeSource::Client(clock) => clock.clone(),
        };
        let resilience = std::mem::take(&mut self.resilience).clock(clock);
        resilience.wrap(self.build_store())
    }

    /// The store alone, without the wrapper: every call one round trip,
    /// with no timeout, breaker or failure policy of its own.
    pub fn build_store(self) -> RedisStore<A> {
        let slack = self.ttl_slack.unwrap_or(match self.time {
            TimeSource::Redis => Duration::ZERO,
            TimeSource::Client(_) => DEFAULT_CLIENT_TTL_SLACK,
        });
        let ttl_slack_ms = duration_to_micros(slack).div_ceil(1000);
        // The scripts accept written instants up to 1 s plus the slack ahead
        // of now: replies may wait that much longer than from a fresh state.
        let bounds = Bounds {
            capacity: self.algorithm.capacity(),
            max_wait: self
                .algorithm
                .max_wait_micros()
                .saturating_add(1_000_000)
                .saturating_add(ttl_slack_ms.saturating_mul(1000)),
            debt: A::DEBT,
        };
        RedisStore {
            registry: QuotaRegistry::new(
                &self.algorithm,
                self.quota_check_every,
                self.on_quota_mismatch,
            ),
            params: self.algorithm.params(),
            script: Script::of::<A>(),
            peek_command: format!("{}_RO", self.algorithm.module_command()),
            module_command: self.algorithm.module_command(),
            key_suffix: self.algorithm.key_suffix(),
            connection: self.connection,
            algorithm: self.algorithm,
            prefix: self.prefix,
            time: self.time,
            ttl_slack_ms,
            bounds,
            redis_clock: RedisClock::default(),
            backend: self.backend,
            detection: Detection::new(),
            peek_twin: Detection::new(),
            peeks: self.peeks.map(|connection| Peeks {
                connection,
                detection: Detection::new(),
                peek_twin: Detection::new(),
            }),
            replicas: self.replicas,
            counters: Counters::default(),
        }
    }
}

impl<A: RemoteForm> RedisStore<A> {
    /// A builder for `algorithm` on `connection`.
    pub fn builder(connection: Connection, algorithm: A) -> RedisStoreBuilder<A> {
        RedisStoreBuilder {
            resilience: Resilience::new(),
            connection,
            algorithm,
            prefix: DEFAULT_PREFIX.to_owned(),
            time: TimeSource::Redis,
            ttl_slack: None,
            backend: ScriptBackend::Auto,
            quota_check_every: Some(DEFAULT_QUOTA_CHECK_EVERY),
            on_quota_mismatch: None,
            replicas: None,
            peeks: None,
        }
    }

    /// A store with every default: Redis time, the default prefix, the
    /// module where the server has it.
    pub fn new(connection: Connection, algorithm: A) -> Self {
        Self::builder(connection, algorithm).build_store()
    }

    /// A limiter with every default: Redis time, 100 ms timeout, errors
    /// returned ([`RedisStore::builder`] then [`RedisStoreBuilder::build`]).
    pub fn limiter(connection: Connection, algorithm: A) -> RedisLimiter<A> {
        Self::builder(connection, algorithm).build()
    }

    /// The connection.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// The Redis key holding `key`'s state.
    pub fn redis_key(&self, key: &[u8]) -> Vec<u8> {
        redis_key(&self.prefix, key, &self.key_suffix)
    }

    /// The Redis key of `key`'s quota registry for this algorithm
    /// ([`RedisStoreBuilder::quota_check_every`]).
    pub fn quota_registry_key(&self, key: &[u8]) -> Vec<u8> {
        self.registry.key(&self.prefix, key)
    }

    /// How this store's calls went to Redis so far.
    pub fn stats(&self) -> RedisStats {
        RedisStats {
            module_calls: self.counters.module_calls.load(Ordering::Relaxed),
            script_calls: self.counters.script_calls.load(Ordering::Relaxed),
            reloads: self.counters.reloads.load(Ordering::Relaxed),
            quota_mismatches: self.registry.mismatches(),
            unconfirmed: self.counters.unconfirmed.load(Ordering::Relaxed),
        }
    }

    /// `now` from the client's clock, or `None` for Redis `TIME`.
    fn now(&self) -> Option<u64> {
        match &self.time {
            TimeSource::Redis => None,
            TimeSource::Client(clock) => Some(clamp_instant(clock.now_micros())),
        }
    }

    /// One call (the module's command or `EVALSHA`, as the backend says;
    /// after `NOSCRIPT`, the script is loaded and the same call sent again),
    /// its reply validated: the decision, and the stamp of an admission.
    /// In strict mode, a call that may `charge` is followed by `WAIT`, and
    /// a charge fewer replicas than asked acknowledged is an outage.
    async fn run(
        &self,
        key: &[u8],
        cost: u32,
        op: Op,
        give_up: Option<Instant>,
    ) -> Result<(Decision, Stamp), Error> {
        let charges = match op {
            Op::Check => cost > 0,
            Op::Settle { actual, .. } => actual > cost,
            Op::Peek | Op::Reset => false,
        };
        let wait = match self.replicas {
            Some((replicas, timeout)) if charges => {
                // Never past the caller's deadline: WAIT blocks the
                // connection it shares with other calls.
                let left = give_up.map_or(timeout, |g| {
                    timeout.min(g.saturating_duration_since(Instant::now()))
                });
                let ms = u64::try_from(left.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
                Some((replicas, ms.max(1)))
            }
            _ => None,
        };
        let redis_key = self.redis_key(key);
        let now = self.now();
        let (target, elsewhere) = match (&self.peeks, op) {
            (Some(peeks), Op::Peek) => (
                Target {
                    connection: &peeks.connection,
                    detection: &peeks.detection,
                    peek_twin: &peeks.peek_twin,
                },
                true,
            ),
            _ => (
                Target {
                    connection: &self.connection,
                    detection: &self.detection,
                    peek_twin: &self.peek_twin,
                },
                false,
            ),
        };
        // Past this instant on Redis's clock the caller has given up: the
        // script must not charge it. Measured, not guessed (`RedisClock`).
        // A peek elsewhere charges nothing, on a clock not measured.
        let deadline = match give_up {
            Some(give_up) if !elsewhere => {
                Some(self.redis_clock.deadline(&self.connection, give_up).await?)
            }
            _ => None,
        };
        let args = ScriptArgs::call(now, cost, self.ttl_slack_ms, deadline, op, &self.params);
        let (reply, acknowledged) = self
            .call(target, &redis_key, &args, op == Op::Peek, wait)
            .await?;
        let asked = Asked {
            stamps: op == Op::Check && cost > 0,
            now,
        };
        let (decision, stamp) =
            decision_from_reply(A::NAME, &reply, self.bounds, asked).map_err(Error::data)?;
        if let (Some((replicas, ms)), Some(acknowledged)) = (wait, acknowledged) {
            // A refusal charged nothing: nothing to lose in a failover.
            let charged = decision.allowed || op != Op::Check;
            if charged && acknowledged < i64::from(replicas) {
                count(&self.counters.unconfirmed);
                return Err(Error::backend(format!(
                    "{acknowledged} of the {replicas} replicas asked for acknowledged the {} \
                     within {ms} ms: not counted as {} (strict mode; its units stay charged \
                     on the master)",
                    op.as_str(),
                    if op == Op::Check {
                        "an admission"
                    } else {
                        "settled"
                    },
                )));
            }
        }
        Ok((decision, stamp))
    }

    /// Sends `args` for `key` to the module's command when the backend says
    /// so (under [`ScriptBackend::Auto`], when this server has it), else, or
    /// when the module turns out to be missing, to the script.
    /// A `peek` goes to the module's read-only twin
    /// (`RATELAB.<ALGORITHM>_RO`, which a replica answers), or, from a
    /// module older than the twins (`ERR unknown command`, re-checked after
    /// [`MODULE_RECHECK`](crate::MODULE_RECHECK)), to its command. With
    /// `wait` (replicas, ms), `WAIT` follows on the same connection: the
    /// number of replicas that acknowledged comes with the reply.
    async fn call(
        &self,
        target: Target<'_>,
        key: &[u8],
        args: &ScriptArgs,
        peek: bool,
        wait: Option<(u32, u64)>,
    ) -> Result<(Value, Option<i64>), Error> {
        let Target {
            connection,
            detection,
            peek_twin,
        } = target;
        let mut twin = peek && peek_twin.route() != Route::Lua;
        while self.module_first(target).await? {
            let command = if twin {
                self.peek_command.as_str()
            } else {
                self.module_command.as_str()
            };
            let mut cmd = redis::cmd(command);
            cmd.arg(key).arg(args.as_slice());
            count(&self.counters.module_calls);
            let result = match wait {
                None => connection.query::<Value>(&cmd).await.map(|v| (v, None)),
                Some((replicas, ms)) => connection
                    .query_then_wait(&cmd, key, replicas, ms)
                    .await
                    .map(|(v, n)| (v, Some(n))),
            };
            match result {
                Err(e) if twin && is_unknown_command(&e) => {
                    // A module older than the twins, or none: the command
                    // itself says which.
                    peek_twin.missing();
                    twin = false;
                    continue;
                }
                Err(e) if is_unknown_command(&e) || is_other_version(&e) => {
                    if self.backend != ScriptBackend::Auto {
                        let what = if is_other_version(&e) {
                            "speaks another protocol version"
                        } else {
                            "is not loaded"
                        };
                        return Err(Error::data(format!(
                            "the ratelab module {what} on this Redis ({command} answered \
                             \"{} {}\"): load this version's \
                             (redis-server --loadmodule libratelab_redis_module.so) or use \
                             ScriptBackend::Auto or ScriptBackend::Lua",
                            e.code().unwrap_or_default(),
                            e.detail().unwrap_or_default()
                        )));
                    }
                    // Gone (a restart or failover onto a node without it),
                    // never there on this cluster node, or of another
                    // version (a cluster's nodes are probed by the command
                    // itself): the script, which this client ships.
                    detection.missing();
                }
                Ok(reply) => {
                    if self.backend == ScriptBackend::Auto && detection.route() != Route::Module {
                        detection.found();
                    }
                    return Ok(reply);
                }
                Err(e) => return Err(classify(e)),
            }
        }
        count(&self.counters.script_calls);
        let reloaded = || count(&self.counters.reloads);
        match wait {
            None => self
                .script
                .invoke(connection, key, args, reloaded)
                .await
                .map(|v| (v, None)),
            Some(wait) => self
                .script
                .invoke_then_wait(connection, key, args, wait, reloaded)
                .await
                .map(|(v, n)| (v, Some(n))),
        }
        .map_err(classify)
    }

    /// Whether the next call goes to the module first. Under
    /// [`ScriptBackend::Auto`], a single node is asked `RATELAB.PROTOCOL`
    /// once (again after [`MODULE_RECHECK`](crate::MODULE_RECHECK) when it
    /// lacked the module); a cluster, whose keyless probe would reach one
    /// random node, tries the module's command itself, routed by its key.
    async fn module_first(&self, target: Target<'_>) -> Result<bool, Error> {
        let detection = target.detection;
        match self.backend {
            ScriptBackend::Lua => Ok(false),
            ScriptBackend::Module => Ok(true),
            ScriptBackend::Auto => match detection.route() {
                Route::Module => Ok(true),
                Route::Lua => Ok(false),
                Route::Unknown => match target.connection {
                    Connection::Single(_) | Connection::Sentinel(_) => {
                        let found = probe(target.connection).await.map_err(classify)?;
                        if found {
                            detection.found();
                        } else {
                            detection.missing();
                        }
                        Ok(found)
                    }
                    Connection::Cluster(_) => Ok(true),
                },
            },
        }
    }
}

impl<A: RemoteForm> Store for RedisStore<A> {
    type Algorithm = A;

    fn algorithm(&self) -> &A {
        &self.algorithm
    }

    fn name(&self) -> &'static str {
        "redis"
    }

    fn max_wait_micros(&self) -> u64 {
        self.algorithm.max_wait_micros()
    }

    /// [`Error::Unsupported`] for parameters Redis cannot hold
    /// ([`RemoteForm::unsupported`]) or a TTL slack the scripts refuse:
    /// refused here, before the script would answer `invalid arguments`.
    fn ensure_supported(&self) -> Result<(), Error> {
        if self.ttl_slack_ms > MAX_TTL_SLACK_MS {
            return Err(Error::Unsupported(
                "a TTL slack above 2^52 µs (MAX_TTL_SLACK_MS), which the scripts refuse",
            ));
        }
        match self.algorithm.unsupported() {
            Some(why) => Err(Error::Unsupported(why)),
            None => Ok(()),
        }
    }

    async fn check(
        &self,
        key: &[u8],
        cost: u32,
        give_up: Option<Instant>,
    ) -> Result<(Decision, Stamp), Error> {
        // Before the check, not beside it: once the check is answered
        // nothing else is waited for, so a caller that times out was never
        // charged.
        if self.registry.due() {
            self.registry
                .record(&self.connection, &self.prefix, key)
                .await;
        }
        self.run(key, cost, Op::Check, give_up).await
    }

    async fn peek(
        &self,
        key: &[u8],
        cost: u32,
        give_up: Option<Instant>,
    ) -> Result<Decision, Error> {
        self.run(key, cost, Op::Peek, give_up)
            .await
            .map(|(decision, _)| decision)
    }

    /// Decided by the script at the instant it runs (never before the
    /// latest instant the key was written at, when a client clock went
    /// back), from the stamp and the key's own state.
    async fn settle(
        &self,
        key: &[u8],
        settlement: Settlement,
        give_up: Option<Instant>,
    ) -> Result<Decision, Error> {
        let op = Op::Settle {
            actual: settlement.actual,
            stamp: settlement.stamp,
        };
        self.run(key, settlement.charged, op, give_up)
            .await
            .map(|(decision, _)| decision)
    }

    /// A key that holds something a receipt could still claim keeps a
    /// tombstone (the state of a key never seen, with its ledger or fence)
    /// until none could: at most the burst's time for the debts, until the
    /// window (the sliding counter: the window after it) ends for the
    /// windows, a window for the sliding log, plus the TTL slack; and in a
    /// window algorithm, admissions later in the same window cannot be
    /// given back. Redis cannot know whether receipts are outstanding, so a
    /// reset pays this even when none is. A key that holds nothing is left
    /// alone.
    async fn reset(&self, key: &[u8], give_up: Option<Instant>) -> Result<(), Error> {
        self.run(key, 0, Op::Reset, give_up).await.map(drop)
    }

    /// A reconnection may reach another server: measure its clock again.
    fn unavailable(&self) {
        self.redis_clock.forget();
    }
}

impl<A: RemoteForm + fmt::Debug> fmt::Debug for RedisStore<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("algorithm", &self.algorithm)
            .field("connection", &self.connection)
            .field("prefix", &self.prefix)
            .field("time", &self.time)
            .field("backend", &self.backend)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}
