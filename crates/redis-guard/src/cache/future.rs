//! [`ResponseFuture`]: the inner service's future for requests the cache does not look at, or
//! the cache's work for the others.

use super::body::ResponseBody;

define_passing_future! {
    /// The response future of [`Cache`](super::Cache): the inner service's future for a
    /// request the cache does not look at (not GET/HEAD, credentials), its body passed through,
    /// else the lookup and the inner call or the stored response (boxed).
    Caching by caching
}
