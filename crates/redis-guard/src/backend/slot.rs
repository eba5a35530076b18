//! Redis Cluster hash slots, computed as the cluster does, so that calls can be grouped by the
//! slot (and the master) their keys live on; and which master serves each slot.

use redis::Value;

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the text between the
/// first `{` and the next `}`, if not empty; else the whole key), modulo 16384. See
/// <https://redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec/#hash-tags>.
pub(super) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let len = rest.iter().position(|&b| b == b'}')?;
            (len > 0).then(|| &rest[..len])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in tagged {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc % 16384
}

/// The slot every key of `keys` hashes to, or `None` when they span slots (or there are none):
/// such keys cannot go to Redis in one call.
#[cfg_attr(
    not(any(feature = "rate-limit", feature = "session")),
    allow(dead_code)
)]
pub(super) fn shared_slot(keys: &[String]) -> Option<u16> {
    let (first, rest) = keys.split_first()?;
    let slot = slot(first.as_bytes());
    rest.iter()
        .all(|key| self::slot(key.as_bytes()) == slot)
        .then_some(slot)
}

/// Which master serves each hash slot, as `CLUSTER SLOTS` said when the connection was made:
/// `(first slot, last slot, master index)`, the masters numbered in order of appearance. Empty
/// when unknown (a [`ClusterConnection`](redis::cluster_async::ClusterConnection) converted
/// with `From`, or `CLUSTER SLOTS` failed).
///
/// Used only to give each master a circuit breaker of its own, so that one dead master does not
/// stop the calls to the others. A map gone stale (slots moved by resharding, a replica promoted)
/// only groups some slots under the wrong circuit: redis-rs routes every call by its own, fresh
/// map.
#[derive(Clone, Debug, Default)]
pub(super) struct Masters {
    ranges: std::sync::Arc<[(u16, u16, usize)]>,
    pub(super) count: usize,
}

impl Masters {
    /// Reads a `CLUSTER SLOTS` reply: `[[first, last, [host, port, …], replicas…], …]`. Anything
    /// unexpected leaves the map empty.
    pub(super) fn parse(reply: &Value) -> Self {
        let mut addrs: Vec<(Vec<u8>, i64)> = Vec::new();
        let mut ranges = Vec::new();
        let Value::Array(entries) = reply else {
            return Self::default();
        };
        for entry in entries {
            let Value::Array(fields) = entry else {
                return Self::default();
            };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return Self::default();
            };
            let host = match master.first() {
                Some(Value::BulkString(b)) => b.clone(),
                Some(Value::SimpleString(s)) => s.as_bytes().to_vec(),
                _ => return Self::default(),
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return Self::default();
            };
            let addr = (host, *port);
            let index = addrs.iter().position(|a| *a == addr).unwrap_or_else(|| {
                addrs.push(addr);
                addrs.len() - 1
            });
            let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
                return Self::default();
            };
            ranges.push((first, last, index));
        }
        Self {
            ranges: ranges.into(),
            count: addrs.len(),
        }
    }

    /// A key (`rg-probe:{<n>}`) whose slot master `index` serves, as this map says: the first
    /// such `n`. Any key when the map knows no slot of that master.
    pub(super) fn key_on(&self, index: usize) -> String {
        // 16384 slots: a few tries per master find one of its slots.
        (0..100_000u32)
            .map(|n| format!("rg-probe:{{{n}}}"))
            .find(|key| self.of(key.as_bytes()) == index)
            .unwrap_or_else(|| "rg-probe:{0}".to_owned())
    }

    /// The index of the master serving `key`'s slot, or 0 when the map does not say.
    pub(super) fn of(&self, key: &[u8]) -> usize {
        let slot = slot(key);
        self.ranges
            .iter()
            .find(|&&(first, last, _)| first <= slot && slot <= last)
            .map_or(0, |&(_, _, index)| index)
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::{Masters, shared_slot, slot};

    #[test]
    fn slots_are_redis_cluster_slots() {
        // From the cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn keys_share_a_slot_only_when_each_hashes_to_it() {
        let keys = |k: &[&str]| k.iter().map(|&k| k.to_owned()).collect::<Vec<_>>();
        assert_eq!(
            shared_slot(&keys(&["rl:a:{x}", "ov:a:{x}"])),
            Some(slot(b"x"))
        );
        assert_eq!(shared_slot(&keys(&["foo"])), Some(12182));
        assert_eq!(shared_slot(&keys(&["foo", "bar"])), None);
        assert_eq!(shared_slot(&[]), None);
    }

    #[test]
    fn masters_are_numbered_by_address() {
        let range = |first, last, port| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                Value::Array(vec![
                    Value::BulkString(b"10.0.0.1".to_vec()),
                    Value::Int(port),
                ]),
            ])
        };
        let masters = Masters::parse(&Value::Array(vec![
            range(0, 5000, 7000),
            range(5001, 12000, 7001),
            // A master may serve several ranges.
            range(12001, 16383, 7000),
        ]));
        assert_eq!(masters.count, 2);
        assert_eq!(masters.of(b"bar"), 1, "slot 5061 is on 7001");
        assert_eq!(masters.of(b"foo"), 0, "slot 12182 is on 7000");
        assert_eq!(Masters::parse(&Value::Nil).count, 0);
        assert_eq!(Masters::default().of(b"foo"), 0);
    }
}
