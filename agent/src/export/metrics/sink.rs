//! The counters every sink keeps (delivered, failed by reason, retried, spilled, dropped, bytes, latency,
//! queue length), as one family per counter with a `sink` label, and the reasons they are counted by.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Registry};

use super::registration::{counter_vec, gauge_vec, register};
use super::saturating_i64;

/// Why one delivery attempt of a sink failed (`pyagent_sink_failures_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// No answer within the per-request timeout.
    Timeout,
    /// Nothing listens at the address (connection refused, host unreachable).
    Refused,
    /// The store refused the request (HTTP 4xx): retrying will not help, except for 408 and 429.
    Http4xx,
    /// The store failed (HTTP 5xx).
    Http5xx,
    /// Any other transport error (TLS, DNS, reset connection).
    Io,
    /// A file could not be written (directory sink).
    Write,
}

impl FailureReason {
    /// Every reason, in the order they are exported.
    pub const ALL: [FailureReason; 6] = [
        FailureReason::Timeout,
        FailureReason::Refused,
        FailureReason::Http4xx,
        FailureReason::Http5xx,
        FailureReason::Io,
        FailureReason::Write,
    ];

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Timeout => "timeout",
            FailureReason::Refused => "refused",
            FailureReason::Http4xx => "4xx",
            FailureReason::Http5xx => "5xx",
            FailureReason::Io => "io",
            FailureReason::Write => "write",
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a sink gave a profile up without delivering or spilling it (`pyagent_sink_dropped_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The upload queue was full and there is no directory to spill to.
    QueueFull,
    /// Every retry failed and there is no directory to spill to.
    RetriesExhausted,
    /// The store refused the profile (4xx) and there is no directory to spill to.
    Rejected,
    /// The shutdown deadline passed before delivery and there is no directory to spill to.
    Shutdown,
    /// Spilling to the directory failed too.
    SpillFailed,
    /// The window could not be encoded as pprof.
    Encode,
    /// Writing the profile's file failed (directory sink, archiving).
    WriteFailed,
}

impl DropReason {
    /// Every reason, in the order they are exported.
    pub const ALL: [DropReason; 7] = [
        DropReason::QueueFull,
        DropReason::RetriesExhausted,
        DropReason::Rejected,
        DropReason::Shutdown,
        DropReason::SpillFailed,
        DropReason::Encode,
        DropReason::WriteFailed,
    ];

    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::RetriesExhausted => "retries_exhausted",
            DropReason::Rejected => "rejected",
            DropReason::Shutdown => "shutdown",
            DropReason::SpillFailed => "spill_failed",
            DropReason::Encode => "encode",
            DropReason::WriteFailed => "write_failed",
        }
    }
}

/// Why the directory sink deleted a file (`pyagent_directory_evictions_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvictReason {
    /// The directory held more bytes than allowed.
    Size,
    /// The file was older than allowed.
    Age,
}

impl EvictReason {
    /// The `reason` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            EvictReason::Size => "size",
            EvictReason::Age => "age",
        }
    }
}

/// How a spilled profile left the spool (`pyagent_spool_settled_total{outcome}`). Together with the
/// profiles still pending, these account for every profile spilled (or found spilled at start) once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpoolOutcome {
    /// Uploaded after all.
    Delivered,
    /// Deleted by the directory's bounds (size or age) before it could be delivered.
    Expired,
    /// The store refused it for good (4xx); the file is kept but no longer offered.
    Rejected,
    /// The file vanished or carries no metadata to upload it with (written by an older version).
    Unreadable,
}

impl SpoolOutcome {
    /// Every outcome, in the order they are exported.
    pub const ALL: [SpoolOutcome; 4] = [
        SpoolOutcome::Delivered,
        SpoolOutcome::Expired,
        SpoolOutcome::Rejected,
        SpoolOutcome::Unreadable,
    ];

    /// The `outcome` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            SpoolOutcome::Delivered => "delivered",
            SpoolOutcome::Expired => "expired",
            SpoolOutcome::Rejected => "rejected",
            SpoolOutcome::Unreadable => "unreadable",
        }
    }
}

/// Which sinks are failing right now, and why: what `/healthz` reports. A sink sets its problem when a
/// delivery fails and clears it when one succeeds.
#[derive(Debug, Clone, Default)]
pub struct SinkHealth(Arc<Mutex<BTreeMap<String, String>>>);

impl SinkHealth {
    /// The failing sinks, each as `sink: what failed`, sorted by sink.
    pub fn problems(&self) -> Vec<String> {
        self.0
            .lock()
            .expect("sink health poisoned")
            .iter()
            .map(|(sink, problem)| format!("{sink}: {problem}"))
            .collect()
    }

    fn set(&self, sink: &str, problem: Option<String>) {
        let mut problems = self.0.lock().expect("sink health poisoned");
        match problem {
            Some(problem) => problems.insert(sink.to_owned(), problem),
            None => problems.remove(sink),
        };
    }
}

/// The metric families shared by all sinks, each with a `sink` label.
pub(super) struct SinkFamilies {
    submitted: IntCounterVec,
    successes: IntCounterVec,
    failures: IntCounterVec,
    retries: IntCounterVec,
    spilled: IntCounterVec,
    dropped: IntCounterVec,
    bytes: IntCounterVec,
    latency: HistogramVec,
    queue: IntGaugeVec,
    evictions: IntCounterVec,
    spool_recovered: IntCounterVec,
    spool_settled: IntCounterVec,
    spool_pending: IntGaugeVec,
    health: SinkHealth,
}

impl SinkFamilies {
    pub(super) fn register(registry: &Registry) -> SinkFamilies {
        // 5 ms .. ~41 s: a local write takes milliseconds, an upload over a slow link tens of seconds.
        let buckets = prometheus::exponential_buckets(0.005, 2.0, 14).expect("valid buckets");
        SinkFamilies {
            submitted: counter_vec(
                registry,
                "pyagent_sink_profiles_total",
                "Profiles handed to a sink.",
                &["sink"],
            ),
            successes: counter_vec(
                registry,
                "pyagent_sink_successes_total",
                "Profiles a sink delivered (uploaded, or written to disk).",
                &["sink"],
            ),
            failures: counter_vec(
                registry,
                "pyagent_sink_failures_total",
                "Failed delivery attempts, by reason (timeout, refused, 4xx, 5xx, io, write).",
                &["sink", "reason"],
            ),
            retries: counter_vec(
                registry,
                "pyagent_sink_retries_total",
                "Delivery attempts repeated after a failure.",
                &["sink"],
            ),
            spilled: counter_vec(
                registry,
                "pyagent_sink_spilled_total",
                "Profiles a sink could not deliver and wrote to the output directory instead.",
                &["sink"],
            ),
            dropped: counter_vec(
                registry,
                "pyagent_sink_dropped_total",
                "Profiles a sink gave up on, neither delivered nor spilled, by reason.",
                &["sink", "reason"],
            ),
            bytes: counter_vec(
                registry,
                "pyagent_sink_bytes_total",
                "Bytes of gzipped pprof a sink delivered.",
                &["sink"],
            ),
            latency: register(
                registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "pyagent_sink_duration_seconds",
                        "Time of one delivery attempt (one HTTP request, or one file write).",
                    )
                    .buckets(buckets),
                    &["sink"],
                )
                .expect("valid histogram vec"),
            ),
            queue: gauge_vec(
                registry,
                "pyagent_sink_queue_length",
                "Profiles waiting in a sink's queue.",
                &["sink"],
            ),
            evictions: counter_vec(
                registry,
                "pyagent_directory_evictions_total",
                "Profile files the directory sink deleted to stay within its bounds, by reason (size, age).",
                &["sink", "reason"],
            ),
            spool_recovered: counter_vec(
                registry,
                "pyagent_spool_recovered_total",
                "Spilled profiles found in the spool directory at start, left by an earlier run.",
                &["sink"],
            ),
            spool_settled: counter_vec(
                registry,
                "pyagent_spool_settled_total",
                "Spilled profiles that left the spool, by outcome (delivered, expired, rejected, unreadable).",
                &["sink", "outcome"],
            ),
            health: SinkHealth::default(),
            spool_pending: gauge_vec(
                registry,
                "pyagent_spool_pending",
                "Spilled profiles waiting in the spool directory for the store.",
                &["sink"],
            ),
        }
    }
}

/// The counters of one sink: a cheap handle to share with the sink's worker thread.
#[derive(Clone)]
pub struct SinkMetrics {
    sink: String,
    families: Arc<SinkFamilies>,
}

impl fmt::Debug for SinkMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SinkMetrics")
            .field("sink", &self.sink)
            .finish_non_exhaustive()
    }
}

impl SinkMetrics {
    /// The handle of `sink` in `families`.
    pub(super) fn new(sink: &str, families: Arc<SinkFamilies>) -> SinkMetrics {
        SinkMetrics {
            sink: sink.to_owned(),
            families,
        }
    }

    /// Counters for `sink` in a registry of their own (for a sink used without [`AgentMetrics`]).
    pub fn detached(sink: &str) -> SinkMetrics {
        SinkMetrics {
            sink: sink.to_owned(),
            families: Arc::new(SinkFamilies::register(&Registry::new())),
        }
    }

    /// The sink's name (the `sink` label value).
    pub fn name(&self) -> &str {
        &self.sink
    }

    /// A profile was handed to the sink.
    pub fn submitted(&self) {
        self.families
            .submitted
            .with_label_values(&[self.sink.as_str()])
            .inc();
    }

    /// A profile of `bytes` bytes was delivered; the attempt took `elapsed`.
    pub fn success(&self, bytes: usize, elapsed: Duration) {
        let sink = [self.sink.as_str()];
        self.families.successes.with_label_values(&sink).inc();
        self.families
            .bytes
            .with_label_values(&sink)
            .inc_by(bytes as u64);
        self.families
            .latency
            .with_label_values(&sink)
            .observe(elapsed.as_secs_f64());
    }

    /// One delivery attempt failed for `reason` after `elapsed`.
    pub fn failure(&self, reason: FailureReason, elapsed: Duration) {
        self.families
            .failures
            .with_label_values(&[self.sink.as_str(), reason.as_str()])
            .inc();
        self.families
            .latency
            .with_label_values(&[self.sink.as_str()])
            .observe(elapsed.as_secs_f64());
    }

    /// A failed attempt will be repeated.
    pub fn retry(&self) {
        self.families
            .retries
            .with_label_values(&[self.sink.as_str()])
            .inc();
    }

    /// A profile went to the output directory instead.
    pub fn spill(&self) {
        self.families
            .spilled
            .with_label_values(&[self.sink.as_str()])
            .inc();
    }

    /// A profile was given up for `reason`.
    pub fn drop_profile(&self, reason: DropReason) {
        self.families
            .dropped
            .with_label_values(&[self.sink.as_str(), reason.as_str()])
            .inc();
    }

    /// Sets the number of queued profiles.
    pub fn set_queue_length(&self, len: usize) {
        self.families
            .queue
            .with_label_values(&[self.sink.as_str()])
            .set(saturating_i64(len as u64));
    }

    /// `n` files were deleted for `reason`.
    pub fn evicted(&self, reason: EvictReason, n: u64) {
        self.families
            .evictions
            .with_label_values(&[self.sink.as_str(), reason.as_str()])
            .inc_by(n);
    }

    /// The sink is failing: `problem` says how (shown by `/healthz` until [`healthy`](Self::healthy)).
    pub fn unhealthy(&self, problem: impl Into<String>) {
        self.families.health.set(&self.sink, Some(problem.into()));
    }

    /// The sink works (again).
    pub fn healthy(&self) {
        self.families.health.set(&self.sink, None);
    }

    /// The health of every sink sharing these families.
    pub(super) fn health(&self) -> SinkHealth {
        self.families.health.clone()
    }

    /// `n` spilled profiles were found at start.
    pub fn spool_recovered(&self, n: u64) {
        self.families
            .spool_recovered
            .with_label_values(&[self.sink.as_str()])
            .inc_by(n);
    }

    /// `n` spilled profiles left the spool with `outcome`.
    pub fn spool_settled(&self, outcome: SpoolOutcome, n: u64) {
        self.families
            .spool_settled
            .with_label_values(&[self.sink.as_str(), outcome.as_str()])
            .inc_by(n);
    }

    /// Sets the number of spilled profiles waiting.
    pub fn set_spool_pending(&self, n: usize) {
        self.families
            .spool_pending
            .with_label_values(&[self.sink.as_str()])
            .set(saturating_i64(n as u64));
    }

    /// Spilled profiles found at start so far.
    pub fn spool_recovered_count(&self) -> u64 {
        self.families
            .spool_recovered
            .with_label_values(&[self.sink.as_str()])
            .get()
    }

    /// Spilled profiles that left the spool with `outcome` so far.
    pub fn spool_settled_count(&self, outcome: SpoolOutcome) -> u64 {
        self.families
            .spool_settled
            .with_label_values(&[self.sink.as_str(), outcome.as_str()])
            .get()
    }

    /// Spilled profiles waiting, as last set.
    pub fn spool_pending(&self) -> i64 {
        self.families
            .spool_pending
            .with_label_values(&[self.sink.as_str()])
            .get()
    }

    /// Profiles handed to the sink so far.
    pub fn submitted_count(&self) -> u64 {
        self.families
            .submitted
            .with_label_values(&[self.sink.as_str()])
            .get()
    }

    /// Profiles delivered so far.
    pub fn successes(&self) -> u64 {
        self.families
            .successes
            .with_label_values(&[self.sink.as_str()])
            .get()
    }

    /// Failed attempts for `reason` so far.
    pub fn failures(&self, reason: FailureReason) -> u64 {
        self.families
            .failures
            .with_label_values(&[self.sink.as_str(), reason.as_str()])
            .get()
    }

    /// Retries so far.
    pub fn retries(&self) -> u64 {
        self.families
            .retries
            .with_label_values(&[self.sink.as_str()])
            .get()
    }

    /// Profiles spilled so far.
    pub fn spilled(&self) -> u64 {
        self.families
            .spilled
            .with_label_values(&[self.sink.as_str()])
            .get()
    }

    /// Profiles dropped for `reason` so far.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.families
            .dropped
            .with_label_values(&[self.sink.as_str(), reason.as_str()])
            .get()
    }

    /// Profiles dropped so far, for any reason.
    pub fn dropped_total(&self) -> u64 {
        DropReason::ALL.iter().map(|&r| self.dropped(r)).sum()
    }

    /// Bytes delivered so far.
    pub fn bytes(&self) -> u64 {
        self.families
            .bytes
            .with_label_values(&[self.sink.as_str()])
            .get()
    }

    /// Delivery attempts timed so far (successful or not).
    pub fn attempts(&self) -> u64 {
        self.families
            .latency
            .with_label_values(&[self.sink.as_str()])
            .get_sample_count()
    }

    /// The queue length last set.
    pub fn queue_length(&self) -> i64 {
        self.families
            .queue
            .with_label_values(&[self.sink.as_str()])
            .get()
    }

    /// Files deleted for `reason` so far.
    pub fn evictions(&self, reason: EvictReason) -> u64 {
        self.families
            .evictions
            .with_label_values(&[self.sink.as_str(), reason.as_str()])
            .get()
    }
}
