//! [`HotLeases`]: a [`RedisLimiter`](crate::rate_limit::RedisLimiter)'s blocks of leased quota,
//! per rule and key, and the requests it admits from them in process.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::Shared;

use super::{OPEN_COUNT_TTL_MS, RESERVE, lease_us};
use crate::backend::{BackendError, ExpiringTable, RedisBackend, ScriptCall};
use crate::prehashed::KeyedHash;
use crate::rate_limit::Key;
use crate::rate_limit::algorithm::{RuleState, ceil_ms};
use crate::rate_limit::limiter::{BoxFuture, Check, LimiterFuture};
use crate::rate_limit::redis::script_reply::ints;

/// How many keys one limiter tracks for leasing at most; past it, the keys seen least recently
/// are forgotten first (their blocks given back).
const CAPACITY: usize = 10_000;

/// A table entry's key: a rule's name and a client key.
type Id = (Arc<str>, Key);

/// The hot keys of one limiter and their blocks.
pub(crate) struct HotLeases {
    backend: RedisBackend,
    /// The origin of the lease clock (µs since it, plus the backend's test shift).
    origin: Instant,
    table: Mutex<Table>,
}

struct Table {
    entries: ExpiringTable<Id, Entry, KeyedHash>,
    next_id: u64,
}

/// One key of one rule, as this replica sees it.
#[derive(Default)]
struct Entry {
    /// Start of the current interval (a lease long, lease clock µs), the units asked for in it,
    /// and in the interval before.
    since: u64,
    seen: u64,
    before: u64,
    block: Option<Block>,
    /// The reservation in flight, if any.
    reserving: Option<u64>,
    /// Redis denied the last reservation: until then (lease clock), requests go to Redis one
    /// by one, through the deny cache.
    cool_until: u64,
    /// The give-back of the key's block whose lease ended, started by the lease's end: the
    /// key's next requests wait for it to land, so that Redis decides them with its units.
    returning: Option<Returning>,
}

/// A block's give-back that several requests may wait for.
type Returning = Shared<BoxFuture<()>>;

/// Units reserved on Redis that this replica admits from.
struct Block {
    id: u64,
    left: u64,
    /// End of the lease (lease clock µs).
    end: u64,
    /// What Redis had left beside the block when it was reserved.
    beyond: u64,
    /// When the TAT that the block left on Redis passes (lease clock µs).
    reset_at: u64,
    limit: u64,
    /// What its give-back needs: the keys, the emission interval, the block's size, the
    /// reservation's floor and Redis time (see `returns.lua`).
    keys: [String; 2],
    emission: u64,
    granted: u64,
    floor: i64,
    at: u64,
}

/// How a leased request goes on.
pub(crate) enum Leased {
    /// Admitted from a block.
    Now(RuleState),
    /// Decided by a reservation (after an ended block is given back).
    Reserve(LimiterFuture<RuleState>),
    /// Decided by Redis as any request, once an ended block's give-back (if any) has landed.
    Normal(Option<BoxFuture<()>>),
}

impl std::fmt::Debug for HotLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotLeases")
            .field("keys", &self.lock().entries.len())
            .finish_non_exhaustive()
    }
}

impl HotLeases {
    pub(crate) fn new(backend: &RedisBackend) -> Self {
        Self {
            backend: backend.clone(),
            origin: Instant::now(),
            table: Mutex::new(Table {
                entries: ExpiringTable::new(CAPACITY),
                next_id: 0,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lease clock, µs: Redis time as this process counts it (the test seams' frozen
    /// time when set).
    fn now(&self) -> u64 {
        self.backend.frozen_us().unwrap_or_else(|| {
            u64::try_from(self.origin.elapsed().as_micros())
                .unwrap_or(u64::MAX)
                .saturating_add(self.backend.shift_us())
        })
    }

    /// How `check` (the only check of its request, of a leased rule) is decided. `names`
    /// gives the key's state and open-count keys on Redis, asked for only to reserve.
    pub(crate) fn take(
        self: &Arc<Self>,
        check: &Check,
        names: impl FnOnce() -> [String; 2],
    ) -> Leased {
        let Some(max) = check.rule.max_block() else {
            return Leased::Normal(None);
        };
        let p = check.params(check.cost);
        let cost = p.cost;
        if cost == 0 || check.varying {
            return Leased::Normal(None);
        }
        let lease = lease_us(p.period_us);
        let now = self.now();
        let id: Id = (Arc::clone(check.rule.name_arc()), check.key.clone());
        let mut locked = self.lock();
        // One lookup for a known key: the request counted and admitted from the key's block when
        // that is live and has room. Else the key's own ended block comes out, to go back before
        // its request is decided, not in a task with the ones the table forgets.
        let first = locked.entries.update(&id, |entry, deadline| {
            let Some(block) = (entry.block.as_mut()).filter(|b| now < b.end && b.left >= cost)
            else {
                let own = entry.block.take_if(|b| now >= b.end);
                return (deadline, Err((own, returning(entry))));
            };
            block.left -= cost;
            let state = block.state(now, p.emission_us);
            let end = block.end.max(now + 2 * lease);
            entry.count(now, lease, cost);
            (end, Ok(state))
        });
        let mut gone = Vec::new();
        locked
            .entries
            .maintain(now, |_, e: Entry| gone.extend(e.block));
        self.detach(gone);
        let own = match first {
            Some(Ok(state)) => return Leased::Now(state),
            Some(Err((own, Some(returning)))) => {
                // Decided once the ended block is back, as after its own give-back below.
                drop(locked);
                let backend = self.backend.clone();
                return Leased::Normal(Some(Box::pin(async move {
                    returning.await;
                    if let Some(block) = own {
                        give_back(backend, block).await;
                    }
                })));
            }
            Some(Err((own, None))) => own,
            None => None,
        };
        let table = &mut *locked;
        if table.entries.get_mut(&id).is_none() {
            let fresh = Entry {
                since: now,
                ..Entry::default()
            };
            table.entries.insert(id.clone(), fresh, now);
        }
        let next_id = table.next_id;
        let Some(entry) = table.entries.get_mut(&id) else {
            return Leased::Normal(None);
        };
        let rate = entry.count(now, lease, cost);
        // Ended, or too little left for this request: what is left goes back first.
        let ended = entry.block.take().or(own);
        let hot = rate >= 2 * cost;
        if !hot || entry.reserving.is_some() || now < entry.cool_until {
            table.entries.set_deadline(&id, now + 2 * lease);
            let backend = self.backend.clone();
            return Leased::Normal(
                ended.map(|b| -> BoxFuture<()> { Box::pin(give_back(backend, b)) }),
            );
        }
        entry.reserving = Some(next_id);
        table.next_id += 1;
        table.entries.set_deadline(&id, now + 2 * lease);
        drop(locked);
        let guard = Reserving {
            leases: Arc::clone(self),
            id,
            reservation: next_id,
        };
        let keys = names();
        let k = rate.clamp(2 * cost, max.max(2 * cost));
        let (burst, emission, limit) = (p.burst, p.emission_us, p.limit);
        Leased::Reserve(Box::pin(async move {
            let backend = guard.leases.backend.clone();
            // The ended block goes back in the same call.
            let call = reserve(&backend, &keys, [burst, emission, cost, k], ended.as_ref());
            let ([granted, remaining, retry, reset, at], floor) = parse(&call.run().await?)?;
            let block = Block {
                id: 0,
                left: granted.saturating_sub(cost),
                end: 0,
                beyond: remaining,
                reset_at: reset,
                limit,
                keys,
                emission,
                granted,
                floor,
                at,
            };
            Ok(guard.reserved(block, retry, lease))
        }))
    }

    /// Spawns the give-back of `blocks` (forgotten by the table), on the current runtime.
    fn detach(&self, blocks: Vec<Block>) {
        if blocks.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for block in blocks {
            runtime.spawn(give_back(self.backend.clone(), block));
        }
    }

    /// Takes block `block` of `id` out of the table, if it is still there, for its give-back,
    /// which the key's requests wait for until it lands (it starts when first polled).
    fn close(&self, id: &Id, block: u64) -> Option<Returning> {
        let mut table = self.lock();
        let entry = table.entries.get_mut(id)?;
        let block = entry.block.take_if(|b| b.id == block)?;
        let back: BoxFuture<()> = Box::pin(give_back(self.backend.clone(), block));
        let back = back.shared();
        entry.returning = Some(back.clone());
        Some(back)
    }

    /// Gives block `block` of `id` back when its lease ends (lease clock `end`), unless a
    /// request or the table has done so first.
    fn give_back_at_end(self: &Arc<Self>, id: Id, block: u64, end: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let leases = Arc::downgrade(self);
        runtime.spawn(async move {
            loop {
                let wait = {
                    let Some(leases) = Weak::upgrade(&leases) else {
                        return;
                    };
                    let now = leases.now();
                    if now >= end {
                        if let Some(back) = leases.close(&id, block) {
                            back.await;
                        }
                        return;
                    }
                    end - now
                };
                // The lease clock runs with real time, except under a test's frozen clock.
                tokio::time::sleep(Duration::from_micros(wait)).await;
            }
        });
    }
}

/// A reservation in flight; dropped (the request gone, or Redis failing) it lets the next
/// request reserve.
struct Reserving {
    leases: Arc<HotLeases>,
    id: Id,
    reservation: u64,
}

impl Reserving {
    /// Records what Redis reserved (`block`: its id and end still to set, its reset still from
    /// now), and decides the request that asked (`retry_us`: its wait when denied).
    fn reserved(&self, mut block: Block, retry_us: u64, lease: u64) -> RuleState {
        let leases = &self.leases;
        let now = leases.now();
        let mut locked = leases.lock();
        let table = &mut *locked;
        if block.granted == 0 {
            if let Some(entry) = table.entries.get_mut(&self.id) {
                entry.cool_until = now.saturating_add(retry_us);
            }
            return RuleState::from_parts(
                false,
                block.limit,
                block.beyond,
                ceil_ms(retry_us),
                ceil_ms(block.reset_at),
            );
        }
        block.id = table.next_id;
        table.next_id += 1;
        block.end = now + lease;
        block.reset_at = now.saturating_add(block.reset_at);
        let state = block.state(now, block.emission);
        let (id, end) = (block.id, block.end);
        let Some(entry) = table.entries.get_mut(&self.id) else {
            // Forgotten meanwhile (a full table): nothing to admit from.
            drop(locked);
            leases.detach(vec![block]);
            return state;
        };
        let previous = entry.block.replace(block);
        table
            .entries
            .set_deadline(&self.id, end.max(now + 2 * lease));
        drop(locked);
        leases.detach(previous.into_iter().collect());
        leases.give_back_at_end(self.id.clone(), id, end);
        state
    }
}

impl Drop for Reserving {
    fn drop(&mut self) {
        let mut table = self.leases.lock();
        if let Some(entry) = table.entries.get_mut(&self.id)
            && entry.reserving == Some(self.reservation)
        {
            entry.reserving = None;
        }
    }
}

/// The give-back of `entry`'s ended block, while it has not landed.
fn returning(entry: &mut Entry) -> Option<Returning> {
    entry.returning.take_if(|back| back.peek().is_some());
    entry.returning.clone()
}

impl Entry {
    /// Counts `cost` units asked for at `now` into the key's intervals (`lease` µs long), and
    /// returns what this replica asks of the key over a lease: its local rate × the lease.
    fn count(&mut self, now: u64, lease: u64, cost: u64) -> u64 {
        if now >= self.since.saturating_add(2 * lease) {
            (self.since, self.seen, self.before) = (now, 0, 0);
        } else if now >= self.since + lease {
            (self.since, self.seen, self.before) = (self.since + lease, 0, self.seen);
        }
        self.seen += cost;
        self.before.max(self.seen)
    }
}

impl Block {
    /// The state of a request just admitted from the block at `now`: what Redis had left
    /// beside it, plus what is left of it; the reset as if its unused units were back.
    fn state(&self, now: u64, emission: u64) -> RuleState {
        let reset = self
            .reset_at
            .saturating_sub(self.left.saturating_mul(emission))
            .saturating_sub(now);
        RuleState::from_parts(true, self.limit, self.beyond + self.left, 0, ceil_ms(reset))
    }
}

impl Drop for HotLeases {
    fn drop(&mut self) {
        // The last clone of the limiter is gone: give its open blocks back (best effort).
        let table = self.table.get_mut().unwrap_or_else(PoisonError::into_inner);
        let mut blocks = Vec::new();
        while let Some((_, entry)) = table.entries.pop_first() {
            blocks.extend(entry.block);
        }
        self.detach(blocks);
    }
}

/// Gives `block`'s unused units back (`reserve.lua`, reserving nothing); a failure leaves them
/// used.
async fn give_back(backend: RedisBackend, block: Block) {
    let (keys, emission) = (&block.keys, block.emission);
    let call = reserve(&backend, keys, [0, emission, 0, 0], Some(&block));
    if let Err(e) = call.run().await {
        tracing::debug!(error = %e, "giving a leased block back failed; its units stay used");
    }
}

/// A call of `reserve.lua` on `keys`: a block of up to `k` units (0: none) for a request of
/// `cost`, after the give-back of `ended`'s unused units, if any.
fn reserve<'a>(
    backend: &'a RedisBackend,
    keys: &[String; 2],
    [burst, emission, cost, k]: [u64; 4],
    ended: Option<&Block>,
) -> ScriptCall<'a> {
    let ended = ended.map_or((0, 0, 0, 0), |b| (b.granted, b.left, b.floor, b.at));
    let mut call = backend.script(&RESERVE, keys);
    call.arg(&[burst, emission, cost, k, OPEN_COUNT_TTL_MS][..])
        .arg(ended);
    call
}

/// Parses `reserve.lua`'s reply: the block, what Redis has left, the retry and reset (µs),
/// the Redis time; then the floor.
fn parse(reply: &redis::Value) -> Result<([u64; 5], i64), BackendError> {
    let v = ints::<i64, 6>(reply, "lease reservation")?;
    let mut out = [0; 5];
    for (o, i) in out.iter_mut().zip(v) {
        *o = u64::try_from(i)
            .map_err(|_| BackendError::BadReply(format!("lease reservation: {reply:?}")))?;
    }
    Ok((out, v[5]))
}

#[cfg(test)]
mod tests {
    use redis_guard_testkit::RedisServer;

    use super::*;
    use crate::backend::RedisConnection;
    use crate::rate_limit::{Quota, RedisLimiter, Rule};

    /// A request that arrives while its key's ended block is on its way back (given back by
    /// the lease's end, not yet landed) waits for it: Redis decides it with the block's unused
    /// unit back, as if the block had never been reserved.
    #[tokio::test]
    async fn a_request_waits_for_its_keys_block_to_come_back() {
        let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        let conn = RedisConnection::open(&server.url()).await.unwrap();
        let limiter = RedisLimiter::new(conn);
        let rule = Rule::new("hot", Quota::per_hour(100)).leased(10);
        // The first request is decided on Redis; the second, the key now busy, reserves a block
        // of two units and takes one.
        for remaining in [99, 98] {
            let d = limiter.check(&rule, Key::from("k")).await.unwrap();
            assert_eq!(d.remaining, remaining);
        }
        let leases = &limiter.leases;
        let id: Id = (Arc::clone(rule.name_arc()), Key::from("k"));
        let block = leases.lock().entries.get_mut(&id).and_then(|e| {
            let block = e.block.as_ref()?;
            Some((block.id, block.left))
        });
        let (block, left) = block.expect("a block reserved");
        assert_eq!(left, 1);
        // The lease ends: its give-back is taken out of the table, and not sent yet.
        let back = leases.close(&id, block).expect("the block closed");
        let d = limiter.check(&rule, Key::from("k")).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 97, "three used, the unused unit back");
        assert!(back.peek().is_some(), "the request drove the give-back");
    }
}
