//! The upload thread: takes the oldest queued profile and tries it (with retries and backoff) until
//! it is delivered or given up, then spilled; with the queue empty, offers the spool's oldest profile
//! to the store, one attempt at a time.

use std::time::{Duration, Instant};

use super::{EncodedProfile, Shared, SpoolRetry};
use crate::export::metrics::{DropReason, SpoolOutcome};
use crate::export::sinks::directory::PendingProfile;

/// What the thread made of one profile.
enum Outcome {
    Delivered(Duration),
    GaveUp(DropReason),
}

impl Shared {
    /// Tries `profile` until delivered, given up, or the shutdown abandons it.
    fn deliver(&self, profile: &EncodedProfile) -> Option<Outcome> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            {
                let state = self.lock();
                if state.abandoned {
                    return None;
                }
                if state.closing && state.store_failed_while_closing {
                    return Some(Outcome::GaveUp(DropReason::Shutdown));
                }
            }
            let started = Instant::now();
            let failure = match self.send(profile) {
                Ok(()) => return Some(Outcome::Delivered(started.elapsed())),
                Err(failure) => failure,
            };
            self.metrics.failure(failure.reason, started.elapsed());
            self.log_failure(&failure);
            if !failure.retryable {
                return Some(Outcome::GaveUp(DropReason::Rejected));
            }
            if attempt >= self.config.max_attempts {
                return Some(Outcome::GaveUp(DropReason::RetriesExhausted));
            }
            let mut state = self.lock();
            if state.closing {
                state.store_failed_while_closing = true;
                return Some(Outcome::GaveUp(DropReason::Shutdown));
            }
            self.metrics.retry();
            let bound = self.config.backoff_bound(attempt);
            let delay = bound.mul_f64(rand::random::<f64>());
            let (state, _) = self
                .changed
                .wait_timeout_while(state, delay, |state| !state.closing)
                .expect("upload state poisoned");
            if state.closing {
                // Shutdown began during the backoff: the store is failing, do not wait for it.
                drop(state);
                self.lock().store_failed_while_closing = true;
                return Some(Outcome::GaveUp(DropReason::Shutdown));
            }
        }
    }
}

/// What the upload thread does next.
enum Work {
    /// A live profile from the queue.
    Live(EncodedProfile),
    /// The oldest spilled profile.
    Spooled(PendingProfile),
}

/// The upload thread.
pub(super) fn run(shared: &Shared) {
    loop {
        let work = {
            let mut state = shared.lock();
            loop {
                if state.abandoned || (state.closing && state.queue.is_empty()) {
                    state.worker_done = true;
                    shared.changed.notify_all();
                    return;
                }
                if let Some(profile) = state.queue.pop_front() {
                    shared.metrics.set_queue_length(state.queue.len());
                    state.in_flight = Some(profile.clone());
                    break Work::Live(profile);
                }
                // The queue is empty: the spool's turn, unless it is backing off or shutting down.
                let now = Instant::now();
                let wait = match state.spool_retry.not_before {
                    Some(at) if at > now => Some(at - now),
                    _ => None,
                };
                if wait.is_none() && !state.closing {
                    if let Some(pending) = shared.spill.as_ref().and_then(|d| d.next_pending()) {
                        state.redelivering = true;
                        break Work::Spooled(pending);
                    }
                }
                state = match wait {
                    Some(wait) => {
                        shared
                            .changed
                            .wait_timeout(state, wait)
                            .expect("upload state poisoned")
                            .0
                    }
                    None => shared.changed.wait(state).expect("upload state poisoned"),
                };
            }
        };
        match work {
            Work::Live(profile) => deliver_live(shared, &profile),
            Work::Spooled(pending) => redeliver(shared, pending),
        }
        shared.changed.notify_all();
    }
}

/// Delivers one queued profile (with retries), or spills it.
fn deliver_live(shared: &Shared, profile: &EncodedProfile) {
    let outcome = shared.deliver(profile);
    let mut state = shared.lock();
    match &outcome {
        // The store is up: the spool may follow at once.
        Some(Outcome::Delivered(_)) => state.spool_retry = SpoolRetry::default(),
        // The store is down: the spool waits too.
        Some(Outcome::GaveUp(_)) => state.spool_retry = shared.spool_backoff(&state.spool_retry),
        None => {}
    }
    // None: the shutdown took the profile (and spilled it) while we were busy.
    if state.in_flight.take().is_some() {
        match outcome {
            Some(Outcome::Delivered(elapsed)) => {
                shared.metrics.success(profile.bytes.len(), elapsed);
                if state.closing {
                    state.report.delivered += 1;
                }
            }
            Some(Outcome::GaveUp(reason)) => shared.spill_or_drop(&mut state, profile, reason),
            None => shared.spill_or_drop(&mut state, profile, DropReason::Shutdown),
        }
    }
}

/// Offers one spilled profile to the store, once.
fn redeliver(shared: &Shared, pending: PendingProfile) {
    let Some(directory) = &shared.spill else {
        return;
    };
    let outcome = match &pending.profile {
        Err(err) => {
            tracing::warn!(
                "cannot upload spilled profile {}: {}",
                directory.dir().join(&pending.name).display(),
                err
            );
            Some(SpoolOutcome::Unreadable)
        }
        Ok(profile) => {
            let started = Instant::now();
            match shared.send(profile) {
                Ok(()) => Some(SpoolOutcome::Delivered),
                Err(failure) => {
                    shared.metrics.failure(failure.reason, started.elapsed());
                    shared.log_failure(&failure);
                    // Retryable: still pending, the store is down.
                    (!failure.retryable).then_some(SpoolOutcome::Rejected)
                }
            }
        }
    };
    let mut state = shared.lock();
    state.redelivering = false;
    match outcome {
        Some(SpoolOutcome::Delivered) => state.spool_retry = SpoolRetry::default(),
        None => state.spool_retry = shared.spool_backoff(&state.spool_retry),
        Some(_) => {}
    }
    if let Some(outcome) = outcome {
        directory.settle(&pending.name, outcome);
    }
}

impl Shared {
    /// The spool's next backoff after one more failure: jittered, growing like the retries' bound.
    fn spool_backoff(&self, retry: &SpoolRetry) -> SpoolRetry {
        let failures = retry.failures.saturating_add(1);
        let bound = self.config.backoff_bound(failures);
        SpoolRetry {
            not_before: Some(Instant::now() + bound.mul_f64(rand::random::<f64>())),
            failures,
        }
    }
}
