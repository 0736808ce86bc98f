//! [`ConfigError`]: what makes a configuration of the limits invalid, and
//! the rule for policy names.

use crate::route::RouteError;

/// A configuration the [`Limits`](crate::Limits) refuse to run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A policy name clients could not read back, or that could clash.
    #[error(
        "policy name {0:?} is not 1 to 64 characters among A-Z a-z 0-9 _ . - \
         (it appears in the RateLimit headers and the limiter keys)"
    )]
    InvalidName(String),
    /// Two policies share a name: their headers and keys would mix.
    #[error("two policies are named {0:?}")]
    DuplicateName(String),
    /// A policy settles from the response
    /// ([`Policy::settle_with`](crate::Policy::settle_with)) on a limiter
    /// that issues no receipts, so nothing could be given back or charged
    /// after the response.
    #[error(
        "policy {0:?} settles from the response, but its limiter issues no receipts \
         (Limiter::refunds is false)"
    )]
    CannotSettle(String),
    /// A route pattern of a policy is not valid.
    #[error("policy {policy:?}: {source}")]
    Route {
        /// The policy.
        policy: String,
        /// What is wrong with the pattern.
        #[source]
        source: RouteError,
    },
}

/// `name` as the structured-field string the headers carry, if it is a
/// valid policy name.
pub(crate) fn policy_name(name: &str) -> Result<sfv::String, ConfigError> {
    // Narrower than what sfv accepts: the name is also the limiter key's
    // prefix, where a `:` would let two policies' keys collide.
    let valid = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    sfv::String::from_string(name.to_owned())
        .ok()
        .filter(|_| valid)
        .ok_or_else(|| ConfigError::InvalidName(name.to_owned()))
}
