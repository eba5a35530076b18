//! What an admitted evaluation took, kept to release, renew or settle it after the response:
//! the request id its state is named by, and where it was recorded (on Redis, each slot group's
//! keys, arguments and Redis time, `redis/give_back.rs`; in process, the memory table's entries,
//! `memory/settle.rs`).

use std::fmt;
use std::sync::{Arc, LazyLock};

use crate::rate_limit::limiter::LimiterFuture;
use crate::rate_limit::memory::InMemory;
use crate::rate_limit::redis::OnRedis;

/// One admitted evaluation, as the store recorded it.
pub(crate) struct Receipt {
    pub(crate) request: Arc<str>,
    pub(crate) place: Place,
}

/// Where the evaluation was recorded.
pub(crate) enum Place {
    Redis(OnRedis),
    Memory(InMemory),
}

impl Receipt {
    /// Gives the leases back.
    pub(crate) fn release(&self) -> LimiterFuture<()> {
        match &self.place {
            Place::Memory(m) => {
                m.release(&self.request);
                Box::pin(std::future::ready(Ok(())))
            }
            Place::Redis(on) => on.release(&self.request),
        }
    }

    /// Settles the request's rules after its response: per rule named in `deltas`, that many
    /// more units charged (positive) or given back (negative), in the window it was counted in.
    pub(crate) fn settle(&self, deltas: &[(Arc<str>, i64)]) -> LimiterFuture<()> {
        let delta = |name: &str| {
            deltas
                .iter()
                .find_map(|(n, d)| (**n == *name).then_some(*d))
                .unwrap_or(0)
        };
        match &self.place {
            Place::Memory(m) => {
                m.settle(delta);
                Box::pin(std::future::ready(Ok(())))
            }
            Place::Redis(on) => on.settle(&self.request, delta),
        }
    }

    /// Pushes the leases' expiry to a full expiry from now; how many were still held.
    pub(crate) fn renew(&self) -> LimiterFuture<usize> {
        match &self.place {
            Place::Memory(m) => Box::pin(std::future::ready(Ok(m.renew(&self.request)))),
            Place::Redis(on) => on.renew(&self.request),
        }
    }

    /// The longest a lease of this receipt lives without renewal, in µs.
    pub(crate) fn shortest_expiry_us(&self) -> u64 {
        match &self.place {
            Place::Memory(m) => m.shortest_expiry_us(),
            Place::Redis(on) => on.shortest_expiry_us(),
        }
        .unwrap_or(u64::MAX)
    }

    pub(crate) fn lease_count(&self) -> usize {
        match &self.place {
            Place::Memory(m) => m.lease_count(),
            Place::Redis(on) => on.lease_count(),
        }
    }
}

impl fmt::Debug for Receipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = match self.place {
            Place::Redis(_) => "redis",
            Place::Memory(_) => "memory",
        };
        f.debug_struct("Receipt")
            .field("request", &self.request)
            .field("place", &place)
            .finish()
    }
}

/// A process-unique, unpredictable-enough id for one evaluation: names sliding-log members and
/// leases.
pub(crate) fn request_id() -> Arc<str> {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: LazyLock<std::collections::hash_map::RandomState> =
        LazyLock::new(std::collections::hash_map::RandomState::new);
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{:016x}{n:x}", SEED.hash_one(n)).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_unique() {
        let ids: std::collections::HashSet<Arc<str>> = (0..1000).map(|_| request_id()).collect();
        assert_eq!(ids.len(), 1000);
    }
}
