//! The evaluation script's reply, parsed.

use redis::Value;

use super::algorithm::RuleState;
use super::limiter::LimiterError;
use crate::backend::BackendError;

/// Parses `{ {allowed, limit, remaining, retry_after_ms, reset_after_ms}, ..., now_us }`: the
/// rules' states and the Redis time (µs) they were decided at.
pub(crate) fn parse_reply(
    reply: &Value,
    expected: usize,
) -> Result<(Vec<RuleState>, u64), LimiterError> {
    let bad = |what: &str| LimiterError::from(BackendError::BadReply(format!("{what}: {reply:?}")));
    let Value::Array(rows) = reply else {
        return Err(bad("expected an array"));
    };
    let Some((Value::Int(now), rows)) = rows.split_last() else {
        return Err(bad("expected the time last"));
    };
    let now = u64::try_from(*now).map_err(|_| bad("expected a non-negative time"))?;
    if rows.len() != expected {
        return Err(bad(&format!("expected {expected} rows")));
    }
    let states = rows
        .iter()
        .map(|row| {
            let Value::Array(cells) = row else {
                return Err(bad("expected a row array"));
            };
            let ints: Vec<u64> = cells
                .iter()
                .map(|c| match c {
                    Value::Int(i) => u64::try_from(*i).ok(),
                    _ => None,
                })
                .collect::<Option<_>>()
                .ok_or_else(|| bad("expected non-negative integers"))?;
            let [allowed, limit, remaining, retry_ms, reset_ms] = ints[..] else {
                return Err(bad("expected 5 integers per row"));
            };
            if allowed > 1 {
                return Err(bad("`allowed` must be 0 or 1"));
            }
            Ok(RuleState::from_parts(
                allowed == 1,
                limit,
                remaining,
                retry_ms,
                reset_ms,
            ))
        })
        .collect::<Result<_, _>>()?;
    Ok((states, now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_replies_that_do_not_fit() {
        let row = |v: Vec<i64>| Value::Array(v.into_iter().map(Value::Int).collect());
        let now = Value::Int(1_700_000_000_000_000);
        let (states, at) = parse_reply(
            &Value::Array(vec![row(vec![1, 10, 9, 0, 6000]), now.clone()]),
            1,
        )
        .unwrap();
        assert_eq!((states.len(), at), (1, 1_700_000_000_000_000));
        for bad in [
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![now.clone()]),
            Value::Array(vec![row(vec![1, 10, 9, 0, 6000])]),
            Value::Array(vec![row(vec![1, 10, 9, 0, 6000]), Value::Int(-1)]),
            Value::Array(vec![row(vec![1, 10, 9, 0]), now.clone()]),
            Value::Array(vec![row(vec![2, 10, 9, 0, 1]), now.clone()]),
            Value::Array(vec![row(vec![1, -1, 9, 0, 1]), now.clone()]),
            Value::Array(vec![Value::Okay, now.clone()]),
        ] {
            assert!(
                matches!(
                    parse_reply(&bad, 1),
                    Err(LimiterError::Backend(BackendError::BadReply(_)))
                ),
                "{bad:?}"
            );
        }
    }
}
