//! [`Client`]: the caller of one request as [`Identify`](crate::Identify)
//! resolved it, and the key it is limited by, written in place for the
//! common address so that identifying a client allocates nothing.

use std::fmt::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use ipnet::IpNet;

use crate::small::SmallBytes;

/// The prefix anonymous IPv6 clients are grouped by, unless
/// [`Identify::ipv6_prefix`](crate::Identify::ipv6_prefix) says otherwise.
pub(crate) const DEFAULT_IPV6_PREFIX: u8 = 64;

/// An identity the application vouches for: an account id and its plan.
///
/// Returned by the resolvers given to
/// [`Identify::api_key`](crate::Identify::api_key) and
/// [`Identify::user`](crate::Identify::user). The id becomes part of the
/// limiter key (and so of the Redis key): use an account id, never the API
/// key or a password itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    id: String,
    plan: Option<String>,
}

impl Identity {
    /// The account `id`, without a plan.
    pub fn new(id: impl Into<String>) -> Self {
        Identity {
            id: id.into(),
            plan: None,
        }
    }

    /// The same identity on `plan` (`"free"`, `"pro"`...), which selects the
    /// policies declared with [`Policy::plan`](crate::Policy::plan).
    pub fn with_plan(mut self, plan: impl Into<String>) -> Self {
        self.plan = Some(plan.into());
        self
    }

    /// The account id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The plan, if any.
    pub fn plan(&self) -> Option<&str> {
        self.plan.as_deref()
    }
}

/// How a [`Client`] was identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClientKind {
    /// By an API key the resolver recognised.
    ApiKey,
    /// By an authenticated user found in the request extensions.
    User,
    /// By IP address (or IPv6 network): an anonymous client.
    Ip,
}

/// The caller of one request, as [`Identify`](crate::Identify) resolved it. A request that
/// passes also carries it in its extensions, for handlers and logs.
///
/// Cloning is cheap: a short key (every IP's) is copied, a longer one and
/// the plan are shared.
#[derive(Clone, PartialEq, Eq)]
pub struct Client {
    kind: ClientKind,
    /// `<prefix>:<id>`: the key, whose end is the id.
    key: ClientKey,
    /// Where the id starts in `key`.
    id_at: usize,
    plan: Option<Arc<str>>,
    ip: Option<IpAddr>,
    /// The prefix IPv6 addresses are grouped by ([`Client::network`]).
    ipv6_prefix: u8,
}

impl Client {
    /// A client identified some other way than by IP (for tests, and for
    /// custom code around the limits).
    pub fn identified(kind: ClientKind, identity: Identity, ip: Option<IpAddr>) -> Self {
        let prefix = match kind {
            ClientKind::ApiKey => "key",
            ClientKind::User => "user",
            ClientKind::Ip => "ip",
        };
        let mut key = KeyBuf::default();
        let _ = write!(key, "{prefix}:{}", identity.id);
        Client {
            kind,
            key: key.into(),
            id_at: prefix.len() + 1,
            plan: identity.plan.map(Arc::from),
            ip,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// The same client, its IPv6 network grouped by the first `len` bits.
    pub(crate) fn with_ipv6_prefix(mut self, len: u8) -> Self {
        self.ipv6_prefix = len;
        self
    }

    /// An anonymous client, `ip:<id>`, where `id` writes the address (or
    /// network).
    pub(crate) fn anonymous(
        id: impl fmt::Display,
        plan: Option<Arc<str>>,
        ip: Option<IpAddr>,
    ) -> Self {
        let mut key = KeyBuf::default();
        let _ = write!(key, "ip:{id}");
        Self::anonymous_key(key, plan, ip)
    }

    /// An anonymous client by IPv4 address, `ip:<address>`: the common
    /// case, written without the formatting machinery.
    pub(crate) fn anonymous_v4(v4: Ipv4Addr, plan: Option<Arc<str>>, ip: Option<IpAddr>) -> Self {
        // `ip:` and at most 15 digits and dots fit in place: no check of
        // the bytes (ASCII) and no buffer of their own.
        let mut bytes = [0; ClientKey::INLINE];
        bytes[..3].copy_from_slice(b"ip:");
        let len = 3 + Dotted(v4).write_into(&mut bytes[3..]);
        Client {
            kind: ClientKind::Ip,
            key: ClientKey::in_place(bytes, len),
            id_at: "ip:".len(),
            plan,
            ip,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    fn anonymous_key(key: KeyBuf, plan: Option<Arc<str>>, ip: Option<IpAddr>) -> Self {
        Client {
            kind: ClientKind::Ip,
            key: key.into(),
            id_at: "ip:".len(),
            plan,
            ip,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// How the client was identified.
    pub fn kind(&self) -> ClientKind {
        self.kind
    }

    /// The account id, or for an anonymous client its address (or IPv6
    /// network, `2001:db8:1:2::/64`); `unknown` if the peer address was
    /// missing.
    pub fn id(&self) -> &str {
        &self.key()[self.id_at..]
    }

    /// The plan: the identity's, or [`Identify::anonymous_plan`](crate::Identify::anonymous_plan) for an
    /// anonymous client.
    pub fn plan(&self) -> Option<&str> {
        self.plan.as_deref()
    }

    /// The client's IP address (after the trusted proxies), whatever
    /// identified it; `None` if the peer address was missing.
    ///
    /// To count something per client address, use [`Client::network`]: one
    /// IPv6 host commonly holds a whole /64 and picks a new address in it at
    /// will.
    pub fn ip(&self) -> Option<IpAddr> {
        self.ip
    }

    /// The client's network, whatever identified it: its IPv4 address (a
    /// /32), or its IPv6 address's network, the /64 (or the prefix
    /// [`Identify::ipv6_prefix`](crate::Identify::ipv6_prefix) sets) that anonymous clients are limited
    /// by; `None` if the peer address was missing. Key anything counted per
    /// address by this (`2001:db8:1:2::/64`, `203.0.113.9/32`), never by
    /// [`Client::ip`]: a host rotating through the addresses of its /64 is
    /// one network.
    pub fn network(&self) -> Option<IpNet> {
        let net = match self.ip? {
            IpAddr::V4(v4) => IpNet::from(IpAddr::V4(v4)),
            IpAddr::V6(v6) => IpNet::new(IpAddr::V6(v6), self.ipv6_prefix)
                .map_or_else(|_| IpNet::from(IpAddr::V6(v6)), |n| n.trunc()),
        };
        Some(net)
    }

    /// The key this client is limited by: `key:<id>`, `user:<id>` or
    /// `ip:<address or network>`. Each policy prefixes it with its name.
    pub fn key(&self) -> &str {
        // Only whole `str`s go into a key: UTF-8.
        std::str::from_utf8(&self.key).unwrap_or_default()
    }

    /// [`Client::key`]'s bytes, read without checking them again (every
    /// request's limiter key is built from them).
    pub(crate) fn key_bytes(&self) -> &[u8] {
        &self.key
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("kind", &self.kind)
            .field("id", &self.id())
            .field("plan", &self.plan)
            .field("ip", &self.ip)
            .field("key", &self.key())
            .finish()
    }
}

/// An IPv4 address in dotted decimal, as its `Display` writes it, without
/// the formatting machinery (four numbers through `fmt::write` cost as much
/// as the whole rate limit check).
#[derive(Clone, Copy)]
pub(crate) struct Dotted(pub(crate) Ipv4Addr);

impl Dotted {
    /// The address, written into `out`.
    fn write(self, out: &mut [u8; 15]) -> &str {
        let len = self.write_into(out);
        // Digits and dots: ASCII.
        std::str::from_utf8(&out[..len]).unwrap_or_default()
    }

    /// The address, written at the start of `out` (at least 15 bytes):
    /// its length. (What lies past it in `out` may be written too.)
    pub(crate) fn write_into(self, out: &mut [u8]) -> usize {
        let out = &mut out[..15];
        let mut len = 0;
        for (i, octet) in self.0.octets().into_iter().enumerate() {
            if i > 0 {
                out[len] = b'.';
                len += 1;
            }
            // Three bytes written, the digits' count kept: no division, no
            // branch per digit. The last octet starts at 12 at the latest.
            let [digits, a, b, c] = OCTETS[usize::from(octet)];
            out[len..len + 3].copy_from_slice(&[a, b, c]);
            len += usize::from(digits);
        }
        len
    }
}

/// Each octet's decimal digits, after their count.
static OCTETS: [[u8; 4]; 256] = octets();

const fn octets() -> [[u8; 4]; 256] {
    let mut table = [[0; 4]; 256];
    let mut n = 0;
    while n < 256 {
        // `n` < 256: each digit fits a byte.
        #[allow(clippy::cast_possible_truncation)]
        let (h, t, u) = ((n / 100) as u8, (n / 10 % 10) as u8, (n % 10) as u8);
        table[n] = match n {
            0..=9 => [1, b'0' + u, 0, 0],
            10..=99 => [2, b'0' + t, b'0' + u, 0],
            _ => [3, b'0' + h, b'0' + t, b'0' + u],
        };
        n += 1;
    }
    table
}

impl fmt::Display for Dotted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Dotted::write(*self, &mut [0; 15]))
    }
}

/// A client key being written: in place (an address and its prefix fit),
/// on the heap past that.
struct KeyBuf {
    stack: [u8; ClientKey::INLINE],
    len: usize,
    heap: String,
}

impl Default for KeyBuf {
    fn default() -> Self {
        KeyBuf {
            stack: [0; ClientKey::INLINE],
            len: 0,
            heap: String::new(),
        }
    }
}

impl fmt::Write for KeyBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.heap.is_empty() && self.len + s.len() <= self.stack.len() {
            self.stack[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
            self.len += s.len();
        } else {
            if self.heap.is_empty() {
                let mut heap = String::with_capacity(self.len + s.len());
                heap.push_str(self.as_str());
                self.heap = heap;
            }
            self.heap.push_str(s);
        }
        Ok(())
    }
}

impl KeyBuf {
    fn as_str(&self) -> &str {
        if !self.heap.is_empty() {
            return &self.heap;
        }
        // Only whole `str`s are ever copied in: the bytes are UTF-8.
        std::str::from_utf8(&self.stack[..self.len]).unwrap_or_default()
    }
}

/// A client's key: in place when short, so that identifying an IP client
/// allocates nothing (`ip:` and the longest IPv6 network,
/// `ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127`, fit: an IPv4-mapped
/// address is keyed as IPv4); shared past that. Only whole `str`s go in.
type ClientKey = SmallBytes<46>;

impl From<KeyBuf> for ClientKey {
    fn from(key: KeyBuf) -> Self {
        if key.heap.is_empty() {
            ClientKey::in_place(key.stack, key.len)
        } else {
            ClientKey::Shared(key.heap.into_bytes().into())
        }
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Identify;
    use crate::identity::tests::parts;

    #[test]
    fn keys_in_place_and_shared_read_the_same() {
        // The longest IP keys there are stay in place.
        let widest = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:1";
        for (prefix, key) in [
            (128, "ip:ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
            (127, "ip:ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127"),
        ] {
            let client = Identify::new().ipv6_prefix(prefix).client(&parts(widest));
            assert_eq!(client.key(), key);
            assert!(client.key.is_inline());
        }
        // Every length across the boundary, in place or shared.
        for len in [
            0,
            1,
            ClientKey::INLINE - 4,
            ClientKey::INLINE - 3,
            ClientKey::INLINE,
            300,
        ] {
            let id = "é".repeat(len / 2) + &"a".repeat(len % 2);
            let client = Client::identified(ClientKind::User, Identity::new(id.clone()), None);
            assert_eq!(
                (client.key(), client.id()),
                (format!("user:{id}").as_str(), id.as_str())
            );
            assert_eq!(client.clone(), client);
            assert_eq!(client.to_string(), client.key());
            let shared = !client.key.is_inline();
            assert_eq!(
                shared,
                "user:".len() + id.len() > ClientKey::INLINE,
                "{len}"
            );
        }
    }

    #[test]
    fn ipv4_is_written_as_display_writes_it() {
        let identify = Identify::new();
        for octets in [
            [0, 0, 0, 0],
            [1, 2, 3, 4],
            [10, 99, 100, 255],
            [203, 0, 113, 9],
        ] {
            let ip = Ipv4Addr::from(octets);
            assert_eq!(Dotted(ip).to_string(), ip.to_string());
            let client = identify.client(&parts(&format!("{ip}:80")));
            assert_eq!(
                (client.key(), client.id()),
                (&*format!("ip:{ip}"), &*ip.to_string())
            );
        }
        for n in (0..=u32::MAX).step_by(65_537) {
            let ip = Ipv4Addr::from(n);
            assert_eq!(Dotted(ip).to_string(), ip.to_string());
            let client = Client::anonymous_v4(ip, None, Some(IpAddr::V4(ip)));
            assert_eq!(client.key(), format!("ip:{ip}"));
            assert_eq!(client.key_bytes(), client.key().as_bytes());
            assert!(client.key.is_inline());
        }
    }
}
