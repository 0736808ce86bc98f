//! [`LoginAttempt`]: one request on a login guard's route, as the guard
//! reads it (the account, a valid device token or none, the client's
//! network), and [`GuardCore`], the guard's per-request decisions: which
//! request is an attempt, and which response gets a device cookie.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::request::Parts;
use http::{HeaderValue, StatusCode};
use sha2::{Digest, Sha256};

use crate::client::Client;
use crate::login::cookie::{self, CookieSettings};
use crate::login::token::{DeviceId, Signer};
use crate::route::Route;

pub(super) type AccountFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;
pub(super) type StatusFn = Arc<dyn Fn(StatusCode) -> bool + Send + Sync>;
pub(super) type WallClock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Accounts longer than this are keyed by their SHA-256 digest: an attacker
/// choosing account names cannot make the limiters' keys (and so their
/// tables, or Redis) grow with them.
const MAX_ACCOUNT_KEY: usize = 64;

/// What the limits consult on every request: the routes, how to read the
/// account, the signer and the cookie.
pub(crate) struct GuardCore {
    pub(super) routes: Vec<Route>,
    pub(super) account: AccountFn,
    pub(super) succeeded: StatusFn,
    pub(super) signer: Signer,
    pub(super) cookie: CookieSettings,
    pub(super) lifetime: Duration,
    pub(super) wall_clock: WallClock,
}

/// One login attempt, as the guard read it: in the extensions of every
/// request on a guard's route, for the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginAttempt {
    /// As [`LoginGuardBuilder::account`](crate::LoginGuardBuilder::account)
    /// read it.
    account: Option<Arc<str>>,
    /// The account as the limiters key it.
    pub(super) key: Arc<str>,
    pub(super) device: Option<DeviceId>,
    /// The client's network, as the limiters key it.
    pub(super) network: Arc<str>,
}

impl LoginAttempt {
    /// The account the attempt is for, if the guard could read it.
    pub fn account(&self) -> Option<&str> {
        self.account.as_deref()
    }

    /// It carries a valid device token for its account: a known device.
    pub fn known_device(&self) -> bool {
        self.device.is_some()
    }

    /// The attempt a guard's policy reads from the request's extensions.
    pub(super) fn in_request(parts: &Parts) -> Option<&LoginAttempt> {
        parts.extensions.get::<LoginAttempt>()
    }
}

impl GuardCore {
    /// The login attempt `parts` is, if it is on one of the guard's routes.
    pub(crate) fn attempt(&self, parts: &Parts, client: &Client) -> Option<LoginAttempt> {
        if !self
            .routes
            .iter()
            .any(|r| r.matches(&parts.method, parts.uri.path()))
        {
            return None;
        }
        let account = (self.account)(parts);
        let now = unix_secs(&self.wall_clock);
        let device = account.as_deref().and_then(|account| {
            // Every cookie of that name: one that verifies for the account
            // is the device's, whatever others came before it.
            cookie::candidates(&parts.headers, self.cookie.read_names())
                .into_iter()
                .find_map(|token| self.signer.verify(token, account, now))
        });
        let key = account.as_deref().map_or_else(String::new, account_key);
        let network = client
            .network()
            .map_or_else(|| "unknown".to_owned(), |net| net.to_string());
        Some(LoginAttempt {
            account: account.map(Arc::from),
            key: key.into(),
            device,
            network: network.into(),
        })
    }

    /// The `Set-Cookie` value for the response of `attempt` with `status`:
    /// a device token for its account if the login succeeded (the device's
    /// own id again for a known device).
    pub(crate) fn cookie(&self, attempt: &LoginAttempt, status: StatusCode) -> Option<HeaderValue> {
        let account = attempt.account.as_deref()?;
        if !(self.succeeded)(status) {
            return None;
        }
        let Some(device) = attempt.device.or_else(DeviceId::random) else {
            tracing::error!("no randomness for a device id: the login's device cookie is not set");
            return None;
        };
        let expires = unix_secs(&self.wall_clock).saturating_add(self.lifetime.as_secs());
        let token = self.signer.sign(account, device, expires);
        cookie::set_cookie(&self.cookie, &token, self.lifetime)
    }
}

/// The Unix second now, by `clock`; 0 before 1970.
fn unix_secs(clock: &WallClock) -> u64 {
    clock()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// `account` as the limiters key it: as it is up to 64 bytes, else
/// `sha256:<hex digest>`.
fn account_key(account: &str) -> String {
    if account.len() <= MAX_ACCOUNT_KEY {
        return account.to_owned();
    }
    let digest = Sha256::digest(account.as_bytes());
    let mut key = String::from("sha256:");
    for byte in digest {
        key.push_str(&format!("{byte:02x}"));
    }
    key
}

impl fmt::Debug for GuardCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardCore")
            .field("routes", &self.routes.len())
            .field("cookie", &self.cookie)
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_accounts_are_keyed_by_digest() {
        assert_eq!(account_key("alice"), "alice");
        let long = "a".repeat(65);
        let key = account_key(&long);
        assert!(key.starts_with("sha256:") && key.len() == 7 + 64, "{key}");
        assert_ne!(account_key(&"a".repeat(66)), key);
        assert_eq!(account_key(&"a".repeat(64)), "a".repeat(64));
    }
}
