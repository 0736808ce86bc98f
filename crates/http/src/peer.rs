//! The connection's peer address, which identifies anonymous clients:
//! [`SetPeerAddr`] records it for plain hyper servers; with the `axum`
//! feature the layer also reads axum's `ConnectInfo<SocketAddr>`.

use std::net::{IpAddr, SocketAddr};
use std::task::{Context, Poll};

use http::Request;
use ratelab_http_core::PeerAddr;

/// A service that inserts the connection's [`PeerAddr`] into every request,
/// for plain hyper servers: wrap the per-connection service in it.
///
/// ```
/// use http::{Request, Response};
/// use ratelab_http::{PeerAddr, SetPeerAddr};
/// use tower::{ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let peer = "203.0.113.9:50000".parse()?; // from TcpListener::accept
/// let service = SetPeerAddr::new(
///     service_fn(|request: Request<()>| async move {
///         let PeerAddr(addr) = *request.extensions().get::<PeerAddr>().unwrap();
///         Ok::<_, std::convert::Infallible>(Response::new(addr.to_string()))
///     }),
///     peer,
/// );
/// let response = service.oneshot(Request::new(())).await?;
/// assert_eq!(response.body(), "203.0.113.9:50000");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SetPeerAddr<S> {
    inner: S,
    peer: SocketAddr,
}

impl<S> SetPeerAddr<S> {
    /// `inner`, told that its requests come from `peer`.
    pub fn new(inner: S, peer: SocketAddr) -> Self {
        SetPeerAddr { inner, peer }
    }
}

impl<S, B> tower::Service<Request<B>> for SetPeerAddr<S>
where
    S: tower::Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        request.extensions_mut().insert(PeerAddr(self.peer));
        self.inner.call(request)
    }
}

/// The peer address the server recorded, where the identity's resolver and
/// a [`PeerAddr`] give none: axum's `ConnectInfo<SocketAddr>` (feature
/// `axum`); none without the feature.
pub(crate) fn connection_peer(extensions: &http::Extensions) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    {
        use axum::extract::ConnectInfo;
        let ConnectInfo(addr) = extensions.get::<ConnectInfo<SocketAddr>>()?;
        Some(addr.ip())
    }
    #[cfg(not(feature = "axum"))]
    {
        let _ = extensions;
        None
    }
}
