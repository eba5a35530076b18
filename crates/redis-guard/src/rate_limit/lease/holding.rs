//! A request's [`Holding`], from the response future to the end of its response body: its
//! concurrency leases ([`Rule::concurrency`](crate::rate_limit::Rule::concurrency)) and what its
//! response settles
//! ([`Rule::charged_after_response`](crate::rate_limit::Rule::charged_after_response),
//! [`Rule::refund_when`](crate::rate_limit::Rule::refund_when)).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{Response, StatusCode};

use super::concurrency::{warn_release, warn_settle};
use crate::rate_limit::Lease;
use crate::rate_limit::limiter::{BoxFuture, Settling};
use crate::rate_limit::{ActualCost, CostReport};

/// What a request's response settles, and what is known of it so far.
struct Settle {
    settling: Settling,
    report: CostReport,
    /// The response's status and the cost its head reports, once there is a response.
    response: Option<(StatusCode, Option<ActualCost>)>,
}

impl Settle {
    /// Per rule, the units to charge more (positive) or give back (negative), as things stand:
    /// only the rules with something to settle. The report wins over the response's head.
    fn deltas(&self) -> Vec<(Arc<str>, i64)> {
        let reported = self.report.reported();
        let (status, head) = match &self.response {
            Some((status, head)) => (Some(*status), head.as_ref()),
            None => (None, None),
        };
        self.settling
            .iter()
            .filter_map(|(rule, charged)| {
                let name = rule.name();
                let actual = reported.get(name).or_else(|| head?.get(name));
                let delta = rule.settlement(status, actual, *charged);
                (delta != 0).then(|| (Arc::clone(rule.name_arc()), delta))
            })
            .collect()
    }
}

/// A request's hold on its leases and its settlement, from the response future (while the
/// inner service runs) to the response body, which renews, settles and releases as
/// [`ResponseBody`](crate::rate_limit::ResponseBody) says; in the background too when the body
/// fails, the response future is dropped or the inner service fails.
pub(crate) struct Holding {
    lease: Arc<Lease>,
    /// Concurrency leases are among the receipts (not only receipts kept for settling).
    leases: bool,
    settle: Option<Settle>,
    /// Renewals are due every third of the expiry; made at the first poll (inside a runtime).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The settlement and release under way. In a `Mutex` only to make the body `Sync` (as
    /// `BodyExt::boxed` wants); reached through `get_mut`, never locked.
    finishing: Option<Mutex<BoxFuture<()>>>,
    /// The inner body reported its end.
    ended: bool,
    finished: bool,
}

impl Holding {
    /// The hold of `lease`, settling `settle`'s rules on what is reported to its report; `None`
    /// when there is nothing to hold (no lease, nothing to settle).
    pub(crate) fn new(lease: Arc<Lease>, settle: Option<(Settling, CostReport)>) -> Option<Self> {
        let leases = lease.holds_leases();
        let settle =
            settle
                .filter(|(settling, _)| !settling.is_empty())
                .map(|(settling, report)| Settle {
                    settling,
                    report,
                    response: None,
                });
        (leases || settle.is_some()).then(|| Self {
            lease,
            leases,
            settle,
            timer: None,
            finishing: None,
            ended: false,
            finished: false,
        })
    }

    pub(crate) fn settles(&self) -> bool {
        self.settle.is_some()
    }

    /// Notes the response: its status and the cost its head reports.
    pub(crate) fn responded<B>(&mut self, res: &Response<B>) {
        if let Some(settle) = &mut self.settle {
            let head = res.extensions().get::<ActualCost>().cloned();
            settle.response = Some((res.status(), head));
        }
    }

    /// Notes that the inner body ended: it is not polled again.
    pub(crate) fn end(&mut self) {
        self.ended = true;
    }

    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    /// Settles and releases in the background, and stops holding: in process at once, on
    /// Redis in a spawned task (a settlement or release already under way goes on there).
    pub(crate) fn finish_detached(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.timer = None;
        if let Some(finishing) = self.finishing.take() {
            let finishing = finishing
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner);
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(finishing)),
                Err(_) => tracing::warn!(
                    "a rate-limit settlement was dropped outside a Tokio runtime: the reservation stands, the leases expire on their own"
                ),
            }
            return;
        }
        if let Some(settle) = &self.settle {
            let deltas = settle.deltas();
            if !deltas.is_empty() {
                self.lease.settle_detached(&deltas);
            }
        }
        if self.leases {
            self.lease.release_detached();
        }
    }

    fn every(&self) -> Duration {
        (self.lease.expiry() / 3).max(Duration::from_millis(1))
    }

    /// Renews (in a spawned task) when a third of the expiry has passed since the last renewal,
    /// and arms the timer that wakes the body for the next one.
    pub(crate) fn poll_renew(&mut self, cx: &mut Context<'_>) {
        if !self.leases || self.finishing.is_some() || self.finished {
            return;
        }
        let every = self.every();
        let Some(timer) = self.timer.as_mut() else {
            if tokio::runtime::Handle::try_current().is_ok() {
                let mut timer = Box::pin(tokio::time::sleep(every));
                // Registers the waker.
                let _ = timer.as_mut().poll(cx);
                self.timer = Some(timer);
            }
            return;
        };
        while timer.as_mut().poll(cx).is_ready() {
            let renew = self.lease.renew();
            tokio::spawn(async move {
                match renew.await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::debug!("a concurrency lease had expired before its renewal");
                    }
                    Err(e) => tracing::warn!(error = %e, "renewing a concurrency lease failed"),
                }
            });
            let next = tokio::time::Instant::now() + every;
            timer.as_mut().reset(next);
        }
    }

    /// Settles what the response reported, then releases the leases, once; ready when done (a
    /// failure is logged: the reservation stands, the lease expires).
    pub(crate) fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.finished {
            return Poll::Ready(());
        }
        if self.finishing.is_none() {
            self.finishing = Some(Mutex::new(self.finish()));
        }
        if let Some(finishing) = self.finishing.as_mut() {
            let finishing = finishing.get_mut().unwrap_or_else(PoisonError::into_inner);
            ready!(finishing.as_mut().poll(cx));
        }
        self.finishing = None;
        self.timer = None;
        self.finished = true;
        Poll::Ready(())
    }

    /// The settlement (made first: the release gives the receipts up) and the release.
    fn finish(&self) -> BoxFuture<()> {
        let settled = self
            .settle
            .as_ref()
            .map(Settle::deltas)
            .filter(|deltas| !deltas.is_empty())
            .map(|deltas| self.lease.settle(&deltas));
        let released = self.leases.then(|| self.lease.release());
        Box::pin(async move {
            if let Some(settled) = settled
                && let Err(e) = settled.await
            {
                warn_settle(&e);
            }
            if let Some(released) = released
                && let Err(e) = released.await
            {
                warn_release(&e);
            }
        })
    }

    /// Whether it settled and released (or handed that to a task).
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.finish_detached();
    }
}

impl fmt::Debug for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holding")
            .field("lease", &self.lease)
            .field("settles", &self.settles())
            .finish_non_exhaustive()
    }
}
