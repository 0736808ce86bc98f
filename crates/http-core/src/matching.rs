//! Which policies apply to a request: each policy compiled once (routes
//! parsed, header item built), then matched against every request head.

use std::borrow::Cow;
use std::net::Ipv4Addr;
use std::sync::Arc;

use http::request::Parts;
use ratelab_core::ceil_secs;
use ratelab_core::toolkit::LogGate;

use crate::client::{Client, Dotted};
use crate::config::ConfigError;
use crate::engine::{Check, LimiterKey, Refill};
use crate::policy::{Cost, Count, Policy};
use crate::response::PolicyItem;
use crate::route::Route;

/// A policy as the [`Limits`](crate::Limits) run it.
#[derive(Debug)]
pub(crate) struct Compiled {
    /// Shared with the checks of the requests it applies to.
    pub(crate) policy: Arc<Policy>,
    /// The policy's name, shared with every [`RateLimitInfo`](crate::RateLimitInfo).
    pub(crate) name: Arc<str>,
    routes: Vec<Route>,
    /// Its `RateLimit-Policy` item.
    pub(crate) item: PolicyItem,
    /// How its quota comes back, for `t`.
    pub(crate) refill: Refill,
    /// Throttles the log lines of its limiter's failures.
    pub(crate) log_gate: LogGate,
    /// `<name>:`, what its limiter keys start with.
    key_prefix: Box<[u8]>,
    /// An anonymous IPv4 client's limiter key up to the address,
    /// `<name>:ip:`, where the address fits after it in place: its length
    /// (0 where it does not fit), and the key's bytes.
    v4_key: (usize, [u8; LimiterKey::INLINE]),
}

impl Compiled {
    /// `policy`, whose checked name is `name`, or what is wrong with its
    /// routes.
    pub(crate) fn new(policy: Policy, name: sfv::String) -> Result<Self, ConfigError> {
        let routes = policy
            .routes
            .iter()
            .map(|(method, pattern)| Route::new(method.clone(), pattern))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| ConfigError::Route {
                policy: policy.name.clone(),
                source,
            })?;
        let quota = policy.limiter.quota();
        let item = PolicyItem::new(
            &name,
            u64::from(quota.burst()),
            // Rounded up, at least 1 s: the advertised rate is never
            // faster than the real one.
            ceil_secs(quota.window()).max(1),
        );
        let refill = Refill::of(policy.limiter.bound());
        if policy.settle.is_some() && !policy.refunds {
            return Err(ConfigError::CannotSettle(policy.name.clone()));
        }
        let key_prefix: Box<[u8]> = [policy.name.as_bytes(), b":"].concat().into();
        let mut v4_key = (0, [0; LimiterKey::INLINE]);
        let v4_prefix = [&key_prefix, &b"ip:"[..]].concat();
        if v4_prefix.len() + 15 <= LimiterKey::INLINE {
            v4_key.1[..v4_prefix.len()].copy_from_slice(&v4_prefix);
            v4_key.0 = v4_prefix.len();
        }
        Ok(Compiled {
            key_prefix,
            v4_key,
            name: Arc::from(policy.name.as_str()),
            policy: Arc::new(policy),
            routes,
            item,
            refill,
            log_gate: LogGate::default(),
        })
    }

    /// The policy's check of the request, if the policy applies to it (see
    /// [`Policy`], "Applies to"); `index` is the policy's position in the
    /// [`Limits`](crate::Limits).
    pub(crate) fn applies(&self, index: usize, parts: &Parts, client: &Client) -> Option<Check> {
        let policy = &self.policy;
        if !self.routes.is_empty()
            && !self
                .routes
                .iter()
                .any(|r| r.matches(&parts.method, parts.uri.path()))
        {
            return None;
        }
        if !self.admits_plan(client) {
            return None;
        }
        if let Some(when) = &policy.when
            && !when(parts, client)
        {
            return None;
        }
        let key = match &policy.key {
            Some(key) => Cow::Owned(key(parts, client)?.into_bytes()),
            None => Cow::Borrowed(client.key_bytes()),
        };
        let cost = match &policy.cost {
            Cost::Fixed(n) => *n,
            Cost::With(f) => f(parts, client),
        };
        Some(self.check(index, &key, cost))
    }

    /// Whether the policy reads nothing of a request but its client: no
    /// routes, no predicate, no key or cost function. Then
    /// [`Compiled::applies_to_client`] says what [`Compiled::applies`]
    /// would.
    pub(crate) fn reads_client_only(&self) -> bool {
        let policy = &self.policy;
        self.routes.is_empty()
            && policy.when.is_none()
            && policy.key.is_none()
            && matches!(policy.cost, Cost::Fixed(_))
    }

    /// [`Compiled::applies`] for a policy that [reads the client
    /// only](Compiled::reads_client_only); `None` for one that reads more.
    pub(crate) fn applies_to_client(&self, index: usize, client: &Client) -> Option<Check> {
        let Cost::Fixed(cost) = self.policy.cost else {
            return None;
        };
        if !self.reads_client_only() || !self.admits_plan(client) {
            return None;
        }
        Some(self.check(index, client.key_bytes(), cost))
    }

    /// For a policy that [reads the client only](Compiled::reads_client_only)
    /// and counts every request as it comes: the limiter key and the cost
    /// of `client`'s request, if the policy applies to it. (The check
    /// [`Compiled::applies_to_client`] makes, without the check.)
    pub(crate) fn client_key(&self, client: &Client) -> Option<(LimiterKey, u32)> {
        let Cost::Fixed(cost) = self.policy.cost else {
            return None;
        };
        if !self.admits_plan(client) {
            return None;
        }
        let key = LimiterKey::concat(&[&self.key_prefix, client.key_bytes()]);
        Some((key, cost))
    }

    /// [`Compiled::client_key`] of the anonymous client at `v4`, on the
    /// anonymous plan `plan`, written without the client: `<name>:ip:`
    /// and the address.
    pub(crate) fn anonymous_v4_key(
        &self,
        v4: Ipv4Addr,
        plan: Option<&str>,
    ) -> Option<(LimiterKey, u32)> {
        let Cost::Fixed(cost) = self.policy.cost else {
            return None;
        };
        if !self.admits(plan) {
            return None;
        }
        let key = match self.v4_key {
            (0, _) => {
                let mut address = [0; 15];
                let len = Dotted(v4).write_into(&mut address);
                LimiterKey::concat(&[&self.key_prefix, b"ip:", &address[..len]])
            }
            (at, mut bytes) => {
                let len = at + Dotted(v4).write_into(&mut bytes[at..]);
                LimiterKey::in_place(bytes, len)
            }
        };
        Some((key, cost))
    }

    /// Whether the policy applies to the client's plan (all plans when it
    /// names none).
    fn admits_plan(&self, client: &Client) -> bool {
        self.admits(client.plan())
    }

    /// Whether the policy applies to a client on `plan`.
    fn admits(&self, plan: Option<&str>) -> bool {
        let plans = &self.policy.plans;
        plans.is_empty() || plan.is_some_and(|plan| plans.iter().any(|p| p == plan))
    }

    /// The policy's check of a request it applies to, under `key` at
    /// `cost`.
    fn check(&self, index: usize, key: &[u8], cost: u32) -> Check {
        let check = Check::new(index, &self.policy, key, cost, self.refill);
        // Without receipts, a policy that counts only some responses can
        // only peek now and count once the response says.
        if self.policy.count != Count::All && !self.policy.refunds {
            return check.deferred();
        }
        check
    }
}

/// The checks of every policy in `policies` that applies to the request, as
/// the engine takes them (no list of its own).
pub(crate) fn checks(
    policies: &[Compiled],
    parts: &Parts,
    client: &Client,
) -> impl Iterator<Item = Check> {
    policies
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.applies(i, parts, client))
}
