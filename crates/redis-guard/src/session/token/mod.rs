//! How the session id travels: in the cookie (the default), or as a token in a request header
//! (`Authorization: Bearer <id>` or a header of your choice) for API and mobile clients.
//!
//! `Transport` (`transport.rs`) is what users set; the layer builder checks it into a `Wire`
//! (`wire.rs`), which reads the session ids a request offers and writes a new token.

mod transport;
mod wire;

pub use transport::Transport;
pub(crate) use wire::Wire;

#[cfg(test)]
mod tests;
