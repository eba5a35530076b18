//! Redis Cluster hash slots, computed as the cluster does, so that calls can be grouped by the
//! slot (and the master) their keys live on.

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

#[cfg(test)]
mod tests {
    use super::{shared_slot, slot};

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
}
