//! Client identity over real connections: forged forwarding headers, trusted
//! proxies, chains of proxies, garbage, and the API key / user / IP chain.

use crate::common;

use std::net::SocketAddr;

use axum::Router;
use axum::extract::{Extension, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use common::{Reply, localhost, other_peer, send, serve};
use http::HeaderName;
use ratelab_core::{Keyed, ManualClock, Quota};
use ratelab_gcra::Gcra;
use ratelab_http::{
    Client, ForwardedHeader, Identify, Identity, Policy, RateLimitLayer, TrustedProxies,
};

/// Raw header lines: name and value bytes.
type Headers<'a> = &'a [(&'a str, &'a [u8])];

/// An app that answers with the key the layer identified the client by, under
/// a quota of 2 per minute per client on a clock that stands still.
async fn whoami_app(identify: Identify) -> SocketAddr {
    let limiter = Keyed::with_clock(Gcra::new(Quota::per_minute(2).unwrap()), ManualClock::new());
    let layer = RateLimitLayer::builder()
        .identify(identify)
        .policy(Policy::new("default", limiter))
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/",
            get(|Extension(client): Extension<Client>| async move { client.key().to_owned() }),
        )
        .layer(layer);
    serve(app).await
}

async fn from(addr: SocketAddr, peer: std::net::IpAddr, headers: &[(&str, &[u8])]) -> Reply {
    send(addr, peer, "GET", "/", headers).await
}

fn trusting(networks: &[&str]) -> Identify {
    Identify::new().trusted_proxies(TrustedProxies::parse(networks).unwrap())
}

#[tokio::test]
async fn forged_forwarded_for_from_an_untrusted_peer_is_ignored() {
    // The proxies are 10.0.0.0/8; this peer (127.0.0.1) is not one of them.
    let addr = whoami_app(trusting(&["10.0.0.0/8"])).await;
    let forged: [&[u8]; 3] = [b"1.1.1.1", b"2.2.2.2, 10.0.0.1", b"3.3.3.3"];
    let mut statuses = Vec::new();
    for xff in forged {
        let reply = from(
            addr,
            localhost(),
            &[("x-forwarded-for", xff), ("forwarded", b"for=4.4.4.4")],
        )
        .await;
        if reply.status == 200 {
            assert_eq!(reply.text(), "ip:127.0.0.1");
        }
        statuses.push(reply.status);
    }
    // Three "different" clients, one real one: the third request is refused.
    assert_eq!(statuses, [200, 200, 429]);
}

#[tokio::test]
async fn a_trusted_proxy_is_honoured_and_only_it() {
    let addr = whoami_app(trusting(&["127.0.0.1/32"])).await;
    let client_a: &[(&str, &[u8])] = &[("x-forwarded-for", b"203.0.113.5")];
    let first = from(addr, localhost(), client_a).await;
    assert_eq!(
        (first.status, first.text().as_str()),
        (200, "ip:203.0.113.5")
    );
    assert_eq!(from(addr, localhost(), client_a).await.status, 200);
    assert_eq!(from(addr, localhost(), client_a).await.status, 429);

    // Another client behind the same proxy has its own quota.
    let b = from(addr, localhost(), &[("x-forwarded-for", b"203.0.113.6")]).await;
    assert_eq!((b.status, b.text().as_str()), (200, "ip:203.0.113.6"));

    // 127.0.0.2 is not the proxy: its header is ignored.
    let stranger = from(addr, other_peer(), &[("x-forwarded-for", b"203.0.113.7")]).await;
    assert_eq!(
        (stranger.status, stranger.text().as_str()),
        (200, "ip:127.0.0.2")
    );

    // Behind the proxy, without a header, the client is the proxy itself.
    let bare = from(addr, localhost(), &[]).await;
    assert_eq!(bare.text(), "ip:127.0.0.1");
}

#[tokio::test]
async fn a_chain_of_trusted_proxies_picks_the_right_hop() {
    let addr = whoami_app(trusting(&["127.0.0.1/32", "10.0.0.0/8", "192.168.0.0/16"])).await;
    let cases: [(Headers<'_>, &str); 6] = [
        // client, CDN edge, internal LB: the rightmost untrusted one.
        (
            &[(
                "x-forwarded-for",
                b"6.6.6.6, 203.0.113.5, 192.168.1.1, 10.0.0.3",
            )],
            "ip:203.0.113.5",
        ),
        // The same chain split over two header lines.
        (
            &[
                ("x-forwarded-for", b"6.6.6.6, 203.0.113.5"),
                ("x-forwarded-for", b"192.168.1.1,10.0.0.3"),
            ],
            "ip:203.0.113.6",
        ),
        // A client that writes proxy addresses on the left gains nothing.
        (
            &[(
                "x-forwarded-for",
                b"10.0.0.9, 192.168.0.9, 203.0.113.7, 10.0.0.3",
            )],
            "ip:203.0.113.7",
        ),
        // Every hop a trusted proxy: the leftmost (an internal client).
        (&[("x-forwarded-for", b"10.0.0.9, 10.0.0.3")], "ip:10.0.0.9"),
        // IPv6 clients are grouped by /64; ports and brackets are fine.
        (
            &[("x-forwarded-for", b"[2001:db8:1:2::99]:4711, 10.0.0.3")],
            "ip:2001:db8:1:2::/64",
        ),
        // IPv4-mapped IPv6 is IPv4.
        (
            &[("x-forwarded-for", b"::ffff:203.0.113.8, ::ffff:10.0.0.3")],
            "ip:203.0.113.8",
        ),
    ];
    for (i, (headers, expected)) in cases.iter().enumerate() {
        let mut headers = headers.to_vec();
        // Case 1 reuses case 0's chain for another client: rewrite its address.
        if i == 1 {
            headers[0].1 = b"6.6.6.6, 203.0.113.6";
        }
        let reply = from(addr, localhost(), &headers).await;
        assert_eq!(
            (reply.status, reply.text()),
            (200, (*expected).to_owned()),
            "case {i}"
        );
    }

    // The same through `Forwarded` (RFC 7239) when the proxies write that.
    let identify = trusting(&["127.0.0.1/32", "10.0.0.0/8"]);
    let proxies = identify
        .proxies()
        .clone()
        .header(ForwardedHeader::Forwarded);
    let addr = whoami_app(identify.trusted_proxies(proxies)).await;
    let reply = from(
        addr,
        localhost(),
        &[
            (
                "forwarded",
                br#"for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https"#,
            ),
            ("forwarded", b"for=10.0.0.3;by=10.0.0.1"),
            // Not the configured header: a client could have written it.
            ("x-forwarded-for", b"1.2.3.4"),
        ],
    )
    .await;
    assert_eq!(reply.text(), "ip:2001:db8:cafe::/64");
}

#[tokio::test]
async fn garbage_in_the_header_never_crashes_or_bypasses() {
    let long = format!("{}garbage", "1.1.1.1, ".repeat(2000));
    let garbage: Vec<&[u8]> = vec![
        b"",
        b",",
        b" , ,",
        b"unknown",
        b"_hidden",
        b"1.2.3.4.5",
        b"999.1.1.1",
        b"[::1",
        b"::ffff:",
        b"\"1.2.3.4",
        b"fe80::1%eth0",
        b"1.2.3.4 5.6.7.8",
        b"\xff\xfe\xfd",
        b"203.0.113.5, \xc3\x28",
        b"-1",
        long.as_bytes(),
    ];
    for header in [ForwardedHeader::XForwardedFor, ForwardedHeader::Forwarded] {
        let identify = trusting(&["127.0.0.1/32"]);
        let proxies = identify.proxies().clone().header(header);
        let addr = whoami_app(identify.trusted_proxies(proxies)).await;
        let name = match header {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            _ => "forwarded",
        };
        let mut admitted = 0;
        for value in &garbage {
            let mut value = value.to_vec();
            if header == ForwardedHeader::Forwarded {
                value.splice(0..0, b"for=".iter().copied());
            }
            let reply = from(addr, localhost(), &[(name, &value)]).await;
            match reply.status {
                // Garbage is no identity: every request counts against the
                // proxy's own address, the last one a trusted party vouched for.
                200 => {
                    assert_eq!(
                        reply.text(),
                        "ip:127.0.0.1",
                        "{name}: {:?}",
                        String::from_utf8_lossy(&value)
                    );
                    admitted += 1;
                }
                429 => {}
                other => panic!(
                    "{name}: {:?} answered {other}",
                    String::from_utf8_lossy(&value)
                ),
            }
        }
        assert_eq!(admitted, 2, "{name}: garbage must not buy extra requests");
        // The server is still up and still limiting.
        assert_eq!(from(addr, localhost(), &[]).await.status, 429);
    }
}

/// Stands in for an authentication layer: `x-user: name` becomes a `User`.
#[derive(Clone)]
struct User(String);

async fn authenticate(mut request: Request, next: Next) -> Response {
    if let Some(name) = request
        .headers()
        .get("x-user")
        .and_then(|v| v.to_str().ok())
    {
        let user = User(name.to_owned());
        request.extensions_mut().insert(user);
    }
    next.run(request).await
}

#[tokio::test]
async fn api_key_then_user_then_ip() {
    let identify = Identify::new()
        .api_key(HeaderName::from_static("x-api-key"), |key| {
            (key == "k-acme").then(|| Identity::new("acme").with_plan("pro"))
        })
        .user(|user: &User| Some(Identity::new(user.0.clone()).with_plan("free")))
        .anonymous_plan("anonymous");
    let layer = RateLimitLayer::builder()
        .identify(identify)
        .policy(Policy::new(
            "default",
            Keyed::with_clock(
                Gcra::new(Quota::per_minute(100).unwrap()),
                ManualClock::new(),
            ),
        ))
        .build()
        .unwrap();
    let app = Router::new()
        .route(
            "/",
            get(|Extension(client): Extension<Client>| async move {
                format!("{} {}", client.key(), client.plan().unwrap_or("-"))
            }),
        )
        .layer(layer)
        // Added last, runs first: authentication before rate limiting.
        .layer(middleware::from_fn(authenticate));
    let addr = serve(app).await;

    let cases: [(Headers<'_>, &str); 4] = [
        (
            &[("x-api-key", b"k-acme"), ("x-user", b"bob")],
            "key:acme pro",
        ),
        // An unknown key is no identity: the next link decides.
        (
            &[("x-api-key", b"k-forged"), ("x-user", b"bob")],
            "user:bob free",
        ),
        (&[("x-api-key", b"k-forged")], "ip:127.0.0.1 anonymous"),
        (&[], "ip:127.0.0.1 anonymous"),
    ];
    for (headers, expected) in cases {
        let reply = from(addr, localhost(), headers).await;
        assert_eq!(reply.text(), expected);
    }
}
