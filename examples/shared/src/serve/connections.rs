//! Who holds the server's connections: the cap on all of them (`MAX_CONNECTIONS`), the cap per
//! client address (`MAX_CONNECTIONS_PER_IP`), and which of them are idle.
//!
//! A connection is *busy* from the moment its request reaches the app until its response body
//! has been sent; otherwise (before its first request, between keep-alive requests, while its
//! request head is still arriving) it is *idle*. When the total is reached and another client
//! arrives, the connection idle the longest is closed to make room (as nginx reuses idle
//! keep-alive connections): holding connections open costs a client them, not the server
//! everyone else's. Only when every connection is busy does a newcomer wait.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

/// The open connections and the two caps; shared by the accept loop and every connection.
#[derive(Debug)]
pub(super) struct Connections {
    state: Mutex<State>,
    /// Woken when a connection closes or turns idle: room, or a connection to close for room.
    changed: Notify,
    max_total: usize,
    max_per_address: usize,
}

#[derive(Debug, Default)]
struct State {
    /// Numbers connections, and orders idle ones by when they turned idle.
    tick: u64,
    /// Every registered connection, those being closed included.
    open: HashMap<u64, Entry>,
    /// Open connections per client address (see [`address_of`]).
    per_address: HashMap<IpAddr, usize>,
    /// The idle connections not yet asked to close, `(turned idle at, id)`: oldest first.
    idle: BTreeSet<(u64, u64)>,
    /// Connections asked to close to make room that have not closed yet.
    closing: usize,
}

#[derive(Debug)]
struct Entry {
    address: IpAddr,
    /// Requests of this connection the app is serving (one, for HTTP/1.1 without pipelining).
    busy: usize,
    /// When it turned idle (its key in [`State::idle`]); `None` while busy or closing.
    idle_since: Option<u64>,
    closing: bool,
    close: Arc<Notify>,
}

/// What [`Connections::admit`] decided for a new connection.
#[derive(Debug)]
pub(super) enum Admission {
    /// Served: the handle keeps its place until dropped.
    Admitted(Handle),
    /// Its address holds `MAX_CONNECTIONS_PER_IP` connections already: to be closed at once.
    OverAddressCap,
    /// The total is reached: wait for [`Connections::changed`] and ask again. An idle
    /// connection, if there is one, has been asked to close.
    Full,
}

impl Connections {
    pub(super) fn new(max_total: usize, max_per_address: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            max_total: max_total.max(1),
            max_per_address: max_per_address.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update below is whole before it can panic (it cannot): a poisoned lock holds
        // consistent counts.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Completes at the next close or idle connection; [`Notified::enable`] it before
    /// [`admit`](Self::admit), so that a change in between is not missed.
    pub(super) fn changed(&self) -> Notified<'_> {
        self.changed.notified()
    }

    /// Whether a new connection from `peer` is served now, refused, or waits.
    pub(super) fn admit(self: &Arc<Self>, peer: IpAddr) -> Admission {
        let address = address_of(peer);
        let mut guard = self.lock();
        let state = &mut *guard;
        if state.per_address.get(&address).copied().unwrap_or(0) >= self.max_per_address {
            return Admission::OverAddressCap;
        }
        if state.open.len() >= self.max_total {
            // One at a time: the one asked to close is idle, so it goes at its next poll.
            if state.closing == 0
                && let Some((_, oldest)) = state.idle.pop_first()
                && let Some(entry) = state.open.get_mut(&oldest)
            {
                entry.idle_since = None;
                entry.closing = true;
                entry.close.notify_one();
                state.closing += 1;
            }
            return Admission::Full;
        }
        state.tick += 1;
        let id = state.tick;
        let close = Arc::new(Notify::new());
        state.open.insert(
            id,
            Entry {
                address,
                busy: 0,
                idle_since: Some(id),
                closing: false,
                close: Arc::clone(&close),
            },
        );
        state.idle.insert((id, id));
        *state.per_address.entry(address).or_default() += 1;
        Admission::Admitted(Handle {
            tracker: Tracker {
                connections: Arc::clone(self),
                id,
            },
            close,
        })
    }

    fn busy(&self, id: u64) {
        let mut state = self.lock();
        let Some(entry) = state.open.get_mut(&id) else {
            return;
        };
        entry.busy += 1;
        if let Some(since) = entry.idle_since.take() {
            state.idle.remove(&(since, id));
        }
    }

    fn done(&self, id: u64) {
        let mut state = self.lock();
        state.tick += 1;
        let tick = state.tick;
        let Some(entry) = state.open.get_mut(&id) else {
            return;
        };
        entry.busy = entry.busy.saturating_sub(1);
        if entry.busy == 0 && !entry.closing {
            entry.idle_since = Some(tick);
            state.idle.insert((tick, id));
            drop(state);
            self.changed.notify_waiters();
        }
    }

    fn remove(&self, id: u64) {
        let mut state = self.lock();
        let Some(entry) = state.open.remove(&id) else {
            return;
        };
        if let Some(since) = entry.idle_since {
            state.idle.remove(&(since, id));
        }
        if entry.closing {
            state.closing = state.closing.saturating_sub(1);
        }
        if let Some(n) = state.per_address.get_mut(&entry.address) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.per_address.remove(&entry.address);
            }
        }
        drop(state);
        self.changed.notify_waiters();
    }
}

/// A served connection's place; dropping it (when the connection ends) frees the place.
#[derive(Debug)]
pub(super) struct Handle {
    tracker: Tracker,
    close: Arc<Notify>,
}

impl Handle {
    /// Completes when the connection is asked to close to make room for another.
    pub(super) fn close_requested(&self) -> Notified<'_> {
        self.close.notified()
    }

    /// What the connection's service marks its requests with.
    pub(super) fn tracker(&self) -> Tracker {
        self.tracker.clone()
    }

    #[cfg(test)]
    fn busy(&self) -> Busy {
        self.tracker.busy()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.tracker.connections.remove(self.tracker.id);
    }
}

/// Marks one connection's requests busy; cheap to clone.
#[derive(Clone, Debug)]
pub(super) struct Tracker {
    connections: Arc<Connections>,
    id: u64,
}

impl Tracker {
    /// Marks the connection busy until the guard is dropped (when its response has been sent).
    pub(super) fn busy(&self) -> Busy {
        self.connections.busy(self.id);
        Busy {
            connections: Arc::clone(&self.connections),
            id: self.id,
        }
    }
}

/// A request being served; see [`Handle::busy`].
#[derive(Debug)]
pub(super) struct Busy {
    connections: Arc<Connections>,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.connections.done(self.id);
    }
}

/// What counts as one client address: an IPv4 address (an IPv4-mapped IPv6 one as the IPv4
/// address it is), or an IPv6 /64 (what one host is usually given, so that it cannot step
/// through its own addresses).
fn address_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u128::MAX >> 64))),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn admitted(a: Admission) -> Handle {
        match a {
            Admission::Admitted(h) => h,
            other => panic!("not admitted: {other:?}"),
        }
    }

    #[test]
    fn one_address_cannot_take_more_than_its_share() {
        let conns = Arc::new(Connections::new(4, 2));
        let _a = admitted(conns.admit(ip("10.0.0.1")));
        let b = admitted(conns.admit(ip("10.0.0.1")));
        assert!(matches!(
            conns.admit(ip("10.0.0.1")),
            Admission::OverAddressCap
        ));
        // The same address, IPv4-mapped.
        assert!(matches!(
            conns.admit(ip("::ffff:10.0.0.1")),
            Admission::OverAddressCap
        ));
        let _c = admitted(conns.admit(ip("10.0.0.2")));
        drop(b);
        let _d = admitted(conns.admit(ip("10.0.0.1")));
    }

    #[test]
    fn an_ipv6_slash_64_is_one_address() {
        let conns = Arc::new(Connections::new(4, 1));
        let _a = admitted(conns.admit(ip("2001:db8::1")));
        assert!(matches!(
            conns.admit(ip("2001:db8::ffff:2")),
            Admission::OverAddressCap
        ));
        let _b = admitted(conns.admit(ip("2001:db8:0:1::1")));
    }

    #[tokio::test]
    async fn when_full_the_longest_idle_connection_is_asked_to_close() {
        let conns = Arc::new(Connections::new(3, 3));
        let first = admitted(conns.admit(ip("10.0.0.1")));
        let second = admitted(conns.admit(ip("10.0.0.1")));
        let third = admitted(conns.admit(ip("10.0.0.1")));
        // The first serves a request, then turns idle after the second did.
        let busy_first = first.busy();
        let busy_second = second.busy();
        drop(busy_second);
        let busy_third = third.busy();
        drop(busy_first);
        // Idle: the second (longest), then the first; the third is busy.
        assert!(matches!(conns.admit(ip("10.0.0.2")), Admission::Full));
        second.close_requested().await;
        // One close at a time: the first is not asked yet.
        assert!(matches!(conns.admit(ip("10.0.0.2")), Admission::Full));
        drop(second);
        let newcomer = admitted(conns.admit(ip("10.0.0.2")));
        assert!(matches!(conns.admit(ip("10.0.0.3")), Admission::Full));
        first.close_requested().await;
        drop(first);
        // Only busy ones left: nothing to close, the next one waits.
        let _busy_newcomer = newcomer.busy();
        let fourth = admitted(conns.admit(ip("10.0.0.3")));
        let _busy_fourth = fourth.busy();
        assert!(matches!(conns.admit(ip("10.0.0.4")), Admission::Full));
        let mut changed = std::pin::pin!(conns.changed());
        changed.as_mut().enable();
        drop(busy_third);
        // Turning idle wakes the waiter, which then has one to close.
        changed.await;
        assert!(matches!(conns.admit(ip("10.0.0.4")), Admission::Full));
        third.close_requested().await;
    }
}
