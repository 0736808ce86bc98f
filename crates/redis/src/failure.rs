//! What a check answers when Redis failed or was too slow: the
//! [`FailurePolicy`], after an alert.

use ratelab_core::{Decision, Error, duration_to_micros};

use crate::alert::Alert;
use crate::limiter::Inner;
use crate::script::RedisAlgorithm;
use crate::settings::FailurePolicy;

impl<A: RedisAlgorithm> Inner<A> {
    /// Raises an alert for `error`, then answers as the policy says.
    pub(crate) fn on_failure(
        &self,
        key: &[u8],
        cost: u32,
        error: Error,
    ) -> Result<Decision, Error> {
        self.alerts.raise(
            &Alert {
                algorithm: self.algorithm.name(),
                error: &error,
                policy: self.failure,
            },
            self.counters.snapshot(),
        );
        match self.failure {
            FailurePolicy::Error => Err(error),
            FailurePolicy::Allow => Ok(Decision::admitted(self.capacity)
                .with_remaining(self.capacity - u64::from(cost))
                .with_reset_after_micros(0)),
            FailurePolicy::Deny => {
                let retry = duration_to_micros(self.timeout).max(1);
                Ok(Decision::refused(self.capacity)
                    .with_retry_after_micros(retry)
                    .with_reset_after_micros(retry))
            }
            FailurePolicy::Fallback => match &self.fallback {
                Some(fallback) => fallback.check(key, cost),
                None => Err(error),
            },
        }
    }
}
