//! One algorithm step in Rust (the memory backend): the dispatcher to each algorithm's step,
//! charge and refund, over the vocabulary of `state.rs`.

use std::collections::VecDeque;

use super::state::{Commit, Params, State, Step};
use super::{
    Algorithm, concurrency, fixed_window, gcra, sliding_counter, sliding_log, token_bucket,
};

/// Runs one algorithm step in Rust, the twin of the Lua function of the same name. A state of
/// another algorithm (the rule changed its algorithm) counts as no state, as in Redis where a
/// value that does not parse is ignored. `None` for custom algorithms, which exist only in Lua.
/// Sliding-log and lease trimming happen in place (Redis trims even when it denies, too); everything else
/// only reads `state`.
#[allow(
    clippy::needless_pass_by_value,
    reason = "an Option<&mut State> is a handle; clippy mistakes it for a value"
)]
pub(crate) fn step(state: Option<&mut State>, now: u64, p: &Params) -> Option<Step> {
    Some(match p.algorithm {
        Algorithm::Custom(_) => return None,
        Algorithm::Gcra => gcra::step(state.as_deref(), now, p),
        Algorithm::FixedWindow => fixed_window::step(state.as_deref(), now, p),
        Algorithm::SlidingLog => match state {
            Some(State::Log(log)) => sliding_log::step(log, now, p),
            _ => sliding_log::step(&mut VecDeque::new(), now, p),
        },
        Algorithm::SlidingCounter => sliding_counter::step(state.as_deref(), now, p),
        Algorithm::TokenBucket => token_bucket::step(state.as_deref(), now, p),
        Algorithm::Concurrency => match state {
            Some(State::Leases(leases)) => concurrency::step(leases, now, p),
            _ => concurrency::step(&mut Vec::new(), now, p),
        },
    })
}

/// A probe's reset (cost 0 records nothing, so the state as it stands): how long until the key
/// is as fresh as a new one, the twin of the scripts' `p.probe` branches. `state` is what
/// [`step`] left (a sliding log trimmed). `None` for the algorithms whose reset does not
/// depend on the cost (concurrency) or that report their own (custom).
pub(crate) fn standing_reset(state: Option<&State>, now: u64, p: &Params) -> Option<u64> {
    Some(match (&p.algorithm, state) {
        (Algorithm::Custom(_) | Algorithm::Concurrency, _) => return None,
        (Algorithm::Gcra, state) => gcra::standing_reset(state, now, p),
        (Algorithm::FixedWindow, state) => fixed_window::standing_reset(state, now, p),
        (Algorithm::SlidingLog, Some(State::Log(log))) => log
            .back()
            .map_or(0, |&t| (t + p.period_us).saturating_sub(now)),
        (Algorithm::SlidingLog, _) => 0,
        (Algorithm::SlidingCounter, state) => sliding_counter::standing_reset(state, now, p),
        (Algorithm::TokenBucket, state) => token_bucket::standing_reset(state, now, p),
    })
}

/// What a refund leaves of a key's state in the memory backend.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refunded {
    /// Store this, as a commit does.
    Store(Commit),
    /// The state was changed in place (or replaced); its deadline stands (Redis' `KEEPTTL`).
    Kept,
    /// Nothing is left: remove the key.
    Delete,
    /// Nothing to give back.
    Nothing,
}

/// Charges `p.cost` more units to a key whatever is left (a cost reported after the response),
/// the twin of the `<algorithm>_charge` Lua functions: how to record it. `None` for custom
/// algorithms, which have no charge.
pub(crate) fn charge(state: Option<&State>, now: u64, p: &Params) -> Option<Commit> {
    Some(match p.algorithm {
        Algorithm::Custom(_) | Algorithm::Concurrency => return None,
        Algorithm::Gcra => gcra::charge(state, now, p),
        Algorithm::FixedWindow => fixed_window::charge(state, now, p),
        Algorithm::SlidingLog => Commit::Append {
            at: now,
            n: p.cost.min(p.limit),
            ttl: p.period_us,
        },
        Algorithm::SlidingCounter => sliding_counter::charge(state, now, p),
        Algorithm::TokenBucket => token_bucket::charge(state, now, p),
    })
}

/// Gives back `p.cost` units of what a request admitted at `charged_at` took, the twin of the
/// `<algorithm>_refund` Lua functions. A state of another algorithm is left alone.
pub(crate) fn refund(state: &mut State, now: u64, p: &Params, charged_at: u64) -> Refunded {
    if let (Algorithm::SlidingLog, State::Log(log)) = (&p.algorithm, &mut *state) {
        // The request's units are the entries logged at its time; any of them will do.
        let mut left = p.cost;
        log.retain(|&t| {
            let drop = t == charged_at && left > 0;
            left -= u64::from(drop);
            !drop
        });
        return Refunded::Kept;
    }
    let replaced = match (&p.algorithm, &*state) {
        (Algorithm::Gcra, State::Gcra { .. }) => {
            return gcra::refund(state, now, p).map_or(Refunded::Delete, Refunded::Store);
        }
        (Algorithm::TokenBucket, State::Bucket { .. }) => {
            return token_bucket::refund(state, now, p).map_or(Refunded::Delete, Refunded::Store);
        }
        (Algorithm::FixedWindow, State::Window { .. }) => {
            fixed_window::refund(state, now, p, charged_at)
        }
        (Algorithm::SlidingCounter, State::Counter { .. }) => {
            sliding_counter::refund(state, p, charged_at)
        }
        _ => None,
    };
    match replaced {
        Some(new) => {
            *state = new;
            Refunded::Kept
        }
        None => Refunded::Nothing,
    }
}
