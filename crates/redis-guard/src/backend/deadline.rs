//! The deadline of every Redis call, kept by one timer thread for the whole process.
//!
//! A Tokio timer per call costs a timer-wheel entry (registered on the first poll, removed when
//! the call ends) and a future around the call. Here a call that has to wait writes its deadline
//! and its task's waker into a shared table, and clears them when it ends: a short lock each
//! time, and no allocation once the table has grown to the number of calls in flight. The table
//! is split into shards, one chosen per thread, so that calls made on different threads take
//! different locks. One thread sleeps until the earliest deadline in the table, wakes the calls
//! that are due, and sleeps again; while calls keep ending in time, it wakes about once per
//! timeout.
//!
//! The thread belongs to no runtime, so a call ends by its deadline wherever it is polled: on
//! the runtime the backend was made on, on another, or on one without a timer. It wakes at most
//! once per [`SLACK`], so a call that gets no answer ends at most [`SLACK`] after its deadline
//! (plus the time the system takes to run the thread and the call's task), and never before it.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// How late the timer thread may wake a call past its deadline: it sleeps at least this long
/// between two rounds, so that calls due close together are woken together.
pub(crate) const SLACK: Duration = Duration::from_millis(1);

/// `call`, or `None` once `deadline` has passed without its answer.
pub(crate) fn within<F: Future>(call: Pin<&mut F>, deadline: Instant) -> Within<'_, F> {
    Within {
        call,
        deadline,
        wait: Wait::Unregistered,
    }
}

/// The future of [`within`].
pub(crate) struct Within<'a, F> {
    call: Pin<&'a mut F>,
    deadline: Instant,
    wait: Wait,
}

/// How a [`Within`] waits for its deadline.
enum Wait {
    /// Not yet: the call has not been pending.
    Unregistered,
    /// In a slot of the table.
    Slot(Slot),
    /// On a Tokio timer of its own, when the system refused the timer thread.
    Sleep(Pin<Box<tokio::time::Sleep>>),
}

/// Where a waiting call is in the table: its shard, and its index there.
#[derive(Clone, Copy)]
struct Slot {
    shard: usize,
    index: usize,
}

impl<F: Future> Future for Within<'_, F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Poll::Ready(out) = this.call.as_mut().poll(cx) {
            this.release();
            return Poll::Ready(Some(out));
        }
        let due = match &mut this.wait {
            Wait::Unregistered => match register(this.deadline, cx.waker()) {
                Some(slot) => {
                    this.wait = Wait::Slot(slot);
                    false
                }
                None => {
                    let mut sleep = Box::pin(tokio::time::sleep_until(this.deadline.into()));
                    let due = sleep.as_mut().poll(cx).is_ready();
                    this.wait = Wait::Sleep(sleep);
                    due
                }
            },
            Wait::Slot(slot) => renew(*slot, cx.waker()),
            Wait::Sleep(sleep) => sleep.as_mut().poll(cx).is_ready(),
        };
        if due {
            this.release();
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

impl<F> Within<'_, F> {
    /// Gives the call's slot back to the table, if it has one (and drops its timer, if it has
    /// one of its own).
    fn release(&mut self) {
        if let Wait::Slot(slot) = std::mem::replace(&mut self.wait, Wait::Unregistered) {
            let waker = {
                let mut shard = lock(slot.shard);
                shard.free.push(slot.index);
                shard.calls[slot.index].waker.take()
            };
            drop(waker);
        }
    }
}

impl<F> Drop for Within<'_, F> {
    fn drop(&mut self) {
        self.release();
    }
}

/// The calls waiting for an answer in one shard of the table, by index.
#[derive(Default)]
struct Shard {
    calls: Vec<Call>,
    /// Indexes no call holds.
    free: Vec<usize>,
    /// The earliest deadline the timer thread knows of in this shard: `None` when it knows of
    /// none (it then sleeps until a call registers, as far as this shard goes).
    wake_at: Option<Instant>,
}

/// One slot of a [`Shard`].
struct Call {
    deadline: Instant,
    /// The task to wake at `deadline`; `None` once woken (or in a free slot).
    waker: Option<Waker>,
}

/// A shard's lock on a cache line of its own, so that two threads' shards do not share one.
#[repr(align(128))]
#[derive(Default)]
struct Padded(Mutex<Shard>);

/// The table: a few shards per core (at most 64).
fn shards() -> &'static [Padded] {
    static SHARDS: OnceLock<Box<[Padded]>> = OnceLock::new();
    SHARDS.get_or_init(|| {
        let cores = thread::available_parallelism().map_or(1, usize::from);
        (0..(cores * 4).clamp(4, 64)).map(|_| Padded::default()).collect()
    })
}

/// The shard calls made on this thread go to: threads take shards in turn as they make their
/// first call.
fn home() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HOME: Cell<Option<usize>> = const { Cell::new(None) };
    }
    HOME.with(|home| {
        home.get().unwrap_or_else(|| {
            let shard = NEXT.fetch_add(1, Ordering::Relaxed) % shards().len();
            home.set(Some(shard));
            shard
        })
    })
}

fn lock(shard: usize) -> MutexGuard<'static, Shard> {
    // Nothing panics while holding the lock; a poisoned shard is still consistent.
    shards()[shard].0.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The timer thread, started by the first call that waits; `None` if it could not be started.
static TIMER: OnceLock<Option<Thread>> = OnceLock::new();

/// Puts a call due at `deadline` into a free slot of this thread's shard, to be woken through
/// `waker`; `None` when there is no timer thread.
fn register(deadline: Instant, waker: &Waker) -> Option<Slot> {
    let timer = TIMER
        .get_or_init(|| {
            thread::Builder::new()
                .name("rg-deadlines".to_owned())
                .spawn(run)
                .ok()
                .map(|handle| handle.thread().clone())
        })
        .as_ref()?;
    let call = Call {
        deadline,
        waker: Some(waker.clone()),
    };
    let index = home();
    let mut shard = lock(index);
    let slot = match shard.free.pop() {
        Some(slot) => {
            shard.calls[slot] = call;
            slot
        }
        None => {
            shard.calls.push(call);
            shard.calls.len() - 1
        }
    };
    // Calls of one backend arrive in deadline order: the thread rarely has to wake sooner.
    let sooner = shard.wake_at.is_none_or(|at| deadline < at);
    if sooner {
        shard.wake_at = Some(deadline);
    }
    drop(shard);
    if sooner {
        // Also when the thread is between two shards of a round: it then finds this call in
        // the next round, which the unpark makes immediate.
        timer.unpark();
    }
    Some(Slot {
        shard: index,
        index: slot,
    })
}

/// Whether the call in `slot`, polled again before its answer, is past its deadline (the timer
/// thread woke it); if not, it is to be woken through `waker` from now on.
fn renew(slot: Slot, waker: &Waker) -> bool {
    let mut shard = lock(slot.shard);
    match &mut shard.calls[slot.index].waker {
        None => true,
        Some(known) => {
            if !known.will_wake(waker) {
                known.clone_from(waker);
            }
            false
        }
    }
}

/// The timer thread: wakes the calls past their deadline, shard by shard, then sleeps until the
/// next deadline (at least [`SLACK`]), or until a call registers when none waits.
fn run() {
    let mut due = Vec::new();
    loop {
        let now = Instant::now();
        let mut wake_at: Option<Instant> = None;
        for index in 0..shards().len() {
            let mut shard = lock(index);
            let mut next: Option<Instant> = None;
            for call in &mut shard.calls {
                if call.waker.is_none() {
                    continue;
                }
                if call.deadline <= now {
                    due.extend(call.waker.take());
                } else {
                    next = Some(next.map_or(call.deadline, |next| next.min(call.deadline)));
                }
            }
            shard.wake_at = next.map(|next| next.max(now + SLACK));
            wake_at = match (wake_at, shard.wake_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            drop(shard);
            for waker in due.drain(..) {
                // A waker that panics must not stop the deadlines of every other call.
                let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
            }
        }
        match wake_at {
            Some(at) => thread::park_timeout(at.saturating_duration_since(Instant::now())),
            None => thread::park(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::pending;
    use std::pin::pin;
    use std::sync::{Arc, Condvar};
    use std::task::Wake;

    use super::*;

    /// A waker that records that it was woken, in a [`Signal`] it shares.
    #[derive(Default)]
    struct Woken(Arc<Signal>);

    #[derive(Default)]
    struct Signal {
        woken: Mutex<bool>,
        cond: Condvar,
    }

    impl Wake for Woken {
        fn wake(self: Arc<Self>) {
            let signal = Arc::clone(&self.0);
            // Let go of the waker first: once woken, nothing holds it.
            drop(self);
            *signal.woken.lock().unwrap() = true;
            signal.cond.notify_all();
        }
    }

    impl Woken {
        /// Whether it is woken within `limit`.
        fn within(&self, limit: Duration) -> bool {
            let woken = self.0.woken.lock().unwrap();
            *self.0.cond.wait_timeout_while(woken, limit, |w| !*w).unwrap().0
        }
    }

    /// The table holds a waiting call's waker and nothing more: a call dropped before its answer
    /// gives it back, and one past its deadline is woken through the waker it was polled with
    /// last (not an earlier one), then ends with `None` and gives its slot back.
    #[test]
    fn a_call_holds_its_last_waker_until_it_ends() {
        let (first, last) = (Arc::new(Woken::default()), Arc::new(Woken::default()));
        let poll = |within: Pin<&mut Within<'_, _>>, woken: &Arc<Woken>| {
            let waker = Waker::from(Arc::clone(woken));
            within.poll(&mut Context::from_waker(&waker))
        };
        {
            let later = Instant::now() + Duration::from_secs(60);
            let never = pin!(pending::<()>());
            let mut call = pin!(within(never, later));
            assert!(poll(call.as_mut(), &first).is_pending());
            assert_eq!(Arc::strong_count(&first), 2, "the table holds the waker");
        }
        assert_eq!(Arc::strong_count(&first), 1, "a dropped call gives it back");

        let soon = Instant::now() + Duration::from_millis(200);
        let never = pin!(pending::<()>());
        let mut call = pin!(within(never, soon));
        assert!(poll(call.as_mut(), &first).is_pending());
        assert!(poll(call.as_mut(), &last).is_pending());
        assert_eq!(Arc::strong_count(&first), 1, "replaced by the last waker");
        assert!(last.within(Duration::from_secs(5)), "woken at the deadline");
        assert!(Instant::now() >= soon);
        assert!(!*first.0.woken.lock().unwrap());
        assert_eq!(poll(call.as_mut(), &last), Poll::Ready(None));
        assert_eq!(Arc::strong_count(&last), 1, "nothing held once it ended");
    }

    /// Many calls that never answer, polled on runtimes without Tokio's timer on four threads
    /// (so in four shards of the table): each ends after its deadline, and at most a scheduling
    /// margin later (generous: the other tests run beside it on a loaded machine).
    #[test]
    fn calls_that_never_answer_end_at_their_deadlines_without_a_runtime_timer() {
        let (sender, ended) = std::sync::mpsc::channel();
        for _ in 0..4 {
            let sender = sender.clone();
            thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("runtime");
                let calls = (1..=50u64).map(|i| async move {
                    let deadline = Instant::now() + Duration::from_millis(10 * (i % 5) + 20);
                    let call = pin!(pending::<()>());
                    let outcome = within(call, deadline).await;
                    (outcome, deadline, Instant::now())
                });
                let _ = sender.send(runtime.block_on(futures_util::future::join_all(calls)));
            });
        }
        for _ in 0..4 {
            // A deadline never kept would leave the calls waiting forever: fail instead.
            let ended = ended
                .recv_timeout(Duration::from_secs(10))
                .expect("the calls end");
            for (outcome, deadline, ended) in ended {
                assert_eq!(outcome, None);
                assert!(ended >= deadline, "ended before its deadline");
                assert!(
                    ended - deadline < SLACK + Duration::from_millis(200),
                    "ended {:?} after its deadline",
                    ended - deadline
                );
            }
        }
    }

    /// A call that answers in time gives its answer and its slot back.
    #[test]
    fn an_answer_in_time_is_the_outcome() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let deadline = Instant::now() + Duration::from_secs(5);
            let call = pin!(async {
                tokio::time::sleep(Duration::from_millis(5)).await;
                7
            });
            assert_eq!(within(call, deadline).await, Some(7));
        });
    }
}
