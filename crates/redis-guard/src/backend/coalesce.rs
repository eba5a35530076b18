//! Coalescing: the calls that arrive while one is in flight go to Redis together, as one
//! `EVALSHA` that runs them in order (or, for another [`Form`], one transaction).
//!
//! On Redis 7 the fixed cost of running a script (looking it up, setting up the interpreter,
//! converting arguments and the reply) is several times what a small script's own commands cost
//! (see docs/benchmarks.md). One call that carries many entries pays it once. The entries of a
//! call run one after the other inside one script, so each is exactly as atomic as it would be
//! alone, and the order between them is the order they were queued in.
//!
//! A coalesced script takes its entries in this form (after the time shift the backend puts in
//! ARGV[1]):
//!
//! ```text
//! KEYS     every entry's keys, entry after entry
//! ARGV[2]  the number of entries
//! ARGV     then, per entry: its key count, its argument count, its arguments
//! reply    an array with one reply per entry, in order; a string in an entry's place is the
//!          error that entry failed with (e.g. `WRONGTYPE …`), the others stand
//! ```
//!
//! A flat reply ([`replies`]) is instead one array of every entry's values, one after the
//! other (each entry's reply has as many as [`Entry::reply_len`] says, or is one string, its
//! error): Redis converts each table of a script's reply at a cost several times that of an
//! integer, so the lean GCRA script sends one table, not one per entry.
//!
//! A call's [`Form`] says how it carries its entries: a script in the batch form above
//! ([`Script`], the default), or another shape with the same queues, batch limit, breaker and
//! timeout (the fixed window's `MULTI` of plain commands).
//!
//! A request never waits for company: while fewer than [`IN_FLIGHT`] calls are out, it goes at
//! once, in a call of its own, made by its own future (a caller that takes the room first,
//! [`Coalescer::room`], makes that call itself, with nothing of the coalescer around it; on a
//! single Redis, taking that room and giving it back are one atomic step each, no lock).
//! Otherwise it joins the newest batch
//! waiting for room (or starts one), and parks. When a call returns, the caller that made it
//! hands the room to the oldest waiting batch: one of that batch's waiters makes its call, in
//! its own future, and every waiter takes its reply from the batch. No task, channel or timer
//! stands between a request and Redis; a batch costs one allocation for all its entries.
//!
//! A batch's call runs within the backend's timeout counted from the moment the batch was
//! started: a batch waits only for calls that started before it, each bounded by its own
//! deadline, so a queued request is answered within about one timeout, as one sent alone. A
//! request dropped while its batch waits is left out of the call (nothing is counted for a
//! request that got no answer); one dropped while its future makes the call hands the call to
//! the runtime, which finishes it for the other waiters.
//!
//! On a Redis Cluster the keys of one call must share a hash slot, so there is one queue per
//! slot: the entries of one slot go together to the master that serves it, as they do on a
//! single Redis, each slot with its own calls in flight. An entry whose keys span slots goes
//! alone. A slot's queue exists only while it has calls out (slot 0's, a single Redis' one,
//! stays), and at most [`MAX_QUEUES`] exist at once (an entry of another slot then goes
//! alone), so a limiter that sees every slot keeps a bounded number of them.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use redis::Value;
use tokio::time::Instant;

use super::{BackendError, BreakerState, LuaScript, RedisBackend, ScriptCall};

/// Per entry of a call, in order: its reply, or the error it alone failed with.
pub(crate) type Replies<R = Value> = Vec<Result<R, BackendError>>;

/// How one coalesced call carries its entries to Redis, and hands each its reply.
pub(crate) trait Form<E>: Clone + Send + Sync + 'static {
    /// What one entry gets back: a [`Value`], or the few numbers a plain form reads from it.
    type Reply: Send + 'static;

    /// The keys of `entry`: they pick its queue (its hash slot, on a cluster) and its master's
    /// circuit.
    fn keys(entry: &E) -> &[String];

    /// One call for `entries` (one or more, sharing a slot on a cluster), answered by
    /// `deadline` (`None`: the backend's timeout from now): per entry, in order, its reply or
    /// its own error; an error of the call itself fails every entry.
    fn call(
        &self,
        backend: &RedisBackend,
        entries: &[&E],
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<Replies<Self::Reply>, BackendError>> + Send;

    /// [`call`](Self::call) for one entry sent alone: its reply, or its error. A form whose
    /// call of one entry needs no list of replies answers it directly.
    fn call_one(
        &self,
        backend: &RedisBackend,
        entry: &E,
    ) -> impl Future<Output = Result<Self::Reply, BackendError>> + Send
    where
        E: Sync,
    {
        async move { only(self.call(backend, &[entry], None).await?) }
    }
}

/// The default [`Form`]: one `EVALSHA` of a script that takes the batch form above.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Script {
    script: &'static LuaScript,
}

impl<E: Entry> Form<E> for Script {
    type Reply = Value;

    fn keys(entry: &E) -> &[String] {
        entry.keys()
    }

    async fn call(
        &self,
        backend: &RedisBackend,
        entries: &[&E],
        deadline: Option<Instant>,
    ) -> Result<Replies, BackendError> {
        run_script(backend, self.script, entries, deadline).await
    }
}

/// Default for how many entries one coalesced call may carry.
pub(crate) const DEFAULT_BATCH: usize = 64;

/// How many coalesced calls may be out at once: while Redis runs one, the next is on its way.
const IN_FLIGHT: usize = 2;

/// The seats a new batch makes room for.
const FIRST_SEATS: usize = 4;

/// The most queues (hash slots being coalesced, on a cluster) at once.
const MAX_QUEUES: usize = 1024;

/// What one caller asks of a coalesced script: its keys and its arguments, which it writes
/// straight into the call.
pub(crate) trait Entry: Send + Sync + 'static {
    /// The entry's keys.
    fn keys(&self) -> &[String];
    /// How many arguments [`write_args`](Self::write_args) writes.
    fn arg_count(&self) -> usize;
    /// Appends the entry's arguments to `call`.
    fn write_args(&self, call: &mut ScriptCall<'_>);
    /// How many values the entry's reply takes in a flat reply (see [`replies`]).
    fn reply_len(&self) -> usize {
        1
    }
}

/// The queues by hash slot (slot 0 on a single Redis), each present while it has calls out
/// (slot 0's always).
struct Queues<E, R> {
    /// Slot 0's gate, also in its queue: a call sent straight on a single Redis takes its room
    /// and gives it back here, without the lock, while no batch of slot 0 waits.
    zero: Arc<Gate>,
    slots: Mutex<HashMap<u16, Queue<E, R>, BuildHasherDefault<SlotHasher>>>,
}

impl<E, R> Default for Queues<E, R> {
    fn default() -> Self {
        let zero = Arc::new(Gate::default());
        let mut slots = HashMap::default();
        slots.insert(0, Queue::new(Arc::clone(&zero)));
        Self {
            zero,
            slots: Mutex::new(slots),
        }
    }
}

/// One slot's calls: how many are out (its gate), and the batches waiting for room, oldest
/// first.
struct Queue<E, R> {
    gate: Arc<Gate>,
    waiting: VecDeque<Arc<Batch<E, R>>>,
}

impl<E, R> Queue<E, R> {
    fn new(gate: Arc<Gate>) -> Self {
        Self {
            gate,
            waiting: VecDeque::new(),
        }
    }
}

/// A slot's calls out (the low bits) and whether batches of it wait ([`WAITING`]), in one word:
/// room is taken while fewer than [`IN_FLIGHT`] are out and nobody waits, in one atomic step.
/// The flag is set and cleared only under the queues' lock, with the batches it stands for;
/// while it is set, calls out give their room back under the lock too, to the oldest batch.
#[derive(Debug, Default)]
struct Gate(AtomicUsize);

/// [`Gate`]'s flag: batches wait.
const WAITING: usize = 1 << (usize::BITS - 1);

impl Gate {
    /// Takes room for a call when there is some and no batch waits.
    fn take(&self) -> bool {
        // With the flag set the word is above any count, so one comparison says both.
        self.update(|g| (g < IN_FLIGHT).then_some(g + 1))
    }

    /// Under the lock: takes room for a call when there is some and no batch waits, else sets
    /// the flag (the caller queues a batch). Whether room was taken.
    fn take_or_wait(&self) -> bool {
        let before = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |g| {
                Some(if g < IN_FLIGHT { g + 1 } else { g | WAITING })
            });
        before.is_ok_and(|g| g < IN_FLIGHT)
    }

    /// Under the lock: takes room for a waiting batch when there is some.
    fn take_for_batch(&self) -> bool {
        self.update(|g| ((g & !WAITING) < IN_FLIGHT).then_some(g + 1))
    }

    /// Gives one call's room back, unless batches wait (which take it under the lock).
    fn give_back(&self) -> bool {
        self.update(|g| (g & WAITING == 0).then(|| g.saturating_sub(1)))
    }

    /// Under the lock: gives one call's room back, whether batches wait or not.
    fn leave(&self) {
        let _ = self.update(|g| Some(if g & !WAITING == 0 { g } else { g - 1 }));
    }

    /// Under the lock: no batch waits any more.
    fn none_waiting(&self) {
        self.0.fetch_and(!WAITING, Ordering::AcqRel);
    }

    /// Whether no call is out and no batch waits.
    fn idle(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }

    fn update(&self, f: impl FnMut(usize) -> Option<usize>) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, f)
            .is_ok()
    }
}

/// Entries waiting to go to Redis in one call, and then their replies.
struct Batch<E, R> {
    /// When the batch's call must have been answered: the backend's timeout from its start.
    deadline: Instant,
    state: Mutex<BatchState<E, R>>,
}

struct BatchState<E, R> {
    phase: Phase,
    seats: Vec<Seat<E, R>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for room: entries may still join.
    Waiting,
    /// Given room (counted in flight): the next waiter to be polled makes the call.
    Go,
    /// Its call is being made.
    Calling,
    /// Every live waiter has its reply, or the batch was abandoned.
    Done,
}

/// One caller's place in a batch.
struct Seat<E, R> {
    /// The entry, until the call takes it; `None` once its caller gave up.
    entry: Option<E>,
    /// Whether the caller still waits.
    live: bool,
    waker: Option<Waker>,
    reply: Option<Result<R, BackendError>>,
}

/// Runs one script (or another [`Form`] of call) for many callers, coalescing what arrives
/// while calls are in flight.
pub(crate) struct Coalescer<E, F: Form<E> = Script> {
    backend: RedisBackend,
    form: F,
    max: usize,
    queues: Arc<Queues<E, F::Reply>>,
}

impl<E: Entry> Coalescer<E> {
    /// A coalescer of `script` (which takes the batch form above) on `backend`, carrying at most
    /// `max` entries per call (`max` ≤ 1: no coalescing).
    pub(crate) fn new(backend: RedisBackend, script: &'static LuaScript, max: usize) -> Self {
        Self::with_form(backend, Script { script }, max)
    }
}

impl<E: Send + Sync + 'static, F: Form<E>> Coalescer<E, F> {
    /// A coalescer whose calls take `form`, on `backend`, carrying at most `max` entries per
    /// call (`max` ≤ 1: no coalescing).
    pub(crate) fn with_form(backend: RedisBackend, form: F, max: usize) -> Self {
        Self {
            backend,
            form,
            max,
            queues: Arc::default(),
        }
    }

    /// How many entries one call may carry.
    #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// The backend the calls go to.
    #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
    pub(crate) fn backend(&self) -> &RedisBackend {
        &self.backend
    }

    /// Makes the call for `entry` and returns the entry's reply, within the backend's timeout
    /// counted from now (so from the moment the entry is queued).
    pub(crate) async fn call(&self, entry: E) -> Result<F::Reply, BackendError> {
        let slot = match self.slot_of(&entry) {
            Some(slot) if self.max > 1 => slot,
            _ => return Box::pin(self.alone(entry)).await,
        };
        // A call made here is boxed: the requests that wait in a batch (most of them, under
        // load) keep a small future.
        match self.join(slot, entry) {
            Joined::Refused => Err(BackendError::CircuitOpen),
            Joined::Room(entry) => {
                let _out = Out {
                    queues: &self.queues,
                    slot,
                };
                Box::pin(self.alone(entry)).await
            }
            Joined::Untracked(entry) => Box::pin(self.alone(entry)).await,
            Joined::Batch(batch, seat) => {
                Waiter {
                    coalescer: self,
                    slot,
                    batch,
                    seat,
                    calling: None,
                }
                .await
            }
        }
    }

    /// One entry in a call of its own.
    async fn alone(&self, entry: E) -> Result<F::Reply, BackendError> {
        self.form.call_one(&self.backend, &entry).await
    }

    /// Makes the call of `entry` in the `room` taken for it, alone, and gives the room back.
    #[cfg_attr(not(any(feature = "rate-limit", feature = "cache")), allow(dead_code))]
    pub(crate) async fn call_in(
        &self,
        room: Room<E, F::Reply>,
        entry: E,
    ) -> Result<F::Reply, BackendError> {
        let reply = self.form.call_one(&self.backend, &entry).await;
        drop(room);
        reply
    }

    /// Room for a call of its own on a single Redis, taken now, when there is some and no batch
    /// waits for it (or when nothing coalesces): its holder makes its call straight, with no
    /// batch and no future of the coalescer around it, and gives the room back when it drops
    /// it. Taking it and giving it back are one atomic step each. `None` (always on a cluster,
    /// whose entries queue by slot): [`call`](Self::call) queues the entry.
    pub(crate) fn room(&self) -> Option<Room<E, F::Reply>> {
        if self.max <= 1 {
            return Some(Room(None));
        }
        if self.backend.connection().is_cluster() || !self.queues.zero.take() {
            return None;
        }
        Some(Room(Some(Arc::clone(&self.queues))))
    }

    /// The queue `entry` may join: 0 on a single Redis; on a cluster its keys' hash slot, or
    /// `None` when they span slots.
    fn slot_of(&self, entry: &E) -> Option<u16> {
        if !self.backend.connection().is_cluster() {
            return Some(0);
        }
        #[cfg(feature = "cluster")]
        return super::slot::shared_slot(F::keys(entry));
        #[cfg(not(feature = "cluster"))]
        {
            // No cluster without the feature: unreachable in practice.
            let _ = entry;
            None
        }
    }

    /// Takes room for `entry` in `slot` when there is some and no batch waits for it, else a
    /// seat in the newest waiting batch (a new one when it is full).
    fn join(&self, slot: u16, entry: E) -> Joined<E, F::Reply> {
        let mut slots = lock(&self.queues.slots);
        let Some(queue) = queue(&mut slots, slot) else {
            return Joined::Untracked(entry);
        };
        if queue.gate.take() {
            return Joined::Room(entry);
        }
        // While the circuit of the entry's master is open (and no probe is due), a queued entry
        // would only be refused after waiting for room. Refuse it here. (Half-open: the entry
        // queues, and its call may be the probe. An entry sent at once meets the breaker in
        // its call.)
        let first = F::keys(&entry).first().map(String::as_str);
        if self.backend.breaker_state_of(first) == BreakerState::Open {
            return Joined::Refused;
        }
        // A call that ended since gave its room back: take it; else the gate says batches wait.
        if queue.gate.take_or_wait() {
            return Joined::Room(entry);
        }
        let mut entry = Some(entry);
        if let Some(batch) = queue.waiting.back() {
            let mut state = lock(&batch.state);
            if state.phase == Phase::Waiting && state.seats.len() < self.max {
                state.seats.push(Seat::new(entry.take()));
                let seat = state.seats.len() - 1;
                drop(state);
                return Joined::Batch(Arc::clone(batch), seat);
            }
        }
        // Room for a few: a batch of two or three (a handful of requests in flight) does not
        // pay for a full one; a batch that fills grows a few times per call.
        let mut seats = Vec::with_capacity(self.max.min(FIRST_SEATS));
        seats.push(Seat::new(entry.take()));
        let batch = Arc::new(Batch {
            deadline: Instant::now() + self.backend.call_timeout(),
            state: Mutex::new(BatchState {
                phase: Phase::Waiting,
                seats,
            }),
        });
        queue.waiting.push_back(Arc::clone(&batch));
        Joined::Batch(batch, 0)
    }
}

/// The queue of `slot`, made when it has none, unless [`MAX_QUEUES`] exist.
fn queue<E, R>(
    queues: &mut HashMap<u16, Queue<E, R>, BuildHasherDefault<SlotHasher>>,
    slot: u16,
) -> Option<&mut Queue<E, R>> {
    let full = queues.len() >= MAX_QUEUES;
    match queues.entry(slot) {
        std::collections::hash_map::Entry::Occupied(queue) => Some(queue.into_mut()),
        std::collections::hash_map::Entry::Vacant(_) if full => None,
        std::collections::hash_map::Entry::Vacant(vacant) => {
            Some(vacant.insert(Queue::new(Arc::default())))
        }
    }
}

/// Where [`Coalescer::join`] put an entry.
enum Joined<E, R> {
    /// Room in flight, taken: the caller makes its call now, and gives the room back.
    Room(E),
    /// No room for another queue: the caller makes its call, uncounted.
    Untracked(E),
    /// A seat in a waiting batch.
    Batch(Arc<Batch<E, R>>, usize),
    /// No room, and the circuit is open: refused at once.
    Refused,
}

impl<E, R> Seat<E, R> {
    fn new(entry: Option<E>) -> Self {
        Self {
            entry,
            live: true,
            waker: None,
            reply: None,
        }
    }
}

/// One call's room in slot 0 taken by [`Coalescer::room`], given back when dropped (`None`:
/// nothing coalesces, nothing to give back).
pub(crate) struct Room<E, R>(Option<Arc<Queues<E, R>>>);

impl<E, R> Drop for Room<E, R> {
    fn drop(&mut self) {
        if let Some(queues) = &self.0 {
            release(queues, 0);
        }
    }
}

/// Gives back one call's room in `slot` when dropped: the call returned, or its caller gave up.
struct Out<'a, E, R> {
    queues: &'a Queues<E, R>,
    slot: u16,
}

impl<E, R> Drop for Out<'_, E, R> {
    fn drop(&mut self) {
        release(self.queues, self.slot);
    }
}

/// One call of `slot` has ended: its room goes to the oldest waiting batch that still has a
/// caller, whose next polled waiter makes the call; the queue goes when nothing is left in it
/// (but slot 0's). While no batch of slot 0 waits, its room is given back without the lock.
fn release<E, R>(queues: &Queues<E, R>, slot: u16) {
    if slot == 0 && queues.zero.give_back() {
        return;
    }
    let mut slots = lock(&queues.slots);
    let Some(queue) = slots.get_mut(&slot) else {
        return;
    };
    queue.gate.leave();
    while !queue.waiting.is_empty() && queue.gate.take_for_batch() {
        let Some(batch) = queue.waiting.pop_front() else {
            queue.gate.leave();
            break;
        };
        let mut state = lock(&batch.state);
        let Some(seat) = state.seats.iter_mut().find(|s| s.live) else {
            // Every caller gave up: nothing to send.
            state.phase = Phase::Done;
            queue.gate.leave();
            continue;
        };
        let waker = seat.waker.take();
        state.phase = Phase::Go;
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
    if queue.waiting.is_empty() {
        queue.gate.none_waiting();
        // Slot 0's queue (a single Redis has no other) stays.
        if slot != 0 && queue.gate.idle() {
            slots.remove(&slot);
        }
    }
}

/// A caller parked on its batch's seat: it waits for room, makes the batch's call if it is the
/// first polled once room is given, and returns its own reply.
struct Waiter<'a, E, F: Form<E>> {
    coalescer: &'a Coalescer<E, F>,
    slot: u16,
    batch: Arc<Batch<E, F::Reply>>,
    seat: usize,
    /// The batch's call, while this waiter makes it.
    calling: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl<E: Send + Sync + 'static, F: Form<E>> Future for Waiter<'_, E, F> {
    type Output = Result<F::Reply, BackendError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            if let Some(calling) = &mut this.calling
                && calling.as_mut().poll(cx).is_ready()
            {
                this.calling = None;
            }
            let mut state = lock(&this.batch.state);
            if let Some(reply) = state.seats[this.seat].reply.take() {
                state.seats[this.seat].live = false;
                return Poll::Ready(reply);
            }
            match state.phase {
                Phase::Go => {
                    state.phase = Phase::Calling;
                    let entries: Vec<(usize, E)> = state
                        .seats
                        .iter_mut()
                        .enumerate()
                        .filter_map(|(i, s)| Some((i, s.entry.take()?)))
                        .collect();
                    drop(state);
                    this.calling = Some(Box::pin(call_batch(
                        this.coalescer.backend.clone(),
                        this.coalescer.form.clone(),
                        Arc::clone(&this.coalescer.queues),
                        this.slot,
                        Arc::clone(&this.batch),
                        entries,
                    )));
                }
                Phase::Done => {
                    // Abandoned with no reply for this seat: cannot happen while it waits.
                    return Poll::Ready(Err(stopped()));
                }
                Phase::Waiting | Phase::Calling => {
                    let waker = &mut state.seats[this.seat].waker;
                    match waker {
                        Some(w) if w.will_wake(cx.waker()) => {}
                        _ => *waker = Some(cx.waker().clone()),
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl<E, F: Form<E>> Drop for Waiter<'_, E, F> {
    fn drop(&mut self) {
        if let Some(calling) = self.calling.take() {
            // The call is on its way: finish it for the other waiters, on the runtime if there
            // is one (else dropping it fails them with an error and gives the room back).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                drop(runtime.spawn(calling));
            }
            let mut state = lock(&self.batch.state);
            state.seats[self.seat].live = false;
            return;
        }
        let mut state = lock(&self.batch.state);
        let seat = &mut state.seats[self.seat];
        if !seat.live {
            return;
        }
        seat.live = false;
        seat.entry = None;
        seat.waker = None;
        if state.phase != Phase::Go {
            return;
        }
        // The room was given to this batch, maybe with this waiter to make its call: another
        // waiter makes it, or, with none left, the room goes back.
        if let Some(next) = state.seats.iter_mut().find(|s| s.live) {
            if let Some(waker) = next.waker.take() {
                waker.wake();
            }
            return;
        }
        state.phase = Phase::Done;
        drop(state);
        release(&self.coalescer.queues, self.slot);
    }
}

/// The call of a batch's `entries` (with their seats), made by one of its waiters: hands every
/// seat its reply (or the call's error), wakes the waiters, then gives the room back.
async fn call_batch<E: Send + Sync + 'static, F: Form<E>>(
    backend: RedisBackend,
    form: F,
    queues: Arc<Queues<E, F::Reply>>,
    slot: u16,
    batch: Arc<Batch<E, F::Reply>>,
    entries: Vec<(usize, E)>,
) {
    let mut ending = Ending {
        queues: &queues,
        slot,
        batch: &batch,
        replies: None,
    };
    let outcome = if Instant::now() >= batch.deadline {
        // The calls it waited for took the whole timeout: nothing is sent.
        Err(BackendError::Timeout(backend.call_timeout()))
    } else {
        let refs: Vec<&E> = entries.iter().map(|(_, e)| e).collect();
        form.call(&backend, &refs, Some(batch.deadline))
            .await
            .and_then(|replies| counted(replies, refs.len()))
    };
    let seats = entries.iter().map(|&(i, _)| i);
    ending.replies = Some(match outcome {
        Ok(replies) => seats.zip(replies).collect(),
        Err(e) => seats.map(|i| (i, Err(e.clone()))).collect(),
    });
}

/// Hands out a batch's replies and gives its room back, when its call ends, or fails its
/// waiters when the call is dropped before it ends (its runtime shut down).
struct Ending<'a, E, R> {
    queues: &'a Queues<E, R>,
    slot: u16,
    batch: &'a Batch<E, R>,
    replies: Option<Vec<(usize, Result<R, BackendError>)>>,
}

impl<E, R> Drop for Ending<'_, E, R> {
    fn drop(&mut self) {
        let mut wakers = Vec::new();
        let mut state = lock(&self.batch.state);
        state.phase = Phase::Done;
        let answered = self.replies.is_some();
        let replies = self.replies.take().unwrap_or_default();
        for (i, reply) in replies {
            let seat = &mut state.seats[i];
            if seat.live {
                seat.reply = Some(reply);
                wakers.extend(seat.waker.take());
            }
        }
        if !answered {
            for seat in state.seats.iter_mut().filter(|s| s.live) {
                seat.reply = Some(Err(stopped()));
                wakers.extend(seat.waker.take());
            }
        }
        drop(state);
        release(self.queues, self.slot);
        for waker in wakers {
            waker.wake();
        }
    }
}

/// The error of waiters whose batch's call was dropped before it ended.
fn stopped() -> BackendError {
    BackendError::Redis(redis::RedisError::from((
        redis::ErrorKind::Io,
        "the coalesced Redis call stopped before it ended (its runtime shut down)",
    )))
}

impl<E, F: Form<E>> fmt::Debug for Coalescer<E, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coalescer")
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

/// A lock whose data stays consistent even if a holder panicked.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The hash of a slot number (at most 16,384 of them, and at most [`MAX_QUEUES`] in the map):
/// the number itself.
#[derive(Default)]
struct SlotHasher(u64);

impl Hasher for SlotHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.0 = u64::from(n);
    }
}

/// Runs `script` (which takes the batch form) for `entry` alone, without a coalescer: for
/// scripts made at run time.
#[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
pub(crate) async fn call_alone<E: Entry>(
    backend: &RedisBackend,
    script: &LuaScript,
    entry: &E,
) -> Result<Value, BackendError> {
    only(run_script(backend, script, &[entry], None).await?)
}

/// The reply of a call's one entry.
fn only<R>(replies: Replies<R>) -> Result<R, BackendError> {
    counted(replies, 1)?
        .pop()
        .unwrap_or_else(|| Err(BackendError::BadReply("no reply".to_owned())))
}

/// `replies`, when there is one per entry of the `count` a call carried.
fn counted<R>(replies: Replies<R>, count: usize) -> Result<Replies<R>, BackendError> {
    if replies.len() == count {
        return Ok(replies);
    }
    Err(BackendError::BadReply(format!(
        "{} replies for {count} coalesced entries",
        replies.len()
    )))
}

/// One call of `script` for `entries`, answered by `deadline`.
async fn run_script<E: Entry>(
    backend: &RedisBackend,
    script: &LuaScript,
    entries: &[&E],
    deadline: Option<Instant>,
) -> Result<Replies, BackendError> {
    let mut call = batch(backend, script, entries);
    call.until(deadline);
    replies(call.run().await?, entries, false)
}

/// Per entry of a call that carried `entries`, its reply or its own error, from the call's
/// `reply` (`flat`: the script replies flat).
pub(crate) fn replies<E: Entry>(
    reply: Value,
    entries: &[&E],
    flat: bool,
) -> Result<Replies, BackendError> {
    if let ([entry], true) = (entries, flat)
        && let Value::Array(values) = &reply
        && values.len() == entry.reply_len().max(1)
        && !matches!(values[0], Value::BulkString(_) | Value::SimpleString(_))
    {
        // One entry's values, as they are: nothing to split.
        return Ok(vec![Ok(reply)]);
    }
    let replies = split_reply(reply, entries, flat)?;
    Ok(replies.into_iter().map(entry_reply).collect())
}

/// The call for `entries`: KEYS are every entry's keys, in order; ARGV after the time shift is
/// the entry count, then per entry its key count, its argument count and its arguments.
fn batch<'a, E: Entry>(
    backend: &'a RedisBackend,
    script: &'a LuaScript,
    entries: &[&E],
) -> ScriptCall<'a> {
    // The entry count, then per entry its two counts and its arguments (numbers, mostly: about
    // 8 bytes each).
    let args = 1 + entries.iter().map(|e| 2 + e.arg_count()).sum::<usize>();
    let mut call = if let [one] = entries {
        backend.script_sized(script, one.keys(), args, 8 * args)
    } else {
        let keys: Vec<&str> = entries
            .iter()
            .flat_map(|e| e.keys().iter().map(String::as_str))
            .collect();
        backend.script_sized(script, &keys, args, 8 * args)
    };
    call.arg(entries.len());
    for entry in entries {
        call.arg(entry.keys().len()).arg(entry.arg_count());
        entry.write_args(&mut call);
    }
    call
}

/// The per-entry replies of a call that carried `entries`; `flat`: the script replies flat.
pub(super) fn split_reply<E: Entry>(
    reply: Value,
    entries: &[&E],
    flat: bool,
) -> Result<Vec<Value>, BackendError> {
    let count = entries.len();
    let bad = |reply: &dyn fmt::Debug| {
        BackendError::BadReply(format!(
            "expected an array of the replies of {count} coalesced calls: {reply:?}"
        ))
    };
    let replies = match reply {
        Value::Array(replies) if !flat && replies.len() == count => return Ok(replies),
        Value::Array(values) if flat => values,
        other => return Err(bad(&other)),
    };
    let total = replies.len();
    let mut values = replies.into_iter();
    let mut out = Vec::with_capacity(count);
    for entry in entries {
        match values.next() {
            Some(error @ (Value::BulkString(_) | Value::SimpleString(_))) => out.push(error),
            Some(first) => {
                let len = entry.reply_len().max(1);
                let mut reply = Vec::with_capacity(len);
                reply.push(first);
                reply.extend(values.by_ref().take(len - 1));
                if reply.len() < len {
                    return Err(bad(&format_args!("{total} values, too few")));
                }
                out.push(Value::Array(reply));
            }
            None => return Err(bad(&format_args!("{total} values, too few"))),
        }
    }
    match values.next() {
        None => Ok(out),
        Some(_) => Err(bad(&format_args!("{total} values, too many"))),
    }
}

/// An entry's reply. A string in its place is the error the entry failed with (e.g.
/// `WRONGTYPE …`): the call itself cannot carry error replies, since redis-rs fails a whole reply
/// for an error nested anywhere in it.
pub(super) fn entry_reply(value: Value) -> Result<Value, BackendError> {
    let message = match value {
        Value::BulkString(bytes) => bytes,
        Value::SimpleString(s) => s.into_bytes(),
        value => return Ok(value),
    };
    let mut resp = Vec::with_capacity(message.len() + 3);
    resp.push(b'-');
    resp.extend(message.iter().filter(|&&b| b != b'\r' && b != b'\n'));
    resp.extend_from_slice(b"\r\n");
    Err(match redis::parse_redis_value(&resp) {
        Ok(Value::ServerError(e)) => BackendError::from_script(e.into()),
        _ => BackendError::BadReply(String::from_utf8_lossy(&message).into_owned()),
    })
}
