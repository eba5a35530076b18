//! Real Redis for redis-guard's tests and benchmarks.
//!
//! [`RedisServer::start`] launches a private `redis-server` on a free loopback port, with no
//! persistence, and kills it when dropped: tests never touch a Redis someone else runs on 6379.
//! [`http`] is a tiny HTTP/1.1 client over a raw socket, able to send what well-behaved clients
//! refuse to (non-UTF-8 header bytes, huge headers).

pub mod http;
mod server;

pub use server::{RedisServer, TestkitError, redis_server_binary, unique_prefix};
