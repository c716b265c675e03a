//! The Pyroscope sink: a bounded queue and one upload thread.
//!
//! [`PyroscopeSink::submit`] only enqueues (or, with the queue full, spills to the directory sink right
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
//! Shutdown: once [`shutdown`](PyroscopeSink::shutdown) starts, the thread stops backing off: each
//! remaining profile gets one attempt, and after the first failure the rest are spilled without trying.
//! Shortly before the deadline whatever is still queued or in flight is spilled by the shutdown itself, so
//! a store that hangs cannot keep a profile off the disk. A profile whose hanging upload still completes
//! after that is both on disk and delivered, and counted once (as spilled).

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use base64::Engine;

use super::directory::{DirectorySink, PendingProfile, SpillFate};
use super::request::{self, INGEST_PATH, PUSH_PATH};
use super::{EncodedProfile, ShutdownReport, SinkError};
use crate::export::metrics::{DropReason, FailureReason, SinkMetrics, SpoolOutcome};

/// Which Pyroscope API to upload through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PyroscopeApi {
    /// `POST /ingest?name=...&format=pprof` with the gzipped pprof as body (every Pyroscope version).
    Ingest,
    /// `POST /push.v1.PusherService/Push` (Connect, JSON): Grafana Pyroscope's native API.
    #[default]
    Push,
}

impl PyroscopeApi {
    /// `ingest` or `push`.
    pub fn name(self) -> &'static str {
        match self {
            PyroscopeApi::Ingest => "ingest",
            PyroscopeApi::Push => "push",
        }
    }
}

impl fmt::Display for PyroscopeApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PyroscopeApi {
    type Err = String;

    fn from_str(text: &str) -> Result<PyroscopeApi, String> {
        match text {
            "ingest" => Ok(PyroscopeApi::Ingest),
            "push" => Ok(PyroscopeApi::Push),
            _ => Err(format!("must be ingest or push, not {text:?}")),
        }
    }
}

/// Credentials sent with every upload (Pyroscope itself has none; a proxy in front of it, or Grafana
/// Cloud, checks them).
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Basic base64(user:password)`.
    Basic {
        /// User name.
        user: String,
        /// Password.
        password: String,
    },
    /// `Authorization: Bearer <token>`.
    Bearer(String),
}

impl Auth {
    /// The `Authorization` header value.
    pub fn header_value(&self) -> String {
        match self {
            Auth::Basic { user, password } => format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            ),
            Auth::Bearer(token) => format!("Bearer {token}"),
        }
    }
}

impl fmt::Debug for Auth {
    /// Never prints the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::Basic { user, .. } => {
                write!(f, "Basic {{ user: {user:?}, password: <redacted> }}")
            }
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

/// How to reach Pyroscope and how hard to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyroscopeConfig {
    /// Base URL, `http://` or `https://`, e.g. `http://pyroscope:4040` (a trailing `/` is ignored).
    pub url: String,
    /// Which API.
    pub api: PyroscopeApi,
    /// Credentials, if any.
    pub auth: Option<Auth>,
    /// `X-Scope-OrgID` for a multi-tenant Pyroscope.
    pub tenant: Option<String>,
    /// Limit on one whole request (connect, send, answer).
    pub timeout: Duration,
    /// Profiles waiting for upload before new ones are spilled.
    pub queue_capacity: usize,
    /// Attempts per profile, the first included.
    pub max_attempts: u32,
    /// Backoff bound after the first failure; doubles after each.
    pub backoff_initial: Duration,
    /// Largest backoff bound.
    pub backoff_max: Duration,
}

impl PyroscopeConfig {
    /// Defaults: 10 s timeout, 32 queued profiles, 4 attempts, backoff from 0.5 s up to 30 s.
    pub fn new(url: impl Into<String>, api: PyroscopeApi) -> PyroscopeConfig {
        PyroscopeConfig {
            url: url.into(),
            api,
            auth: None,
            tenant: None,
            timeout: Duration::from_secs(10),
            queue_capacity: 32,
            max_attempts: 4,
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
        }
    }

    /// The upper bound of the (jittered) wait after failed attempt number `attempt` (1-based).
    fn backoff_bound(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(20);
        self.backoff_initial
            .saturating_mul(factor)
            .min(self.backoff_max)
    }
}

/// What one attempt ended with.
#[derive(Debug)]
struct Failure {
    reason: FailureReason,
    retryable: bool,
    detail: String,
}

/// What the thread made of one profile.
enum Outcome {
    Delivered(Duration),
    GaveUp(DropReason),
}

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
    config: PyroscopeConfig,
    base: String,
    agent: ureq::Agent,
    spill: Option<Arc<DirectorySink>>,
    metrics: SinkMetrics,
    state: Mutex<State>,
    changed: Condvar,
    logged: Mutex<HashSet<FailureReason>>,
}

/// Uploads profiles to Pyroscope from a background thread; see the module docs.
pub struct PyroscopeSink {
    shared: Arc<Shared>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for PyroscopeSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PyroscopeSink")
            .field("config", &self.shared.config)
            .field("spill", &self.shared.spill.as_ref().map(|d| d.dir()))
            .finish_non_exhaustive()
    }
}

impl PyroscopeSink {
    /// Starts the upload thread. Profiles that cannot be delivered go to `spill` (if given).
    pub fn start(
        config: PyroscopeConfig,
        spill: Option<Arc<DirectorySink>>,
        metrics: SinkMetrics,
    ) -> Result<PyroscopeSink, SinkError> {
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
                .spawn(move || run(&shared))
                .map_err(|source| SinkError::Thread { source })?
        };
        Ok(PyroscopeSink {
            shared,
            worker: Mutex::new(Some(worker)),
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &PyroscopeConfig {
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

impl Drop for PyroscopeSink {
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

    fn log_failure(&self, failure: &Failure) {
        let first = self
            .logged
            .lock()
            .expect("failure log set poisoned")
            .insert(failure.reason);
        if first {
            tracing::warn!(
                "pyroscope upload to {} failed ({}): {} (further failures of this kind are only counted)",
                self.base,
                failure.reason,
                failure.detail
            );
        } else {
            tracing::debug!("pyroscope upload failed: {}", failure.detail);
        }
    }

    /// One request; `Ok` on a 2xx answer.
    fn send(&self, profile: &EncodedProfile) -> Result<(), Failure> {
        let config = &self.config;
        let result = match config.api {
            PyroscopeApi::Ingest => {
                let mut request = self
                    .agent
                    .post(format!("{}{INGEST_PATH}", self.base))
                    .header("Content-Type", "application/octet-stream");
                for (key, value) in request::ingest_query(profile) {
                    request = request.query(key, value);
                }
                if let Some(auth) = &config.auth {
                    request = request.header("Authorization", auth.header_value());
                }
                if let Some(tenant) = &config.tenant {
                    request = request.header("X-Scope-OrgID", tenant);
                }
                request.send(&profile.bytes[..])
            }
            PyroscopeApi::Push => {
                let body = request::push_body(
                    profile,
                    // A random (version 4) id, as Pyroscope's own clients give each sample.
                    &uuid::Uuid::new_v4().to_string(),
                );
                let mut request = self
                    .agent
                    .post(format!("{}{PUSH_PATH}", self.base))
                    .header("Content-Type", "application/json")
                    .header("Connect-Protocol-Version", "1");
                if let Some(auth) = &config.auth {
                    request = request.header("Authorization", auth.header_value());
                }
                if let Some(tenant) = &config.tenant {
                    request = request.header("X-Scope-OrgID", tenant);
                }
                request.send(body.as_bytes())
            }
        };
        let mut response = result.map_err(classify)?;
        let status = response.status().as_u16();
        // Read the answer (bounded) so the connection can be reused, and to quote an error.
        let answer = response
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_to_vec()
            .unwrap_or_default();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let detail = format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&answer[..answer.len().min(200)]).trim()
        );
        Err(match status {
            // Request timeout and rate limiting: worth another try.
            408 | 429 => Failure {
                reason: FailureReason::Http4xx,
                retryable: true,
                detail,
            },
            400..=499 => Failure {
                reason: FailureReason::Http4xx,
                retryable: false,
                detail,
            },
            500..=599 => Failure {
                reason: FailureReason::Http5xx,
                retryable: true,
                detail,
            },
            // 1xx/3xx (redirects are followed by ureq): unexpected, treat as a transport problem.
            _ => Failure {
                reason: FailureReason::Io,
                retryable: true,
                detail,
            },
        })
    }

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

/// Sorts a transport error into a failure reason; all of them are worth a retry.
fn classify(err: ureq::Error) -> Failure {
    use std::io::ErrorKind;
    let reason = match &err {
        ureq::Error::Timeout(_) => FailureReason::Timeout,
        ureq::Error::Io(io) => match io.kind() {
            ErrorKind::TimedOut | ErrorKind::WouldBlock => FailureReason::Timeout,
            ErrorKind::ConnectionRefused
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
            | ErrorKind::AddrNotAvailable => FailureReason::Refused,
            _ => FailureReason::Io,
        },
        ureq::Error::HostNotFound | ureq::Error::ConnectionFailed => FailureReason::Refused,
        _ => FailureReason::Io,
    };
    Failure {
        reason,
        retryable: true,
        detail: err.to_string(),
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
fn run(shared: &Shared) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let mut config = PyroscopeConfig::new("http://x", PyroscopeApi::Push);
        config.backoff_initial = Duration::from_millis(100);
        config.backoff_max = Duration::from_millis(500);
        let bounds: Vec<u128> = (1..=5)
            .map(|a| config.backoff_bound(a).as_millis())
            .collect();
        assert_eq!(bounds, [100, 200, 400, 500, 500]);
    }

    #[test]
    fn auth_headers_and_redaction() {
        let basic = Auth::Basic {
            user: "u".into(),
            password: "p".into(),
        };
        assert_eq!(basic.header_value(), "Basic dTpw");
        assert_eq!(Auth::Bearer("t".into()).header_value(), "Bearer t");
        assert!(!format!("{basic:?}").contains("\"p\""));
        assert!(!format!("{:?}", Auth::Bearer("secret".into())).contains("secret"));
    }

    #[test]
    fn bad_url_is_refused() {
        let err = PyroscopeSink::start(
            PyroscopeConfig::new("pyroscope:4040", PyroscopeApi::Ingest),
            None,
            SinkMetrics::detached("pyroscope"),
        )
        .unwrap_err();
        assert!(matches!(err, SinkError::BadUrl { .. }), "{err}");
    }
}
