//! The engine's order of calls, with recorded limiters on a manual clock:
//! with receipts (one round, given back on a refusal) and without (peek,
//! then charge).

use std::fmt;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use ratelab_core::{
    AsyncRateLimiter, CheckFuture, Decision, Error, Keyed, Limiter, ManualClock, Quota,
    RateLimiter, Receipt,
};
use ratelab_gcra::Gcra;

use crate::engine::check::Check;
use crate::engine::decide::Engine;
use crate::engine::refill::Refill;
use crate::engine::report::State;
use crate::engine::tally::{Outcome, Tally};
use crate::policy::{FailureMode, Policy};

/// A call: the key, the cost, and what it was (`check`, `receipt`,
/// `refund`, `peek`).
type Call = (String, u32, &'static str);
type Calls = Arc<Mutex<Vec<Call>>>;

/// An in-memory GCRA limiter that records every call into a log shared by
/// all the policies of a test, so the order shows; it issues receipts when
/// `receipts` says so.
#[derive(Debug)]
struct Recorded {
    limiter: Keyed<Gcra, ManualClock>,
    calls: Calls,
    receipts: bool,
}

impl Recorded {
    fn record(&self, key: &[u8], cost: u32, what: &'static str) {
        let key = String::from_utf8_lossy(key).into_owned();
        self.calls.lock().unwrap().push((key, cost, what));
    }
}

impl Limiter for Recorded {
    fn quota(&self) -> Quota {
        self.limiter.quota()
    }
    fn algorithm_name(&self) -> &'static str {
        self.limiter.algorithm_name()
    }
    fn backend(&self) -> &'static str {
        self.limiter.backend()
    }
    fn bound(&self) -> ratelab_core::Bound {
        self.limiter.bound()
    }
    fn refunds(&self) -> bool {
        self.receipts
    }
}

impl RateLimiter for Recorded {
    fn check(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.record(key, cost, "check");
        self.limiter.check(key, cost)
    }

    fn peek(&self, key: &[u8], cost: u32) -> Result<Decision, Error> {
        self.record(key, cost, "peek");
        self.limiter.peek(key, cost)
    }

    fn check_with_receipt(
        &self,
        key: &[u8],
        cost: u32,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        assert!(self.receipts, "asked for a receipt it does not issue");
        self.record(key, cost, "receipt");
        self.limiter.check_with_receipt(key, cost)
    }

    fn settle(&self, receipt: Receipt, actual: u32) -> Result<Decision, Error> {
        let what = if actual == 0 { "refund" } else { "settle" };
        self.record(receipt.key(), actual, what);
        self.limiter.settle(receipt, actual)
    }
}

/// A limiter whose backend answers `error()`, or never (`None`).
struct Down(Option<fn() -> Error>);

impl fmt::Debug for Down {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Down")
    }
}

impl Limiter for Down {
    fn quota(&self) -> Quota {
        Quota::per_minute(10).unwrap()
    }
    fn algorithm_name(&self) -> &'static str {
        "gcra"
    }
    fn backend(&self) -> &'static str {
        "down"
    }
    fn bound(&self) -> ratelab_core::Bound {
        ratelab_core::Bound::rate(&self.quota())
    }
}

impl AsyncRateLimiter for Down {
    fn check_async<'a>(&'a self, _key: &'a [u8], _cost: u32) -> CheckFuture<'a> {
        match self.0 {
            Some(error) => Box::pin(std::future::ready(Err(error()))),
            None => Box::pin(std::future::pending()),
        }
    }
}

fn refused_connection() -> Error {
    Error::backend("connection refused")
}

/// Policies on one manual clock, sharing one call log.
struct Setup {
    clock: ManualClock,
    calls: Calls,
}

impl Setup {
    fn new() -> Self {
        Setup {
            clock: ManualClock::new(),
            calls: Calls::default(),
        }
    }

    fn recorded(&self, name: &str, quota: Quota, receipts: bool) -> Arc<Policy> {
        Arc::new(Policy::new(
            name,
            Recorded {
                limiter: Keyed::with_clock(Gcra::new(quota), self.clock.clone()),
                calls: self.calls.clone(),
                receipts,
            },
        ))
    }

    /// A policy on an in-memory GCRA limiter that issues receipts.
    fn policy(&self, name: &str, quota: Quota) -> Arc<Policy> {
        self.recorded(name, quota, true)
    }

    /// A policy on an in-memory GCRA limiter without receipts.
    fn plain(&self, name: &str, quota: Quota) -> Arc<Policy> {
        self.recorded(name, quota, false)
    }

    /// The calls made since the last time this was asked.
    fn calls(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

fn per_minute(n: u32) -> Quota {
    Quota::per_minute(n).unwrap()
}

/// What `policy` has left for alice, by a check of cost 0 that is not
/// recorded.
async fn remaining(policy: &Policy) -> u64 {
    let key = format!("{}:alice", policy.name);
    let decision = policy.limiter.check_async(key.as_bytes(), 0).await.unwrap();
    decision.remaining
}

/// The engine on alice's request, costing `cost` under each policy.
async fn decide(policies: &[(&Arc<Policy>, u32)]) -> Tally {
    let checks = policies
        .iter()
        .enumerate()
        .map(|(i, &(policy, cost))| Check::new(i, policy, "alice", cost, Refill::Window));
    let mut engine = Engine::new(checks);
    engine.decide().await;
    engine.tally
}

fn call(key: &str, cost: u32, what: &'static str) -> Call {
    (key.to_owned(), cost, what)
}

fn passed() -> Outcome {
    Outcome::Pass {
        delay: Duration::ZERO,
    }
}

#[test]
fn the_limiter_key_is_prefixed_with_the_policy_name() {
    let setup = Setup::new();
    let policy = setup.policy("login", per_minute(5));
    let check = Check::new(3, &policy, "user:7", 2, Refill::Window);
    assert_eq!(&*check.key, b"login:user:7");
    assert_eq!((check.index, check.cost), (3, 2));
    // Past the inline room, the same bytes.
    let long = "k".repeat(100);
    let check = Check::new(0, &policy, &long, 1, Refill::Window);
    assert_eq!(*check.key, *format!("login:{long}").as_bytes());
}

#[tokio::test]
async fn no_policy_passes() {
    let ruling = decide(&[]).await;
    assert_eq!(ruling.outcome, passed());
    assert!(ruling.reports.is_empty() && ruling.failures.is_empty());
    assert!(ruling.binding().is_none());
}

#[tokio::test]
async fn one_policy_is_asked_once_without_a_receipt() {
    let setup = Setup::new();
    let global = setup.policy("global", per_minute(5));
    let ruling = decide(&[(&global, 2)]).await;
    // Nothing could give it back: no receipt.
    assert_eq!(setup.calls(), [call("global:alice", 2, "check")]);
    assert_eq!(ruling.outcome, passed());
    assert!(matches!(ruling.reports[0].state, State::Decided(d) if d.allowed && d.remaining == 3));
    assert!(ruling.reports[0].receipt.is_none());
}

#[tokio::test]
async fn several_policies_take_their_cost_with_receipts_at_once() {
    let setup = Setup::new();
    let global = setup.policy("global", per_minute(5));
    let sms = setup.policy("sms", per_minute(10));
    let ruling = decide(&[(&global, 1), (&sms, 3)]).await;
    // One round: no peek first.
    assert_eq!(
        setup.calls(),
        [
            call("global:alice", 1, "receipt"),
            call("sms:alice", 3, "receipt"),
        ]
    );
    assert_eq!(ruling.outcome, passed());
    assert!(ruling.failures.is_empty());
    assert_eq!((remaining(&global).await, remaining(&sms).await), (4, 7));
    let left: Vec<u64> = ruling
        .reports
        .iter()
        .map(|r| r.decision().unwrap().remaining)
        .collect();
    assert_eq!(left, [4, 7]);
    // Passed, and nothing after the response needs them: the charges stand.
    assert!(ruling.reports.iter().all(|r| r.receipt.is_none()));
}

#[tokio::test]
async fn a_refusal_by_one_policy_gives_back_what_the_others_took() {
    let setup = Setup::new();
    let global = setup.policy("global", per_minute(10));
    let login = setup.policy("login", per_minute(1));
    assert_eq!(decide(&[(&global, 1), (&login, 1)]).await.outcome, passed());
    setup.calls();

    let second = decide(&[(&global, 1), (&login, 1)]).await;
    assert_eq!(second.outcome, Outcome::Refuse);
    assert_eq!(
        setup.calls(),
        [
            call("global:alice", 1, "receipt"),
            call("login:alice", 1, "receipt"),
            call("global:alice", 0, "refund"),
        ]
    );
    // As if the refused request never came.
    assert_eq!(remaining(&global).await, 9);
    // The response shows the global policy as the refund left it.
    assert!(matches!(second.reports[0].state, State::GivenBack(d) if d.remaining == 9));
    assert!(matches!(second.reports[1].state, State::Decided(d) if !d.allowed));
    let violated: Vec<&str> = second.violated().map(|r| r.check.policy.name()).collect();
    assert_eq!(violated, ["login"]);
    assert_eq!(second.retry_after(), Some(Duration::from_secs(60)));

    // After the wait, the same request passes both.
    setup.clock.advance(Duration::from_secs(60));
    assert_eq!(decide(&[(&global, 1), (&login, 1)]).await.outcome, passed());
    // (Refilled during the wait, then charged this request only.)
    assert_eq!(remaining(&global).await, 9);
}

#[tokio::test]
async fn without_receipts_policies_are_peeked_then_charged() {
    let setup = Setup::new();
    let global = setup.plain("global", per_minute(5));
    let sms = setup.plain("sms", per_minute(10));
    let ruling = decide(&[(&global, 1), (&sms, 3)]).await;
    assert_eq!(
        setup.calls(),
        [
            call("global:alice", 0, "check"),
            call("sms:alice", 0, "check"),
            call("global:alice", 1, "check"),
            call("sms:alice", 3, "check"),
        ]
    );
    assert_eq!(ruling.outcome, passed());
    assert_eq!((remaining(&global).await, remaining(&sms).await), (4, 7));

    // One predicted to refuse is asked alone: its refusal consumes nothing,
    // and the other is not charged.
    let login = setup.plain("login", per_minute(1));
    decide(&[(&login, 1)]).await;
    setup.calls();
    let refused = decide(&[(&global, 1), (&login, 1)]).await;
    assert_eq!(refused.outcome, Outcome::Refuse);
    assert_eq!(
        setup.calls(),
        [
            call("global:alice", 0, "check"),
            call("login:alice", 0, "check"),
            call("login:alice", 1, "check"),
        ]
    );
    assert_eq!(remaining(&global).await, 4);
}

#[tokio::test]
async fn a_policy_without_receipts_is_charged_only_once_the_others_admitted() {
    let setup = Setup::new();
    let login = setup.policy("login", per_minute(1));
    let plain = setup.plain("plain", per_minute(5));
    decide(&[(&login, 1)]).await;
    setup.calls();
    let ruling = decide(&[(&plain, 1), (&login, 1)]).await;
    assert_eq!(ruling.outcome, Outcome::Refuse);
    // The receipt check refused in the first round, where the other only
    // peeked.
    assert_eq!(
        setup.calls(),
        [
            call("plain:alice", 0, "check"),
            call("login:alice", 1, "receipt"),
        ]
    );
    assert_eq!(remaining(&plain).await, 5);
    assert!(matches!(ruling.reports[0].state, State::Peeked(_)));
}

#[tokio::test]
async fn a_cost_that_can_never_fit_is_refused_with_no_wait_and_nothing_kept() {
    let setup = Setup::new();
    let global = setup.policy("global", per_minute(10));
    let sms = setup.policy("sms", per_minute(2));
    let ruling = decide(&[(&global, 3), (&sms, 3)]).await;
    assert_eq!(ruling.outcome, Outcome::Refuse);
    assert_eq!(ruling.reports[1].state, State::Never { capacity: 2 });
    assert_eq!(ruling.retry_after(), None);
    assert!(
        ruling.failures.is_empty(),
        "a cost too high is not a failure"
    );
    assert_eq!(remaining(&global).await, 10);
}

#[tokio::test]
async fn a_failing_fail_open_policy_drops_out_and_the_others_apply() {
    let setup = Setup::new();
    let down = Arc::new(Policy::new("down", Down(Some(refused_connection))));
    let global = setup.policy("global", per_minute(5));
    let ruling = decide(&[(&down, 1), (&global, 1)]).await;
    assert_eq!(ruling.outcome, passed());
    assert_eq!(ruling.reports[0].state, State::FailedOpen);
    assert_eq!(remaining(&global).await, 4);
    let [failure] = &ruling.failures[..] else {
        panic!("one failure expected: {:?}", ruling.failures);
    };
    assert_eq!((failure.report, failure.mode), (0, FailureMode::Open));
    assert!(matches!(failure.error, Error::Backend(_)));

    // It refuses as usual when another policy refuses.
    let login = setup.policy("login", per_minute(1));
    decide(&[(&login, 1)]).await;
    let ruling = decide(&[(&down, 1), (&login, 1)]).await;
    assert_eq!(ruling.outcome, Outcome::Refuse);
}

#[tokio::test]
async fn a_failing_fail_closed_policy_gives_back_what_the_others_took() {
    let setup = Setup::new();
    let down = Arc::new(Policy::new("down", Down(Some(refused_connection))).fail_closed());
    let global = setup.policy("global", per_minute(5));
    let ruling = decide(&[(&global, 1), (&down, 1)]).await;
    assert_eq!(ruling.outcome, Outcome::Unavailable);
    assert_eq!(
        setup.calls(),
        [
            call("global:alice", 1, "receipt"),
            call("global:alice", 0, "refund")
        ]
    );
    assert_eq!(remaining(&global).await, 5);
    assert_eq!(ruling.reports[1].state, State::FailedClosed(None));
    assert_eq!(ruling.unavailable_retry_after(), None);
    let failed: Vec<&str> = ruling
        .failed_closed()
        .map(|r| r.check.policy.name())
        .collect();
    assert_eq!(failed, ["down"]);
    assert_eq!(ruling.failures[0].mode, FailureMode::Closed);

    // Alone, the same.
    let ruling = decide(&[(&down, 1)]).await;
    assert_eq!(ruling.outcome, Outcome::Unavailable);
}

#[tokio::test]
async fn a_refusal_wins_over_a_failure() {
    let setup = Setup::new();
    let down = Arc::new(Policy::new("down", Down(Some(refused_connection))).fail_closed());
    let login = setup.policy("login", per_minute(1));
    decide(&[(&login, 1)]).await;
    let ruling = decide(&[(&down, 1), (&login, 1)]).await;
    assert_eq!(ruling.outcome, Outcome::Refuse);
    assert_eq!(ruling.failures.len(), 1);
}

#[tokio::test]
async fn a_limiter_out_of_keys_fails_closed_whatever_the_mode() {
    fn full() -> Error {
        Error::TooManyKeys {
            max_keys: 1,
            retry_after: Duration::from_millis(4500),
        }
    }
    let full = Arc::new(Policy::new("full", Down(Some(full))).fail_open());
    let ruling = decide(&[(&full, 1)]).await;
    assert_eq!(ruling.outcome, Outcome::Unavailable);
    assert_eq!(ruling.failures[0].mode, FailureMode::Closed);
    assert_eq!(
        ruling.unavailable_retry_after(),
        Some(Duration::from_millis(4500))
    );
}

#[tokio::test]
async fn a_stuck_limiter_fails_at_its_policy_timeout() {
    let setup = Setup::new();
    let stuck = Arc::new(Policy::new("stuck", Down(None)).timeout(Duration::from_millis(20)));
    let global = setup.policy("global", per_minute(5));
    let ruling = decide(&[(&stuck, 1), (&global, 1)]).await;
    assert_eq!(ruling.outcome, passed());
    assert!(matches!(
        ruling.failures[0].error,
        Error::Timeout(t) if t == Duration::from_millis(20)
    ));
    assert_eq!(remaining(&global).await, 4);
}

#[tokio::test]
async fn the_binding_decision_is_the_closest_to_refusing() {
    let setup = Setup::new();
    // Same remaining after this request (1): the longer reset binds.
    let minute = setup.policy("minute", per_minute(2));
    let hour = setup.policy("hour", Quota::per_hour(2).unwrap());
    let roomy = setup.policy("roomy", per_minute(100));
    let ruling = decide(&[(&minute, 1), (&hour, 1), (&roomy, 1)]).await;
    let (report, decision) = ruling.binding().unwrap();
    assert_eq!(report.check.policy.name(), "hour");
    assert_eq!(decision.remaining, 1);

    // On a refusal: the violated policy with the longest wait.
    decide(&[(&minute, 1), (&hour, 1)]).await;
    let ruling = decide(&[(&minute, 1), (&hour, 1), (&roomy, 1)]).await;
    assert_eq!(ruling.outcome, Outcome::Refuse);
    let (report, decision) = ruling.binding().unwrap();
    assert_eq!(report.check.policy.name(), "hour");
    assert_eq!(decision.retry_after(), Duration::from_secs(1800));
    assert_eq!(ruling.retry_after(), Some(Duration::from_secs(1800)));
    assert_eq!(ruling.violated().count(), 2);
}

#[tokio::test]
async fn a_sliding_policy_peeks_for_t_and_the_others_do_not() {
    let setup = Setup::new();
    let sliding = setup.policy("sliding", per_minute(4));
    let check = |refill| Check::new(0, &sliding, "alice", 1, refill);
    let mut engine = Engine::new([check(Refill::Steady {
        interval: 15_000_000,
    })]);
    engine.decide().await;
    let ruling = engine.tally;
    assert_eq!(setup.calls(), [call("sliding:alice", 1, "check")]);
    assert_eq!(
        ruling.reports[0].next_after(),
        Some(Duration::from_secs(15))
    );
    // Read as sliding, the limiter is asked when r + 1 = 3 units pass: as
    // the steady refill said, 15 s after the first unit was taken.
    let mut engine = Engine::new([check(Refill::Sliding)]);
    assert!(engine.decide_now());
    let ruling = engine.tally;
    assert_eq!(
        setup.calls(),
        [
            call("sliding:alice", 1, "check"),
            call("sliding:alice", 3, "peek")
        ]
    );
    assert_eq!(
        ruling.reports[0].next_after(),
        Some(Duration::from_secs(15))
    );
}
