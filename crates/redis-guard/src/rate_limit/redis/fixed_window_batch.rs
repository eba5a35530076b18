//! The fixed window's plain transactions, coalesced: the requests that queue while
//! transactions are in flight go to Redis as one `MULTI` … `EXEC`, through the same coalescer
//! as the scripts (its queues, batch size, breaker and timeout), whatever their keys; on a
//! Cluster, the coalescer queues per hash slot, so one transaction names keys of one slot.
//!
//! Per key of a call, in the order keys first appear: one `INCRBY` of the sum of its requests'
//! costs, then `PEXPIRE key period NX` (the period of its first request, the one whose own
//! `PEXPIRE` would have opened the window) and `PTTL key`. A request's count is the total less
//! the costs of the requests queued after it on that key: what its own `INCRBY` would have
//! answered had the requests run alone, one after the other, in arrival order. Its TTL is the
//! one it would have read: Redis judges expiry at one time for a whole transaction (7.0 and
//! later), so no key expires between two of its commands, and `INCRBY` keeps a key's TTL. The
//! `PEXPIRE` follows the key's `INCRBY`, so the counter carries a TTL whatever happened before.
//! A call of `n` requests on `k` keys is `3k + 2` commands where alone they were `5n`.
//!
//! `PTTL` stays: `PEXPIRE … NX` says only whether it set the TTL, which gives the window's end
//! for the request that opened it, not for the others, and a transaction cannot send a command
//! only when another answered 0. Once per key and call, it costs a request of a busy key
//! little.

use std::collections::HashMap;

use redis::Value;

use crate::backend::{BackendError, Form, RedisBackend, Replies};

/// One request decided by the plain transaction: its rule's counter, its cost, and how long a
/// window it opens lasts.
#[derive(Debug)]
pub(super) struct Count {
    pub(super) key: [String; 1],
    pub(super) cost: u64,
    pub(super) period_ms: u64,
}

/// The coalescer's [`Form`] for [`Count`]s: one transaction per call. Each request's reply is
/// `(count, pttl)`, as its own `INCRBY` and `PTTL` would have answered (two integers, not a
/// [`Value`] to walk).
#[derive(Clone, Copy, Debug)]
pub(super) struct Transaction;

impl Form<Count> for Transaction {
    type Reply = (i64, i64);

    fn keys(entry: &Count) -> &[String] {
        &entry.key
    }

    async fn call(
        &self,
        backend: &RedisBackend,
        entries: &[&Count],
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Replies<(i64, i64)>, BackendError> {
        let Some(first) = entries.first() else {
            return Ok(Vec::new());
        };
        let plan = Plan::of(entries);
        let reply = backend
            .pipeline_until(&plan.pipeline(), &first.key[0], deadline)
            .await?;
        plan.replies(&reply)
    }
}

/// How many keys a call's plan looks up by comparing them all, before it makes a map.
const FEW_KEYS: usize = 8;

/// The transaction of one call.
struct Plan<'a> {
    /// Per key, in order of first appearance: the key, the period of its first request, and
    /// the sum of its requests' costs.
    keys: Vec<(&'a str, u64, u64)>,
    /// Per request, in order: its key's index, and the costs queued after it on that key.
    after: Vec<(usize, u64)>,
}

impl<'a> Plan<'a> {
    fn of(entries: &[&'a Count]) -> Self {
        let mut keys: Vec<(&str, u64, u64)> = Vec::new();
        // Keys are looked up in `keys` while they are few (one, for a busy client), then in a
        // map.
        let mut index: Option<HashMap<&str, usize>> = None;
        // Per request: its key's index and the key's running total, its own cost included.
        let running: Vec<(usize, u64)> = entries
            .iter()
            .map(|entry| {
                let key = entry.key[0].as_str();
                let found = match &mut index {
                    Some(index) => index.get(key).copied(),
                    None => keys.iter().position(|&(k, _, _)| k == key),
                };
                let k = found.unwrap_or_else(|| {
                    keys.push((key, entry.period_ms, 0));
                    let k = keys.len() - 1;
                    match &mut index {
                        Some(index) => {
                            index.insert(key, k);
                        }
                        None if keys.len() > FEW_KEYS => {
                            index = Some(
                                keys.iter()
                                    .enumerate()
                                    .map(|(i, &(k, _, _))| (k, i))
                                    .collect(),
                            );
                        }
                        None => {}
                    }
                    k
                });
                keys[k].2 = keys[k].2.saturating_add(entry.cost);
                (k, keys[k].2)
            })
            .collect();
        let after = running
            .into_iter()
            .map(|(k, sum)| (k, keys[k].2 - sum))
            .collect();
        Self { keys, after }
    }

    /// `MULTI`, per key `INCRBY`, `PEXPIRE … NX` (its reply dropped) and `PTTL`, `EXEC`. The
    /// error of one key's command (a key that holds no counter) is its requests' alone.
    fn pipeline(&self) -> redis::Pipeline {
        let mut pipe = redis::Pipeline::with_capacity(3 * self.keys.len());
        pipe.atomic().ignore_errors();
        // Each command sized up front (its name, key and numbers of at most 20 digits), so
        // that no buffer grows as its arguments go in.
        let sized = |name: &str, args: usize, bytes: usize| {
            let mut cmd = redis::Cmd::with_capacity(args, name.len() + bytes);
            cmd.arg(name);
            cmd
        };
        for &(key, period_ms, total) in &self.keys {
            let mut incrby = sized("INCRBY", 3, key.len() + 20);
            incrby.arg(key).arg(total);
            let mut pexpire = sized("PEXPIRE", 4, key.len() + 22);
            pexpire.arg(key).arg(period_ms).arg("NX");
            let mut pttl = sized("PTTL", 2, key.len());
            pttl.arg(key);
            pipe.add_command(incrby)
                .add_command(pexpire)
                .ignore()
                .add_command(pttl);
        }
        pipe
    }

    /// Each request's `(count, pttl)` from `EXEC`'s `[total, pttl]` per key; a request whose
    /// key's `INCRBY` failed gets that error.
    fn replies(&self, reply: &Value) -> Result<Replies<(i64, i64)>, BackendError> {
        let per_key = match reply {
            Value::Array(values) if values.len() == 2 * self.keys.len() => values,
            _ => {
                let keys = self.keys.len();
                let text = format!("MULTI INCRBY PEXPIRE PTTL on {keys} keys: {reply:?}");
                return Err(BackendError::BadReply(text));
            }
        };
        Ok(self
            .after
            .iter()
            .map(|&(k, after)| match &per_key[2 * k..2 * k + 2] {
                [Value::Int(total), Value::Int(ttl)] => {
                    let after = i64::try_from(after).unwrap_or(i64::MAX);
                    Ok((total.saturating_sub(after), *ttl))
                }
                [Value::ServerError(e), _] => Err(BackendError::Redis(e.clone().into())),
                other => Err(BackendError::BadReply(format!("INCRBY PTTL: {other:?}"))),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(key: &str, cost: u64, period_ms: u64) -> Count {
        Count {
            key: [key.to_owned()],
            cost,
            period_ms,
        }
    }

    #[test]
    fn one_incrby_per_key_and_each_request_its_own_count() {
        let entries = [
            count("a", 1, 1000),
            count("b", 5, 2000),
            count("a", 2, 9000),
            count("a", 3, 1000),
        ];
        let refs: Vec<&Count> = entries.iter().collect();
        let plan = Plan::of(&refs);
        assert_eq!(plan.keys, [("a", 1000, 6), ("b", 2000, 5)]);
        let commands: Vec<Vec<u8>> = plan
            .pipeline()
            .cmd_iter()
            .map(redis::Cmd::get_packed_command)
            .collect();
        assert_eq!(commands.len(), 6);
        assert_eq!(
            commands[1],
            redis::cmd("PEXPIRE")
                .arg("a")
                .arg(1000)
                .arg("NX")
                .get_packed_command()
        );
        // `a` was at 4 before the call (now 10), `b` new (now 5).
        let reply = Value::Array(vec![
            Value::Int(10),
            Value::Int(700),
            Value::Int(5),
            Value::Int(2000),
        ]);
        let replies: Vec<(i64, i64)> = plan
            .replies(&reply)
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(replies, [(5, 700), (5, 2000), (7, 700), (10, 700)]);
    }

    #[test]
    fn many_keys_are_counted_as_few() {
        // 20 keys, each twice: past the few the plan compares, it looks them up in a map.
        let entries: Vec<Count> = (0..40)
            .map(|i| count(&format!("k{}", i % 20), 1, 10))
            .collect();
        let refs: Vec<&Count> = entries.iter().collect();
        let plan = Plan::of(&refs);
        assert_eq!(plan.keys.len(), 20);
        assert!(plan.keys.iter().all(|&(_, _, total)| total == 2));
        let after: Vec<u64> = plan.after.iter().map(|&(_, after)| after).collect();
        assert_eq!(after, [[1; 20], [0; 20]].concat());
        assert!(
            plan.after
                .iter()
                .enumerate()
                .all(|(i, &(k, _))| k == i % 20)
        );
    }

    #[test]
    fn a_key_that_fails_fails_its_requests_alone() {
        let entries = [count("bad", 1, 10), count("ok", 1, 10), count("bad", 1, 10)];
        let refs: Vec<&Count> = entries.iter().collect();
        let plan = Plan::of(&refs);
        let wrong = redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n").unwrap();
        let reply = Value::Array(vec![wrong, Value::Int(-1), Value::Int(1), Value::Int(10)]);
        let replies = plan.replies(&reply).unwrap();
        assert!(
            matches!(&replies[0], Err(BackendError::Redis(e)) if e.code() == Some("WRONGTYPE"))
        );
        assert!(replies[1].is_ok());
        assert!(replies[2].is_err());
        for bad in [Value::Nil, Value::Array(vec![Value::Int(1)])] {
            assert!(matches!(plan.replies(&bad), Err(BackendError::BadReply(_))));
        }
    }
}
