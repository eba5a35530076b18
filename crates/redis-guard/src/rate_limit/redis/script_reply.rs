//! The scripts' replies, parsed.

use redis::{FromRedisValue, Value};

use crate::backend::BackendError;
use crate::rate_limit::Mode;
use crate::rate_limit::algorithm::{RuleState, ceil_ms, idiv, narrow};
use crate::rate_limit::limiter::LimiterError;
use crate::rate_limit::limiter::live::{LiveRecord, quota_of};

/// Parses one entry of `evaluate.lua`'s reply (its header has the layout): the rules' states,
/// the Redis time (µs) they were decided at, and the `lives` live records as the script saw them.
pub(crate) fn parse_reply(
    reply: &Value,
    expected: usize,
    lives: usize,
) -> Result<(Vec<RuleState>, u64, Vec<LiveRecord>), LimiterError> {
    let bad = |what: &str| LimiterError::from(BackendError::BadReply(format!("{what}: {reply:?}")));
    let Value::Array(cells) = reply else {
        return Err(bad("expected an array"));
    };
    let len = expected * 5 + 1 + lives * 5;
    if cells.len() != len {
        return Err(bad(&format!("expected {len} integers")));
    }
    let int = |c: &Value| match c {
        Value::Int(i) => u64::try_from(*i).map_err(|_| bad("expected non-negative integers")),
        _ => Err(bad("expected non-negative integers")),
    };
    let (rows, rest) = cells.split_at(expected * 5);
    let now = int(&rest[0])?;
    let seen = rest[1..]
        .chunks_exact(5)
        .map(|record| {
            let mode = match int(&record[1])? {
                0 => None,
                1 => Some(Mode::Enforce),
                2 => Some(Mode::Shadow),
                3 => Some(Mode::Soft),
                _ => return Err(bad("a live record's mode must be 0 to 3")),
            };
            let quota = match [&record[2], &record[3], &record[4]].map(int) {
                [Ok(0), Ok(0), Ok(0)] => None,
                [Ok(limit), Ok(period), Ok(burst)] if limit > 0 && period > 0 => Some(
                    quota_of(limit, period, burst)
                        .ok_or_else(|| bad("a live record's quota must fit a quota"))?,
                ),
                _ => return Err(bad("a live record's quota must be 0 0 0 or a quota")),
            };
            Ok(LiveRecord {
                version: int(&record[0])?,
                quota,
                mode,
            })
        })
        .collect::<Result<_, LimiterError>>()?;
    let states = rows
        .chunks_exact(5)
        .map(|row| {
            let [allowed, limit, remaining, retry_ms, reset_ms] =
                [&row[0], &row[1], &row[2], &row[3], &row[4]].map(int);
            let allowed = allowed?;
            if allowed > 1 {
                return Err(bad("`allowed` must be 0 or 1"));
            }
            Ok(RuleState::from_parts(
                allowed == 1,
                limit?,
                remaining?,
                retry_ms?,
                reset_ms?,
            ))
        })
        .collect::<Result<_, _>>()?;
    Ok((states, now, seen))
}

/// Parses `gcra_plain.lua`'s reply (its header has the encoding), one integer per rule, of the
/// rules whose decided arguments are `rules` (algorithm, limit, period, burst, emission
/// interval, cost; [`RuleArgs::decided`](super::evaluation::RuleArgs::decided)). The states are
/// what `evaluate.lua`'s five integers per rule would have said: the same arithmetic, exact on
/// integers.
pub(crate) fn parse_compact<C: FromIterator<RuleState>>(
    reply: &Value,
    rules: &[[u64; 6]],
) -> Result<C, LimiterError> {
    let bad = |what: &str| LimiterError::from(BackendError::BadReply(format!("{what}: {reply:?}")));
    let cells = match reply {
        Value::Array(cells) => cells.as_slice(),
        Value::Int(_) => std::slice::from_ref(reply),
        _ => return Err(bad("expected an array")),
    };
    if cells.len() != rules.len() {
        return Err(bad(&format!("expected {} integers", rules.len())));
    }
    cells
        .iter()
        .zip(rules)
        .map(|(cell, &[_, limit, _, burst, emission, cost])| {
            let Value::Int(v) = *cell else {
                return Err(bad("expected integers"));
            };
            if emission == 0 {
                return Err(bad("a rule without an emission interval"));
            }
            let (allowed, d) = if v >= 0 { (true, v) } else { (false, -1 - v) };
            let (d, em) = (i128::from(d), i128::from(emission));
            let capacity = i128::from(burst) * em;
            let ms = |us: i128| ceil_ms(narrow(us));
            // Floor of a negative quotient is below 0: none remaining.
            let remaining = narrow(idiv(capacity - d, em));
            // A probe (cost 0) is decided as cost 1.
            let retry_ms = if allowed {
                0
            } else {
                ms(d + i128::from(cost.max(1)) * em - capacity)
            };
            Ok(RuleState::from_parts(
                allowed,
                limit,
                remaining,
                retry_ms,
                ms(d),
            ))
        })
        .collect()
}

/// A script's reply of `N` integers, each a `T`; anything else is a bad reply of `script`.
pub(super) fn ints<T: TryFrom<i64> + Copy + Default, const N: usize>(
    reply: &Value,
    script: &str,
) -> Result<[T; N], BackendError> {
    let mut out = [T::default(); N];
    let read = <[i64; N]>::from_redis_value_ref(reply).ok().and_then(|v| {
        for (o, i) in out.iter_mut().zip(v) {
            *o = T::try_from(i).ok()?;
        }
        Some(())
    });
    read.map(|()| out)
        .ok_or_else(|| BackendError::BadReply(format!("{script}: {reply:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::Quota;

    #[test]
    fn a_compact_reply_says_what_the_five_integers_say() {
        let ints = |v: &[i64]| Value::Array(v.iter().copied().map(Value::Int).collect());
        // 10 per minute: one unit every 6 s, a burst of 10; cost 1.
        let em = 6_000_000;
        let rule = [1, 10, 60_000_000, 10, 6_000_000, 1];
        let state = |v: i64| parse_compact::<Vec<_>>(&ints(&[v]), &[rule]).unwrap()[0];
        // A fresh client: admitted, 9 left, full again in 6 s.
        assert_eq!(state(em), RuleState::from_parts(true, 10, 9, 0, 6000));
        // A quarter unit and 1 µs fuller than that: 8 left, the reset rounded up.
        assert_eq!(
            state(em + em / 4 + 1),
            RuleState::from_parts(true, 10, 8, 0, 7501)
        );
        // Every unit taken: denied, none left, the next in 6 s, empty again in 60 s.
        assert_eq!(
            state(-10 * em - 1),
            RuleState::from_parts(false, 10, 0, 6000, 60_000)
        );
        // A bare integer is an array of that one integer.
        for v in [em, -10 * em - 1] {
            let bare = parse_compact::<Vec<_>>(&Value::Int(v), &[rule]).unwrap()[0];
            assert_eq!(bare, state(v));
        }
        // A probe (cost 0) is decided as cost 1.
        let probe = [1, 10, 60_000_000, 10, 6_000_000, 0];
        let states: Vec<_> = parse_compact(&ints(&[0, -10 * em - 1]), &[probe, probe]).unwrap();
        assert_eq!(states[0], RuleState::from_parts(true, 10, 10, 0, 0));
        assert_eq!(states[1], RuleState::from_parts(false, 10, 0, 6000, 60_000));
        for bad in [
            Value::Nil,
            ints(&[]),
            ints(&[1, 2]),
            Value::Array(vec![Value::Okay]),
        ] {
            assert!(parse_compact::<Vec<_>>(&bad, &[rule]).is_err(), "{bad:?}");
        }
        assert!(parse_compact::<Vec<_>>(&ints(&[1]), &[[1, 10, 0, 10, 0, 1]]).is_err());
        // One integer for two rules is too few.
        assert!(parse_compact::<Vec<_>>(&Value::Int(1), &[rule, rule]).is_err());
    }

    #[test]
    fn rejects_replies_that_do_not_fit() {
        let ints = |v: &[i64]| Value::Array(v.iter().copied().map(Value::Int).collect());
        let now = 1_700_000_000_000_000;
        let (states, at, _) = parse_reply(&ints(&[1, 10, 9, 0, 6000, now]), 1, 0).unwrap();
        assert_eq!((states.len(), at), (1, 1_700_000_000_000_000));
        assert!(states[0].allowed);
        let (states, _, _) =
            parse_reply(&ints(&[1, 10, 9, 0, 6000, 0, 5, 0, 2000, 9000, now]), 2, 0).unwrap();
        assert!(!states[1].allowed);
        for bad in [
            Value::Nil,
            Value::Array(vec![]),
            ints(&[now]),
            ints(&[1, 10, 9, 0, 6000]),
            ints(&[1, 10, 9, 0, 6000, -1]),
            ints(&[1, 10, 9, 0, now]),
            ints(&[2, 10, 9, 0, 1, now]),
            ints(&[1, -1, 9, 0, 1, now]),
            Value::Array(vec![Value::Okay, Value::Int(now)]),
            ints(&[1, 10, 9, 0, 6000, now, 3]),
        ] {
            assert!(
                matches!(
                    parse_reply(&bad, 1, 0),
                    Err(LimiterError::Backend(BackendError::BadReply(_)))
                ),
                "{bad:?}"
            );
        }
        let minute = 60_000_000;
        let (_, _, seen) =
            parse_reply(&ints(&[1, 10, 9, 0, 6000, now, 7, 2, 2, minute, 2]), 1, 1).unwrap();
        let two = Quota::per_minute(2);
        assert_eq!(
            seen,
            [LiveRecord {
                version: 7,
                quota: Some(two),
                mode: Some(Mode::Shadow)
            }]
        );
        let (_, _, seen) =
            parse_reply(&ints(&[1, 10, 9, 0, 6000, now, 7, 0, 2, minute, 1]), 1, 1).unwrap();
        assert_eq!(seen[0].quota, Some(two.burst(1)));
        let (_, _, seen) =
            parse_reply(&ints(&[1, 10, 9, 0, 6000, now, 0, 0, 0, 0, 0]), 1, 1).unwrap();
        assert_eq!(seen, [LiveRecord::default()]);
        for bad in [
            ints(&[1, 10, 9, 0, 6000, now]),
            ints(&[1, 10, 9, 0, 6000, now, 7, 2]),
            ints(&[1, 10, 9, 0, 6000, now, 7, 4, 0, 0, 0]),
            ints(&[1, 10, 9, 0, 6000, now, -7, 1, 0, 0, 0]),
            ints(&[1, 10, 9, 0, 6000, now, 7, 1, 0, minute, 2]),
            ints(&[1, 10, 9, 0, 6000, now, 7, 1, 2, 0, 2]),
            ints(&[1, 10, 9, 0, 6000, now, 7, 1, 1 << 32, minute, 2]),
            ints(&[1, 10, 9, 0, 6000, now, 7, 1, 2, minute, -2]),
        ] {
            assert!(parse_reply(&bad, 1, 1).is_err(), "{bad:?}");
        }
    }
}
