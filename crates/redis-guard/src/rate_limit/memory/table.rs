//! A [`MemoryLimiter`](super::MemoryLimiter)'s table: the algorithms' states and the override
//! records, each with the deadline it expires at, in shards that lock apart (the limiter's docs
//! say how they are bounded and swept).
//!
//! An entry is named by a 64-bit [`KeyedHash`] of its rule and key ([`EntryId`]), never the key:
//! a client that sends 16 KB user names must not make the table grow by 16 KB per name, nor aim
//! collisions at other clients or at the buckets. A decision locks the shards of its entries in
//! ascending order: two decisions never wait in a circle.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::backend::{Clock, MonotonicClock, micros};
use crate::prehashed::{KeyedHash, PreHashed};
use crate::rate_limit::algorithm::{Commit, State, ceil_ms};
use crate::rate_limit::limiter::overrides::Override;
use crate::rate_limit::{Few, Key, Rule};

/// What one entry is the state or record of: a rule, its algorithm (each keeps its own state,
/// as on Redis) and the key, as a 64-bit keyed hash (see the module's text). Two different
/// entries share an id with a chance of about n² / 2⁶⁵ for n entries (3 in 10¹⁰ at 100 000):
/// then they share one state.
pub(super) type EntryId = u64;

/// The most shards a table has.
const MAX_SHARDS: usize = 64;
const _: () = assert!(MAX_SHARDS <= 64, "a locked set of shards is a u64 of bits");

/// The fewest entries a shard's share holds: a smaller table has fewer shards (one under 128
/// keys), so its bound and eviction order are the whole table's.
const MIN_SHARE: usize = 64;

/// The algorithms' states, and the override records (penalties, allow-list entries, bans).
#[derive(Debug)]
pub(super) struct Table {
    clock: Box<dyn Clock>,
    shards: Box<[Mutex<Shard>]>,
    /// The keyed hash of this table's ids.
    hash: KeyedHash,
    /// The next shard a sweep looks at.
    sweep: AtomicUsize,
}

/// One shard: its entries, and the operations on it since it last asked for a sweep.
#[derive(Debug)]
pub(super) struct Shard {
    states: Entries<State>,
    overrides: Entries<Override>,
    ops: usize,
}

/// A shard's entries of one kind, at most `max`.
#[derive(Debug)]
struct Entries<V> {
    map: HashMap<EntryId, (V, u64), PreHashed>,
    max: usize,
}

impl Table {
    /// A table of at most `capacity` states and `capacity` records (each at least 1), on
    /// `clock` (the monotonic clock by default).
    pub(super) fn new(capacity: usize, clock: Option<Box<dyn Clock>>) -> Self {
        let capacity = capacity.max(1);
        let wanted = std::thread::available_parallelism().map_or(1, usize::from) * 4;
        let fit = 1 << (capacity / MIN_SHARE).max(1).ilog2();
        let shards = wanted.next_power_of_two().min(MAX_SHARDS).min(fit);
        Self::with_shards(capacity, shards, clock)
    }

    /// A table of `shards` shards (a power of two, at most `capacity`).
    fn with_shards(capacity: usize, shards: usize, clock: Option<Box<dyn Clock>>) -> Self {
        let max = capacity / shards;
        let shard = || Shard {
            states: Entries::new(max),
            overrides: Entries::new(max),
            ops: 0,
        };
        Self {
            clock: clock.unwrap_or_else(|| Box::new(MonotonicClock::new())),
            shards: (0..shards).map(|_| Mutex::new(shard())).collect(),
            hash: KeyedHash::default(),
            sweep: AtomicUsize::new(0),
        }
    }

    /// Now, in whole µs on the table's clock.
    pub(super) fn now_us(&self) -> u64 {
        micros(self.clock.now())
    }

    pub(super) fn state_id(&self, rule: &Rule, key: &Key) -> EntryId {
        match rule.algorithm().builtin_id() {
            Some(tag) => self.id(rule.name(), tag, key.as_bytes()),
            // Never evaluated here (Lua only), but reset and inspected like the others.
            None => {
                let mut h = self.hasher();
                std::hash::Hash::hash(&(rule.algorithm(), key.as_bytes()), &mut h);
                self.id(rule.name(), u8::MAX, &h.finish().to_le_bytes())
            }
        }
    }

    /// The entry of `rule`'s override record (penalty, allow-list entry, bans) for `key`.
    pub(super) fn record_id(&self, rule: &Rule, key: &Key) -> EntryId {
        self.id(rule.name(), 0, key.as_bytes())
    }

    /// The id of `name ∥ 0xff ∥ tag ∥ key` (a rule name is UTF-8, never 0xff: the parts are
    /// told apart).
    fn id(&self, name: &str, tag: u8, key: &[u8]) -> EntryId {
        let mut h = self.hasher();
        h.write(name.as_bytes());
        h.write(&[0xff, tag]);
        h.write(key);
        h.finish()
    }

    fn hasher(&self) -> foldhash::quality::FoldHasher<'_> {
        self.hash.build_hasher()
    }

    /// The shard of `id`: bits the shard's hash maps do not use (they take the lowest bits for
    /// the bucket and the highest seven for its tag).
    fn shard_of(&self, id: EntryId) -> usize {
        (id >> 32) as usize & (self.shards.len() - 1)
    }

    /// What `decide` makes of the state under `id` (live at `now`, if any), its commit recorded
    /// in the same lookup: a busy key's state is found once and changed in place.
    pub(super) fn decide<T>(
        &self,
        id: EntryId,
        now: u64,
        decide: impl FnOnce(Option<&mut State>) -> (T, Option<Commit>),
    ) -> T {
        let mut shard = lock(&self.shards[self.shard_of(id)]);
        let s = &mut *shard;
        let mut slot = s.states.map.get_mut(&id);
        let live = slot.as_mut().filter(|(_, d)| now < *d).map(|(v, _)| v);
        let (out, commit) = decide(live);
        // A known key's state is replaced where it is.
        if let Some((state, deadline)) = commit.and_then(|c| committed(slot, c, now, "")) {
            s.states.insert(id, state, deadline, now);
        }
        let due = s.tick();
        drop(shard);
        if due {
            self.sweep();
        }
        out
    }

    /// The shards of `ids`, locked (in ascending order) until the result is dropped.
    pub(super) fn lock(&self, ids: impl IntoIterator<Item = EntryId>) -> Locked<'_> {
        // A bit per shard (at most 64), taken lowest first.
        let mut wanted = ids
            .into_iter()
            .fold(0_u64, |w, id| w | 1 << self.shard_of(id));
        let mut guards = Few::new();
        while wanted != 0 {
            let i = wanted.trailing_zeros() as usize;
            wanted &= wanted - 1;
            guards.push((i, lock(&self.shards[i])));
        }
        Locked {
            table: self,
            guards,
        }
    }

    /// How many states and records the table holds (expired ones included until swept).
    pub(super) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = lock(s);
                s.states.map.len() + s.overrides.map.len()
            })
            .sum()
    }

    /// Drops the expired entries of the next shard in turn.
    fn sweep(&self) {
        let now = self.now_us();
        let i = self.sweep.fetch_add(1, Ordering::Relaxed) & (self.shards.len() - 1);
        let mut shard = lock(&self.shards[i]);
        shard.states.drop_expired(now);
        shard.overrides.drop_expired(now);
    }
}

/// A shard, locked. A panic elsewhere while holding the lock leaves a shard that is still
/// consistent (every step keeps the invariants), so a poisoned lock is taken over.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The shards of some entries, locked: what a decision reads and writes. An entry whose shard
/// was not locked reads as absent and is not written (never the case: each caller locks the
/// shards of the ids it uses).
#[derive(Debug)]
pub(super) struct Locked<'a> {
    table: &'a Table,
    guards: Few<(usize, MutexGuard<'a, Shard>)>,
}

impl Locked<'_> {
    fn shard(&mut self, id: EntryId) -> Option<&mut Shard> {
        let i = self.table.shard_of(id);
        let found = self
            .guards
            .as_mut_slice()
            .iter_mut()
            .find(|(at, _)| *at == i);
        debug_assert!(found.is_some(), "the shard of every id used is locked");
        found.map(|(_, g)| &mut **g)
    }

    /// The state under `id` if it is live at `now`, to change in place.
    pub(super) fn state(&mut self, id: EntryId, now: u64) -> Option<&mut State> {
        self.shard(id)?.states.live(id, now)
    }

    pub(super) fn remove(&mut self, id: EntryId) {
        if let Some(s) = self.shard(id) {
            s.states.map.remove(&id);
            s.overrides.map.remove(&id);
        }
    }

    /// Moves the deadline of the state under `id` to `deadline` if that is later.
    pub(super) fn extend_state(&mut self, id: EntryId, deadline: u64) {
        if let Some((_, until)) = self.shard(id).and_then(|s| s.states.map.get_mut(&id)) {
            *until = deadline.max(*until);
        }
    }

    /// The override record under `id` as of `now` (none: an empty one).
    pub(super) fn record(&mut self, id: EntryId, now: u64) -> Override {
        self.shard(id)
            .and_then(|s| s.overrides.live(id, now))
            .map(|r| r.live(now))
            .unwrap_or_default()
    }

    /// Stores `record` until its latest deadline (whole milliseconds, as Redis' PX), or drops
    /// it when none is left.
    pub(super) fn store(&mut self, id: EntryId, record: Override, now: u64) {
        let until = record.until();
        let Some(s) = self.shard(id) else { return };
        if until <= now {
            s.overrides.map.remove(&id);
        } else {
            s.overrides
                .insert(id, record, expiry(now, until - now), now);
        }
    }

    /// Records `commit`; a lease is named `request`.
    pub(super) fn apply(&mut self, id: EntryId, commit: Commit, now: u64, request: &str) {
        let Some(s) = self.shard(id) else { return };
        if let Some((state, deadline)) = committed(s.states.map.get_mut(&id), commit, now, request)
        {
            s.states.insert(id, state, deadline, now);
        }
    }
}

/// `commit` (a lease named `request`) made to `slot`, an entry's state and deadline, live or
/// not: `None` when done in place, else the entry to store (there was none).
fn committed(
    slot: Option<&mut (State, u64)>,
    commit: Commit,
    now: u64,
    request: &str,
) -> Option<(State, u64)> {
    let expiry = |ttl_us: u64| expiry(now, ttl_us);
    let live = |d: &u64| now < *d;
    let repeat = |at, n| std::iter::repeat_n(at, usize::try_from(n).unwrap_or(0));
    let (new, slot) = match (commit, slot) {
        (Commit::Append { at, n, ttl }, Some((State::Log(log), d))) if live(d) => {
            log.extend(repeat(at, n));
            *d = expiry(ttl);
            return None;
        }
        (Commit::Lease { expiry: until, ttl }, Some((State::Leases(held), d))) if live(d) => {
            held.push((Arc::from(request), until));
            *d = expiry(ttl);
            return None;
        }
        (Commit::Replace(state, ttl), slot) => ((state, expiry(ttl)), slot),
        (Commit::Append { at, n, ttl }, slot) => {
            let log = repeat(at, n).collect::<VecDeque<_>>();
            ((State::Log(log), expiry(ttl)), slot)
        }
        (Commit::Lease { expiry: until, ttl }, slot) => {
            let held = vec![(Arc::from(request), until)];
            ((State::Leases(held), expiry(ttl)), slot)
        }
    };
    match slot {
        Some(slot) => {
            *slot = new;
            None
        }
        None => Some(new),
    }
}

/// When an entry written at `now` living `ttl_us` expires: as Redis' PX, whole milliseconds,
/// rounded up.
fn expiry(now: u64, ttl_us: u64) -> u64 {
    now + ceil_ms(ttl_us) * 1000
}

impl Drop for Locked<'_> {
    /// Unlocks; then, once every so many operations on a shard, sweeps the next one in turn.
    fn drop(&mut self) {
        let mut due = false;
        for (_, shard) in self.guards.as_mut_slice() {
            due |= shard.tick();
        }
        self.guards = Few::default();
        if due {
            self.table.sweep();
        }
    }
}

impl Shard {
    /// Counts an operation; true once every so many, when a sweep is due.
    fn tick(&mut self) -> bool {
        self.ops += 1;
        let due = self.ops >= self.states.max.max(MIN_SHARE);
        if due {
            self.ops = 0;
        }
        due
    }
}

impl<V> Entries<V> {
    fn new(max: usize) -> Self {
        Self {
            map: HashMap::default(),
            max: max.max(1),
        }
    }

    fn live(&mut self, id: EntryId, now: u64) -> Option<&mut V> {
        self.map
            .get_mut(&id)
            .filter(|(_, d)| now < *d)
            .map(|(v, _)| v)
    }

    /// Puts `value` under `id` until `deadline`, making room first when a new entry finds the
    /// shard full: its expired entries go, then the sixteenth closest to expiry.
    fn insert(&mut self, id: EntryId, value: V, deadline: u64, now: u64) {
        if self.map.len() >= self.max && !self.map.contains_key(&id) {
            self.drop_expired(now);
            if self.map.len() >= self.max {
                self.evict((self.max / 16).max(1));
            }
        }
        self.map.insert(id, (value, deadline));
    }

    fn drop_expired(&mut self, now: u64) {
        self.map.retain(|_, (_, d)| now < *d);
    }

    fn evict(&mut self, n: usize) {
        let mut soonest: Vec<(u64, EntryId)> =
            self.map.iter().map(|(id, (_, d))| (*d, *id)).collect();
        if n < soonest.len() {
            soonest.select_nth_unstable(n - 1);
            soonest.truncate(n);
        }
        for (_, id) in soonest {
            self.map.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::Quota;

    fn state(n: u64) -> State {
        State::Window { start: 0, count: n }
    }

    /// Puts a state under each of `ids` until `deadline`, at time 0.
    fn put(table: &Table, ids: impl IntoIterator<Item = EntryId>, deadline: u64) {
        for id in ids {
            let commit = Commit::Replace(state(id), deadline);
            table.lock([id]).apply(id, commit, 0, "");
        }
    }

    fn ids(table: &Table, keys: std::ops::Range<u64>) -> Vec<EntryId> {
        let rule = Rule::new("r", Quota::per_second(1));
        keys.map(|k| table.state_id(&rule, &Key::from(k))).collect()
    }

    #[test]
    fn ids_spread_over_the_shards_and_one_lock_holds_several() {
        let table = Table::with_shards(1 << 16, 8, None);
        let ids = ids(&table, 0..800);
        let mut per_shard = [0; 8];
        ids.iter()
            .for_each(|&id| per_shard[table.shard_of(id)] += 1);
        assert!(per_shard.iter().all(|&n| n > 50), "{per_shard:?}");
        // Several shards locked at once (in any order), each entry reached through the lock.
        let mut locked = table.lock(ids[..20].iter().rev().copied());
        for &id in &ids[..20] {
            locked.apply(id, Commit::Replace(state(id), 1_000), 0, "");
        }
        assert!(
            ids[..20]
                .iter()
                .all(|&id| locked.state(id, 999) == Some(&mut state(id)))
        );
        drop(locked);
        assert_eq!(table.len(), 20);
    }

    #[test]
    fn two_tables_name_the_same_key_differently() {
        let (a, b) = (Table::new(100, None), Table::new(100, None));
        let rule = Rule::new("r", Quota::per_second(1));
        let key = Key::from("client");
        assert_eq!(a.state_id(&rule, &key), a.state_id(&rule, &key));
        assert_ne!(a.state_id(&rule, &key), b.state_id(&rule, &key));
        assert_ne!(a.state_id(&rule, &key), a.record_id(&rule, &key));
    }

    #[test]
    fn a_sweep_drops_expired_entries_no_request_touches() {
        let clock = crate::backend::ManualClock::new();
        let table = Table::with_shards(1 << 12, 4, Some(Box::new(clock.clone())));
        // Expired at 100 µs, in every shard; one live entry in each.
        put(&table, (0..400).map(|i| (i % 4) << 32 | i), 100);
        put(&table, (0..4).map(|s| s << 32 | 1_000_000), 1 << 40);
        assert_eq!(table.len(), 404);
        clock.advance(std::time::Duration::from_millis(1));
        // Requests to one live entry only: each sweep takes the next shard in turn.
        for _ in 0..4 * 1024 {
            let now = table.now_us();
            assert!(table.lock([1_000_000]).state(1_000_000, now).is_some());
        }
        assert_eq!(table.len(), 4);
    }

    #[test]
    fn a_full_shard_drops_the_expired_then_the_entries_closest_to_expiry() {
        let table = Table::with_shards(4, 1, None);
        put(&table, [1, 2], 10);
        put(&table, [3, 4, 5], 1_000);
        // Full: one of the two closest to expiry went, the others stay.
        let mut locked = table.lock([1]);
        let live =
            |l: &mut Locked<'_>, now| (1..=6).filter(|&id| l.state(id, now).is_some()).count();
        assert_eq!(live(&mut locked, 0), 4);
        assert!((3..=5).all(|id| locked.state(id, 0).is_some()));
        // Full again, past the first deadlines: the expired one goes, nothing live.
        locked.apply(6, Commit::Replace(state(6), 2_000), 20, "");
        assert_eq!(live(&mut locked, 20), 4);
        drop(locked);
        assert_eq!(table.len(), 4);
    }

    #[test]
    fn the_bound_holds_over_every_shard() {
        let table = Table::new(1_000, None);
        assert!(table.shards.len().is_power_of_two() && table.shards.len() <= 1_000 / MIN_SHARE);
        put(&table, ids(&table, 0..20_000), 1 << 40);
        assert!(table.len() <= 1_000, "{}", table.len());
        // A small table is one shard: its bound and eviction order are the whole table's.
        assert_eq!(Table::new(127, None).shards.len(), 1);
    }
}
