//! Who is calling: [`Identify`] turns a request into a [`Client`], by API key,
//! then by an authenticated user the application put in the request
//! extensions, then by IP address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::HeaderName;
use http::request::Parts;
use ipnet::IpNet;

use crate::client::{Client, ClientKind, DEFAULT_IPV6_PREFIX, Identity};
use crate::proxy::TrustedProxies;

/// The peer address of a connection, for servers that record it in the
/// request's extensions: insert it into each request (ratelab-http's
/// `SetPeerAddr` does, for plain hyper), and [`Identify`] reads it. A server
/// that knows the address otherwise gives it to
/// [`Identify::client_with`] (or [`Limits::start`](crate::Limits::start))
/// instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

type ApiKeyResolver = Arc<dyn Fn(&str) -> Option<Identity> + Send + Sync>;
type UserResolver = Arc<dyn Fn(&http::Extensions) -> Option<Identity> + Send + Sync>;
type PeerResolver = Arc<dyn Fn(&Parts) -> Option<IpAddr> + Send + Sync>;

/// The chain that identifies the caller of a request: the first link that
/// answers wins.
///
/// 1. **API key** ([`Identify::api_key`]): the header's value is given to a
///    resolver, which returns the [`Identity`] it belongs to, or `None` for a
///    key it does not know. An unknown key is no identity at all, so inventing
///    keys buys a client nothing: it is limited by IP like anyone anonymous.
///    The resolver runs on every request: make it a lookup in memory. To
///    check keys against a database, do it in an authentication layer placed
///    before this one and use the next link.
/// 2. **Authenticated user** ([`Identify::user`]): a value of your type that
///    an earlier layer (your authentication middleware) inserted into the
///    request extensions, turned into an [`Identity`].
/// 3. **IP address**: the peer address, or behind trusted proxies the one
///    they recorded ([`TrustedProxies`]). IPv6 clients are grouped by /64 by
///    default ([`Identify::ipv6_prefix`]), since one host commonly owns a
///    whole /64 and could otherwise rotate through addresses.
///
/// The peer address comes from a resolver set with [`Identify::peer_addr`],
/// else from a [`PeerAddr`] extension, else from the server
/// ([`Identify::client_with`]: ratelab-http's layer reads axum's
/// `ConnectInfo<SocketAddr>` with its `axum` feature). If none is there (a
/// server set up without connect info), the client is `ip:unknown`, shared
/// by every such request, and an error is logged once: no request is let
/// through unlimited for want of an address.
///
/// ```
/// use http::{HeaderName, Request};
/// use ratelab_http_core::{Client, ClientKind, Identify, Identity, PeerAddr, TrustedProxies};
///
/// #[derive(Clone)]
/// struct CurrentUser { id: u64, pro: bool }
///
/// let identify = Identify::new()
///     .api_key(HeaderName::from_static("x-api-key"), |key| match key {
///         "k-3f9a" => Some(Identity::new("acme").with_plan("pro")),
///         _ => None,
///     })
///     .user(|user: &CurrentUser| {
///         Some(Identity::new(user.id.to_string()).with_plan(if user.pro { "pro" } else { "free" }))
///     })
///     .trusted_proxies(TrustedProxies::parse(["10.0.0.0/8"])?)
///     .anonymous_plan("anonymous");
///
/// let (mut parts, ()) = Request::get("/").header("x-api-key", "k-3f9a").body(())?.into_parts();
/// parts.extensions.insert(PeerAddr("10.0.0.1:5000".parse()?));
/// assert_eq!(identify.client(&parts).key(), "key:acme");
///
/// parts.headers.clear();
/// parts.extensions.insert(CurrentUser { id: 42, pro: false });
/// assert_eq!(identify.client(&parts).plan(), Some("free"));
///
/// parts.extensions.remove::<CurrentUser>();
/// parts.headers.insert("x-forwarded-for", "203.0.113.9".parse()?);
/// let client = identify.client(&parts);
/// assert_eq!((client.kind(), client.key()), (ClientKind::Ip, "ip:203.0.113.9"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Identify {
    api_key: Option<(HeaderName, ApiKeyResolver)>,
    users: Vec<UserResolver>,
    proxies: TrustedProxies,
    peer: Option<PeerResolver>,
    anonymous_plan: Option<Arc<str>>,
    ipv6_prefix: u8,
}

impl Default for Identify {
    fn default() -> Self {
        Identify {
            api_key: None,
            users: Vec::new(),
            proxies: TrustedProxies::none(),
            peer: None,
            anonymous_plan: None,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }
}

impl Identify {
    /// By IP address only, with no trusted proxy and IPv6 clients grouped by
    /// /64.
    pub fn new() -> Self {
        Self::default()
    }

    /// Identify by the API key in `header`: `resolve` returns the identity a
    /// key belongs to, or `None` for an unknown key (then the next link
    /// decides). Replaces any API key link set before.
    pub fn api_key<F>(mut self, header: HeaderName, resolve: F) -> Self
    where
        F: Fn(&str) -> Option<Identity> + Send + Sync + 'static,
    {
        self.api_key = Some((header, Arc::new(resolve)));
        self
    }

    /// Identify by a value of type `T` in the request extensions, put there
    /// by an earlier authentication layer. Several user links are tried in
    /// the order they were added.
    pub fn user<T, F>(mut self, resolve: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> Option<Identity> + Send + Sync + 'static,
    {
        self.users
            .push(Arc::new(move |extensions: &http::Extensions| {
                extensions.get::<T>().and_then(&resolve)
            }));
        self
    }

    /// Believe the forwarding header when the peer is one of these proxies.
    pub fn trusted_proxies(mut self, proxies: TrustedProxies) -> Self {
        self.proxies = proxies;
        self
    }

    /// Read the peer address with `resolve` (for a server that records it in
    /// its own extension type) instead of [`PeerAddr`] or what the server
    /// gives ([`Identify::client_with`]).
    pub fn peer_addr<F>(mut self, resolve: F) -> Self
    where
        F: Fn(&Parts) -> Option<IpAddr> + Send + Sync + 'static,
    {
        self.peer = Some(Arc::new(resolve));
        self
    }

    /// The plan of clients identified by IP address (none by default).
    pub fn anonymous_plan(mut self, plan: impl Into<String>) -> Self {
        self.anonymous_plan = Some(Arc::from(plan.into()));
        self
    }

    /// Group IPv6 clients by their first `len` bits (64 by default; 128
    /// limits every address on its own), both as anonymous clients and in
    /// [`Client::network`]. Capped at 128.
    pub fn ipv6_prefix(mut self, len: u8) -> Self {
        self.ipv6_prefix = len.min(128);
        self
    }

    /// The trusted proxies.
    pub fn proxies(&self) -> &TrustedProxies {
        &self.proxies
    }

    /// The caller of the request whose head is `parts`, its peer address
    /// from the [resolver](Identify::peer_addr) or a [`PeerAddr`] extension.
    pub fn client(&self, parts: &Parts) -> Client {
        self.client_with(parts, |_| None)
    }

    /// The caller of the request whose head is `parts`, where `peer` gives
    /// the connection's peer address if neither the
    /// [resolver](Identify::peer_addr) nor a [`PeerAddr`] extension does:
    /// the server's own record of the connection (axum's `ConnectInfo`, an
    /// address from `accept`).
    pub fn client_with<P>(&self, parts: &Parts, peer: P) -> Client
    where
        P: FnOnce(&Parts) -> Option<IpAddr>,
    {
        self.resolve(parts, peer).with_ipv6_prefix(self.ipv6_prefix)
    }

    /// The caller of a request read in place, from its `headers` and
    /// `extensions`, for identities with no [peer
    /// resolver](Identify::peer_addr) (which reads the whole head): the
    /// peer address from a [`PeerAddr`] extension, else from `peer`.
    pub(crate) fn client_in_place<P>(
        &self,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
        peer: P,
    ) -> Client
    where
        P: FnOnce(&http::Extensions) -> Option<IpAddr>,
    {
        let ip = self.ip_in_place(headers, extensions, peer);
        self.client_at(headers, extensions, ip)
    }

    /// The client's address, read in place as [`Identify::client_in_place`]
    /// reads it: the peer's, or behind trusted proxies the one they
    /// recorded.
    pub(crate) fn ip_in_place<P>(
        &self,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
        peer: P,
    ) -> Option<IpAddr>
    where
        P: FnOnce(&http::Extensions) -> Option<IpAddr>,
    {
        debug_assert!(self.peer.is_none(), "a peer resolver reads the whole head");
        let ip = match extensions.get::<PeerAddr>() {
            Some(PeerAddr(addr)) => Some(addr.ip()),
            None => peer(extensions),
        };
        ip.map(|peer| self.proxies.client_ip(peer, headers))
    }

    /// The caller of a request read in place, whose address is `ip` (from
    /// [`Identify::ip_in_place`]).
    pub(crate) fn client_at(
        &self,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
        ip: Option<IpAddr>,
    ) -> Client {
        self.identified(headers, extensions, ip)
            .with_ipv6_prefix(self.ipv6_prefix)
    }

    /// The IPv4 address of a client whose address is `ip`, when it is
    /// identified by that address alone (no API key or user link): its
    /// key is `ip:<address>`, and it is
    /// [`Identify::anonymous_v4`]'s client.
    pub(crate) fn by_ipv4(&self, ip: Option<IpAddr>) -> Option<Ipv4Addr> {
        match ip {
            Some(IpAddr::V4(v4)) if self.api_key.is_none() && self.users.is_empty() => Some(v4),
            _ => None,
        }
    }

    /// The anonymous client at `v4` ([`Identify::by_ipv4`]), as
    /// [`Identify::client_at`] identifies it.
    pub(crate) fn anonymous_v4(&self, v4: Ipv4Addr) -> Client {
        Client::anonymous_v4(v4, self.anonymous_plan.clone(), Some(IpAddr::V4(v4)))
            .with_ipv6_prefix(self.ipv6_prefix)
    }

    /// The plan of clients identified by IP address.
    pub(crate) fn plan_of_anonymous(&self) -> Option<&str> {
        self.anonymous_plan.as_deref()
    }

    /// Whether identifying a client reads the request's headers and
    /// extensions only (no [peer resolver](Identify::peer_addr)).
    pub(crate) fn reads_in_place(&self) -> bool {
        self.peer.is_none()
    }

    fn resolve<P>(&self, parts: &Parts, peer: P) -> Client
    where
        P: FnOnce(&Parts) -> Option<IpAddr>,
    {
        let ip = self.peer_ip(parts).or_else(|| peer(parts));
        let ip = ip.map(|peer| self.proxies.client_ip(peer, &parts.headers));
        self.identified(&parts.headers, &parts.extensions, ip)
    }

    /// The caller, its address (after the trusted proxies) being `ip`.
    fn identified(
        &self,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
        ip: Option<IpAddr>,
    ) -> Client {
        if let Some((header, resolve)) = &self.api_key {
            let key = headers.get(header).and_then(|v| v.to_str().ok());
            if let Some(identity) = key
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .and_then(|k| resolve(k))
            {
                return Client::identified(ClientKind::ApiKey, identity, ip);
            }
        }
        for resolve in &self.users {
            if let Some(identity) = resolve(extensions) {
                return Client::identified(ClientKind::User, identity, ip);
            }
        }
        let plan = self.anonymous_plan.clone();
        match ip {
            Some(IpAddr::V6(v6)) if self.ipv6_prefix < 128 => {
                let net = IpNet::new(IpAddr::V6(v6), self.ipv6_prefix)
                    .map_or_else(|_| IpNet::from(IpAddr::V6(v6)), |n| n.trunc());
                Client::anonymous(net, plan, ip)
            }
            Some(IpAddr::V4(v4)) => Client::anonymous_v4(v4, plan, ip),
            Some(address) => Client::anonymous(address, plan, ip),
            None => {
                warn_missing_peer_once();
                Client::anonymous("unknown", plan, ip)
            }
        }
    }

    fn peer_ip(&self, parts: &Parts) -> Option<IpAddr> {
        if let Some(resolve) = &self.peer {
            return resolve(parts);
        }
        let PeerAddr(addr) = parts.extensions.get::<PeerAddr>()?;
        Some(addr.ip())
    }
}

fn warn_missing_peer_once() {
    const MESSAGE: &str = "ratelab-http: a request carries no peer address (no PeerAddr or \
        ConnectInfo<SocketAddr> extension); every such request is limited as the one client \
        `ip:unknown`. With axum, enable ratelab-http's `axum` feature and serve \
        `app.into_make_service_with_connect_info::<SocketAddr>()`; with hyper, wrap the service \
        in `SetPeerAddr`.";
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::error!("{MESSAGE}");
        // A program with no tracing subscriber would never see the event:
        // this mistake must not pass silently.
        if !tracing::dispatcher::has_been_set() {
            eprintln!("{MESSAGE}");
        }
    }
}

impl fmt::Debug for Identify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identify")
            .field("api_key", &self.api_key.as_ref().map(|(h, _)| h))
            .field("users", &self.users.len())
            .field("proxies", &self.proxies)
            .field("custom_peer", &self.peer.is_some())
            .field("anonymous_plan", &self.anonymous_plan)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .finish()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use http::Request;

    /// A request head from `peer`, as a server records it.
    pub(crate) fn parts(peer: &str) -> Parts {
        let (mut parts, ()) = Request::get("/").body(()).unwrap().into_parts();
        parts.extensions.insert(PeerAddr(peer.parse().unwrap()));
        parts
    }

    #[test]
    fn ipv4_written_as_ipv6_is_keyed_as_ipv4() {
        let identify = Identify::new();
        for peer in ["[::1.2.3.4]:80", "[::ffff:1.2.3.4]:80"] {
            assert_eq!(identify.client(&parts(peer)).key(), "ip:1.2.3.4", "{peer}");
        }
        assert_eq!(identify.client(&parts("[::1]:80")).key(), "ip:::/64");
    }

    #[test]
    fn ipv6_grouped_by_prefix() {
        let p = parts("[2001:db8:1:2:3:4:5:6]:80");
        assert_eq!(Identify::new().client(&p).key(), "ip:2001:db8:1:2::/64");
        assert_eq!(
            Identify::new().ipv6_prefix(128).client(&p).key(),
            "ip:2001:db8:1:2:3:4:5:6"
        );
        assert_eq!(
            Identify::new().ipv6_prefix(48).client(&p).key(),
            "ip:2001:db8:1::/48"
        );
        let c = Identify::new().client(&p);
        assert_eq!(c.ip(), Some("2001:db8:1:2:3:4:5:6".parse().unwrap()));
    }

    #[test]
    fn the_network_is_the_ipv4_address_or_the_ipv6_prefix_whatever_identified() {
        let net = |identify: &Identify, peer: &str| identify.client(&parts(peer)).network();
        let by_64 = Identify::new();
        assert_eq!(
            net(&by_64, "203.0.113.9:1").unwrap().to_string(),
            "203.0.113.9/32"
        );
        assert_eq!(
            net(&by_64, "[::ffff:1.2.3.4]:1").unwrap().to_string(),
            "1.2.3.4/32"
        );
        let v6 = "[2001:db8:1:2:3:4:5:6]:1";
        assert_eq!(net(&by_64, v6).unwrap().to_string(), "2001:db8:1:2::/64");
        assert_eq!(
            net(&by_64, "[2001:db8:1:2:ffff::1]:1"),
            net(&by_64, v6),
            "one /64"
        );
        let by_48 = Identify::new().ipv6_prefix(48);
        assert_eq!(net(&by_48, v6).unwrap().to_string(), "2001:db8:1::/48");
        // An API key client too: its network, not its account.
        let keyed = Identify::new().api_key(HeaderName::from_static("x-api-key"), |_| {
            Some(Identity::new("acct"))
        });
        let mut p = parts(v6);
        p.headers.insert("x-api-key", "k".parse().unwrap());
        let client = keyed.client(&p);
        assert_eq!(client.key(), "key:acct");
        assert_eq!(client.network().unwrap().to_string(), "2001:db8:1:2::/64");
        let (p, ()) = Request::get("/").body(()).unwrap().into_parts();
        assert_eq!(Identify::new().client(&p).network(), None);
    }

    #[test]
    fn unknown_key_falls_through() {
        let id = Identify::new()
            .api_key(HeaderName::from_static("x-api-key"), |k| {
                (k == "good").then(|| Identity::new("acct"))
            })
            .anonymous_plan("anon");
        let mut p = parts("1.2.3.4:1");
        p.headers.insert("x-api-key", "bad".parse().unwrap());
        let c = id.client(&p);
        assert_eq!((c.key(), c.plan()), ("ip:1.2.3.4", Some("anon")));
        p.headers.insert("x-api-key", " good ".parse().unwrap());
        let c = id.client(&p);
        assert_eq!((c.key(), c.plan()), ("key:acct", None));
        p.headers.insert(
            "x-api-key",
            http::HeaderValue::from_bytes(b"\xffgood").unwrap(),
        );
        assert_eq!(id.client(&p).key(), "ip:1.2.3.4");
    }

    #[test]
    fn missing_peer_is_one_shared_client() {
        let (p, ()) = Request::get("/").body(()).unwrap().into_parts();
        let c = Identify::new().client(&p);
        assert_eq!((c.key(), c.ip()), ("ip:unknown", None));
    }

    #[test]
    fn custom_peer_resolver_wins() {
        let id = Identify::new().peer_addr(|_| Some("9.9.9.9".parse().unwrap()));
        assert_eq!(id.client(&parts("1.2.3.4:1")).key(), "ip:9.9.9.9");
    }
}
