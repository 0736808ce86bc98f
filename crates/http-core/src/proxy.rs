//! The client's IP address: the peer address, or, only when the peer is a
//! trusted proxy, the address the proxies recorded in `X-Forwarded-For` or
//! `Forwarded`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use http::HeaderMap;
use http::header::FORWARDED;
use ipnet::IpNet;

/// The header the trusted proxies write the client's address into.
///
/// Read exactly one: if the proxies write `X-Forwarded-For` and the layer read
/// `Forwarded` as well, a client could send its own `Forwarded` header, which
/// the proxies pass through untouched, and choose its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the de facto standard;
    /// nginx, HAProxy, AWS ALB, Envoy, Cloudflare...).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239); only the `for`
    /// parameter is read.
    Forwarded,
}

/// The networks of the proxies in front of the application, whose forwarding
/// header is believed.
///
/// **The rule.** If the peer (the TCP connection's remote address) is not in
/// one of these networks, the client is the peer, whatever the headers say: a
/// client cannot pick its own address by sending `X-Forwarded-For`. If it is,
/// the forwarding header is read from right to left (each proxy appends the
/// address it received the request from), skipping addresses that are
/// themselves trusted proxies; the first address that is not is the client.
/// If every address is a trusted proxy, the leftmost one is the client.
///
/// **Garbage.** An element that is not an address (`unknown`, an obfuscated
/// `_identifier`, an empty element, bytes that are not text) stops the walk:
/// nothing to its left can be believed, since no trusted proxy vouched for
/// it, and the client is the last address that was vouched for (the trusted
/// proxy next to the garbage, or the peer). Since a trusted proxy appends the
/// real address after whatever the client sent, garbage written by a client
/// is never reached; only a misbehaving trusted proxy can put it there, and
/// then its clients share the proxy's quota rather than escape it. For that
/// to hold on the same line too, each element is read on its own (bytes that
/// are not text spoil only the element they are in), and a `Forwarded` line
/// is split from its right end, so that a quote a client leaves open cannot
/// run over the elements proxies append after it
/// (`tests/it/forwarded_chain.rs`).
///
/// Addresses are compared in canonical form: an IPv4-mapped IPv6 address
/// (`::ffff:10.0.0.1`, what a dual-stack socket reports for an IPv4 peer) is
/// the IPv4 address, and so is an IPv4-compatible one (`::10.0.0.1`). Ports (`10.0.0.1:4711`, `[2001:db8::1]:4711`) are
/// ignored.
///
/// ```
/// use http::HeaderMap;
/// use ratelab_http_core::TrustedProxies;
/// use std::net::IpAddr;
///
/// let proxies = TrustedProxies::parse(["10.0.0.0/8"])?;
/// let mut headers = HeaderMap::new();
/// headers.insert("x-forwarded-for", "1.1.1.1, 203.0.113.7, 10.0.0.2".parse()?);
///
/// // Through the trusted load balancer: the rightmost untrusted address.
/// let lb: IpAddr = "10.0.0.1".parse()?;
/// assert_eq!(proxies.client_ip(lb, &headers), "203.0.113.7".parse::<IpAddr>()?);
///
/// // Straight from the internet: the header is ignored.
/// let stranger: IpAddr = "198.51.100.9".parse()?;
/// assert_eq!(proxies.client_ip(stranger, &headers), stranger);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
    header: ForwardedHeader,
}

/// A trusted proxy network that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is neither an IP address nor a network in CIDR notation (10.0.0.0/8, fd00::/8); \
     host names are not resolved: give the proxy's address"
)]
pub struct InvalidNetwork {
    /// The text given.
    pub input: String,
}

impl TrustedProxies {
    /// No trusted proxy: the client is always the peer (the default).
    pub fn none() -> Self {
        Self::default()
    }

    /// These networks, reading `X-Forwarded-For`.
    pub fn new(networks: impl IntoIterator<Item = IpNet>) -> Self {
        TrustedProxies {
            networks: networks
                .into_iter()
                .map(|n| canonical_net(n).trunc())
                .collect(),
            header: ForwardedHeader::default(),
        }
    }

    /// Networks in CIDR notation (`10.0.0.0/8`, `fd00::/8`) or single
    /// addresses (`10.1.2.3`, a /32 or /128), reading `X-Forwarded-For`.
    pub fn parse<I>(networks: I) -> Result<Self, InvalidNetwork>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let networks = networks
            .into_iter()
            .map(|text| {
                let text = text.as_ref().trim();
                IpNet::from_str(text)
                    .or_else(|_| IpAddr::from_str(text).map(IpNet::from))
                    .map_err(|_| InvalidNetwork {
                        input: text.to_owned(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(networks))
    }

    /// Read `header` instead of `X-Forwarded-For`.
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// The header read.
    pub fn forwarded_header(&self) -> ForwardedHeader {
        self.header
    }

    /// The trusted networks.
    pub fn networks(&self) -> &[IpNet] {
        &self.networks
    }

    /// `ip` is inside a trusted network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.networks.iter().any(|net| net.contains(&ip))
    }

    /// The client's address for a request from `peer` with `headers`: see the
    /// type's docs for the rule. Never fails: whatever the headers hold, the
    /// answer is an address some trusted party vouched for.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        // (No proxy trusted: the peer is the client, read once.)
        if self.networks.is_empty() || !self.contains(peer) {
            return peer;
        }
        let hops = match self.header {
            ForwardedHeader::XForwardedFor => x_forwarded_for(headers),
            ForwardedHeader::Forwarded => forwarded(headers),
        };
        let mut client = peer;
        for hop in hops.iter().rev() {
            match hop {
                Some(ip) => {
                    client = canonical(*ip);
                    if !self.contains(client) {
                        return client;
                    }
                }
                // Nothing left of this was vouched for by a trusted proxy.
                None => return client,
            }
        }
        client
    }
}

impl fmt::Display for ForwardedHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ForwardedHeader::XForwardedFor => "X-Forwarded-For",
            ForwardedHeader::Forwarded => "Forwarded",
        })
    }
}

/// An IPv4 address written as IPv6 is the IPv4 address: mapped
/// (`::ffff:1.2.3.4`, what a dual-stack socket reports for an IPv4 peer) and
/// compatible (`::1.2.3.4`, deprecated by RFC 4291 but still parsed and
/// sent). Otherwise a compatible address would be grouped by /64 with `::1`
/// and every other one of them. `::` and `::1` stay IPv6's own.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let octets = v6.octets();
    if octets[..12].iter().all(|&b| b == 0) && !v6.is_loopback() && !v6.is_unspecified() {
        let [a, b, c, d] = [octets[12], octets[13], octets[14], octets[15]];
        return IpAddr::V4(Ipv4Addr::new(a, b, c, d));
    }
    ip
}

/// An IPv4-mapped IPv6 network is the IPv4 network it maps.
fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => IpNet::new(IpAddr::V4(v4), v6.prefix_len() - 96).unwrap_or(net),
            None => net,
        },
        _ => net,
    }
}

/// The elements of every `X-Forwarded-For` line, left to right; `None` for an
/// element that is not an address.
///
/// Each element is read on its own, from the line's bytes: a client's bytes
/// that are not text (or any junk it sends) spoil its own elements only,
/// never the addresses trusted proxies appended to the same line after them.
fn x_forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let mut hops = Vec::new();
    for line in headers.get_all("x-forwarded-for") {
        hops.extend(
            line.as_bytes()
                .split(|&b| b == b',')
                .map(|element| std::str::from_utf8(element).ok().and_then(parse_node)),
        );
    }
    hops
}

/// The `for` of every element of every `Forwarded` line, left to right;
/// `None` for an element without a usable `for`.
fn forwarded(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let mut hops = Vec::new();
    for line in headers.get_all(FORWARDED) {
        hops.extend(
            elements_from_the_right(line.as_bytes())
                .into_iter()
                .map(|element| std::str::from_utf8(element).ok().and_then(forwarded_for)),
        );
    }
    hops
}

/// The `for` of one `Forwarded` element (`for=1.2.3.4;proto=https`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let mut node = None;
    for pair in split_outside_quotes(element, ';') {
        // A pair without '=' makes the element malformed.
        let (name, value) = pair.split_once('=')?;
        if name.trim().eq_ignore_ascii_case("for") {
            if node.is_some() {
                // Two `for`s: which one would a proxy mean?
                return None;
            }
            node = Some(unquote(value.trim())?);
        }
    }
    node.as_deref().and_then(parse_node)
}

/// A `Forwarded` line's elements (split on commas outside quoted strings),
/// left to right, found by reading the line from its end.
///
/// Trusted proxies append their elements on the right, well formed; what a
/// client sent is on the left and may be anything. Read from the left, an
/// unterminated quote the client left open would run over every element
/// appended after it, the client's own address included. Read from the
/// right, a quoted string ends at a `"` that no odd run of backslashes
/// escapes, and the client's junk can only spoil elements left of the
/// proxies'.
fn elements_from_the_right(line: &[u8]) -> Vec<&[u8]> {
    let mut elements = Vec::new();
    let (mut end, mut quoted) = (line.len(), false);
    for i in (0..line.len()).rev() {
        match line[i] {
            b'"' => {
                let backslashes = line[..i].iter().rev().take_while(|&&b| b == b'\\').count();
                if !quoted || backslashes % 2 == 0 {
                    quoted = !quoted;
                }
            }
            b',' if !quoted => {
                elements.push(&line[i + 1..end]);
                end = i;
            }
            _ => {}
        }
    }
    elements.push(&line[..end]);
    elements.reverse();
    elements
}

/// Splits on `separator` outside quoted strings (`"..."` with `\` escapes).
fn split_outside_quotes(text: &str, separator: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == separator && !quoted {
            parts.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

/// A token as is, or a quoted string without its quotes and escapes; `None`
/// for an unterminated quoted string.
fn unquote(value: &str) -> Option<String> {
    let Some(inner) = value.strip_prefix('"') else {
        return Some(value.to_owned());
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return chars.as_str().is_empty().then_some(out),
            c => out.push(c),
        }
    }
    None
}

/// One hop: `1.2.3.4`, `2001:db8::1`, `[2001:db8::1]`, with or without a
/// port. Anything else (`unknown`, `_hidden`, empty, junk) is `None`.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim_matches([' ', '\t']);
    if let Ok(ip) = IpAddr::from_str(text) {
        return Some(ip);
    }
    if let Ok(socket) = SocketAddr::from_str(text) {
        return Some(socket.ip());
    }
    let bracketed = text.strip_prefix('[')?.strip_suffix(']')?;
    Ipv6Addr::from_str(bracketed).ok().map(IpAddr::V6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn headers(name: &str, values: &[&[u8]]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn nodes() {
        assert_eq!(parse_node(" 1.2.3.4 "), Some(ip("1.2.3.4")));
        assert_eq!(parse_node("1.2.3.4:80"), Some(ip("1.2.3.4")));
        assert_eq!(parse_node("2001:db8::1"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("[2001:db8::1]"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("[2001:db8::1]:4711"), Some(ip("2001:db8::1")));
        for junk in [
            "",
            "unknown",
            "_hidden",
            "1.2.3",
            "1.2.3.4.5",
            "[1.2.3.4]",
            "::g",
        ] {
            assert_eq!(parse_node(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn untrusted_peer_ignores_headers() {
        let proxies = TrustedProxies::parse(["10.0.0.0/8"]).unwrap();
        let h = headers("x-forwarded-for", &[b"6.6.6.6"]);
        assert_eq!(proxies.client_ip(ip("8.8.8.8"), &h), ip("8.8.8.8"));
        assert_eq!(
            TrustedProxies::none().client_ip(ip("10.0.0.1"), &h),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn rightmost_untrusted_across_lines() {
        let proxies = TrustedProxies::parse(["10.0.0.0/8", "192.168.1.1"]).unwrap();
        let h = headers(
            "x-forwarded-for",
            &[b"6.6.6.6, 203.0.113.9", b"192.168.1.1,10.1.1.1"],
        );
        assert_eq!(proxies.client_ip(ip("10.0.0.1"), &h), ip("203.0.113.9"));
        // All trusted: the leftmost.
        let h = headers("x-forwarded-for", &[b"10.9.9.9, 10.1.1.1"]);
        assert_eq!(proxies.client_ip(ip("10.0.0.1"), &h), ip("10.9.9.9"));
        // No header: the proxy itself.
        assert_eq!(
            proxies.client_ip(ip("10.0.0.1"), &HeaderMap::new()),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn garbage_stops_at_the_last_vouched_address() {
        let proxies = TrustedProxies::parse(["10.0.0.0/8"]).unwrap();
        for value in [
            &b"6.6.6.6, garbage"[..],
            b"6.6.6.6,,",
            b"6.6.6.6, unknown",
            b"\xff\xfe",
            b"",
        ] {
            let h = headers("x-forwarded-for", &[value]);
            assert_eq!(proxies.client_ip(ip("10.0.0.1"), &h), ip("10.0.0.1"));
        }
        let h = headers("x-forwarded-for", &[b"6.6.6.6, junk, 10.0.0.7"]);
        assert_eq!(proxies.client_ip(ip("10.0.0.1"), &h), ip("10.0.0.7"));
    }

    #[test]
    fn compatible_and_mapped_addresses_are_ipv4() {
        assert_eq!(canonical(ip("::1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical(ip("::1")), ip("::1"));
        assert_eq!(canonical(ip("::")), ip("::"));
        assert_eq!(canonical(ip("2001:db8::1.2.3.4")), ip("2001:db8::102:304"));
        assert_eq!(canonical(ip("1.2.3.4")), ip("1.2.3.4"));
        let none = TrustedProxies::none();
        assert_eq!(
            none.client_ip(ip("::1.2.3.4"), &HeaderMap::new()),
            ip("1.2.3.4")
        );
    }

    #[test]
    fn mapped_addresses_are_ipv4() {
        let proxies = TrustedProxies::parse(["10.0.0.0/8"]).unwrap();
        let h = headers("x-forwarded-for", &[b"::ffff:203.0.113.9"]);
        assert_eq!(
            proxies.client_ip(ip("::ffff:10.0.0.1"), &h),
            ip("203.0.113.9")
        );
        let mapped = TrustedProxies::parse(["::ffff:10.0.0.0/104"]).unwrap();
        assert!(mapped.contains(ip("10.2.3.4")));
        assert!(TrustedProxies::parse(["10.0.0.0/33"]).is_err());
        assert!(TrustedProxies::parse(["proxy.local"]).is_err());
    }

    #[test]
    fn forwarded_header() {
        let proxies = TrustedProxies::parse(["10.0.0.0/8"])
            .unwrap()
            .header(ForwardedHeader::Forwarded);
        let h = headers(
            "forwarded",
            &[
                br#"for=6.6.6.6;proto=https, For="[2001:db8:cafe::17]:4711";by=10.0.0.1"#,
                b"for=10.0.0.5",
            ],
        );
        assert_eq!(
            proxies.client_ip(ip("10.0.0.1"), &h),
            ip("2001:db8:cafe::17")
        );
        // X-Forwarded-For is not read when Forwarded is configured.
        let h = headers("x-forwarded-for", &[b"6.6.6.6"]);
        assert_eq!(proxies.client_ip(ip("10.0.0.1"), &h), ip("10.0.0.1"));
        for junk in [
            &b"for=unknown"[..],
            b"for=_hidden",
            b"proto=https",
            b"for=\"1.2.3.4",
            b"for=1.2.3.4;for=5.6.7.8",
            b"for",
        ] {
            let h = headers("forwarded", &[junk]);
            assert_eq!(
                proxies.client_ip(ip("10.0.0.1"), &h),
                ip("10.0.0.1"),
                "{}",
                String::from_utf8_lossy(junk)
            );
        }
        // A comma inside a quoted value does not split the element.
        let h = headers("forwarded", &[br#"for=203.0.113.1;ext="a,b""#]);
        assert_eq!(proxies.client_ip(ip("10.0.0.1"), &h), ip("203.0.113.1"));
    }
}
