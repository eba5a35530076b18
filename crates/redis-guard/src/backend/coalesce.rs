//! Coalescing: the script calls that arrive while one is in flight go to Redis together, as one
//! `EVALSHA` that runs them in order.
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
//! A request never waits for company: while fewer than [`IN_FLIGHT`] calls are out, it goes at
//! once, in a batch of one. Otherwise the requests queue, and go together (up to `max` per call)
//! as soon as a call returns. On a Redis Cluster the keys of one
//! call must share a slot, so entries are not coalesced there: each goes alone.

use std::fmt;
use std::sync::Mutex;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::{Script, Value};
use tokio::sync::{mpsc, oneshot};

use super::{BackendError, RedisBackend};

/// Default for how many entries one coalesced call may carry.
pub const DEFAULT_BATCH: usize = 64;

/// How many coalesced calls may be out at once: while Redis runs one, the next is on its way.
const IN_FLIGHT: usize = 2;

/// One entry waiting for its call.
struct Entry {
    keys: Vec<String>,
    args: Vec<String>,
    reply: oneshot::Sender<Result<Value, BackendError>>,
}

/// Runs one script for many callers, coalescing what arrives while a call is in flight.
pub(crate) struct Coalescer {
    backend: RedisBackend,
    script: &'static Script,
    max: usize,
    /// The queue of the task that makes the calls; started on first use, and again when the
    /// runtime it ran on has gone.
    queue: Mutex<Option<mpsc::UnboundedSender<Entry>>>,
}

impl Coalescer {
    /// A coalescer of `script` (which takes the batch form above) on `backend`, carrying at most
    /// `max` entries per call (`max` ≤ 1: no coalescing).
    pub(crate) fn new(backend: RedisBackend, script: &'static Script, max: usize) -> Self {
        Self {
            backend,
            script,
            max,
            queue: Mutex::new(None),
        }
    }

    /// The backend the calls go to.
    pub(crate) fn backend(&self) -> &RedisBackend {
        &self.backend
    }

    /// Runs the script for one entry (`keys`, `args`) and returns the entry's reply, within the
    /// backend's timeout counted from now.
    pub(crate) async fn call(
        &self,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> Result<Value, BackendError> {
        if self.max <= 1 || self.backend.connection().is_cluster() {
            return self.alone(keys, args).await;
        }
        let (reply, receiver) = oneshot::channel();
        if let Err(entry) = self.enqueue(Entry { keys, args, reply }) {
            // No runtime to run the task on: the caller's own future makes the call.
            return self.alone(entry.keys, entry.args).await;
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
    async fn alone(&self, keys: Vec<String>, args: Vec<String>) -> Result<Value, BackendError> {
        let entry = [(keys, args)];
        let reply = self
            .backend
            .eval(self.script, &batch_keys(&entry), &batch_args(&entry))
            .await?;
        split_reply(reply, 1)
            .map(|mut replies| replies.pop().unwrap_or(Value::Nil))
            .and_then(entry_reply)
    }

    /// Queues `entry` for the task, starting the task when there is none (or its runtime has
    /// shut down). Gives `entry` back when there is no runtime to start it on.
    fn enqueue(&self, entry: Entry) -> Result<(), Entry> {
        let mut queue = self
            .queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = match queue.as_ref() {
            Some(q) => match q.send(entry) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::SendError(entry)) => entry,
            },
            None => entry,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Err(entry);
        };
        let (sender, receiver) = mpsc::unbounded_channel();
        runtime.spawn(run(self.backend.clone(), self.script, self.max, receiver));
        // The receiver is alive: it was just made.
        let sent = sender.send(entry).map_err(|e| e.0);
        *queue = Some(sender);
        sent
    }
}

impl fmt::Debug for Coalescer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coalescer")
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

/// The task: takes what is queued (up to `max`) whenever fewer than [`IN_FLIGHT`] calls are
/// out, makes it one call, hands out the replies. Ends when every sender is gone and the last
/// call has returned.
async fn run(
    backend: RedisBackend,
    script: &'static Script,
    max: usize,
    mut queue: mpsc::UnboundedReceiver<Entry>,
) {
    let mut waiting = Vec::with_capacity(max);
    let mut calls = FuturesUnordered::new();
    let mut open = true;
    loop {
        tokio::select! {
            taken = queue.recv_many(&mut waiting, max), if open && calls.len() < IN_FLIGHT => {
                open = taken > 0;
                // A caller that gave up (timed out, or its request was dropped) is not run:
                // nothing is counted for a request that got no answer from us.
                waiting.retain(|e: &Entry| !e.reply.is_closed());
                if !waiting.is_empty() {
                    calls.push(call(&backend, script, std::mem::take(&mut waiting)));
                }
            }
            Some(()) = calls.next(), if !calls.is_empty() => {}
            else => break,
        }
    }
}

/// One call for `entries`; every entry gets its reply, or the call's error.
async fn call(backend: &RedisBackend, script: &Script, entries: Vec<Entry>) {
    let (entries, replies): (Vec<_>, Vec<_>) = entries
        .into_iter()
        .map(|e| ((e.keys, e.args), e.reply))
        .unzip();
    let outcome = backend
        .eval(script, &batch_keys(&entries), &batch_args(&entries))
        .await
        .and_then(|reply| split_reply(reply, entries.len()));
    match outcome {
        Ok(values) => {
            for (reply, value) in replies.into_iter().zip(values) {
                let _ = reply.send(entry_reply(value));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

/// KEYS of a call: every entry's keys, in order.
fn batch_keys(entries: &[(Vec<String>, Vec<String>)]) -> Vec<String> {
    entries
        .iter()
        .flat_map(|(k, _)| k.iter().cloned())
        .collect()
}

/// ARGV of a call after the time shift: the entry count, then per entry its key count, its
/// argument count and its arguments.
fn batch_args(entries: &[(Vec<String>, Vec<String>)]) -> Vec<String> {
    let mut args = Vec::with_capacity(1 + entries.iter().map(|(_, a)| a.len() + 2).sum::<usize>());
    args.push(entries.len().to_string());
    for (keys, entry_args) in entries {
        args.push(keys.len().to_string());
        args.push(entry_args.len().to_string());
        args.extend(entry_args.iter().cloned());
    }
    args
}

/// The per-entry replies of a call that carried `count` entries.
fn split_reply(reply: Value, count: usize) -> Result<Vec<Value>, BackendError> {
    match reply {
        Value::Array(replies) if replies.len() == count => Ok(replies),
        other => Err(BackendError::BadReply(format!(
            "expected an array of {count} replies, one per coalesced call: {other:?}"
        ))),
    }
}

/// An entry's reply. A string in its place is the error the entry failed with (e.g.
/// `WRONGTYPE …`): the call itself cannot carry error replies, since redis-rs fails a whole reply
/// for an error nested anywhere in it.
fn entry_reply(value: Value) -> Result<Value, BackendError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_lay_entries_out_in_order() {
        let entries = vec![
            (vec!["a".to_owned()], vec!["x".to_owned(), "y".to_owned()]),
            (vec!["b".to_owned(), "c".to_owned()], vec![]),
        ];
        assert_eq!(batch_keys(&entries), ["a", "b", "c"]);
        assert_eq!(batch_args(&entries), ["2", "1", "2", "x", "y", "2", "0"]);
    }

    #[test]
    fn a_string_in_an_entrys_place_is_its_error() {
        let e = entry_reply(Value::BulkString(
            b"WRONGTYPE Operation against a key".to_vec(),
        ))
        .expect_err("an error");
        assert!(
            matches!(&e, BackendError::Redis(r) if r.code() == Some("WRONGTYPE")),
            "{e:?}"
        );
        let e = entry_reply(Value::BulkString(b"RG_ARITY bad\r\n".to_vec())).expect_err("error");
        assert_eq!(e.code(), Some("RG_ARITY"));
        let ok = Value::Array(vec![Value::Int(1)]);
        assert_eq!(entry_reply(ok.clone()).expect("a reply"), ok);
    }

    #[test]
    fn replies_must_match_the_entries() {
        let two = Value::Array(vec![Value::Int(1), Value::Int(2)]);
        assert_eq!(split_reply(two.clone(), 2).unwrap().len(), 2);
        assert!(matches!(
            split_reply(two, 3),
            Err(BackendError::BadReply(_))
        ));
        assert!(matches!(
            split_reply(Value::Nil, 1),
            Err(BackendError::BadReply(_))
        ));
    }
}
