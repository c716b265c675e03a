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

mod own_process;
mod server;
mod sink;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{
    Counter, CounterVec, Encoder, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

pub use server::{serve, MetricsError, MetricsServer, DEFAULT_METRICS_ADDR};
use sink::SinkFamilies;

use crate::aggregate::ProfileWindow;
pub use sink::{DropReason, EvictReason, FailureReason, SinkHealth, SinkMetrics, SpoolOutcome};

/// Distinct `service` label values kept before new services are counted as `other`.
pub const DEFAULT_MAX_SERVICES: usize = 100;

/// The `service` value that absorbs every service past the cap.
pub const OTHER_SERVICE: &str = "other";

pub use crate::discovery::host::{NotProfiled, ProcessKind as ProcessState};

/// Processes named by `pyagent_process_not_profiled_info`: the newest ones not profiled for a
/// reason, so that a host of thousands of short-lived failures stays a bounded set of series.
pub const NOT_PROFILED_SHOWN: usize = 20;

/// Longest `reason` label value; longer reasons are cut (on a character boundary).
const REASON_LABEL_MAX: usize = 160;

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
    samples_unverified: IntCounter,
    bpf_run_time: Counter,
    bpf_runs: IntCounter,
    ring_drops: IntCounter,
    bpf_last: Mutex<BpfTotals>,
    /// One counter per `common::COUNTERS` entry (the program's own log), by counter id.
    bpf_counters: Vec<IntCounter>,
    bpf_counters_last: Mutex<[u64; common::COUNTER_COUNT]>,
    cache_lookups: IntCounterVec,
    processes: IntGaugeVec,
    service_samples: IntCounterVec,
    service_gil_samples: IntCounterVec,
    service_off_cpu: CounterVec,
    service_threads: IntGaugeVec,
    stalled_threads: IntGaugeVec,
    stalls: IntCounterVec,
    python_info: IntGaugeVec,
    not_profiled: IntGaugeVec,
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
fn register<C: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    collector: C,
) -> C {
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
        registry
            .register(Box::new(own_process::OwnProcessCollector::new()))
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
            samples_unverified: counter(
                &registry,
                "pyagent_samples_unverified_total",
                "Thread samples kept although the thread's top frame moved while its stack was read (userspace sampler; the chain was whole, but not proven to be one instant's).",
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
            bpf_counters: common::COUNTERS
                .iter()
                .map(|c| counter(&registry, c.name, c.help))
                .collect(),
            bpf_counters_last: Mutex::new([0; common::COUNTER_COUNT]),
            cache_lookups: counter_vec(
                &registry,
                "pyagent_cache_lookups_total",
                "Lookups in the agent's caches (page, frame, code), by cache and result (hit, miss; bypassed: frame-cache walks beyond its bounds, done whole).",
                &["cache", "result"],
            ),
            processes: gauge_vec(
                &registry,
                "pyagent_processes",
                "Processes seen by discovery, by state (not_python, unsupported, ready, failed, denied: not inspectable for lack of permission).",
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
            service_off_cpu: register(
                &registry,
                CounterVec::new(
                    Opts::new(
                        "pyagent_service_off_cpu_seconds_total",
                        "Time Python threads per service spent off the CPU, by wait reason (io, sleep, lock, gil, other; eBPF mode with off-CPU on). The share of wait=\"gil\" is the time spent waiting for the GIL.",
                    ),
                    &["service", "wait"],
                )
                .expect("valid counter vec"),
            ),
            service_threads: gauge_vec(
                &registry,
                "pyagent_service_threads",
                "Python threads per service at the last scan.",
                &["service"],
            ),
            stalled_threads: gauge_vec(
                &registry,
                "pyagent_python_stalled_threads",
                "Python threads per service blocked in one stack for longer than stall_after (needs off-CPU profiling).",
                &["service"],
            ),
            stalls: counter_vec(
                &registry,
                "pyagent_python_stalls_total",
                "Stalls reported per service: a thread blocked in one stack past stall_after counts once per wait.",
                &["service"],
            ),
            python_info: gauge_vec(
                &registry,
                "pyagent_python_info",
                "CPython version per service (always 1).",
                &["service", "version"],
            ),
            not_profiled: gauge_vec(
                &registry,
                "pyagent_process_not_profiled_info",
                "The newest processes (at most 20) that are not profiled, with why (always 1): state unsupported, failed or denied.",
                &["pid", "state", "reason"],
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

    /// Counts what a profile window of `service` holds: its samples, those that held the GIL,
    /// and its off-CPU time by wait reason.
    pub fn add_window(&self, service: &str, window: &ProfileWindow) {
        self.add_samples(service, window.total_samples(), window.gil_held_samples());
        let label = self.services.label(service);
        for (wait, ns) in window.off_cpu_by_wait() {
            if ns > 0 {
                self.service_off_cpu
                    .with_label_values(&[label.as_str(), wait.label()])
                    .inc_by(ns as f64 / 1e9);
            }
        }
    }

    /// Counts `n` samples lost for `reason`. Use a fixed set of reasons (for instance `ringbuf_full`,
    /// `unreadable_stack`, `process_gone`, `stack_map_full`): each is one series.
    pub fn add_lost(&self, reason: &str, n: u64) {
        self.samples_lost.with_label_values(&[reason]).inc_by(n);
    }

    /// Counts `n` samples kept unverified (see `pyagent_samples_unverified_total`).
    pub fn add_unverified(&self, n: u64) {
        self.samples_unverified.inc_by(n);
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
                .with_label_values(&[state.label()])
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
        self.ring_drops
            .inc_by(increase(last.ring_drops, ring_drops));
        *last = BpfTotals {
            run_time_ns,
            runs,
            ring_drops,
        };
    }

    /// Records the BPF program's counters (`pa_counters` summed over CPUs, by counter id), each
    /// as its own `pyagent_bpf_*_total`. Pass totals; a smaller total (program reloaded) counts
    /// from zero again.
    pub fn set_bpf_counters(&self, totals: &[u64; common::COUNTER_COUNT]) {
        let mut last = self
            .bpf_counters_last
            .lock()
            .expect("bpf counters poisoned");
        for ((counter, total), last) in self.bpf_counters.iter().zip(totals).zip(last.iter_mut()) {
            counter.inc_by(increase(*last, *total));
            *last = *total;
        }
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

    /// Adds `n` walks the cache could not hold (beyond its bounds), done without it.
    pub fn add_cache_bypassed(&self, cache: &str, n: u64) {
        self.cache_lookups
            .with_label_values(&[cache, "bypassed"])
            .inc_by(n);
    }

    /// Sets the number of Python threads per service; services left out disappear (their processes
    /// exited), services past the cap are summed into `other`.
    pub fn set_service_threads(&self, threads: &[(&str, u64)]) {
        self.set_per_service(&self.service_threads, threads);
    }

    /// Sets `gauge` to the sums of `values` per service label; services left out disappear.
    fn set_per_service(&self, gauge: &IntGaugeVec, values: &[(&str, u64)]) {
        let mut by_label: BTreeMap<String, u64> = BTreeMap::new();
        for (service, n) in values {
            *by_label.entry(self.services.label(service)).or_default() += n;
        }
        gauge.reset();
        for (service, n) in by_label {
            gauge
                .with_label_values(&[service.as_str()])
                .set(saturating_i64(n));
        }
    }

    /// Counts one stall of `service`.
    pub fn add_stall(&self, service: &str) {
        let service = self.services.label(service);
        self.stalls.with_label_values(&[service.as_str()]).inc();
    }

    /// Sets the stalled threads of each service; services left out go back to none.
    pub fn set_stalled_threads(&self, stalled: &[(&str, u64)]) {
        self.set_per_service(&self.stalled_threads, stalled);
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

    /// Sets `pyagent_process_not_profiled_info{pid, state, reason} 1` for each of `processes`
    /// (at most [`NOT_PROFILED_SHOWN`]); processes left out disappear.
    pub fn set_not_profiled(&self, processes: &[NotProfiled]) {
        self.not_profiled.reset();
        for p in processes.iter().take(NOT_PROFILED_SHOWN) {
            let mut reason = p.reason.as_str();
            if reason.len() > REASON_LABEL_MAX {
                let mut end = REASON_LABEL_MAX;
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                reason = &reason[..end];
            }
            self.not_profiled
                .with_label_values(&[p.pid.to_string().as_str(), p.kind.label(), reason])
                .set(1);
        }
    }

    /// Which sinks are failing (for `/healthz`).
    pub fn sink_health(&self) -> SinkHealth {
        self.sink("health").health()
    }

    /// The counters of one sink (`directory`, `pyroscope`), labelled `sink="<name>"`.
    pub fn sink(&self, name: &str) -> SinkMetrics {
        SinkMetrics::new(name, Arc::clone(&self.sinks))
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

#[cfg(test)]
pub(crate) mod tests {
    use std::process::{Command, Stdio};

    use super::*;

    /// Metrics with at least one series in every family.
    pub(crate) fn busy_metrics() -> AgentMetrics {
        let metrics = AgentMetrics::new();
        metrics.add_samples("web", 100, 40);
        metrics.add_samples("worker", 7, 0);
        metrics.add_lost("ringbuf_full", 3);
        metrics.set_bpf(12_345_678, 200, 1);
        metrics.add_cache("page", 90, 10);
        metrics.add_cache("frame", 50, 5);
        metrics.add_cache("code", 500, 2);
        metrics.set_process_states(&[(ProcessState::Ready, 2), (ProcessState::NotPython, 120)]);
        metrics.set_service_threads(&[("web", 8), ("worker", 1)]);
        metrics.set_python_info(&[("web", "3.12.3"), ("worker", "3.11.9")]);
        let sink = metrics.sink("pyroscope");
        sink.submitted();
        sink.failure(FailureReason::Timeout, Duration::from_secs(1));
        sink.retry();
        sink.success(2048, Duration::from_millis(30));
        sink.spill();
        sink.drop_profile(DropReason::QueueFull);
        sink.set_queue_length(3);
        let directory = metrics.sink("directory");
        directory.success(2048, Duration::from_millis(2));
        directory.evicted(EvictReason::Size, 2);
        metrics
    }

    /// Every query of `deploy/grafana-dashboard.json` parses (`promtool check rules` on them as recording
    /// rules) and names only metrics the agent exports.
    #[test]
    fn dashboard_queries_parse_and_use_exported_metrics() {
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../../deploy/grafana-dashboard.json"))
                .expect("the dashboard is JSON");
        let exprs: Vec<String> = dashboard["panels"]
            .as_array()
            .expect("panels")
            .iter()
            .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
            .map(|target| target["expr"].as_str().expect("expr").to_owned())
            .collect();
        assert!(exprs.len() >= 15, "{} queries", exprs.len());

        let exported = busy_metrics().encode();
        let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
        for (i, expr) in exprs.iter().enumerate() {
            for name in expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.starts_with("pyagent_") || word.starts_with("process_"))
            {
                assert!(
                    exported.contains(&format!("\n{name}")),
                    "the dashboard queries {name}, which the agent does not export"
                );
            }
            // Grafana's variables, as Prometheus would see them after substitution.
            let expr = expr
                .replace("$__rate_interval", "5m")
                .replace("$job", ".*")
                .replace("$instance", ".*");
            rules.push_str(&format!(
                "      - record: dashboard:q{i}\n        expr: {}\n",
                serde_json::to_string(&expr).expect("JSON string")
            ));
        }
        let dir = std::env::temp_dir().join(format!("pyagent-dash-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("rules.yml");
        std::fs::write(&file, &rules).expect("write rules");
        let output = Command::new("promtool")
            .args(["check", "rules"])
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|err| {
                panic!("cannot run promtool ({err}); apt-get install prometheus")
            });
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            output.status.success(),
            "promtool check rules failed:\n{}{}\n{rules}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

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
