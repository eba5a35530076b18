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
//! A [flat](Coalescer::flat) script instead replies with one array of every entry's values, one
//! after the other (each entry's reply has as many as [`Entry::reply_len`] says, or is one
//! string, its error): Redis converts each table of a script's reply at a cost several times
//! that of an integer, so the lean GCRA script sends one table, not one per entry.
//!
//! A call's [`Form`] says how it carries its entries: a script in the batch form above
//! ([`Script`], the default), or another shape with the same queues, batch limit, breaker and
//! timeout (the fixed window's `MULTI` of plain commands).
//!
//! A request never waits for company: while fewer than [`IN_FLIGHT`] calls are out, it goes at
//! once, in a batch of one. Otherwise the requests queue, and go together (up to `max` per call)
//! as soon as a call returns.
//!
//! On a Redis Cluster the keys of one call must share a hash slot, so there is one queue (and
//! one task making its calls) per slot: the entries of one slot go together to the master that
//! serves it, as they do on a single Redis, each slot with its own calls in flight. An entry
//! whose keys span slots goes alone. Queues are made on first use and end after [`IDLE`]
//! without work, and at most [`MAX_QUEUES`] exist at once (an entry of another slot then goes
//! alone), so a limiter that sees every slot keeps a bounded number of them.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::Value;
use tokio::sync::{mpsc, oneshot};

use super::{BackendError, BreakerState, LuaScript, RedisBackend, ScriptCall};

/// Per entry of a call, in order: its reply, or the error it alone failed with.
pub(crate) type Replies = Vec<Result<Value, BackendError>>;

/// How one coalesced call carries its entries to Redis, and hands each its reply.
pub(crate) trait Form<E>: Clone + Send + Sync + 'static {
    /// The keys of `entry`: they pick its queue (its hash slot, on a cluster) and its master's
    /// circuit.
    fn keys(entry: &E) -> &[String];

    /// One call for `entries` (one or more, sharing a slot on a cluster): per entry, in order,
    /// its reply or its own error; an error of the call itself fails every entry.
    fn call(
        &self,
        backend: &RedisBackend,
        entries: &[&E],
    ) -> impl Future<Output = Result<Replies, BackendError>> + Send;
}

/// The default [`Form`]: one `EVALSHA` of a script that takes the batch form above.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Script {
    script: &'static LuaScript,
    /// Whether the script's reply is [flat](Coalescer::flat).
    flat: bool,
}

impl<E: Entry> Form<E> for Script {
    fn keys(entry: &E) -> &[String] {
        entry.keys()
    }

    async fn call(&self, backend: &RedisBackend, entries: &[&E]) -> Result<Replies, BackendError> {
        run_script(backend, self.script, entries, self.flat).await
    }
}

/// Default for how many entries one coalesced call may carry.
pub(crate) const DEFAULT_BATCH: usize = 64;

/// How many coalesced calls may be out at once: while Redis runs one, the next is on its way.
const IN_FLIGHT: usize = 2;

/// How long a queue's task waits with nothing queued and nothing in flight before it ends.
const IDLE: Duration = Duration::from_secs(1);

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
    /// How many values the entry's reply takes in a [flat](Coalescer::flat) reply.
    fn reply_len(&self) -> usize {
        1
    }
}

/// An entry waiting for its call, with where its reply goes.
struct Waiting<E> {
    entry: E,
    reply: oneshot::Sender<Result<Value, BackendError>>,
}

/// The queues by hash slot (slot 0 on a single Redis).
type Queues<E> = Mutex<HashMap<u16, mpsc::UnboundedSender<Waiting<E>>>>;

/// Runs one script (or another [`Form`] of call) for many callers, coalescing what arrives
/// while calls are in flight.
pub(crate) struct Coalescer<E, F = Script> {
    backend: RedisBackend,
    form: F,
    max: usize,
    /// The queues of the tasks that make the calls; each started on first use, and again when
    /// it ended idle or the runtime it ran on has gone. A task removes its own queue, under
    /// this lock, when it ends idle.
    queues: Arc<Queues<E>>,
}

impl<E: Entry> Coalescer<E> {
    /// A coalescer of `script` (which takes the batch form above) on `backend`, carrying at most
    /// `max` entries per call (`max` ≤ 1: no coalescing).
    pub(crate) fn new(backend: RedisBackend, script: &'static LuaScript, max: usize) -> Self {
        let form = Script {
            script,
            flat: false,
        };
        Self::with_form(backend, form, max)
    }

    /// The same coalescer of a script that replies flat: one array of every entry's
    /// [`reply_len`](Entry::reply_len) values (or its error string), entry after entry; each
    /// entry gets its own values as an array.
    #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
    pub(crate) fn flat(mut self) -> Self {
        self.form.flat = true;
        self
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

    /// The backend the calls go to.
    #[cfg_attr(not(feature = "rate-limit"), allow(dead_code))]
    pub(crate) fn backend(&self) -> &RedisBackend {
        &self.backend
    }

    /// Makes the call for `entry` and returns the entry's reply, within the backend's timeout
    /// counted from now (so from the moment the entry is queued).
    pub(crate) async fn call(&self, entry: E) -> Result<Value, BackendError> {
        let slot = match self.slot_of(&entry) {
            Some(slot) if self.max > 1 => slot,
            _ => return self.alone(entry).await,
        };
        // While the circuit of the entry's master is open (and no probe is due), the task would
        // only refuse the call, after a hop through its queue and back: two wake-ups that, on a
        // busy runtime, cost milliseconds the failure policy is meant to save. Refuse it here.
        // (Half-open: the entry goes to the task, whose call is the probe.)
        let first = F::keys(&entry).first().map(String::as_str);
        if self.backend.breaker_state_of(first) == BreakerState::Open {
            return Err(BackendError::CircuitOpen);
        }
        let (reply, receiver) = oneshot::channel();
        if let Err(waiting) = self.enqueue(slot, Waiting { entry, reply }) {
            // No runtime to run the task on, or no room for another queue: the caller's own
            // future makes the call.
            return self.alone(waiting.entry).await;
        }
        let timeout = self.backend.call_timeout();
        match tokio::time::timeout(timeout, receiver).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(BackendError::Redis(redis::RedisError::from((
                redis::ErrorKind::Io,
                "the task making coalesced Redis calls stopped (its runtime shut down)",
            )))),
            Err(_) => Err(BackendError::Timeout(timeout)),
        }
    }

    /// One entry in a call of its own.
    async fn alone(&self, entry: E) -> Result<Value, BackendError> {
        only(self.form.call(&self.backend, &[&entry]).await?)
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

    /// Queues `entry` for the task of `slot`, starting the task when there is none (or its
    /// runtime has shut down). Gives `entry` back when there is no runtime to start it on, or
    /// no room for another queue.
    fn enqueue(&self, slot: u16, entry: Waiting<E>) -> Result<(), Waiting<E>> {
        let mut queues = lock(&self.queues);
        let entry = match queues.get(&slot) {
            Some(q) => match q.send(entry) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::SendError(entry)) => entry,
            },
            None if queues.len() >= MAX_QUEUES => return Err(entry),
            None => entry,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Err(entry);
        };
        let (sender, receiver) = mpsc::unbounded_channel();
        let task = Task {
            backend: self.backend.clone(),
            form: self.form.clone(),
            max: self.max,
            queues: Arc::downgrade(&self.queues),
            slot,
        };
        runtime.spawn(task.run(receiver));
        // The receiver is alive: it was just made.
        let sent = sender.send(entry).map_err(|e| e.0);
        queues.insert(slot, sender);
        sent
    }
}

impl<E, F> fmt::Debug for Coalescer<E, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coalescer")
            .field("max", &self.max)
            .finish_non_exhaustive()
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
    only(run_script(backend, script, &[entry], false).await?)
}

/// The reply of a call's one entry.
fn only(replies: Replies) -> Result<Value, BackendError> {
    counted(replies, 1)?.pop().unwrap_or(Ok(Value::Nil))
}

/// `replies`, when there is one per entry of the `count` a call carried.
fn counted(replies: Replies, count: usize) -> Result<Replies, BackendError> {
    if replies.len() == count {
        return Ok(replies);
    }
    Err(BackendError::BadReply(format!(
        "{} replies for {count} coalesced entries",
        replies.len()
    )))
}

/// One call of `script` for `entries`; `flat`: the script replies flat.
async fn run_script<E: Entry>(
    backend: &RedisBackend,
    script: &LuaScript,
    entries: &[&E],
    flat: bool,
) -> Result<Replies, BackendError> {
    let reply = batch(backend, script, entries).run().await?;
    let replies = split_reply(reply, entries, flat)?;
    Ok(replies.into_iter().map(entry_reply).collect())
}

/// The queues' lock, whose data stays consistent even if a holder panicked.
fn lock<E>(
    queues: &Queues<E>,
) -> std::sync::MutexGuard<'_, HashMap<u16, mpsc::UnboundedSender<Waiting<E>>>> {
    queues
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The task of one queue (one hash slot on a cluster).
struct Task<E, F> {
    backend: RedisBackend,
    form: F,
    max: usize,
    queues: Weak<Queues<E>>,
    slot: u16,
}

impl<E: Send + Sync + 'static, F: Form<E>> Task<E, F> {
    /// Takes what is queued (up to `max`) whenever fewer than [`IN_FLIGHT`] calls are out,
    /// makes it one call, hands out the replies. Ends when every sender is gone and the last
    /// call has returned, or after [`IDLE`] without work.
    async fn run(self, mut queue: mpsc::UnboundedReceiver<Waiting<E>>) {
        let mut waiting = Vec::new();
        let mut calls = FuturesUnordered::new();
        let mut open = true;
        loop {
            tokio::select! {
                taken = queue.recv_many(&mut waiting, self.max), if open && calls.len() < IN_FLIGHT => {
                    open = taken > 0;
                    // A caller that gave up (timed out, or its request was dropped) is not run:
                    // nothing is counted for a request that got no answer from us.
                    waiting.retain(|w: &Waiting<E>| !w.reply.is_closed());
                    if !waiting.is_empty() {
                        let entries = std::mem::take(&mut waiting);
                        calls.push(call(&self.backend, &self.form, entries));
                    }
                }
                Some(()) = calls.next(), if !calls.is_empty() => {}
                () = tokio::time::sleep(IDLE), if open && calls.is_empty() => {
                    if self.retire(&queue) {
                        break;
                    }
                }
                else => break,
            }
        }
    }

    /// Removes this task's queue, unless something was queued meanwhile. Callers queue under
    /// the same lock, so once the queue is out of the map nothing more can arrive in it, and
    /// nothing queued is lost.
    fn retire(&self, queue: &mpsc::UnboundedReceiver<Waiting<E>>) -> bool {
        let Some(queues) = self.queues.upgrade() else {
            // The coalescer is gone, and with it every sender.
            return true;
        };
        let mut queues = lock(&queues);
        if !queue.is_empty() {
            return false;
        }
        // The queue in the map under this slot is this task's: a caller replaces it only once
        // its receiver is gone, which is when this task has ended.
        queues.remove(&self.slot);
        true
    }
}

/// One call for `waiting`; every entry gets its reply, or the call's error.
async fn call<E, F: Form<E>>(backend: &RedisBackend, form: &F, waiting: Vec<Waiting<E>>) {
    let entries: Vec<&E> = waiting.iter().map(|w| &w.entry).collect();
    let outcome = form.call(backend, &entries).await;
    match outcome.and_then(|replies| counted(replies, entries.len())) {
        Ok(replies) => {
            for (w, reply) in waiting.into_iter().zip(replies) {
                let _ = w.reply.send(reply);
            }
        }
        Err(e) => {
            for w in waiting {
                let _ = w.reply.send(Err(e.clone()));
            }
        }
    }
}

/// The call for `entries`: KEYS are every entry's keys, in order; ARGV after the time shift is
/// the entry count, then per entry its key count, its argument count and its arguments.
fn batch<'a, E: Entry>(
    backend: &'a RedisBackend,
    script: &'a LuaScript,
    entries: &[&E],
) -> ScriptCall<'a> {
    let keys: Vec<&str> = entries
        .iter()
        .flat_map(|e| e.keys().iter().map(String::as_str))
        .collect();
    let mut call = backend.script(script, &keys);
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
