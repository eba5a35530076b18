//! `cache-proxy`: a reverse proxy with `CacheLayer` in front of an origin, to run an HTTP
//! cache test suite (`scripts/cache-tests.sh`) against the layer as an HTTP cache.
//!
//! ```sh
//! cargo run -p redis-guard-bench --bin cache-proxy -- \
//!     --listen 127.0.0.1:8081 --origin http://127.0.0.1:8000 --store memory
//! cargo run -p redis-guard-bench --bin cache-proxy -- \
//!     --listen 127.0.0.1:8081 --origin http://127.0.0.1:8000 --store redis://127.0.0.1:6390
//! ```
//!
//! The layer has its builder defaults, plus the request headers the test suite's origin
//! varies on (`--vary`, a comma-separated list; `Accept-Language, Foo, Bar, Baz, Abc` by
//! default), which the layer needs listed up front. Every request (method, path and query,
//! headers, body) is forwarded to `--origin` over HTTP/1.1; its status, headers and body come
//! back as the handler's response. Connection-level headers are not forwarded either way.
//! An origin that cannot be reached is a `502 Bad Gateway`. Interim (`1xx`) responses are not
//! relayed: a tower service answers with one final response.

use std::net::SocketAddr;
use std::process::ExitCode;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use redis_guard::backend::RedisConnection;
use redis_guard::cache::{CacheLayer, MemoryCacheStore, RedisCacheStore};

const USAGE: &str = "\
A reverse proxy with CacheLayer (builder defaults, plus the listed Vary headers) in front of an
origin.

USAGE:
    cache-proxy --origin <URL> [--listen <ADDR>] [--store memory|<redis URL>] [--vary <H,...>]

OPTIONS:
    --origin <URL>     where requests go, e.g. http://127.0.0.1:8000
    --listen <ADDR>    where the proxy listens (default 127.0.0.1:8081)
    --store <S>        `memory` (default), or a Redis URL such as redis://127.0.0.1:6390
    --vary <H,...>     request headers listed with CacheLayerBuilder::vary
                       (default Accept-Language,Foo,Bar,Baz,Abc)
";

/// What the command line asks for.
struct Options {
    origin: Uri,
    listen: SocketAddr,
    store: String,
    vary: Vec<HeaderName>,
}

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Self>, String> {
        let mut origin = None;
        let mut listen = "127.0.0.1:8081".to_owned();
        let mut store = "memory".to_owned();
        let mut vary = "Accept-Language,Foo,Bar,Baz,Abc".to_owned();
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--origin" => origin = Some(value()?),
                "--listen" => listen = value()?,
                "--store" => store = value()?,
                "--vary" => vary = value()?,
                "--help" | "-h" => return Ok(None),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        let origin: Uri = origin
            .ok_or("--origin is required")?
            .parse()
            .map_err(|e| format!("--origin: {e}"))?;
        if origin.scheme_str() != Some("http") || origin.authority().is_none() {
            return Err("--origin must be an http:// URL with a host".into());
        }
        let listen = listen.parse().map_err(|e| format!("--listen: {e}"))?;
        let vary = vary
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|h| HeaderName::try_from(h).map_err(|e| format!("--vary {h:?}: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Some(Self {
            origin,
            listen,
            store,
            vary,
        }))
    }
}

fn main() -> ExitCode {
    let options = match Options::parse(std::env::args().skip(1)) {
        Ok(Some(options)) => options,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("cache-proxy: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cache-proxy: a tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cache-proxy: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(options: Options) -> Result<(), String> {
    let builder = if options.store == "memory" {
        CacheLayer::builder(MemoryCacheStore::new())
    } else {
        let conn = RedisConnection::open(&options.store)
            .await
            .map_err(|e| format!("connecting to {}: {e}", options.store))?;
        CacheLayer::builder(RedisCacheStore::new(conn))
    };
    let layer = builder
        .vary(options.vary)
        .build()
        .map_err(|e| format!("cache layer: {e}"))?;
    // Idle connections are dropped before an origin's keep-alive timeout closes them (5 s on
    // Node's), so that no request is sent on a connection the origin is closing.
    let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(std::time::Duration::from_secs(2))
        .build_http();
    let origin = options.origin;
    let forward = tower::service_fn(move |req: Request<Body>| {
        let client = client.clone();
        let origin = origin.clone();
        async move { Ok::<_, std::convert::Infallible>(forward(&client, &origin, req).await) }
    });
    let app = Router::new().fallback_service(forward).layer(layer);
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| format!("listening on {}: {e}", options.listen))?;
    eprintln!(
        "cache-proxy: listening on {} (store {})",
        options.listen, options.store
    );
    axum::serve(listener, app)
        .await
        .map_err(|e| format!("serving: {e}"))
}

/// Sends `req` to `origin` and returns its answer, or a `502` that says why there is none.
async fn forward(
    client: &Client<HttpConnector, Full<Bytes>>,
    origin: &Uri,
    req: Request<Body>,
) -> Response<Full<Bytes>> {
    match try_forward(client, origin, req).await {
        Ok(response) => response,
        Err(e) => {
            let mut response = Response::new(Full::new(Bytes::from(e)));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    }
}

async fn try_forward(
    client: &Client<HttpConnector, Full<Bytes>>,
    origin: &Uri,
    req: Request<Body>,
) -> Result<Response<Full<Bytes>>, String> {
    let (mut parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| format!("reading the request body: {e}"))?
        .to_bytes();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut uri = Uri::builder().path_and_query(path);
    if let Some(scheme) = origin.scheme() {
        uri = uri.scheme(scheme.clone());
    }
    if let Some(authority) = origin.authority() {
        uri = uri.authority(authority.clone());
    }
    parts.uri = uri.build().map_err(|e| format!("the origin URI: {e}"))?;
    strip_connection_headers(&mut parts.headers);
    parts.headers.remove(header::HOST);
    parts.version = axum::http::Version::HTTP_11;
    let answer = client
        .request(Request::from_parts(parts, Full::new(body)))
        .await
        .map_err(|e| format!("the origin: {e}"))?;
    let (mut parts, body) = answer.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| format!("reading the origin's body: {e}"))?
        .to_bytes();
    strip_connection_headers(&mut parts.headers);
    Ok(Response::from_parts(parts, Full::new(body)))
}

/// Takes off the headers that describe one connection, not the message (RFC 9110 §7.6.1).
fn strip_connection_headers(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::try_from(name.trim()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::PROXY_AUTHENTICATE,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ] {
        headers.remove(name);
    }
}
