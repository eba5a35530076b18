//! The coalescer's unit tests: how a script's batch reply splits into its entries' replies.

use redis::Value;

use super::coalesce::{Entry, entry_reply, split_reply};
use super::{BackendError, ScriptCall};

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
