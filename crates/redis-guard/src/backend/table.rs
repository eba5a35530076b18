//! [`ExpiringTable`]: the bounded in-process table under both memory backends.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash};

/// Expired entries removed per [`ExpiringTable::maintain`] at most, on top of what the bound
/// requires: spreads a mass expiry over many operations instead of stalling one behind a lock.
pub(crate) const SWEEP_PER_OP: usize = 32;

/// Entries with a deadline (µs on the backend's clock), ordered by it, bounded.
///
/// Every operation is O(log n); [`maintain`](Self::maintain) removes at most
/// [`SWEEP_PER_OP`] expired entries plus whatever the bound requires, so no operation ever
/// scans the table and each entry is removed once: amortized O(log n). Past the bound, expired
/// entries go first, then ordinary ones, then [kept](Self::keep) ones, each soonest deadline
/// first.
///
/// A deadline that moves later leaves the entry where it stands in the deadline order (a busy
/// client's entry moves on every request: a `BTreeMap` remove and insert each time, for an
/// order that is read only when something expires or the bound is reached). An entry is thus
/// never placed after its deadline, only sometimes before it; whoever takes the first entry of
/// an order ([`maintain`](Self::maintain), [`pop_first`](Self::pop_first)) and finds it placed
/// early moves it to its deadline instead, once per move of its deadline at most.
///
/// `S` hashes the keys: SipHash with random keys by default; a table whose keys are already
/// keyed hashes (the memory limiter's entry ids) hashes them no further.
#[derive(Debug)]
pub(crate) struct ExpiringTable<K, V, S = RandomState> {
    entries: HashMap<K, Slot<V>, S>,
    /// Every entry by (place, insertion number), ordinary entries in `[0]`, kept ones in
    /// `[1]`. An entry's place is at or before its deadline: the first of each order whose
    /// place is its deadline is that order's next to expire and first to evict.
    order: [BTreeMap<(u64, u64), K>; 2],
    seq: u64,
    max: usize,
}

#[derive(Debug)]
struct Slot<V> {
    value: V,
    /// Where the entry stands in its order: at or before `deadline`.
    at: (u64, u64),
    deadline: u64,
    /// Which order holds the entry: 1 when it is evicted only after every ordinary entry.
    tier: usize,
}

// The response cache alone uses only part of the table.
#[cfg_attr(
    not(any(feature = "rate-limit", feature = "session")),
    allow(dead_code)
)]
impl<K: Clone + Eq + Hash, V, S: BuildHasher + Default> ExpiringTable<K, V, S> {
    /// An empty table holding at most `max` entries (at least 1).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            entries: HashMap::default(),
            order: [BTreeMap::new(), BTreeMap::new()],
            seq: 0,
            max: max.max(1),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The most entries the table holds past a [`maintain`](Self::maintain).
    #[cfg_attr(not(feature = "idempotency"), allow(dead_code))]
    pub(crate) fn capacity(&self) -> usize {
        self.max
    }

    /// How many entries are [kept](Self::keep), live or not. A user that must never lose a
    /// live kept entry to the bound keeps at most [`capacity`](Self::capacity) of them: past
    /// the bound, expired and ordinary entries go first.
    #[cfg_attr(not(feature = "idempotency"), allow(dead_code))]
    pub(crate) fn kept_len(&self) -> usize {
        self.order[1].len()
    }

    #[cfg_attr(not(feature = "session"), allow(dead_code))]
    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.entries.contains_key(key)
    }

    /// The entry's deadline, live or not.
    pub(crate) fn deadline(&self, key: &K) -> Option<u64> {
        self.entries.get(key).map(|s| s.deadline)
    }

    /// Whether `key` has an entry whose deadline is after `now`.
    pub(crate) fn is_live(&self, key: &K, now: u64) -> bool {
        self.deadline(key).is_some_and(|d| now < d)
    }

    /// The value under `key` if it is live at `now`, to change in place (its deadline stays).
    #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
    pub(crate) fn get_live_mut<Q>(&mut self, key: &Q, now: u64) -> Option<&mut V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries
            .get_mut(key)
            .filter(|s| now < s.deadline)
            .map(|s| &mut s.value)
    }

    /// The value under `key`, live or not.
    #[cfg_attr(not(feature = "session"), allow(dead_code))]
    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|s| &s.value)
    }

    /// The value under `key`, live or not.
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.entries.get_mut(key).map(|s| &mut s.value)
    }

    /// Puts `value` under `key` until `deadline`, replacing what was there.
    pub(crate) fn insert(&mut self, key: K, value: V, deadline: u64) -> Option<V> {
        if let Some(slot) = self.slot_until(&key, deadline) {
            return Some(std::mem::replace(&mut slot.value, value));
        }
        self.seq += 1;
        let at = (deadline, self.seq);
        self.order[0].insert(at, key.clone());
        self.entries.insert(
            key,
            Slot {
                value,
                at,
                deadline,
                tier: 0,
            },
        );
        None
    }

    /// Marks `key`'s entry as kept: past the bound it is evicted only once no ordinary entry is
    /// left. It stays kept until removed.
    #[cfg_attr(
        not(any(feature = "session", feature = "idempotency")),
        allow(dead_code)
    )]
    pub(crate) fn keep(&mut self, key: &K) {
        let Some(slot) = self.entries.get_mut(key) else {
            return;
        };
        if slot.tier == 0
            && let Some(k) = self.order[0].remove(&slot.at)
        {
            self.order[1].insert(slot.at, k);
            slot.tier = 1;
        }
    }

    /// Moves `key`'s deadline; false when there is no entry.
    pub(crate) fn set_deadline(&mut self, key: &K, deadline: u64) -> bool {
        self.slot_until(key, deadline).is_some()
    }

    /// Changes `key`'s value in place and moves its deadline, in one lookup: `change` gets the
    /// value and its deadline, and returns the new deadline with what `update` returns. `None`
    /// when there is no entry (live or not).
    #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
    pub(crate) fn update<R>(
        &mut self,
        key: &K,
        change: impl FnOnce(&mut V, u64) -> (u64, R),
    ) -> Option<R> {
        let slot = self.entries.get_mut(key)?;
        let (deadline, out) = change(&mut slot.value, slot.deadline);
        place(slot, deadline, &mut self.order, &mut self.seq);
        Some(out)
    }

    /// `key`'s slot with its deadline moved to `deadline`, in one lookup: a client's next request
    /// updates its entry in place.
    fn slot_until(&mut self, key: &K, deadline: u64) -> Option<&mut Slot<V>> {
        let slot = self.entries.get_mut(key)?;
        place(slot, deadline, &mut self.order, &mut self.seq);
        Some(slot)
    }

    /// Takes the first entry of order `tier` out, unless it stands before its deadline: then it
    /// moves to its deadline and `None` says to look again.
    fn pop_placed(&mut self, tier: usize) -> Option<Option<(K, V)>> {
        let (at, key) = self.order[tier].pop_first()?;
        let Some(slot) = self.entries.get_mut(&key) else {
            return Some(None);
        };
        if slot.deadline != at.0 {
            self.seq += 1;
            slot.at = (slot.deadline, self.seq);
            self.order[tier].insert(slot.at, key);
            return Some(None);
        }
        let slot = self.entries.remove(&key)?;
        Some(Some((key, slot.value)))
    }

    /// Removes the entry under `key`, live or not.
    #[cfg_attr(not(feature = "session"), allow(dead_code))]
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        let slot = self.entries.remove(key)?;
        self.order[slot.tier].remove(&slot.at);
        Some(slot.value)
    }

    /// Removes every entry.
    #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.order.iter_mut().for_each(BTreeMap::clear);
    }

    /// Removes the first entry to evict, live or not: the ordinary entry closest to its
    /// deadline, or the kept one when no ordinary entry is left.
    #[cfg_attr(not(feature = "cache"), allow(dead_code))]
    pub(crate) fn pop_first(&mut self) -> Option<(K, V)> {
        loop {
            let tier = usize::from(self.order[0].is_empty());
            if let Some(first) = self.pop_placed(tier)? {
                return Some(first);
            }
        }
    }

    /// Removes up to [`SWEEP_PER_OP`] entries expired at `now`, then, until the bound holds,
    /// expired entries, then ordinary entries, then kept ones, each soonest deadline first,
    /// handing each to `gone`. Returns how many entries it looked at.
    pub(crate) fn maintain(&mut self, now: u64, mut gone: impl FnMut(K, V)) -> usize {
        let mut examined = 0;
        loop {
            let firsts = self
                .order
                .each_ref()
                .map(|o| o.first_key_value().map(|(at, _)| *at));
            // The tier whose first entry stands soonest, if it stands at or before now (it has
            // expired, or stands before its deadline).
            let expired = match firsts {
                [Some(a), Some(b)] => Some(if a <= b { (0, a) } else { (1, b) }),
                [Some(a), None] => Some((0, a)),
                [None, Some(b)] => Some((1, b)),
                [None, None] => None,
            }
            .filter(|(_, at)| at.0 <= now)
            .map(|(tier, _)| tier);
            let over = self.entries.len() > self.max;
            let tier = match expired {
                Some(tier) if over || examined < SWEEP_PER_OP => tier,
                _ if over => usize::from(firsts[0].is_none()),
                _ => break,
            };
            // Moving an entry that stood early counts as looking at it: a sweep stays bounded.
            examined += 1;
            match self.pop_placed(tier) {
                Some(Some((key, value))) => gone(key, value),
                Some(None) => {}
                None => break,
            }
        }
        examined
    }
}

/// Moves `slot`'s deadline to `deadline`. The entry keeps its place in its order (`order`)
/// unless that place would now be after its deadline; `seq` numbers the places.
fn place<K, V>(
    slot: &mut Slot<V>,
    deadline: u64,
    order: &mut [BTreeMap<(u64, u64), K>; 2],
    seq: &mut u64,
) {
    if deadline < slot.at.0 {
        *seq += 1;
        let at = (deadline, *seq);
        let order = &mut order[slot.tier];
        if let Some(k) = order.remove(&slot.at) {
            order.insert(at, k);
        }
        slot.at = at;
    }
    slot.deadline = deadline;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_entries_go_a_batch_at_a_time_and_the_bound_holds() {
        let mut t: ExpiringTable<_, _> = ExpiringTable::new(100);
        for i in 0..1000_u64 {
            t.insert(i, i, 1_000 + i);
            let mut gone = Vec::new();
            t.maintain(0, |k, _| gone.push(k));
            assert!(t.len() <= 100);
            if i >= 100 {
                // The soonest deadline is evicted first.
                assert_eq!(gone, vec![i - 100]);
            }
        }
        // Everything expires at once: a batch per operation, never a scan.
        let mut swept = 0;
        while t.len() > 0 {
            let n = t.maintain(10_000, |_, _| {});
            assert!(n <= SWEEP_PER_OP);
            swept += n;
        }
        assert_eq!(swept, 100);
    }

    #[test]
    fn an_update_changes_the_value_and_moves_the_deadline_in_one_call() {
        let mut t: ExpiringTable<_, _> = ExpiringTable::new(10);
        t.insert("a", 1, 100);
        t.insert("b", 2, 200);
        // The value changes in place; the deadline it is given is the one the entry keeps.
        let old = t.update(&"a", |v, deadline| {
            *v += 10;
            (deadline + 500, deadline)
        });
        assert_eq!(old, Some(100));
        assert_eq!((t.get(&"a"), t.deadline(&"a")), (Some(&11), Some(600)));
        assert_eq!(t.update(&"c", |_: &mut i32, d| (d, ())), None);
        // "a" now outlives "b": "b" expires first, then "a" at its new deadline, not its old.
        let mut gone = Vec::new();
        t.maintain(300, |k, _| gone.push(k));
        assert_eq!(gone, vec!["b"]);
        // An earlier deadline moves the entry forward in the expiry order.
        t.update(&"a", |_, _| (250, ()));
        t.maintain(300, |k, _| gone.push(k));
        assert_eq!(gone, vec!["b", "a"]);
    }

    #[test]
    fn past_the_bound_expired_then_ordinary_then_kept_entries_go() {
        let mut t: ExpiringTable<_, _> = ExpiringTable::new(3);
        // Kept entries expire soonest, yet ordinary ones are evicted before them.
        for k in [1, 2] {
            t.insert(k, (), 100 + k);
            t.keep(&k);
        }
        for k in [3, 4, 5] {
            t.insert(k, (), 1_000 + k);
        }
        assert_eq!((t.kept_len(), t.capacity()), (2, 3));
        let mut gone = Vec::new();
        t.maintain(0, |k, ()| gone.push(k));
        assert_eq!(gone, vec![3, 4]);
        // A kept entry whose deadline has passed goes before a live ordinary one.
        t.insert(6, (), 2_000);
        gone.clear();
        t.maintain(101, |k, ()| gone.push(k));
        assert_eq!(gone, vec![1]);
        // Only kept entries left beyond the bound: the soonest of them.
        t.remove(&5);
        t.remove(&6);
        for k in [7, 8, 10] {
            t.insert(k, (), 3_000 + k);
            t.keep(&k);
        }
        gone.clear();
        t.maintain(101, |k, ()| gone.push(k));
        assert_eq!(gone, vec![2]);
        assert_eq!(t.len(), 3);
        // A kept entry moves in its own order when its deadline moves.
        assert!(t.set_deadline(&7, 9_999));
        t.insert(9, (), 5_000);
        t.keep(&9);
        gone.clear();
        t.maintain(101, |k, ()| gone.push(k));
        assert_eq!(gone, vec![8]);
    }

    /// A busy client's entry moves later on every request: it keeps its place in the order (no
    /// `BTreeMap` remove and insert per request), and expiry and eviction still go by deadline.
    #[test]
    fn a_later_deadline_keeps_the_place_and_the_order_stays_by_deadline() {
        fn first(t: &ExpiringTable<&'static str, u32>) -> Option<(u64, &'static str)> {
            t.order[0].first_key_value().map(|(at, k)| (at.0, *k))
        }
        let mut t: ExpiringTable<_, _> = ExpiringTable::new(2);
        t.insert("busy", 0, 100);
        t.insert("quiet", 0, 500);
        for deadline in 200..300 {
            assert!(t.set_deadline(&"busy", deadline));
        }
        assert_eq!(t.insert("busy", 1, 1_000), Some(0));
        assert_eq!(first(&t), Some((100, "busy")), "not moved in the order");
        // Past its first place it is still live, and is moved to its deadline, not swept.
        assert_eq!(t.maintain(150, |_, _| panic!("nothing expired")), 1);
        assert!(t.is_live(&"busy", 150));
        assert_eq!(first(&t), Some((500, "quiet")));
        // Past the bound, the soonest deadline goes, not the entry that stands first.
        assert!(t.set_deadline(&"quiet", 2_000));
        t.insert("new", 0, 700);
        let mut gone = Vec::new();
        t.maintain(150, |k, _| gone.push(k));
        assert_eq!(gone, ["new"]);
        assert_eq!(t.pop_first(), Some(("busy", 1)));
        // A deadline moved earlier moves the entry at once.
        t.insert("busy", 2, 3_000);
        assert!(t.set_deadline(&"busy", 10));
        gone.clear();
        t.maintain(10, |k, _| gone.push(k));
        assert_eq!(gone, ["busy"]);
        assert_eq!(t.pop_first(), Some(("quiet", 0)));
        assert_eq!(t.pop_first(), None);
    }

    #[test]
    fn deadlines_move_and_liveness_follows_them() {
        let mut t: ExpiringTable<_, _> = ExpiringTable::new(10);
        t.insert("a", 1, 100);
        assert!(t.is_live(&"a", 99));
        assert!(!t.is_live(&"a", 100));
        assert_eq!(t.get_live_mut(&"a", 100), None);
        assert!(t.set_deadline(&"a", 200));
        assert_eq!(t.get_live_mut(&"a", 150), Some(&mut 1));
        assert!(!t.set_deadline(&"b", 1));
        assert_eq!(t.insert("a", 2, 300), Some(1));
        assert_eq!(t.len(), 1);
        // Its first place has passed, its deadline has not: moved, not removed.
        t.maintain(250, |_, _| panic!("a is live"));
        assert!(t.is_live(&"a", 250));
        // A key updated in place moves in the deadline order: the other one expires first.
        t.insert("b", 3, 260);
        assert_eq!(t.insert("a", 4, 280), Some(2));
        let mut gone = Vec::new();
        t.maintain(270, |k, v| gone.push((k, v)));
        assert_eq!(gone, vec![("b", 3)]);
        assert_eq!(t.remove(&"a"), Some(4));
        assert!(!t.contains_key(&"a"));
    }
}
