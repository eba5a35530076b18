//! The coalescer's unit tests: how a script's batch reply splits into its entries' replies, and
//! the rooms in flight a call sent straight takes.

use redis::Value;

use super::coalesce::{Coalescer, Entry, entry_reply, split_reply};
use super::{BackendError, LuaScript, RedisBackend, RedisConnection, ScriptCall};

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

/// An entry whose reply takes `0` values in a flat reply.
struct Sized(usize);

impl Entry for Sized {
    fn keys(&self) -> &[String] {
        &[]
    }
    fn arg_count(&self) -> usize {
        0
    }
    fn write_args(&self, _: &mut ScriptCall<'_>) {}
    fn reply_len(&self) -> usize {
        self.0
    }
}

#[test]
fn replies_must_match_the_entries() {
    let (one, two) = (Sized(1), Sized(2));
    let ints = |v: &[i64]| Value::Array(v.iter().copied().map(Value::Int).collect());
    assert_eq!(
        split_reply(ints(&[1, 2]), &[&one, &one], false)
            .unwrap()
            .len(),
        2
    );
    for (reply, count) in [(ints(&[1, 2]), 3), (Value::Nil, 1)] {
        let entries: Vec<&Sized> = std::iter::repeat_n(&one, count).collect();
        assert!(matches!(
            split_reply(reply, &entries, false),
            Err(BackendError::BadReply(_))
        ));
    }
    // Flat: each entry takes its own values, or one string (its error).
    let error = Value::BulkString(b"WRONGTYPE x".to_vec());
    let flat = Value::Array(vec![
        Value::Int(1),
        Value::Int(2),
        error.clone(),
        Value::Int(3),
    ]);
    let split = split_reply(flat, &[&two, &two, &one], true).unwrap();
    assert_eq!(split, [ints(&[1, 2]), error, ints(&[3])]);
    for (reply, entries) in [
        (ints(&[1, 2, 3]), vec![&two, &two]),
        (ints(&[1, 2, 3]), vec![&two]),
        (ints(&[1]), vec![&two]),
        (Value::Nil, vec![&one]),
    ] {
        assert!(
            matches!(
                split_reply(reply.clone(), &entries, true),
                Err(BackendError::BadReply(_))
            ),
            "{reply:?}"
        );
    }
}

/// A call sent straight takes one of the few rooms in flight, as a call the coalescer makes
/// does: while they are all out, a request queues, and a room dropped (its call over, or its
/// request gone before it was sent) is given back. Without coalescing, every call goes at once.
#[tokio::test]
async fn a_call_sent_straight_holds_its_room_until_dropped() {
    static SCRIPT: std::sync::LazyLock<LuaScript> =
        std::sync::LazyLock::new(|| LuaScript::new("return 1"));
    // Nothing listens: no call is made, only rooms taken and given back.
    let conn = RedisConnection::open_lazy("redis://127.0.0.1:1/")
        .await
        .expect("a lazy connection");
    let backend = RedisBackend::new(conn);
    let calls: Coalescer<Sized> = Coalescer::new(backend.clone(), &SCRIPT, 64);
    let first = calls.room().expect("room");
    let second = calls.room().expect("room");
    assert!(calls.room().is_none(), "both rooms are out");
    drop(first);
    let third = calls.room().expect("the room given back");
    assert!(calls.room().is_none());
    drop((second, third));
    assert!(calls.room().is_some());
    let alone: Coalescer<Sized> = Coalescer::new(backend, &SCRIPT, 1);
    let rooms: Vec<_> = (0..10).map(|_| alone.room().expect("no limit")).collect();
    assert_eq!(rooms.len(), 10);
}

/// While a batch waits for room, a call that returns gives its room to the batch, not to a
/// request that asks for room straight: that one queues behind the batch. Once the batch's
/// room comes back (its call ended, or every caller gave up), room is free again.
#[tokio::test]
async fn a_waiting_batch_gets_the_room_before_a_straight_call() {
    static SCRIPT: std::sync::LazyLock<LuaScript> =
        std::sync::LazyLock::new(|| LuaScript::new("return 1"));
    let conn = RedisConnection::open_lazy("redis://127.0.0.1:1/")
        .await
        .expect("a lazy connection");
    let calls: Coalescer<Sized> = Coalescer::new(RedisBackend::new(conn), &SCRIPT, 64);
    let (first, second) = (calls.room().expect("room"), calls.room().expect("room"));
    let mut queued = Box::pin(calls.call(Sized(1)));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(
        queued.as_mut().poll(&mut cx).is_pending(),
        "no room: it waits"
    );
    drop(first);
    assert!(calls.room().is_none(), "the room went to the waiting batch");
    drop(second);
    let third = calls.room().expect("one room free again, no batch waiting");
    assert!(calls.room().is_none(), "the batch and the third hold both");
    // The batch's only caller gives up before making its call: the room comes back.
    drop(queued);
    let fourth = calls.room().expect("the batch's room given back");
    drop((third, fourth));
    assert!(calls.room().is_some());
}
