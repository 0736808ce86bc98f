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

use ratelab_core::{
    Algorithm, AsyncRateLimiter, CheckFuture, Clock, Limiter, ManualClock, Quota, RateLimiter,
};
use ratelab_fixed_window::Counter;
use ratelab_leaky_bucket::Level;
use ratelab_sliding_window::{Log, Windows};
use ratelab_token_bucket::Bucket;
use redis::aio::MultiplexedConnection;

use crate::algorithms::with_algorithm;

/// An algorithm state written to Redis as text, for [`ReadThenWrite`].
pub trait Codec: Sized {
    /// The state as text.
    fn encode(&self) -> String;
    /// The state back from text; `None` if it is not one.
    fn decode(text: &str) -> Option<Self>;
}

fn numbers(text: &str) -> Option<Vec<u64>> {
    text.split_whitespace().map(|n| n.parse().ok()).collect()
}

impl Codec for u64 {
    fn encode(&self) -> String {
        self.to_string()
    }
    fn decode(text: &str) -> Option<Self> {
        text.trim().parse().ok()
    }
}

impl Codec for Counter {
    fn encode(&self) -> String {
        format!("{} {}", self.index(), self.count())
    }
    fn decode(text: &str) -> Option<Self> {
        match numbers(text)?[..] {
            [index, count] => Some(Counter::from_parts(index, count)),
            _ => None,
        }
    }
}

impl Codec for Windows {
    fn encode(&self) -> String {
        format!("{} {} {}", self.index(), self.previous(), self.current())
    }
    fn decode(text: &str) -> Option<Self> {
        match numbers(text)?[..] {
            [index, previous, current] => Some(Windows::from_parts(index, previous, current)),
            _ => None,
        }
    }
}

impl Codec for Level {
    fn encode(&self) -> String {
        format!("{} {}", self.water(), self.at())
    }
    fn decode(text: &str) -> Option<Self> {
        match numbers(text)?[..] {
            [water, at] => Some(Level::from_parts(water, at)),
            _ => None,
        }
    }
}

impl Codec for Bucket {
    fn encode(&self) -> String {
        format!("{} {}", self.tokens(), self.last())
    }
    fn decode(text: &str) -> Option<Self> {
        match numbers(text)?[..] {
            [tokens, last] => Some(Bucket::from_parts(tokens, last)),
            _ => None,
        }
    }
}

impl Codec for Log {
    fn encode(&self) -> String {
        let mut text = self.total().to_string();
        for (at, units) in self.entries() {
            text.push_str(&format!(" {at} {units}"));
        }
        text
    }
    fn decode(text: &str) -> Option<Self> {
        let numbers = numbers(text)?;
        let (&total, rest) = numbers.split_first()?;
        if rest.len() % 2 != 0 {
            return None;
        }
        let log = Log::from_entries(rest.chunks(2).map(|p| (p[0], p[1])))?;
        (log.total() == total).then_some(log)
    }
}

/// **Deliberately flawed: not atomic.** The named algorithm's state on
/// Redis, read with `GET`, decided in the client, written back with `SET`
/// (only when the request passed, as a naive counter does). Between one
/// client's `GET` and its `SET`, others read the same state: concurrent
/// requests all see room that only one of them may take.
pub struct ReadThenWrite<A: Algorithm> {
    algorithm: A,
    conn: MultiplexedConnection,
    clock: ManualClock,
    prefix: String,
}

impl<A: Algorithm> std::fmt::Debug for ReadThenWrite<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadThenWrite")
            .field("algorithm", &self.algorithm.name())
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl<A: Algorithm> Limiter for ReadThenWrite<A>
where
    A::State: Codec,
{
    fn quota(&self) -> Quota {
        *self.algorithm.quota()
    }
    fn algorithm_name(&self) -> &'static str {
        self.algorithm.name()
    }
    fn backend(&self) -> &'static str {
        "redis (read-then-write, flawed)"
    }
}

impl<A: Algorithm> AsyncRateLimiter for ReadThenWrite<A>
where
    A::State: Codec + Sync,
{
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let key = format!("{}{}", self.prefix, String::from_utf8_lossy(key));
            let stored: Option<String> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .map_err(ratelab_core::Error::backend)?;
            let mut state = stored
                .as_deref()
                .and_then(A::State::decode)
                .unwrap_or_else(|| self.algorithm.initial_state());
            let now = self.clock.now_micros();
            let decision = self.algorithm.decide(&mut state, now, cost)?;
            if decision.allowed && cost > 0 {
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(state.encode())
                    .arg("PX")
                    .arg(600_000)
                    .query_async(&mut conn)
                    .await
                    .map_err(ratelab_core::Error::backend)?;
            }
            Ok(decision)
        })
    }
}

/// The named algorithm as a [`ReadThenWrite`] limiter on `conn`, deciding on
/// `clock`, its keys under `prefix`.
///
/// # Panics
///
/// On an unknown algorithm name.
pub fn read_then_write(
    name: &str,
    quota: Quota,
    conn: MultiplexedConnection,
    clock: ManualClock,
    prefix: String,
) -> Box<dyn AsyncRateLimiter> {
    fn boxed<A: Algorithm>(
        algorithm: A,
        conn: MultiplexedConnection,
        clock: ManualClock,
        prefix: String,
    ) -> Box<dyn AsyncRateLimiter>
    where
        A::State: Codec + Sync,
    {
        Box::new(ReadThenWrite {
            algorithm,
            conn,
            clock,
            prefix,
        })
    }
    with_algorithm!(name, quota, |a| boxed(a, conn, clock, prefix))
        .unwrap_or_else(|| panic!("no algorithm named {name}"))
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
}

impl RateLimiter for PerInstance {
    fn check(&self, key: &[u8], cost: u32) -> Result<ratelab_core::Decision, ratelab_core::Error> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.instances.len();
        self.instances[i].check(key, cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::{NAMES, keyed};

    #[test]
    fn states_survive_the_round_trip() {
        let log = Log::from_entries([(5, 1), (9, 3)]).unwrap();
        assert_eq!(Log::decode(&log.encode()), Some(log));
        assert_eq!(Log::decode(""), None);
        let bucket = Bucket::from_parts(3, 7);
        assert_eq!(Bucket::decode(&bucket.encode()), Some(bucket));
        let w = Windows::from_parts(1, 2, 3);
        assert_eq!(Windows::decode(&w.encode()), Some(w));
        let c = Counter::from_parts(4, 5);
        assert_eq!(Counter::decode(&c.encode()), Some(c));
        let l = Level::from_parts(6, 7);
        assert_eq!(Level::decode(&l.encode()), Some(l));
        assert_eq!(u64::decode(" 8 "), Some(8));
    }

    #[test]
    fn two_instances_admit_twice_the_limit() {
        let quota = Quota::per_minute(10).unwrap();
        for name in NAMES {
            let clock = ManualClock::new();
            let balancer = PerInstance::new(vec![
                keyed(name, quota, clock.clone()),
                keyed(name, quota, clock.clone()),
            ]);
            let admitted = (0..30)
                .filter(|_| balancer.check(b"k", 1).unwrap().allowed)
                .count();
            assert_eq!(admitted, 20, "{name}");
        }
    }
}
