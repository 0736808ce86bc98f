//! Client-side rate limiting: outgoing calls wait for their turn (the
//! scraper and the decorator of the Python reference), over any ratelab
//! limiter, with a timeout. [`Throttle`] wraps any future:
//! `throttle.run(fetch(url)).await` waits until the limiter admits, then
//! runs it. [`ThrottleLayer`] does the same for every request through a
//! tower client service (a hyper client, a tower `Service` around
//! reqwest...), with a key per request (per host, per API token). Both are
//! the async twins of [`ratelab_core::BlockingThrottle`], for blocking code.
//!
//! ```
//! use ratelab_core::{Direct, Quota};
//! use ratelab_gcra::Gcra;
//! use ratelab_throttle::Throttle;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // 2 per second, bursts of 5 (the reference's scraper), at most 10 s per
//! // wait, on one bucket (a `Keyed` limiter works the same, per key).
//! let limiter = Arc::new(Direct::new(Gcra::new(Quota::per_second(2)?.with_burst(5)?)));
//! let throttle = Throttle::new(limiter, Duration::from_secs(10)).key("api.example.com");
//!
//! for page in 0..3 {
//!     let body = throttle.run(async move { format!("page {page}") }).await?;
//!     assert_eq!(body, format!("page {page}"));
//! }
//! # Ok(()) }
//! ```
//!
//! Both wait with [`ratelab_core::wait_and_consume_async`]: a refused request
//! sleeps exactly the limiter's `retry_after`, then tries again; if the next
//! turn is past the deadline, it gives up at once with
//! [`WaitError::TimedOut`] instead of sleeping in vain. With a shared Redis
//! limiter, several processes take turns on one quota.
//!
//! A crate of its own, apart from the server side (`ratelab-http`), which
//! a client does not need, and from `ratelab-core`, which stays free of
//! tower: the throttles need tower's `Layer` and `Service` and tokio's
//! timer, and nothing of HTTP.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ratelab_core::{AsyncRateLimiter, Decision, WaitError, wait_and_consume_async};
use tower::{Layer, Service};

/// Makes calls wait for their turn on one key of a limiter (see [the crate
/// docs](crate) for an example).
pub struct Throttle<L: ?Sized> {
    limiter: Arc<L>,
    key: Vec<u8>,
    cost: u32,
    timeout: Duration,
}

impl<L: AsyncRateLimiter + ?Sized> Throttle<L> {
    /// Waits on `limiter` under the empty key, cost 1, for at most `timeout`
    /// per call.
    pub fn new(limiter: Arc<L>, timeout: Duration) -> Self {
        Throttle {
            limiter,
            key: Vec::new(),
            cost: 1,
            timeout,
        }
    }

    /// Wait under `key` (one quota per key of a keyed limiter).
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = key.into();
        self
    }

    /// Each call costs `cost` units.
    pub fn cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }

    /// Waits for a turn: the admitting decision, or why there was none
    /// within the timeout.
    pub async fn acquire(&self) -> Result<Decision, WaitError> {
        wait_and_consume_async(&*self.limiter, &self.key, self.cost, self.timeout).await
    }

    /// Waits for a turn, then runs `call`: the decorator.
    pub async fn run<F: Future>(&self, call: F) -> Result<F::Output, WaitError> {
        self.acquire().await?;
        Ok(call.await)
    }
}

impl<L: ?Sized> Clone for Throttle<L> {
    fn clone(&self) -> Self {
        Throttle {
            limiter: self.limiter.clone(),
            key: self.key.clone(),
            cost: self.cost,
            timeout: self.timeout,
        }
    }
}

impl<L: ?Sized> fmt::Debug for Throttle<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("cost", &self.cost)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The key (and so the quota) a request of a [`ThrottleLayer`] waits on.
pub trait ThrottleKey<Request> {
    /// The limiter key for `request`.
    fn key(&self, request: &Request) -> Vec<u8>;
}

/// Every request waits on the same key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SameKey(pub Vec<u8>);

impl<Request> ThrottleKey<Request> for SameKey {
    fn key(&self, _request: &Request) -> Vec<u8> {
        self.0.clone()
    }
}

impl<Request, F> ThrottleKey<Request> for F
where
    F: Fn(&Request) -> Vec<u8>,
{
    fn key(&self, request: &Request) -> Vec<u8> {
        self(request)
    }
}

/// A tower layer for clients: each request waits for its turn before it is
/// sent, for at most the timeout; then it fails with
/// [`ThrottleError::Wait`] without being sent.
///
/// ```
/// use http::{Request, Response};
/// use ratelab_core::{Keyed, Quota};
/// use ratelab_gcra::Gcra;
/// use ratelab_throttle::ThrottleLayer;
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tower::{Layer, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Arc::new(Keyed::new(Gcra::new(Quota::per_second(5)?)));
/// // One quota per host.
/// let layer = ThrottleLayer::new(limiter, Duration::from_secs(30))
///     .key(|request: &Request<()>| request.uri().host().unwrap_or("").as_bytes().to_vec());
/// let client = layer.layer(service_fn(|request: Request<()>| async move {
///     Ok::<_, std::convert::Infallible>(Response::new(request.uri().to_string()))
/// }));
/// let response = client.oneshot(Request::get("http://example.com/a").body(())?).await?;
/// assert_eq!(response.body(), "http://example.com/a");
/// # Ok(()) }
/// ```
pub struct ThrottleLayer<L: ?Sized, K = SameKey> {
    limiter: Arc<L>,
    key: K,
    cost: u32,
    timeout: Duration,
}

impl<L: AsyncRateLimiter + ?Sized> ThrottleLayer<L> {
    /// Every request waits on the empty key of `limiter`, cost 1, for at most
    /// `timeout`.
    pub fn new(limiter: Arc<L>, timeout: Duration) -> Self {
        ThrottleLayer {
            limiter,
            key: SameKey::default(),
            cost: 1,
            timeout,
        }
    }
}

impl<L: ?Sized, K> ThrottleLayer<L, K> {
    /// Each request waits on the key `key` gives it (a closure
    /// `Fn(&Request) -> Vec<u8>`, or [`SameKey`]).
    pub fn key<K2>(self, key: K2) -> ThrottleLayer<L, K2> {
        ThrottleLayer {
            limiter: self.limiter,
            key,
            cost: self.cost,
            timeout: self.timeout,
        }
    }

    /// Each request costs `cost` units.
    pub fn cost(mut self, cost: u32) -> Self {
        self.cost = cost;
        self
    }
}

impl<L: ?Sized, K: Clone> Clone for ThrottleLayer<L, K> {
    fn clone(&self) -> Self {
        ThrottleLayer {
            limiter: self.limiter.clone(),
            key: self.key.clone(),
            cost: self.cost,
            timeout: self.timeout,
        }
    }
}

impl<L: ?Sized, K> fmt::Debug for ThrottleLayer<L, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleLayer")
            .field("cost", &self.cost)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl<S, L: ?Sized, K: Clone> Layer<S> for ThrottleLayer<L, K> {
    type Service = Throttled<S, L, K>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttled {
            inner,
            limiter: self.limiter.clone(),
            key: self.key.clone(),
            cost: self.cost,
            timeout: self.timeout,
        }
    }
}

/// The client service [`ThrottleLayer`] wraps around `S`.
pub struct Throttled<S, L: ?Sized, K> {
    inner: S,
    limiter: Arc<L>,
    key: K,
    cost: u32,
    timeout: Duration,
}

impl<S: Clone, L: ?Sized, K: Clone> Clone for Throttled<S, L, K> {
    fn clone(&self) -> Self {
        Throttled {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
            key: self.key.clone(),
            cost: self.cost,
            timeout: self.timeout,
        }
    }
}

impl<S: fmt::Debug, L: ?Sized, K> fmt::Debug for Throttled<S, L, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttled")
            .field("inner", &self.inner)
            .field("cost", &self.cost)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Why a throttled call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ThrottleError<E> {
    /// No turn within the timeout, or the limiter failed: the request was
    /// not sent.
    Wait(WaitError),
    /// The inner service failed.
    Service(E),
}

impl<E: fmt::Display> fmt::Display for ThrottleError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThrottleError::Wait(e) => write!(f, "not sent: {e}"),
            ThrottleError::Service(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for ThrottleError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ThrottleError::Wait(e) => Some(e),
            ThrottleError::Service(e) => e.source(),
        }
    }
}

/// The future of a [`Throttled`] call.
pub type ThrottledFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, ThrottleError<E>>> + Send>>;

impl<S, L, K, Request> Service<Request> for Throttled<S, L, K>
where
    S: Service<Request> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    L: AsyncRateLimiter + ?Sized + 'static,
    K: ThrottleKey<Request>,
    Request: Send + 'static,
{
    type Response = S::Response;
    type Error = ThrottleError<S::Error>;
    type Future = ThrottledFuture<S::Response, S::Error>;

    /// Always ready: the wait happens per request (its key is only known
    /// then), and the inner service is polled ready after the wait, so that
    /// a request waiting its turn holds none of the inner service's capacity.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let key = self.key.key(&request);
        let limiter = self.limiter.clone();
        let (cost, timeout) = (self.cost, self.timeout);
        let mut inner = self.inner.clone();
        Box::pin(async move {
            wait_and_consume_async(&*limiter, &key, cost, timeout)
                .await
                .map_err(ThrottleError::Wait)?;
            poll_fn(|cx| inner.poll_ready(cx))
                .await
                .map_err(ThrottleError::Service)?;
            inner.call(request).await.map_err(ThrottleError::Service)
        })
    }
}
