//! What a check answers when Redis failed or was too slow: outages and data
//! errors told apart, then the [`FailurePolicy`], after an alert.

use ratelab_core::{Decision, Error, Receipt, duration_to_micros};
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::alert::Alert;
use crate::limiter::Inner;
use crate::script::RedisAlgorithm;
use crate::settings::FailurePolicy;

/// A Redis error as an outage ([`Error::Backend`]: the connection, a
/// cluster moving or down, a server loading or busy) or a data error
/// ([`Error::Data`]: Redis answered, and what it said is about the key or
/// the server's state, not its reachability: `WRONGTYPE`, `OOM`, corrupt
/// state, a script error).
pub(crate) fn classify(error: RedisError) -> Error {
    let outage = match error.kind() {
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        ) => true,
        ErrorKind::Server(_) | ErrorKind::Parse | ErrorKind::UnexpectedReturnType => false,
        // A script running too long elsewhere blocks the server: it will pass.
        ErrorKind::Extension => matches!(error.code(), Some("BUSY")),
        // I/O, the client, a cluster node not found, authentication.
        _ => true,
    };
    if outage {
        return Error::backend(error);
    }
    if error.code() == Some("ratelab") && error.detail().is_some_and(|d| d.starts_with("expired")) {
        // The reply came back within the timeout, yet the script started
        // after the deadline on Redis's clock: this host's clock is behind.
        return Error::backend(format!(
            "Redis ran a check after its deadline although it answered within the timeout: \
             this host's clock is behind Redis's by more than the clock skew allowance ({error})"
        ));
    }
    // The server's own words, `<code> <detail>`: "ratelab gcra: corrupt
    // state at ...", "WRONGTYPE ...", "OOM ...".
    match (error.code(), error.detail()) {
        (Some(code), Some(detail)) => Error::data(format!("{code} {detail}")),
        _ => Error::data(error),
    }
}

impl<A: RedisAlgorithm> Inner<A> {
    /// Raises an alert for `error`, then answers as the policy says: the
    /// policy applies to outages, and to data errors only when asked to.
    /// With `receipt`, an admission the fallback decided has the fallback's
    /// receipt; fail open charges nothing anywhere, so it has none.
    pub(crate) fn on_failure(
        &self,
        key: &[u8],
        cost: u32,
        error: Error,
        receipt: bool,
    ) -> Result<(Decision, Option<Receipt>), Error> {
        let policy = if error.is_unavailable() || self.policy_on_data_errors {
            self.failure
        } else {
            FailurePolicy::Error
        };
        self.alerts.raise(
            &Alert {
                algorithm: self.algorithm.name(),
                error: &error,
                policy,
            },
            self.stats(),
        );
        let mut issued = None;
        let decision = match policy {
            FailurePolicy::Error => return Err(error),
            // As a fresh key would answer: what is left after `cost`, and
            // (the contract: full iff nothing is missing) the longest this
            // algorithm takes to be full again when something is.
            FailurePolicy::Allow => Decision::admitted(self.capacity)
                .with_remaining(self.capacity - u64::from(cost))
                .with_reset_after_micros(if cost == 0 {
                    0
                } else {
                    self.algorithm.max_wait_micros().max(1)
                }),
            FailurePolicy::Deny => {
                // An open breaker says when Redis is tried again; else the
                // next check may find it back after a timeout at most.
                let wait = match &error {
                    Error::CircuitOpen(wait) => *wait,
                    _ => self.timeout,
                };
                let retry = duration_to_micros(wait).max(1);
                Decision::refused(self.capacity)
                    .with_retry_after_micros(retry)
                    .with_reset_after_micros(retry)
            }
            FailurePolicy::Fallback => match &self.fallback {
                Some(fallback) if receipt => {
                    let (decision, given) = fallback.check_with_receipt(key, cost)?;
                    issued = given;
                    decision
                }
                Some(fallback) => fallback.check(key, cost)?,
                None => return Err(error),
            },
        };
        // Told apart from Redis's own answers, so that a caller with its own
        // failure mode (an HTTP policy) can let that mode win.
        Ok((decision.degraded(), issued))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::ErrorKind as Kind;

    fn server(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
    }

    #[test]
    fn outages_and_data_errors_are_told_apart() {
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(classify(io).kind(), Kind::Backend);
        assert_eq!(classify(server("BUSY", "a script")).kind(), Kind::Backend);
        for (code, detail) in [
            ("OOM", "command not allowed when used memory > 'maxmemory'."),
            (
                "WRONGTYPE",
                "Operation against a key holding the wrong kind of value",
            ),
            (
                "ratelab",
                "gcra: corrupt state at k: not a timestamp: \"abc\"",
            ),
        ] {
            let error = classify(server(code, detail));
            assert_eq!(error.kind(), Kind::Data);
            assert!(!error.is_unavailable());
            assert!(
                error.to_string().ends_with(&format!(": {code} {detail}")),
                "{error}"
            );
        }
        // An expired reply within the timeout: this host's clock is behind.
        let skew = classify(server("ratelab", "expired: ran 5 us after its deadline"));
        assert_eq!(skew.kind(), Kind::Backend);
        assert!(skew.to_string().contains("clock skew"), "{skew}");
    }
}
