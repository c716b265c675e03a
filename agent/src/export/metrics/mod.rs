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
//!
//! The parts: `catalog` names and describes every metric of [`AgentMetrics`], `service_labels` caps the
//! `service` label, `sink` holds the sinks' counters, `own_process` the agent's own cost, `server` serves
//! them; this module counts what the service loop reports.

mod catalog;
mod deltas;
mod own_process;
mod registration;
mod server;
mod service_labels;
mod sink;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{
    Counter, CounterVec, Encoder, Gauge, GaugeVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Registry, TextEncoder,
};

pub use deltas::{increase, Deltas};
pub use server::{serve, MetricsError, MetricsServer, DEFAULT_METRICS_ADDR};
pub use service_labels::ServiceLabels;
use sink::SinkFamilies;

use crate::aggregate::ProfileWindow;
use crate::discovery::service_name::ProcessRole;
use crate::profiler::{CoreShare, WindowCost};
use crate::unwind::LossReason;
pub use sink::{DropReason, EvictReason, FailureReason, SinkHealth, SinkMetrics, SpoolOutcome};

/// The labels of a process's per-service series: its service, its CPython version and its role
/// in the service, if any. Processes of one service on different interpreters (a migration
/// from 3.13 to 3.14 in progress), or a pre-forking server's master and workers, are told
/// apart; every label but `service` takes values from a small set (the interpreters installed,
/// two roles), so the series stay bounded by the service cap.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceSeries {
    /// `service`: the service name
    pub service: String,
    /// `python_version`: the CPython version (`3.13.1`), as the profiles' label
    pub python_version: String,
    /// `process_role`: `master`, `worker`, or empty for a process of neither role
    pub role: Option<ProcessRole>,
}

impl ServiceSeries {
    /// The label names, in the order of [`ServiceSeries::values`].
    pub const LABELS: [&'static str; 3] = ["service", "python_version", "process_role"];

    /// The label values, in the order of [`ServiceSeries::LABELS`].
    pub fn values(&self) -> [&str; 3] {
        [
            &self.service,
            &self.python_version,
            self.role.map_or("", ProcessRole::label),
        ]
    }
}

/// Distinct `service` label values kept before new services are counted as `other`.
pub const DEFAULT_MAX_SERVICES: usize = 100;

/// The `service` value that absorbs every service past the cap.
pub const OTHER_SERVICE: &str = "other";

pub use crate::discovery::host::{NotProfiled, ProcessKind as ProcessState, UnsupportedReason};

/// Processes named by `pyagent_process_not_profiled_info`: the newest ones not profiled for a
/// reason, so that a host of thousands of short-lived failures stays a bounded set of series.
pub const NOT_PROFILED_SHOWN: usize = 20;

/// Longest `reason` label value; longer reasons are cut (on a character boundary).
const REASON_LABEL_MAX: usize = 160;
/// The cumulative BPF statistics last passed to [`AgentMetrics::set_bpf`], to turn them into increments.
#[derive(Debug, Default, Clone, Copy)]
struct BpfTotals {
    run_time_ns: u64,
    runs: u64,
    ring_drops: u64,
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
    samples_proven_root: IntCounter,
    userspace_thread_time: CounterVec,
    task_samples: IntCounterVec,
    native_objects: IntCounterVec,
    symbol_files_refused: IntCounterVec,
    async_unsupported: IntCounter,
    bpf_run_time: Counter,
    bpf_runs: IntCounter,
    ring_drops: IntCounter,
    bpf_last: Mutex<BpfTotals>,
    /// One counter per `common::COUNTERS` entry (the program's own log), by counter id.
    bpf_counters: Vec<IntCounter>,
    bpf_counters_last: Mutex<[u64; common::COUNTER_COUNT]>,
    cache_lookups: IntCounterVec,
    memory: IntGaugeVec,
    processes: IntGaugeVec,
    service_samples: IntCounterVec,
    service_gil_samples: IntCounterVec,
    service_off_cpu: CounterVec,
    python_wall: CounterVec,
    service_threads: IntGaugeVec,
    stalled_threads: IntGaugeVec,
    stalls: IntCounterVec,
    cgroup_periods: IntCounterVec,
    cgroup_throttled_periods: IntCounterVec,
    cgroup_throttled: CounterVec,
    cgroup_limit: GaugeVec,
    python_info: IntGaugeVec,
    not_profiled: IntGaugeVec,
    unsupported: IntGaugeVec,
    budget: BudgetGauges,
    sinks: Arc<SinkFamilies>,
}

/// The CPU budget's gauges: the rate it leaves, the budget, and what the last window cost.
struct BudgetGauges {
    rate: IntGauge,
    limit: Gauge,
    used: GaugeVec,
    used_by_samples: Gauge,
    over_at_lowest_rate: IntCounter,
}

impl fmt::Debug for AgentMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentMetrics")
            .field("services", &self.services)
            .finish_non_exhaustive()
    }
}
impl AgentMetrics {
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

    /// Counts `n` samples of `series`, of which `gil_held` were taken while the thread held the
    /// GIL.
    pub fn add_samples(&self, series: &ServiceSeries, n: u64, gil_held: u64) {
        self.samples.inc_by(n);
        let labels = self.labels(series);
        let labels = labels.values();
        self.service_samples.with_label_values(&labels).inc_by(n);
        self.service_gil_samples
            .with_label_values(&labels)
            .inc_by(gil_held);
    }

    /// Counts what a profile window of a process of `series` holds: its samples, those that held
    /// the GIL, and its off-CPU time by wait reason.
    pub fn add_window(&self, series: &ServiceSeries, window: &ProfileWindow) {
        self.add_samples(series, window.total_samples(), window.gil_held_samples());
        let labels = self.labels(series);
        let [service, version, role] = labels.values();
        for (wait, ns) in window.off_cpu_by_wait() {
            if ns > 0 {
                self.service_off_cpu
                    .with_label_values(&[service, version, role, wait.label()])
                    .inc_by(ns as f64 / 1e9);
            }
        }
        for (part, ns) in window.wall_by_part() {
            if ns > 0 {
                self.python_wall
                    .with_label_values(&[service, version, role, part.label()])
                    .inc_by(ns as f64 / 1e9);
            }
        }
    }

    /// The label values of `series`, its service capped.
    fn labels(&self, series: &ServiceSeries) -> ServiceSeries {
        ServiceSeries {
            service: self.services.label(&series.service),
            ..series.clone()
        }
    }

    /// Counts `n` samples lost for `reason` (one series per reason).
    pub fn add_lost(&self, reason: LossReason, n: u64) {
        self.samples_lost
            .with_label_values(&[reason.label()])
            .inc_by(n);
    }

    /// Counts `n` samples kept unverified (see `pyagent_samples_unverified_total`).
    pub fn add_unverified(&self, n: u64) {
        self.samples_unverified.inc_by(n);
    }

    /// Counts `n` userspace walks kept as their proven root (see
    /// `pyagent_samples_proven_root_total`).
    pub fn add_proven_roots(&self, n: u64) {
        self.samples_proven_root.inc_by(n);
    }

    /// Adds `ns` of the read threads' time in `state` (`sampled`, `unread`, `runqueue`,
    /// `off_cpu`; see `pyagent_userspace_thread_seconds_total`).
    pub fn add_userspace_thread_time(&self, state: &str, ns: u64) {
        if ns > 0 {
            self.userspace_thread_time
                .with_label_values(&[state])
                .inc_by(ns as f64 / 1e9);
        }
    }

    /// Counts `n` task-aware samples with `result` (`attributed`, `unattributed`, `waiting`;
    /// see `pyagent_task_samples_total`).
    pub fn add_task_samples(&self, result: &str, n: u64) {
        self.task_samples.with_label_values(&[result]).inc_by(n);
    }

    /// Counts `n` more native objects named from `source` (see
    /// `pyagent_native_objects_total`).
    pub fn add_native_objects(&self, source: &str, n: u64) {
        self.native_objects.with_label_values(&[source]).inc_by(n);
    }

    /// Counts `n` more refused symbol sources of `kind` (see
    /// `pyagent_native_symbol_files_refused_total`).
    pub fn add_symbol_files_refused(&self, kind: &str, n: u64) {
        self.symbol_files_refused
            .with_label_values(&[kind])
            .inc_by(n);
    }

    /// Counts `n` processes profiled without task stacks, asked for but unsupported there.
    pub fn add_async_unsupported(&self, n: u64) {
        self.async_unsupported.inc_by(n);
    }

    /// Sets the number of processes in each state; states left out are set to 0.
    pub fn set_process_states(&self, counts: &[(ProcessState, u64)]) {
        set_each(&self.processes, &ProcessState::ALL, counts, |s| s.label());
    }

    /// Sets the bytes each of the agent's caches holds now.
    pub fn set_cache_memory(&self, memory: &crate::unwind::CacheMemory) {
        for (cache, bytes) in memory.by_cache() {
            self.memory
                .with_label_values(&[cache])
                .set(saturating_i64(bytes));
        }
    }

    /// Records the kernel's cumulative BPF statistics: total run time in nanoseconds and number of runs
    /// (from `bpf_prog_info`, with `kernel.bpf_stats_enabled=1`), and ring-buffer drops (the program's own
    /// counter). Pass totals, not increments; a total smaller than the last one (program reloaded) counts
    /// from zero again.
    pub fn set_bpf(&self, run: Option<(u64, u64)>, ring_drops: u64) {
        let mut last = self.bpf_last.lock().expect("bpf totals poisoned");
        self.ring_drops
            .inc_by(increase(last.ring_drops, ring_drops));
        last.ring_drops = ring_drops;
        // Without the kernel's run-time statistics (no CAP_SYS_ADMIN to turn them on) the run
        // totals stay as they were; the ring drops come from the program's own counters.
        if let Some((run_time_ns, runs)) = run {
            let run_ns = increase(last.run_time_ns, run_time_ns);
            self.bpf_run_time
                .inc_by(Duration::from_nanos(run_ns).as_secs_f64());
            self.bpf_runs.inc_by(increase(last.runs, runs));
            last.run_time_ns = run_time_ns;
            last.runs = runs;
        }
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

    /// Sets the sampling rate in effect and the budget (`None`: no budget).
    pub fn set_rate(&self, rate_hz: u32, budget: Option<CoreShare>) {
        self.budget.rate.set(i64::from(rate_hz));
        self.budget
            .limit
            .set(budget.map_or(0.0, CoreShare::fraction));
    }

    /// Records what the last window cost; `over_at_lowest_rate`: it exceeded the budget at the
    /// lowest rate.
    pub fn set_window_cost(&self, cost: WindowCost, over_at_lowest_rate: bool) {
        self.budget
            .used
            .with_label_values(&["agent"])
            .set(cost.agent);
        self.budget.used.with_label_values(&["bpf"]).set(cost.bpf);
        self.budget.used_by_samples.set(cost.per_sample);
        if over_at_lowest_rate {
            self.budget.over_at_lowest_rate.inc();
        }
    }

    /// Sets the number of Python threads per series; series left out disappear (their processes
    /// exited), services past the cap are summed into `other`.
    pub fn set_service_threads(&self, threads: &[(&ServiceSeries, u64)]) {
        self.set_per_service(&self.service_threads, threads);
    }

    /// Sets `gauge` to the sums of `values` per series; series left out disappear.
    fn set_per_service(&self, gauge: &IntGaugeVec, values: &[(&ServiceSeries, u64)]) {
        let mut by_labels: BTreeMap<ServiceSeries, u64> = BTreeMap::new();
        for (series, n) in values {
            *by_labels.entry(self.labels(series)).or_default() += n;
        }
        gauge.reset();
        for (series, n) in by_labels {
            gauge
                .with_label_values(&series.values())
                .set(saturating_i64(n));
        }
    }

    /// Counts one stall of a process of `series`.
    pub fn add_stall(&self, series: &ServiceSeries) {
        let labels = self.labels(series);
        self.stalls.with_label_values(&labels.values()).inc();
    }

    /// Sets the stalled threads of each series; series left out go back to none.
    pub fn set_stalled_threads(&self, stalled: &[(&ServiceSeries, u64)]) {
        self.set_per_service(&self.stalled_threads, stalled);
    }

    /// Adds what the CPU-limited cgroups of `service` did since the last call: enforcement
    /// periods, the periods throttled, and the time throttled.
    pub fn add_cpu_throttling(
        &self,
        service: &str,
        periods: u64,
        throttled_periods: u64,
        throttled: Duration,
    ) {
        let service = self.services.label(service);
        let labels = [service.as_str()];
        self.cgroup_periods
            .with_label_values(&labels)
            .inc_by(periods);
        self.cgroup_throttled_periods
            .with_label_values(&labels)
            .inc_by(throttled_periods);
        self.cgroup_throttled
            .with_label_values(&labels)
            .inc_by(throttled.as_secs_f64());
    }

    /// Sets each service's summed CPU limit in cores; services left out disappear.
    pub fn set_cpu_limits(&self, limits: &[(&str, f64)]) {
        let mut by_label: BTreeMap<String, f64> = BTreeMap::new();
        for (service, cores) in limits {
            *by_label.entry(self.services.label(service)).or_default() += cores;
        }
        self.cgroup_limit.reset();
        for (service, cores) in by_label {
            self.cgroup_limit.with_label_values(&[&service]).set(cores);
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

    /// Sets the number of unsupported processes for each reason; reasons left out are set to 0.
    pub fn set_unsupported(&self, counts: &[(UnsupportedReason, u64)]) {
        set_each(&self.unsupported, &UnsupportedReason::ALL, counts, |r| {
            r.label()
        });
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

/// Sets `gauge{label(k)}` to the sum of `counts` for each key `k` of `all` (0 for one left out).
fn set_each<K: Copy + PartialEq>(
    gauge: &IntGaugeVec,
    all: &[K],
    counts: &[(K, u64)],
    label: impl Fn(K) -> &'static str,
) {
    for &key in all {
        let n: u64 = counts
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, n)| n)
            .sum();
        gauge
            .with_label_values(&[label(key)])
            .set(saturating_i64(n));
    }
}
