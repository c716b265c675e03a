//! The upload sink (Pyroscope through its own APIs, or any OTLP profiles receiver): a bounded
//! queue and one upload thread.
//!
//! [`UploadSink::submit`] only enqueues (or, with the queue full, spills to the directory sink right
//! away: a local write, never a network wait). The thread takes the oldest profile and sends it
//! ([`super::request`] has the exact request formats), with a per-request timeout. A timeout, a refused
//! connection, a 5xx, 408 or 429 is retried after an exponential backoff with full jitter (a random delay
//! between zero and `backoff_initial * 2^attempt`, capped at `backoff_max`), up to `max_attempts`; any
//! other 4xx means the store will never take this profile. Either way a profile that is not delivered is
//! spilled to the directory (or, without one, dropped) — and counted.
//!
//! Spilled profiles are not left behind: the directory is a spool (see [`super::directory`]), and when the
//! queue is empty the thread offers the store the oldest spilled profile, one attempt at a time. A failure
//! means the store is still down: the next try waits a backoff (growing like the retries'); a delivery
//! means it is back, and the next spilled profile follows at once. Live profiles go first.
//!
//! Shutdown: once [`shutdown`](UploadSink::shutdown) starts, the thread stops backing off: each
//! remaining profile gets one attempt, and after the first failure the rest are spilled without trying.
//! Shortly before the deadline whatever is still queued or in flight is spilled by the shutdown itself, so
//! a store that hangs cannot keep a profile off the disk. A profile whose hanging upload still completes
//! after that is both on disk and delivered, and counted once (as spilled).
//!
//! The parts: `config` says where the store is and how hard to try, `transport` sends one request
//! and sorts its failure, `worker` is the upload thread (retries, spool redelivery); this module holds
//! the queue and the state the thread and the caller share, and the shutdown.

mod config;
mod transport;
mod worker;

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::directory::{DirectorySink, SpillFate};
use super::{EncodedProfile, ShutdownReport, SinkError};
use crate::export::metrics::{DropReason, FailureReason, SinkMetrics};

pub use config::{Auth, Headers, UploadApi, UploadConfig};

/// The spool's backoff: after a failed offer, wait before the next one.
#[derive(Debug, Default)]
struct SpoolRetry {
    not_before: Option<Instant>,
    failures: u32,
}

#[derive(Default)]
struct State {
    queue: VecDeque<EncodedProfile>,
    /// The profile being uploaded; taken by a shutdown that runs out of time.
    in_flight: Option<EncodedProfile>,
    closing: bool,
    /// The shutdown deadline is (nearly) reached: the thread must stop.
    abandoned: bool,
    /// While closing, the store failed once: spill the rest without trying.
    store_failed_while_closing: bool,
    /// A spilled profile is being offered to the store (it stays on disk meanwhile).
    redelivering: bool,
    /// When the spool may be offered to the store again, and how many offers in a row failed.
    spool_retry: SpoolRetry,
    worker_done: bool,
    report: ShutdownReport,
}

struct Shared {
    config: UploadConfig,
    base: String,
    agent: ureq::Agent,
    spill: Option<Arc<DirectorySink>>,
    metrics: SinkMetrics,
    state: Mutex<State>,
    changed: Condvar,
    logged: Mutex<HashSet<FailureReason>>,
}

/// Uploads profiles to Pyroscope or an OTLP receiver from a background thread; see the module
/// docs.
pub struct UploadSink {
    shared: Arc<Shared>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for UploadSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UploadSink")
            .field("config", &self.shared.config)
            .field("spill", &self.shared.spill.as_ref().map(|d| d.dir()))
            .finish_non_exhaustive()
    }
}

impl UploadSink {
    /// Starts the upload thread. Profiles that cannot be delivered go to `spill` (if given).
    pub fn start(
        config: UploadConfig,
        spill: Option<Arc<DirectorySink>>,
        metrics: SinkMetrics,
    ) -> Result<UploadSink, SinkError> {
        let base = config.url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(SinkError::BadUrl { url: config.url });
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .user_agent(format!("pyagent/{}", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let shared = Arc::new(Shared {
            config,
            base,
            agent,
            spill,
            metrics,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            logged: Mutex::new(HashSet::new()),
        });
        let worker = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name("pyagent-upload".into())
                .spawn(move || worker::run(&shared))
                .map_err(|source| SinkError::Thread { source })?
        };
        Ok(UploadSink {
            shared,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &UploadConfig {
        &self.shared.config
    }

    /// The counters of this sink.
    pub fn metrics(&self) -> &SinkMetrics {
        &self.shared.metrics
    }

    /// Profiles waiting (not counting the one being uploaded).
    pub fn queue_len(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Queues `profile` for upload, or spills it when the queue is full (or the sink is shut down).
    pub fn submit(&self, profile: EncodedProfile) {
        let shared = &self.shared;
        shared.metrics.submitted();
        let mut state = shared.lock();
        if state.closing {
            // Too late for an upload: the service is stopping.
            shared.spill_or_drop(&mut state, &profile, DropReason::Shutdown);
            return;
        }
        if state.queue.len() >= shared.config.queue_capacity.max(1) {
            shared.spill_or_drop(&mut state, &profile, DropReason::QueueFull);
            return;
        }
        state.queue.push_back(profile);
        shared.metrics.set_queue_length(state.queue.len());
        shared.changed.notify_all();
    }

    /// Delivers what is queued until shortly before `deadline`, then spills the rest (including a
    /// request still hanging). Returns what became of the profiles queued at shutdown or submitted after.
    pub fn shutdown(&self, deadline: Instant) -> ShutdownReport {
        let shared = &self.shared;
        // Keep a little time to write the spilled files.
        let remaining = deadline.saturating_duration_since(Instant::now());
        let spill_at = deadline - (remaining / 10).min(Duration::from_millis(500));
        let mut state = shared.lock();
        state.closing = true;
        shared.changed.notify_all();
        loop {
            if state.worker_done || (state.queue.is_empty() && state.in_flight.is_none()) {
                break;
            }
            let now = Instant::now();
            if now >= spill_at {
                break;
            }
            state = shared
                .changed
                .wait_timeout(state, spill_at - now)
                .expect("upload state poisoned")
                .0;
        }
        state.abandoned = true;
        shared.changed.notify_all();
        let mut left: Vec<EncodedProfile> = state.queue.drain(..).collect();
        // A spilled profile being offered is safe on disk; its request may hang like any other.
        let stuck = state.in_flight.is_some() || state.redelivering;
        left.extend(state.in_flight.take());
        for profile in &left {
            shared.spill_or_drop(&mut state, profile, DropReason::Shutdown);
        }
        shared.metrics.set_queue_length(0);
        let report = state.report;
        if !stuck {
            // The thread is idle or between two profiles: it exits at once.
            let timeout = deadline.saturating_duration_since(Instant::now());
            state = shared
                .changed
                .wait_timeout_while(state, timeout, |state| !state.worker_done)
                .expect("upload state poisoned")
                .0;
        }
        let done = state.worker_done;
        drop(state);
        if done {
            if let Some(worker) = self.worker.lock().expect("worker handle poisoned").take() {
                let _ = worker.join();
            }
        }
        // Otherwise the thread is stuck in a request; it sees `abandoned` when that returns, and the
        // process is about to exit anyway.
        report
    }
}

impl Drop for UploadSink {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if !state.closing {
            // Dropped without shutdown: stop the thread, spill what is queued.
            drop(state);
            self.shutdown(Instant::now());
        } else {
            state.abandoned = true;
            self.shared.changed.notify_all();
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("upload state poisoned")
    }

    /// Spills `profile` to the directory, or counts it dropped for `reason` without one.
    fn spill_or_drop(&self, state: &mut State, profile: &EncodedProfile, reason: DropReason) {
        let closing = state.closing;
        // A profile the store refused for good is kept, not offered again.
        let fate = if reason == DropReason::Rejected {
            SpillFate::Keep
        } else {
            SpillFate::Redeliver
        };
        match &self.spill {
            Some(directory) => match directory.spill(profile, fate) {
                Ok(_) => {
                    self.metrics.spill();
                    if closing {
                        state.report.spilled += 1;
                    }
                }
                Err(err) => {
                    directory.warn_once(&err);
                    self.metrics.drop_profile(DropReason::SpillFailed);
                    if closing {
                        state.report.dropped += 1;
                    }
                }
            },
            None => {
                self.metrics.drop_profile(reason);
                if closing {
                    state.report.dropped += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_url_is_refused() {
        let err = UploadSink::start(
            UploadConfig::new("pyroscope:4040", UploadApi::Ingest),
            None,
            SinkMetrics::detached("pyroscope"),
        )
        .unwrap_err();
        assert!(matches!(err, SinkError::BadUrl { .. }), "{err}");
    }
}
