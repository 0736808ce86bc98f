//! A request started in place (limits that read no more of it than its
//! headers and extensions: the layer neither takes it apart nor puts it
//! together again) is answered exactly as the general path answers it. Two
//! layers, alike but for a `skip` that never skips (which sends every
//! request down the general path), each on its own limiter and frozen
//! clock, take the same requests and clock moves through the tower service:
//! several clients (IPv4, IPv6, behind a trusted proxy or not, some with an
//! API key), each algorithm, costs, header styles, extensions on and off.
//! Every response must match, status, every header field and body (which
//! echoes the extensions the handler saw), and so must the counters.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use proptest::prelude::*;
use ratelab_core::{AsyncRateLimiter, Keyed, ManualClock, Quota};
use ratelab_fixed_window::FixedWindow;
use ratelab_gcra::Gcra;
use ratelab_http::{
    Client, HeaderStyle, Identify, Identity, LegacyReset, LimitedBody, PeerAddr, Policy,
    RateLimitInfo, RateLimitLayer, TrustedProxies,
};
use ratelab_leaky_bucket::LeakyMeter;
use ratelab_sliding_window::{SlidingCounter, SlidingLog};
use ratelab_token_bucket::TokenBucket;
use tower::{Layer, Service, ServiceExt, service_fn};

/// The layers' settings in one case.
#[derive(Debug, Clone)]
struct Setup {
    algorithm: usize,
    burst: u32,
    window_secs: u64,
    cost: u32,
    style: usize,
    extensions: bool,
    epoch_reset: bool,
    proxies: bool,
    api_keys: bool,
    /// The policy applies to the "pro" plan only.
    pro_only: bool,
}

/// One step of a case.
#[derive(Debug, Clone)]
enum Step {
    Request {
        peer: usize,
        /// An `X-Forwarded-For` value, by index.
        forwarded: Option<usize>,
        /// An `X-Api-Key` value, by index.
        api_key: Option<usize>,
    },
    Advance(u64),
    Rewind(u64),
}

const PEERS: [&str; 5] = [
    "203.0.113.9:4711",
    "198.51.100.7:80",
    "[2001:db8::1]:443",
    // Trusted proxies, when the case trusts them.
    "10.0.0.1:5000",
    "[fd00::2]:5000",
];

const FORWARDED: [&str; 4] = [
    "203.0.113.9",
    "192.0.2.44, 10.0.0.3",
    "2001:db8:1::9",
    "not an address",
];

const API_KEYS: [&str; 3] = ["k-pro", "k-free", "k-unknown"];

/// The limiter of `setup` on `clock`, its keys hashed with a fixed seed:
/// two of them given the same calls answer the same (the keys' shards, and
/// so how a shard takes a clock that went back, do not vary by instance).
fn limiter(setup: &Setup, clock: &ManualClock) -> Arc<dyn AsyncRateLimiter> {
    fn keyed<A>(algorithm: A, clock: &ManualClock) -> Arc<dyn AsyncRateLimiter>
    where
        A: ratelab_core::Algorithm + 'static,
        Keyed<A, ManualClock>: AsyncRateLimiter,
    {
        Arc::new(
            Keyed::builder(algorithm)
                .clock(clock.clone())
                .seed(31)
                .build(),
        )
    }
    let quota = Quota::new(setup.burst, Duration::from_secs(setup.window_secs)).unwrap();
    match setup.algorithm {
        0 => keyed(Gcra::new(quota), clock),
        1 => keyed(TokenBucket::new(quota), clock),
        2 => keyed(FixedWindow::new(quota), clock),
        3 => keyed(SlidingLog::new(quota), clock),
        4 => keyed(SlidingCounter::new(quota), clock),
        _ => keyed(LeakyMeter::new(quota), clock),
    }
}

/// The layer of `setup` on its own limiter and `clock`; `general`: with a
/// skip that never skips, so that no request is started in place.
fn layer(setup: &Setup, clock: &ManualClock, general: bool) -> RateLimitLayer {
    let mut policy = Policy::shared("per-client", limiter(setup, clock)).cost(setup.cost);
    if setup.pro_only {
        policy = policy.plan("pro");
    }
    let mut identify = Identify::new().anonymous_plan("anonymous");
    if setup.proxies {
        identify =
            identify.trusted_proxies(TrustedProxies::parse(["10.0.0.0/8", "fd00::/8"]).unwrap());
    }
    if setup.api_keys {
        identify = identify.api_key(HeaderName::from_static("x-api-key"), |key| match key {
            "k-pro" => Some(Identity::new("acme").with_plan("pro")),
            "k-free" => Some(Identity::new("tiny").with_plan("free")),
            _ => None,
        });
    }
    let style = [
        HeaderStyle::Draft,
        HeaderStyle::Legacy,
        HeaderStyle::DraftAndLegacy,
        HeaderStyle::None,
    ][setup.style];
    let reset = if setup.epoch_reset {
        LegacyReset::Epoch
    } else {
        LegacyReset::Delta
    };
    let mut builder = RateLimitLayer::builder()
        .identify(identify)
        .policy(policy)
        .headers(style)
        .legacy_reset(reset)
        .wall_clock(|| SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .request_extensions(setup.extensions);
    if general {
        builder = builder.skip(|_| false);
    }
    builder.build().unwrap()
}

/// A response, all of it: status, every field in order, body.
type Answer = (StatusCode, Vec<(String, Vec<u8>)>, Bytes);

async fn answer<S>(service: &mut S, request: Request<()>) -> Answer
where
    S: Service<Request<()>, Response = Response<LimitedBody<Full<Bytes>>>, Error = Infallible>,
{
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let fields = parts
        .headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
        .collect();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status, fields, body)
}

fn request(
    setup: &Setup,
    peer: usize,
    forwarded: Option<usize>,
    key: Option<usize>,
) -> Request<()> {
    let mut request = Request::get("/");
    if let Some(i) = forwarded {
        request = request.header("x-forwarded-for", FORWARDED[i]);
    }
    if let Some(i) = key.filter(|_| setup.api_keys) {
        request = request.header("x-api-key", API_KEYS[i]);
    }
    let mut request = request.body(()).unwrap();
    let peer: SocketAddr = PEERS[peer].parse().unwrap();
    request.extensions_mut().insert(PeerAddr(peer));
    request
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        0..6usize,
        1..6u32,
        prop::sample::select(vec![1u64, 2, 60]),
        0..4u32,
        0..4usize,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(
                algorithm,
                burst,
                window_secs,
                cost,
                style,
                extensions,
                epoch_reset,
                proxies,
                api_keys,
                pro_only,
            )| Setup {
                algorithm,
                burst,
                window_secs,
                // Now and then above the burst: never admitted.
                cost: if cost == 3 { burst + 1 } else { cost },
                style,
                extensions,
                epoch_reset,
                proxies,
                api_keys,
                pro_only,
            },
        )
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (
            0..PEERS.len(),
            prop::option::of(0..FORWARDED.len()),
            prop::option::of(0..API_KEYS.len()),
        )
            .prop_map(|(peer, forwarded, api_key)| Step::Request {
                peer,
                forwarded,
                api_key,
            }),
        2 => (1..3_000u64).prop_map(Step::Advance),
        1 => (1..1_000u64).prop_map(Step::Rewind),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: Some(ratelab_testkit::props::regressions()),
        ..ProptestConfig::default()
    })]

    #[test]
    fn in_place_answers_as_the_general_path(setup in setup(), steps in prop::collection::vec(step(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async {
            let handler = service_fn(|request: Request<()>| async move {
                let extensions = request.extensions();
                let seen = format!(
                    "{:?}\n{:?}",
                    extensions.get::<Client>(),
                    extensions.get::<RateLimitInfo>()
                );
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(seen))))
            });
            let (fast_clock, general_clock) = (ManualClock::new(), ManualClock::new());
            let fast_layer = layer(&setup, &fast_clock, false);
            let general_layer = layer(&setup, &general_clock, true);
            prop_assert!(fast_layer.limits().starts_in_place());
            prop_assert!(!general_layer.limits().starts_in_place());
            let mut fast = fast_layer.layer(handler);
            let mut general = general_layer.layer(handler);
            for step in &steps {
                match *step {
                    Step::Request { peer, forwarded, api_key } => {
                        let in_place = answer(&mut fast, request(&setup, peer, forwarded, api_key)).await;
                        let whole = answer(&mut general, request(&setup, peer, forwarded, api_key)).await;
                        prop_assert_eq!(&in_place, &whole, "{:?}", step);
                    }
                    Step::Advance(ms) => {
                        fast_clock.advance(Duration::from_millis(ms));
                        general_clock.advance(Duration::from_millis(ms));
                    }
                    Step::Rewind(ms) => {
                        fast_clock.rewind(Duration::from_millis(ms));
                        general_clock.rewind(Duration::from_millis(ms));
                    }
                }
            }
            let (a, b) = (fast_layer.stats(), general_layer.stats());
            prop_assert_eq!(
                (a.allowed(), a.refused(), a.unavailable(), a.failed_open(), a.failed_closed()),
                (b.allowed(), b.refused(), b.unavailable(), b.failed_open(), b.failed_closed())
            );
            Ok(())
        })?;
    }
}
