//! What the session layer does when its store fails.

/// What to do when the session store fails (Redis down, slow or answering nonsense): the same
/// words as the rate limiter's [`FailurePolicy`](crate::rate_limit::FailurePolicy), with the
/// opposite default: a request that needed its session is not served without it.
///
/// Whatever the policy:
///
/// - After a failed **load**, nothing is written for the rest of the request and no
///   `Set-Cookie` is sent: the client's cookie may name a perfectly good session, and replacing
///   it with a new one would log the user out.
/// - A failed **idle refresh** (the one round trip after a response whose handler never touched
///   the session) never changes the response; it is logged at `warn`. The session keeps its
///   previous idle deadline.
/// - A session that gets a user but cannot be indexed under it is never handed to the client
///   (no `Set-Cookie`), since `revoke_user` could not reach it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Answer `503 Service Unavailable` with `Retry-After: 1` (the default): a request that
    /// needed its session is not served without it. This covers a failed load that the handler
    /// saw as an error, and a failed **save** of changed data after the handler: the handler
    /// believes its changes are stored, so its response (say, "logged in") would be a lie.
    /// The handler's side effects have happened by then; make handlers idempotent or save
    /// critical state elsewhere.
    #[default]
    Closed,
    /// Carry on as if the request had no session (reads see nothing, writes are dropped, no
    /// cookie is set) and log a warning: for sites where sessions are a convenience. A failed
    /// save keeps the handler's response and sends no cookie.
    Open,
}
