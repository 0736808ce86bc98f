//! What a client writes into `X-Forwarded-For` or `Forwarded` never changes
//! whom its request is counted against, once a trusted proxy has appended
//! the address it saw.
//!
//! The request's header is built as it travels: the client sends anything
//! (addresses of others, trusted addresses, unterminated quotes, stray
//! separators, bytes that are not UTF-8, several lines), then each trusted
//! proxy on the way appends the address it received the request from, to
//! the last line or as a line of its own. The layer, fed by the last proxy,
//! must find the client's own address: the rightmost address no trusted
//! proxy owns. Whatever the client wrote sits left of it, and nothing a
//! client writes there may move its requests to another key (someone
//! else's, to lock them out, or a fresh one, to evade its own).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::{HeaderMap, HeaderValue};
use proptest::prelude::*;
use ratelab_http_core::{ForwardedHeader, TrustedProxies};

/// The proxies' networks.
fn trusted(header: ForwardedHeader) -> TrustedProxies {
    TrustedProxies::parse(["10.0.0.0/8", "fd00::/8"])
        .expect("valid networks")
        .header(header)
}

/// An address outside the trusted networks.
fn outside() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>()
            .prop_filter("outside 10/8", |o| o[0] != 10)
            .prop_map(|o| IpAddr::V4(Ipv4Addr::from(o))),
        any::<[u16; 8]>()
            .prop_filter("outside fd00::/8 and not IPv4 in disguise", |s| {
                s[0] >> 8 != 0xfd && s[..5] != [0; 5]
            })
            .prop_map(|s| IpAddr::V6(Ipv6Addr::from(s))),
    ]
}

/// A trusted proxy's address.
fn inside() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 3]>().prop_map(|o| IpAddr::V4(Ipv4Addr::new(10, o[0], o[1], o[2]))),
        any::<u64>()
            .prop_map(|low| IpAddr::V6(Ipv6Addr::from((0xfd00_u128 << 112) | u128::from(low)))),
    ]
}

/// How a proxy writes a hop for `ip` in `header`.
fn hop(header: ForwardedHeader, ip: IpAddr) -> String {
    match (header, ip) {
        (ForwardedHeader::XForwardedFor, ip) => ip.to_string(),
        (_, IpAddr::V4(v4)) => format!("for={v4}"),
        (_, IpAddr::V6(v6)) => format!("for=\"[{v6}]\""),
    }
}

/// A header value's bytes a client may send: visible ASCII, tabs, spaces,
/// and bytes above 0x7f (obs-text), which `HeaderValue` accepts.
fn junk() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => 0x20u8..0x7f,
        1 => Just(b'\t'),
        1 => 0x80u8..=0xff,
        2 => proptest::sample::select(&b"\",;=[]:\\"[..]),
    ];
    proptest::collection::vec(byte, 0..24)
}

/// One element a client writes: another's address, a trusted one (as if a
/// proxy had vouched for it), a hop as a proxy writes it, or junk.
fn element(header: ForwardedHeader) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => outside().prop_map(move |ip| hop(header, ip).into_bytes()),
        2 => inside().prop_map(move |ip| hop(header, ip).into_bytes()),
        1 => Just(b"unknown".to_vec()),
        1 => Just(b"for=\"".to_vec()),
        1 => Just(b"for=\"[::1".to_vec()),
        1 => Just(b"\"".to_vec()),
        1 => Just(b"for=1.2.3.4;for=5.6.7.8".to_vec()),
        1 => Just(b"\\".to_vec()),
        3 => junk(),
    ]
}

/// What the client sent: lines of elements, each line joined by `, ` or
/// whatever separator the client fancied.
fn sent(header: ForwardedHeader) -> impl Strategy<Value = Vec<Vec<u8>>> {
    let line = proptest::collection::vec(
        (
            element(header),
            prop_oneof![Just(b", ".to_vec()), Just(b",".to_vec()), junk()],
        ),
        0..4,
    )
    .prop_map(|parts| {
        let mut line = Vec::new();
        for (i, (element, separator)) in parts.into_iter().enumerate() {
            if i > 0 {
                line.extend(separator);
            }
            line.extend(element);
        }
        line
    });
    proptest::collection::vec(line, 0..3)
}

/// The header lines once every proxy on the way appended its hop: the
/// client's address first (appended by the proxy it reached), then each
/// proxy's. `new_line[i]` says whether proxy `i` adds a line of its own.
fn travelled(
    header: ForwardedHeader,
    mut lines: Vec<Vec<u8>>,
    hops: &[IpAddr],
    new_line: &[bool],
) -> HeaderMap {
    for (hop_ip, &own_line) in hops.iter().zip(new_line) {
        let hop = hop(header, *hop_ip).into_bytes();
        match lines.last_mut() {
            Some(last) if !own_line && !last.is_empty() => {
                last.extend(b", ");
                last.extend(hop);
            }
            _ => lines.push(hop),
        }
    }
    let name = match header {
        ForwardedHeader::XForwardedFor => "x-forwarded-for",
        _ => "forwarded",
    };
    let mut map = HeaderMap::new();
    for line in lines {
        // Leading and trailing white space is not part of a field value.
        let value = HeaderValue::from_bytes(line.trim_ascii()).expect("a valid header value");
        map.append(name, value);
    }
    map
}

fn header() -> impl Strategy<Value = ForwardedHeader> {
    prop_oneof![
        Just(ForwardedHeader::XForwardedFor),
        Just(ForwardedHeader::Forwarded)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn what_a_client_writes_never_moves_it_to_another_key(
        (header, sent) in header().prop_flat_map(|h| (Just(h), sent(h))),
        client in outside(),
        proxies in proptest::collection::vec(inside(), 1..4),
        new_line in proptest::collection::vec(any::<bool>(), 4),
    ) {
        // The first proxy appends the client's address, each next one the
        // address of the proxy before it; the layer's peer is the last.
        let mut hops = vec![client];
        hops.extend(&proxies[..proxies.len() - 1]);
        let headers = travelled(header, sent.clone(), &hops, &new_line);
        let peer = *proxies.last().expect("one proxy at least");
        let found = trusted(header).client_ip(peer, &headers);
        prop_assert_eq!(
            found, client,
            "{:?}: client {} through {:?} sent {:?}: {:?}",
            header, client, proxies,
            sent.iter().map(|l| String::from_utf8_lossy(l).into_owned()).collect::<Vec<_>>(),
            headers
        );
    }

    #[test]
    fn a_client_straight_from_the_internet_is_its_own_address(
        (header, sent) in header().prop_flat_map(|h| (Just(h), sent(h))),
        client in outside(),
    ) {
        let headers = travelled(header, sent, &[], &[]);
        prop_assert_eq!(trusted(header).client_ip(client, &headers), client);
    }
}
