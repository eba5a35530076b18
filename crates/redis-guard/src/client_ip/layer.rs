//! [`ClientIpLayer`]: resolves the client address once and leaves it in the request extensions.

use std::task::{Context, Poll};

use http::Request;
use tower_layer::Layer;
use tower_service::Service;

use super::{ClientAddr, ClientIp};

/// Puts the client address its [`ClientIp`] finds into each request's extensions, as a
/// [`ClientAddr`], for handlers on routes that no rate-limit rule keyed by `ClientIp` covers
/// (a [`RateLimitLayer`](crate::rate_limit::RateLimitLayer) with such a rule puts the address
/// it counted itself). A `ClientAddr` already there is kept, so that the one a rate-limit layer
/// outside this one keyed on is what the handler sees.
///
/// A request without a peer address (no `ConnectInfo`, no [`PeerAddr`](super::PeerAddr)) goes
/// on without a `ClientAddr`; the extractor then answers `500` and logs the fix.
///
/// ```
/// use redis_guard::client_ip::{ClientAddr, ClientIp, ClientIpLayer, PeerAddr};
/// use tower::{ServiceBuilder, ServiceExt, service_fn};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ip = ClientIp::trusted_proxies(["10.0.0.0/8"])?;
/// let svc = ServiceBuilder::new()
///     .layer(ClientIpLayer::new(ip))
///     .service(service_fn(|req: http::Request<()>| async move {
///         let client = req.extensions().get::<ClientAddr>().copied();
///         Ok::<_, std::convert::Infallible>(client.map(|c| c.to_string()))
///     }));
/// let mut req = http::Request::builder()
///     .header("x-forwarded-for", "203.0.113.7")
///     .body(())?;
/// req.extensions_mut().insert(PeerAddr("10.0.0.1:40000".parse()?));
/// assert_eq!(svc.oneshot(req).await?.as_deref(), Some("203.0.113.7"));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ClientIpLayer {
    ip: ClientIp,
}

impl ClientIpLayer {
    /// A layer that resolves each request's client address with `ip`: give it the `ClientIp`
    /// your rate-limit rules and sessions use.
    #[must_use]
    pub const fn new(ip: ClientIp) -> Self {
        Self { ip }
    }
}

impl<S> Layer<S> for ClientIpLayer {
    type Service = ClientIpService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientIpService {
            inner,
            ip: self.ip.clone(),
        }
    }
}

/// The service [`ClientIpLayer`] wraps around its inner service.
#[derive(Clone, Debug)]
pub struct ClientIpService<S> {
    inner: S,
    ip: ClientIp,
}

impl<S> ClientIpService<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the wrapper, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B> Service<Request<B>> for ClientIpService<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let (mut parts, body) = req.into_parts();
        if parts.extensions.get::<ClientAddr>().is_none()
            && let Some(client) = self.ip.resolve(&parts)
        {
            parts.extensions.insert(client);
        }
        self.inner.call(Request::from_parts(parts, body))
    }
}
