//! **Deliberately flawed limiters**, kept here to show how limiters fail.
//! Never use them: each one exists to be measured against the correct one.
//!
//! - [`ReadThenWrite`]: the state on Redis, but read with `GET`, decided in
//!   the client and written back with `SET`: two requests that read the same
//!   state both pass (the race of the reference article's second test).
//! - [`PerInstance`]: one in-memory limiter per app instance behind a
//!   round-robin load balancer: each instance admits the whole limit (the
//!   third test).

use std::any::{Any, TypeId};
use std::sync::atomic::{AtomicUsize, Ordering};

use ratelab::fixed_window::Counter;
use ratelab::leaky_bucket::Level;
use ratelab::sliding_window::{Log, Windows};
use ratelab::token_bucket::Bucket;
use ratelab::{
    Algorithm, AlgorithmKind, AlgorithmVisitor, AsyncRateLimiter, CheckFuture, Clock,
    KnownAlgorithm, Limiter, ManualClock, Quota, RateLimiter,
};
use redis::aio::MultiplexedConnection;

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

/// Calls `$found` with `$t` bound to each state type that has a [`Codec`].
macro_rules! each_codec {
    (|$t:ident| $found:block) => {{
        {
            type $t = u64;
            $found
        }
        {
            type $t = Counter;
            $found
        }
        {
            type $t = Windows;
            $found
        }
        {
            type $t = Level;
            $found
        }
        {
            type $t = Bucket;
            $found
        }
        {
            type $t = Log;
            $found
        }
    }};
}

/// [`Codec::encode`] of `state`, found by its type: an [`AlgorithmVisitor`]
/// knows its algorithm only as a [`KnownAlgorithm`], so it cannot require a
/// [`Codec`] of the state. `None` for a state without one.
fn encode_state<S: 'static>(state: &S) -> Option<String> {
    let state: &dyn Any = state;
    each_codec!(|T| {
        if let Some(state) = state.downcast_ref::<T>() {
            return Some(state.encode());
        }
    });
    None
}

/// [`Codec::decode`] into `S`, found by its type (see [`encode_state`]).
fn decode_state<S: 'static>(text: &str) -> Option<S> {
    each_codec!(|T| {
        if TypeId::of::<S>() == TypeId::of::<T>() {
            let state: Box<dyn Any> = Box::new(T::decode(text)?);
            return state.downcast::<S>().ok().map(|s| *s);
        }
    });
    None
}

/// Whether `S` has a [`Codec`].
fn has_codec<S: 'static>() -> bool {
    each_codec!(|T| {
        if TypeId::of::<S>() == TypeId::of::<T>() {
            return true;
        }
    });
    false
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

impl<A: Algorithm> Limiter for ReadThenWrite<A> {
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

impl<A: Algorithm> AsyncRateLimiter for ReadThenWrite<A> {
    fn check_async<'a>(&'a self, key: &'a [u8], cost: u32) -> CheckFuture<'a> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let key = format!("{}{}", self.prefix, String::from_utf8_lossy(key));
            let stored: Option<String> = redis::cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .map_err(ratelab::Error::backend)?;
            let mut state = stored
                .as_deref()
                .and_then(decode_state::<A::State>)
                .unwrap_or_else(|| self.algorithm.initial_state());
            let now = self.clock.now_micros();
            let decision = self.algorithm.decide(&mut state, now, cost)?;
            if decision.allowed && cost > 0 {
                // Checked when built: every ReadThenWrite's state has a codec.
                let text = encode_state(&state).unwrap_or_default();
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(text)
                    .arg("PX")
                    .arg(600_000)
                    .query_async(&mut conn)
                    .await
                    .map_err(ratelab::Error::backend)?;
            }
            Ok(decision)
        })
    }
}

/// `kind` as a [`ReadThenWrite`] limiter on `conn`, deciding on `clock`, its
/// keys under `prefix`.
///
/// # Panics
///
/// When `kind`'s state has no [`Codec`] (an algorithm added without one).
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
            assert!(
                has_codec::<A::State>(),
                "{}: its state has no Codec in crate::flawed",
                algorithm.name()
            );
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
}

impl RateLimiter for PerInstance {
    fn check(&self, key: &[u8], cost: u32) -> Result<ratelab::Decision, ratelab::Error> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.instances.len();
        self.instances[i].check(key, cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn every_algorithm_state_has_a_codec_found_by_type() {
        struct Check;
        impl AlgorithmVisitor for Check {
            type Output = ();
            fn visit<A: KnownAlgorithm>(self, algorithm: A) {
                assert!(has_codec::<A::State>(), "{}", algorithm.name());
                let state = algorithm.initial_state();
                let text = encode_state(&state).unwrap();
                let back = decode_state::<A::State>(&text).unwrap();
                assert_eq!(encode_state(&back), Some(text), "{}", algorithm.name());
            }
        }
        for kind in AlgorithmKind::ALL {
            kind.visit(Quota::per_second(10).unwrap(), Check);
        }
        assert!(!has_codec::<String>());
        assert_eq!(encode_state(&"text"), None);
        assert_eq!(decode_state::<String>("text"), None);
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
