//! One limiter call, bounded in time: the engine's checks share their
//! policy's deadline for the request; the calls that give back or settle
//! later, and the peeks for `t`, get the policy's timeout of their own.

use std::future::Future;

use futures::FutureExt;
use ratelab_core::{Decision, Error, Receipt};
use tokio::time::Instant;

use crate::engine::check::Check;
use crate::policy::Policy;

/// How one policy is asked in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// Cost 0: what it would say, nothing consumed.
    Peek,
    /// The cost that counts now (none for a deferred check), without a
    /// receipt: nothing will be given back.
    Charge,
    /// The cost, with a receipt for what may be given back.
    Receipt,
}

/// Asks the limiter of `check` as `ask` says, within `deadline` (none:
/// unbounded), timed for the metrics: the decision, and the receipt of an
/// admission asked with one.
pub(crate) async fn ask(
    check: &Check,
    deadline: Option<Instant>,
    ask: Ask,
) -> (Result<Decision, Error>, Option<Receipt>) {
    let policy = &check.policy;
    let started = Instant::now();
    let result = match ask {
        Ask::Peek => within(policy, deadline, policy.limiter.check_async(&check.key, 0))
            .await
            .map(|d| (d, None)),
        Ask::Charge => within(
            policy,
            deadline,
            policy.limiter.check_async(&check.key, check.charged()),
        )
        .await
        .map(|d| (d, None)),
        Ask::Receipt => {
            within(
                policy,
                deadline,
                policy
                    .limiter
                    .check_with_receipt_async(&check.key, check.cost),
            )
            .await
        }
    };
    policy.metrics.limiter_call(started.elapsed());
    match result {
        Ok((decision, receipt)) => (Ok(decision), receipt),
        Err(error) => (Err(error), None),
    }
}

/// `call`, bounded by the policy's timeout from now.
pub(crate) async fn bounded<T>(
    policy: &Policy,
    call: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let mut call = std::pin::pin!(call);
    if let Some(result) = (&mut call).now_or_never() {
        return result;
    }
    // Possibly first polled outside the runtime, as `within` says.
    yield_once().await;
    match Box::pin(tokio::time::timeout(policy.timeout, call)).await {
        Ok(result) => result,
        Err(_) => Err(Error::Timeout(policy.timeout)),
    }
}

/// `call`, bounded by `deadline` (none: unbounded), which fails as the
/// policy's timeout.
async fn within<T>(
    policy: &Policy,
    deadline: Option<Instant>,
    call: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let mut call = std::pin::pin!(call);
    // An in-memory limiter has answered already: no timer is set up for it
    // (a timer entry on every request costs more than the check itself).
    if let Some(result) = (&mut call).now_or_never() {
        return result;
    }
    // A driver may poll a decision once where it was asked (a tower
    // service's `call`), which may run outside the runtime: the timer
    // (which needs it) is set up at the next poll.
    yield_once().await;
    match deadline {
        None => call.await,
        // The timer is boxed: held in place, it would make every request's
        // future larger (a timer entry is big).
        Some(deadline) => match Box::pin(tokio::time::timeout_at(deadline, call)).await {
            Ok(result) => result,
            Err(_) => Err(Error::Timeout(policy.timeout)),
        },
    }
}

/// Pending once, asking to be polled again at once.
async fn yield_once() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}
