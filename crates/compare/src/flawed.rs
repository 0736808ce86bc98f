//! **Deliberately flawed limiters**, kept here to show how limiters fail.
//! Never use them: each one exists to be measured against the correct one.
//!
//! - [`ReadThenWrite`]: the state on Redis, but read with `GET`, decided in
//!   the client and written back with `SET`: two requests that read the same
//!   state both pass (the race of the reference article's second test).
//! - [`PerInstance`]: one in-memory limiter per app instance behind a
//!   round-robin load balancer: each instance admits the whole limit (the
//!   third test).

use std::sync::atomic::{AtomicUsize, Ordering};

use ratelab::toolkit::RemoteForm;
use ratelab::toolkit::remote::{Shape, Stored, Value};
use ratelab::{
    AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, CheckFuture, Clock, Error, KnownAlgorithm,
    Limiter, ManualClock, Quota, RateLimiter,
};
use redis::aio::MultiplexedConnection;

/// How far ahead of now a stored instant may be, as the scripts take it
/// with no slack: the instances share one clock.
const SKEW: u64 = 1_000_000;

/// **Deliberately flawed: not atomic.** The named algorithm's state on
/// Redis, in the scripts' own encoding ([`RemoteForm`]), read with `GET`
/// (or `ZRANGE`, the sliding log's sorted set), decided in the client,
/// written back with `SET` (or `ZADD`) only when the request passed, as a
/// naive counter does. Between one client's read and its write, others read
/// the same state: concurrent requests all see room that only one of them
/// may take.
pub struct ReadThenWrite<A: RemoteForm> {
    algorithm: A,
    conn: MultiplexedConnection,
    clock: ManualClock,
    prefix: String,
}

impl<A: RemoteForm> std::fmt::Debug for ReadThenWrite<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadThenWrite")
            .field("algorithm", &self.algorithm.name())
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl<A: RemoteForm> Limiter for ReadThenWrite<A> {
    fn quota(&self) -> Quota {
        *self.algorithm.quota()
    }
    fn algorithm_name(&self) -> &'static str {
        self.algorithm.name()
    }
    fn backend(&self) -> &'static str {
        "redis (read-then-write, flawed)"
    }
    /// The algorithm's: what it promises, and this limiter breaks.
    fn bound(&self) -> ratelab::Bound {
        self.algorithm.bound()
    }
}

impl<A: RemoteForm> ReadThenWrite<A> {
    /// What the key holds, as the scripts stored it, if anything.
    async fn read(&self, key: &str) -> Result<Option<Value>, Error> {
        let mut conn = self.conn.clone();
        Ok(match A::SHAPE {
            Shape::String => {
                let raw: Option<Vec<u8>> = redis::cmd("GET")
                    .arg(key)
                    .query_async(&mut conn)
                    .await
                    .map_err(Error::backend)?;
                raw.map(Value::String)
            }
            Shape::SortedSet => {
                let members: Vec<(Vec<u8>, u64)> = redis::cmd("ZRANGE")
                    .arg(key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query_async(&mut conn)
                    .await
                    .map_err(Error::backend)?;
                (!members.is_empty()).then_some(Value::SortedSet(members))
            }
            other => return Err(Error::data(format!("no flawed reader for {other:?}"))),
        })
    }

    /// Writes `value` over the key (a sorted set's members are added to it).
    async fn write(&self, key: &str, value: Value) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        let cmd = match value {
            Value::String(raw) => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg(raw).arg("PX").arg(600_000);
                cmd
            }
            Value::SortedSet(members) => {
                let mut cmd = redis::cmd("ZADD");
                cmd.arg(key);
                for (member, score) in members {
                    cmd.arg(score).arg(member);
                }
                cmd
            }
        };
        let _: redis::Value = cmd.query_async(&mut conn).await.map_err(Error::backend)?;
        if A::SHAPE == Shape::SortedSet {
            let _: () = redis::cmd("PEXPIRE")
                .arg(key)
                .arg(600_000)
                .query_async(&mut conn)
                .await
                .map_err(Error::backend)?;
        }
        Ok(())
    }
}

impl<A: RemoteForm> AsyncRateLimiter for ReadThenWrite<A> {
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(async move {
            let key = format!("{}{}", self.prefix, String::from_utf8_lossy(key));
            let now = self.clock.now_micros();
            let mut stored = match self.read(&key).await? {
                Some(value) => self
                    .algorithm
                    .decode(&value, now, SKEW)
                    .map_err(Error::data)?,
                None => Stored {
                    state: self.algorithm.initial_state(),
                    ledger: Default::default(),
                    latest: 0,
                },
            };
            let decision = self.algorithm.decide(&mut stored.state, now, cost)?;
            if decision.allowed && cost > 0 {
                stored.latest = stored.latest.max(now);
                self.write(&key, self.algorithm.encode(&stored)).await?;
            }
            Ok(decision)
        })
    }
}

/// `kind` as a [`ReadThenWrite`] limiter on `conn`, deciding on `clock`, its
/// keys under `prefix`.
pub fn read_then_write(
    kind: AlgorithmKind,
    quota: Quota,
    conn: MultiplexedConnection,
    clock: ManualClock,
    prefix: String,
) -> Box<dyn AsyncRateLimiter> {
    struct Build {
        conn: MultiplexedConnection,
        clock: ManualClock,
        prefix: String,
    }
    impl AlgorithmVisitor for Build {
        type Output = Box<dyn AsyncRateLimiter>;
        fn visit<A: KnownAlgorithm>(self, algorithm: A) -> Self::Output {
            Box::new(ReadThenWrite {
                algorithm,
                conn: self.conn,
                clock: self.clock,
                prefix: self.prefix,
            })
        }
    }
    kind.visit(
        quota,
        Build {
            conn,
            clock,
            prefix,
        },
    )
}

/// **Deliberately flawed: counts per instance.** App instances behind a
/// round-robin load balancer, each with its own in-memory limiter: every
/// instance admits the whole limit, so N instances admit N times it.
pub struct PerInstance {
    instances: Vec<Box<dyn RateLimiter>>,
    next: AtomicUsize,
}

impl std::fmt::Debug for PerInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerInstance")
            .field("instances", &self.instances.len())
            .finish_non_exhaustive()
    }
}

impl PerInstance {
    /// The balancer in front of `instances`, starting with the first.
    ///
    /// # Panics
    ///
    /// With no instance.
    pub fn new(instances: Vec<Box<dyn RateLimiter>>) -> Self {
        assert!(!instances.is_empty(), "a balancer needs an instance");
        PerInstance {
            instances,
            next: AtomicUsize::new(0),
        }
    }
}

impl Limiter for PerInstance {
    fn quota(&self) -> Quota {
        self.instances[0].quota()
    }
    fn algorithm_name(&self) -> &'static str {
        self.instances[0].algorithm_name()
    }
    fn backend(&self) -> &'static str {
        "memory per instance (flawed)"
    }
    /// Each instance's: what the balanced whole breaks.
    fn bound(&self) -> ratelab::Bound {
        self.instances[0].bound()
    }
}

impl RateLimiter for PerInstance {
    fn check(&self, key: &[u8], cost: u32) -> Result<ratelab::Decision, Error> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.instances.len();
        self.instances[i].check(key, cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_s_state_survives_the_scripts_encoding() {
        // What ReadThenWrite writes and reads back: the state after a few
        // admissions, through the algorithm's own encoding.
        struct RoundTrip;
        impl AlgorithmVisitor for RoundTrip {
            type Output = ();
            fn visit<A: KnownAlgorithm>(self, algorithm: A) {
                let now = 1_000_500_000;
                let mut stored = Stored {
                    state: algorithm.initial_state(),
                    ledger: Default::default(),
                    latest: now,
                };
                for cost in [1, 2, 3] {
                    algorithm.decide(&mut stored.state, now, cost).unwrap();
                }
                let value = algorithm.encode(&stored);
                let back = algorithm.decode(&value, now, SKEW).unwrap();
                assert_eq!(algorithm.encode(&back), value, "{}", algorithm.name());
                let mut a = stored.state.clone();
                let mut b = back.state;
                assert_eq!(
                    algorithm.decide(&mut a, now, 1).unwrap(),
                    algorithm.decide(&mut b, now, 1).unwrap(),
                    "{}",
                    algorithm.name()
                );
            }
        }
        for kind in AlgorithmKind::ALL {
            kind.visit(Quota::per_second(10).unwrap(), RoundTrip);
        }
    }

    #[test]
    fn two_instances_admit_twice_the_limit() {
        let quota = Quota::per_minute(10).unwrap();
        for kind in AlgorithmKind::ALL {
            let clock = ManualClock::new();
            let balancer = PerInstance::new(vec![
                kind.keyed(quota, clock.clone()),
                kind.keyed(quota, clock.clone()),
            ]);
            let admitted = (0..30)
                .filter(|_| balancer.check(b"k", 1).unwrap().allowed)
                .count();
            assert_eq!(admitted, 20, "{kind}");
        }
    }
}
