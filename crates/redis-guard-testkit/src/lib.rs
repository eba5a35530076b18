//! Real Redis for redis-guard's tests and benchmarks.
//!
//! [`RedisServer::start`] launches a private `redis-server` on a free loopback port, with no
//! persistence, and kills it when dropped: tests never touch a Redis someone else runs on 6379.
//! For fault injection it can be [frozen](RedisServer::freeze) and
//! [thawed](RedisServer::thaw) (`SIGSTOP` / `SIGCONT`), or killed and
//! [restarted](RedisServer::restart) on the same port.
//! [`RedisCluster::start`] does the same for a 3-master Redis Cluster, and returns once every
//! node agrees that all 16384 slots are served.
//! [`RedisServer::start_tls`] and [`RedisCluster::start_tls`] start servers and clusters that
//! speak only TLS, with certificates [`TestTls::generate`] makes at run time.
//! [`RedisSentinels`] starts Redis Sentinels (`redis-server --sentinel`) watching a primary,
//! for tests of a connection that follows failovers.
//! [`NotRedis`] listens on a port and answers as anything but Redis (garbage, an HTTP reply,
//! silence), for tests of a `REDIS_URL` that names the wrong port.
//! [`http`] is a tiny HTTP/1.1 client over a raw socket, able to send what well-behaved clients
//! refuse to (non-UTF-8 header bytes, huge headers).
//! [`Browser::start`] launches a headless Chromium under its own chromedriver, with a fresh
//! profile, and drives it through the W3C WebDriver API (with [`fantoccini`]) for end-to-end
//! tests of real pages.

pub mod app;
mod browser;
mod cluster;
pub mod http;
pub mod inspect;
pub mod not_redis;
mod process;
mod sentinel;
mod server;
mod tls;

pub use browser::{Browser, BrowserCookie};
pub use cluster::RedisCluster;
pub use not_redis::NotRedis;
pub use sentinel::RedisSentinels;
pub use server::{RedisServer, TestkitError, free_port, redis_server_binary, unique_prefix};
pub use tls::TestTls;
