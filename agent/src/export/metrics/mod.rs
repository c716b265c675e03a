//! Prometheus metrics of the agent: what it sampled, what it lost, how its caches and uploads fare, and
//! what it costs (its own CPU time and memory).
//!
//! In come counts from the service loop (through the methods of [`AgentMetrics`]) and from the sinks
//! (through a [`SinkMetrics`] handle each); out goes the text exposition format, served by [`serve`] on
//! `/metrics`. Everything lives in one [`Registry`] owned by [`AgentMetrics`], so tests can run many agents
//! in one process. Memory stays bounded: per-service series are capped by [`ServiceLabels`] (overflow is
//! folded into `service="other"`), and every other label takes values from a fixed set.
//!
//! Names follow `promtool check metrics`: counters end in `_total`, times are in seconds (the BPF run time
//! the kernel reports in nanoseconds is converted), bytes in bytes.

mod server;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{
    Counter, Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

pub use server::{serve, MetricsError, MetricsServer, DEFAULT_METRICS_ADDR};

/// Distinct `service` label values kept before new services are counted as `other`.
pub const DEFAULT_MAX_SERVICES: usize = 100;

/// The `service` value that absorbs every service past the cap.
pub const OTHER_SERVICE: &str = "other";

/// What discovery decided about a process, as counted by `pyagent_processes{state}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProcessState {
    /// Not a CPython process.
    NotPython,
    /// CPython, but a version or build the agent cannot read.
    Unsupported,
    /// Being sampled.
    Ready,
    /// Looked like CPython, but attaching failed (permissions, unreadable memory).
    Failed,
}

impl ProcessState {
    /// Every state, in the order they are exported.
    pub const ALL: [ProcessState; 4] = [
        ProcessState::NotPython,
        ProcessState::Unsupported,
        ProcessState::Ready,
        ProcessState::Failed,
    ];

    /// The `state` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessState::NotPython => "not_python",
            ProcessState::Unsupported => "unsupported",
            ProcessState::Ready => "ready",
            ProcessState::Failed => "failed",
        }
    }
}

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

/// Why a sink gave a profile up without delivering or spilling it (`pyagent_profiles_dropped_total{reason}`).
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
}

impl DropReason {
    /// Every reason, in the order they are exported.
    pub const ALL: [DropReason; 6] = [
        DropReason::QueueFull,
        DropReason::RetriesExhausted,
        DropReason::Rejected,
        DropReason::Shutdown,
        DropReason::SpillFailed,
        DropReason::Encode,
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

/// Caps the number of distinct `service` label values; services past the cap share [`OTHER_SERVICE`].
///
/// The first `max` services seen keep their own series for the agent's lifetime (a Prometheus series that
/// disappears and comes back under another name would break `rate()`), later ones are folded.
#[derive(Debug)]
pub struct ServiceLabels {
    max: usize,
    known: Mutex<HashSet<String>>,
}

impl ServiceLabels {
    /// A cap of `max` distinct services (plus `other`).
    pub fn new(max: usize) -> ServiceLabels {
        ServiceLabels {
            max,
            known: Mutex::new(HashSet::new()),
        }
    }

    /// The label value to use for `service`: itself while under the cap (or already known), else `other`.
    /// An empty name becomes `unknown`.
    pub fn label(&self, service: &str) -> String {
        let service = if service.is_empty() {
            "unknown"
        } else {
            service
        };
        if service == OTHER_SERVICE {
            return OTHER_SERVICE.to_owned();
        }
        let mut known = self.known.lock().expect("service label set poisoned");
        if known.contains(service) {
            return service.to_owned();
        }
        if known.len() < self.max {
            known.insert(service.to_owned());
            return service.to_owned();
        }
        OTHER_SERVICE.to_owned()
    }

    /// How many distinct services have their own label value.
    pub fn len(&self) -> usize {
        self.known.lock().expect("service label set poisoned").len()
    }

    /// Whether no service was seen yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The cumulative BPF statistics last passed to [`AgentMetrics::set_bpf`], to turn them into increments.
#[derive(Debug, Default, Clone, Copy)]
struct BpfTotals {
    run_time_ns: u64,
    runs: u64,
    ring_drops: u64,
}

/// The increase from `last` to `now` of a kernel counter; a smaller `now` means the counter restarted
/// (program reloaded), so all of `now` is new.
fn increase(last: u64, now: u64) -> u64 {
    if now >= last {
        now - last
    } else {
        now
    }
}

/// Every metric of the agent, registered in one [`Registry`].
///
/// Cheap to share behind an `Arc`; every method takes `&self` and may be called from any thread.
pub struct AgentMetrics {
    registry: Registry,
    services: ServiceLabels,
    samples: IntCounter,
    samples_lost: IntCounterVec,
    bpf_run_time: Counter,
    bpf_runs: IntCounter,
    ring_drops: IntCounter,
    bpf_last: Mutex<BpfTotals>,
    cache_lookups: IntCounterVec,
    processes: IntGaugeVec,
    service_samples: IntCounterVec,
    service_gil_samples: IntCounterVec,
    service_threads: IntGaugeVec,
    python_info: IntGaugeVec,
    sinks: Arc<SinkFamilies>,
}

impl fmt::Debug for AgentMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentMetrics")
            .field("services", &self.services)
            .finish_non_exhaustive()
    }
}

/// Registers `collector` and returns it; names are fixed in this file, so a clash is a bug.
fn register<C: prometheus::core::Collector + Clone + 'static>(registry: &Registry, collector: C) -> C {
    registry
        .register(Box::new(collector.clone()))
        .expect("metric names in export::metrics are unique and valid");
    collector
}

fn counter(registry: &Registry, name: &str, help: &str) -> IntCounter {
    register(
        registry,
        IntCounter::new(name, help).expect("valid counter name"),
    )
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(
        registry,
        IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter vec"),
    )
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    register(
        registry,
        IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge vec"),
    )
}

impl AgentMetrics {
    /// All metrics, with at most [`DEFAULT_MAX_SERVICES`] distinct services.
    pub fn new() -> AgentMetrics {
        AgentMetrics::with_max_services(DEFAULT_MAX_SERVICES)
    }

    /// All metrics, with at most `max_services` distinct `service` label values (plus `other`).
    pub fn with_max_services(max_services: usize) -> AgentMetrics {
        let registry = Registry::new();
        // process_cpu_seconds_total, process_resident_memory_bytes, open fds, ...: the agent's own cost.
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("the process collector registers once per registry");

        let bpf_run_time = register(
            &registry,
            Counter::new(
                "pyagent_bpf_run_time_seconds_total",
                "CPU time the sampling BPF program ran, as the kernel reports it (bpf_stats_enabled).",
            )
            .expect("valid counter name"),
        );
        AgentMetrics {
            samples: counter(
                &registry,
                "pyagent_samples_total",
                "Thread samples turned into stacks.",
            ),
            samples_lost: counter_vec(
                &registry,
                "pyagent_samples_lost_total",
                "Thread samples lost before they reached a profile, by reason.",
                &["reason"],
            ),
            bpf_run_time,
            bpf_runs: counter(
                &registry,
                "pyagent_bpf_runs_total",
                "Times the sampling BPF program ran, as the kernel reports it (bpf_stats_enabled).",
            ),
            ring_drops: counter(
                &registry,
                "pyagent_ringbuf_drops_total",
                "Samples the BPF program could not put in the full ring buffer.",
            ),
            bpf_last: Mutex::new(BpfTotals::default()),
            cache_lookups: counter_vec(
                &registry,
                "pyagent_cache_lookups_total",
                "Lookups in the agent's caches (page, frame, code), by cache and result (hit, miss).",
                &["cache", "result"],
            ),
            processes: gauge_vec(
                &registry,
                "pyagent_processes",
                "Processes seen by discovery, by state (not_python, unsupported, ready, failed).",
                &["state"],
            ),
            service_samples: counter_vec(
                &registry,
                "pyagent_service_samples_total",
                "Thread samples per service (services past the cap are counted as other).",
                &["service"],
            ),
            service_gil_samples: counter_vec(
                &registry,
                "pyagent_service_gil_samples_total",
                "Thread samples per service taken while the thread held the GIL.",
                &["service"],
            ),
            service_threads: gauge_vec(
                &registry,
                "pyagent_service_threads",
                "Python threads per service at the last scan.",
                &["service"],
            ),
            python_info: gauge_vec(
                &registry,
                "pyagent_python_info",
                "CPython version per service (always 1).",
                &["service", "version"],
            ),
            sinks: Arc::new(SinkFamilies::register(&registry)),
            services: ServiceLabels::new(max_services),
            registry,
        }
    }

    /// The registry holding every metric (to serve it, or to add more).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Every metric in the Prometheus text exposition format (what `/metrics` serves).
    pub fn encode(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding into a Vec cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    /// Counts `n` samples of `service`, of which `gil_held` were taken while the thread held the GIL.
    pub fn add_samples(&self, service: &str, n: u64, gil_held: u64) {
        self.samples.inc_by(n);
        let service = self.services.label(service);
        self.service_samples
            .with_label_values(&[service.as_str()])
            .inc_by(n);
        self.service_gil_samples
            .with_label_values(&[service.as_str()])
            .inc_by(gil_held);
    }

    /// Counts `n` samples lost for `reason`. Use a fixed set of reasons (for instance `ringbuf_full`,
    /// `unreadable_stack`, `process_gone`, `stack_map_full`): each is one series.
    pub fn add_lost(&self, reason: &str, n: u64) {
        self.samples_lost.with_label_values(&[reason]).inc_by(n);
    }

    /// Sets the number of processes in each state; states left out are set to 0.
    pub fn set_process_states(&self, counts: &[(ProcessState, u64)]) {
        for state in ProcessState::ALL {
            let n: u64 = counts
                .iter()
                .filter(|(s, _)| *s == state)
                .map(|(_, n)| n)
                .sum();
            self.processes
                .with_label_values(&[state.as_str()])
                .set(saturating_i64(n));
        }
    }

    /// Records the kernel's cumulative BPF statistics: total run time in nanoseconds and number of runs
    /// (from `bpf_prog_info`, with `kernel.bpf_stats_enabled=1`), and ring-buffer drops (the program's own
    /// counter). Pass totals, not increments; a total smaller than the last one (program reloaded) counts
    /// from zero again.
    pub fn set_bpf(&self, run_time_ns: u64, runs: u64, ring_drops: u64) {
        let mut last = self.bpf_last.lock().expect("bpf totals poisoned");
        let run_ns = increase(last.run_time_ns, run_time_ns);
        self.bpf_run_time
            .inc_by(Duration::from_nanos(run_ns).as_secs_f64());
        self.bpf_runs.inc_by(increase(last.runs, runs));
        self.ring_drops.inc_by(increase(last.ring_drops, ring_drops));
        *last = BpfTotals {
            run_time_ns,
            runs,
            ring_drops,
        };
    }

    /// Counts `hits` and `misses` of `cache` (`page`, `frame`, `code`) since the last call.
    pub fn add_cache(&self, cache: &str, hits: u64, misses: u64) {
        self.cache_lookups
            .with_label_values(&[cache, "hit"])
            .inc_by(hits);
        self.cache_lookups
            .with_label_values(&[cache, "miss"])
            .inc_by(misses);
    }

    /// Sets the number of Python threads per service; services left out disappear (their processes
    /// exited), services past the cap are summed into `other`.
    pub fn set_service_threads(&self, threads: &[(&str, u64)]) {
        let mut by_label: BTreeMap<String, u64> = BTreeMap::new();
        for (service, n) in threads {
            *by_label.entry(self.services.label(service)).or_default() += n;
        }
        self.service_threads.reset();
        for (service, n) in by_label {
            self.service_threads
                .with_label_values(&[service.as_str()])
                .set(saturating_i64(n));
        }
    }

    /// Sets `pyagent_python_info{service, version} 1` for each running (service, CPython version) pair;
    /// pairs left out disappear.
    pub fn set_python_info(&self, services: &[(&str, &str)]) {
        self.python_info.reset();
        for (service, version) in services {
            let service = self.services.label(service);
            self.python_info
                .with_label_values(&[service.as_str(), version])
                .set(1);
        }
    }

    /// The counters of one sink (`directory`, `pyroscope`), labelled `sink="<name>"`.
    pub fn sink(&self, name: &str) -> SinkMetrics {
        SinkMetrics {
            sink: name.to_owned(),
            families: Arc::clone(&self.sinks),
        }
    }

    /// Samples counted so far (all services).
    pub fn samples(&self) -> u64 {
        self.samples.get()
    }

    /// The `service` label values in use (without `other`).
    pub fn services(&self) -> &ServiceLabels {
        &self.services
    }
}

impl Default for AgentMetrics {
    fn default() -> AgentMetrics {
        AgentMetrics::new()
    }
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The metric families shared by all sinks, each with a `sink` label.
struct SinkFamilies {
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
}

impl SinkFamilies {
    fn register(registry: &Registry) -> SinkFamilies {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_past_the_cap_fold_into_other() {
        let metrics = AgentMetrics::with_max_services(2);
        metrics.add_samples("web", 10, 4);
        metrics.add_samples("api", 5, 0);
        metrics.add_samples("batch", 7, 7);
        metrics.add_samples("cron", 1, 0);
        metrics.add_samples("web", 1, 1);
        assert_eq!(metrics.samples(), 24);
        assert_eq!(metrics.services().len(), 2);
        let text = metrics.encode();
        assert!(
            text.contains("pyagent_service_samples_total{service=\"web\"} 11"),
            "{text}"
        );
        assert!(
            text.contains("pyagent_service_samples_total{service=\"other\"} 8"),
            "{text}"
        );
        assert!(
            text.contains("pyagent_service_gil_samples_total{service=\"other\"} 7"),
            "{text}"
        );
        assert!(!text.contains("batch"), "{text}");

        metrics.set_service_threads(&[("web", 3), ("batch", 2), ("cron", 1)]);
        metrics.set_python_info(&[("web", "3.12.3"), ("cron", "3.11.9")]);
        let text = metrics.encode();
        assert!(
            text.contains("pyagent_service_threads{service=\"other\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("pyagent_python_info{service=\"other\",version=\"3.11.9\"} 1"),
            "{text}"
        );
        // A service that went away loses its gauge.
        metrics.set_service_threads(&[("api", 1)]);
        let text = metrics.encode();
        assert!(
            !text.contains("pyagent_service_threads{service=\"web\"}"),
            "{text}"
        );
    }

    #[test]
    fn bpf_totals_become_increments() {
        let metrics = AgentMetrics::new();
        metrics.set_bpf(1_500_000_000, 10, 0);
        metrics.set_bpf(2_000_000_000, 15, 3);
        assert_eq!(metrics.bpf_runs.get(), 15);
        assert_eq!(metrics.ring_drops.get(), 3);
        assert!((metrics.bpf_run_time.get() - 2.0).abs() < 1e-9);
        // The program was reloaded: its counters start again from zero.
        metrics.set_bpf(500_000_000, 2, 0);
        assert_eq!(metrics.bpf_runs.get(), 17);
        assert!((metrics.bpf_run_time.get() - 2.5).abs() < 1e-9);
    }

    #[test]
    fn process_states_are_all_exported() {
        let metrics = AgentMetrics::new();
        metrics.set_process_states(&[(ProcessState::Ready, 3), (ProcessState::NotPython, 40)]);
        let text = metrics.encode();
        for expected in [
            "pyagent_processes{state=\"ready\"} 3",
            "pyagent_processes{state=\"not_python\"} 40",
            "pyagent_processes{state=\"unsupported\"} 0",
            "pyagent_processes{state=\"failed\"} 0",
        ] {
            assert!(text.contains(expected), "missing {expected}:\n{text}");
        }
    }

    #[test]
    fn sink_counters_are_labelled_per_sink() {
        let metrics = AgentMetrics::new();
        let dir = metrics.sink("directory");
        let remote = metrics.sink("pyroscope");
        remote.failure(FailureReason::Http5xx, Duration::from_millis(3));
        remote.retry();
        remote.success(100, Duration::from_millis(5));
        dir.success(50, Duration::from_millis(1));
        assert_eq!(remote.successes(), 1);
        assert_eq!(remote.failures(FailureReason::Http5xx), 1);
        assert_eq!(remote.attempts(), 2);
        assert_eq!(dir.bytes(), 50);
        let text = metrics.encode();
        assert!(
            text.contains("pyagent_sink_failures_total{reason=\"5xx\",sink=\"pyroscope\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("pyagent_sink_bytes_total{sink=\"directory\"} 50"),
            "{text}"
        );
    }
}
