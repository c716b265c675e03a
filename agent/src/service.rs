//! The continuous profiling service: `pyagent --all-python` without `--duration`.
//!
//! Ties the stages together for fleet use: the [`HostProfiler`] samples every CPython process;
//! every `interval` one pprof per process is cut, labelled (service, host, pid, Python version,
//! container and pod ids) and handed to the sinks (directory, Pyroscope) without waiting on the
//! network; Prometheus metrics are served all along. On SIGTERM/SIGINT the partial interval is
//! flushed and the sinks deliver or spill what they hold before the process exits.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use common::Counter;

use crate::config::{ServiceConfig, ServiceNameRule};
use crate::discovery::container::{container_id, pod_uid};
use crate::discovery::privileges::{Privileges, Shortfall};
use crate::discovery::service_name::{service_name, ProcessRole};
use crate::export::metrics::{
    serve, AgentMetrics, Deltas, FailureReason, MetricsError, ProcessState, ServiceSeries,
    NOT_PROFILED_SHOWN,
};
use crate::export::sinks::{ProfileMeta, ShutdownReport, SinkError, SinkSet};
use crate::profiler::{
    process_roles, CpuBudget, Decision, HostConfig, HostError, HostProfiler, HostStats,
    ProcessInfo, RateGovernor,
};
use crate::unwind::{LossReason, RecordLoss, StackLoss, UnwindOptions};

mod stalls;
mod throttling;
use stalls::StallWatch;
use throttling::ThrottlingWatch;

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The sampler backend.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The metrics endpoint.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// A sink (unwritable directory, bad URL).
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// The kernel lets this process read no other process.
    #[error("{0}")]
    Privileges(Shortfall),
}

/// What a finished run did.
#[derive(Debug, Default)]
pub struct ServiceReport {
    /// profiles handed to the sinks
    pub profiles: u64,
    /// profiles written to the output directory over the whole run
    pub written: u64,
    /// profiles uploaded to Pyroscope over the whole run
    pub uploaded: u64,
    /// what the sinks did at shutdown
    pub shutdown: ShutdownReport,
    /// profiles lost over the whole run, by any sink for any reason (write failures included)
    pub dropped: u64,
    /// failed file writes over the whole run
    pub write_failures: u64,
    /// sampler backend used
    pub mode: &'static str,
}

/// Labels of one process's profiles, the same for the service and `--duration` files:
/// `service_name`, `process_role` (`master` or `worker`, when it has one), `hostname`, `pid`
/// (`ns_pid` in a PID namespace), `python_version`, and `container_id`/`pod_uid` when its cgroup
/// names them.
pub fn process_labels(
    info: &ProcessInfo,
    service: &str,
    role: Option<ProcessRole>,
    host: &str,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    labels.insert("service_name".into(), service.to_string());
    if let Some(role) = role {
        labels.insert("process_role".into(), role.label().to_string());
    }
    labels.insert("hostname".into(), host.to_string());
    labels.insert("pid".into(), info.pid.to_string());
    if info.ns_pid != info.pid {
        labels.insert("ns_pid".into(), info.ns_pid.to_string());
    }
    labels.insert("python_version".into(), info.version.clone());
    if let Some(id) = container_id(&info.cgroup) {
        labels.insert("container_id".into(), id);
    }
    if let Some(uid) = pod_uid(&info.cgroup) {
        labels.insert("pod_uid".into(), uid);
    }
    for (label, value) in &info.env.labels {
        labels.insert(label.to_string(), value.clone());
    }
    labels
}

/// The labels of the per-service metrics of process `info`, whose role is `role`.
pub fn series_of(
    info: &ProcessInfo,
    role: Option<ProcessRole>,
    rules: &[ServiceNameRule],
) -> ServiceSeries {
    ServiceSeries {
        service: service_name(info.identity(), rules),
        python_version: info.version.clone(),
        role,
    }
}

/// Adds to `services` (the service's cache of series by PID) the series of every process of
/// `profiler` it lacks; the processes' roles are worked out once for all of them.
pub(super) fn fill_series(
    profiler: &HostProfiler,
    rules: &[ServiceNameRule],
    services: &mut HashMap<u32, ServiceSeries>,
) {
    if profiler
        .process_infos()
        .all(|info| services.contains_key(&info.pid))
    {
        return;
    }
    let roles = process_roles(profiler.process_infos(), rules);
    for info in profiler.process_infos() {
        services
            .entry(info.pid)
            .or_insert_with(|| series_of(info, roles.get(&info.pid).copied(), rules));
    }
}

/// This host's name (`unknown` when it cannot be read).
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

/// A running total the service turns into metric increments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Total {
    /// Ticks lost for a reason.
    Lost(LossReason),
    /// Userspace stacks kept although their top frame moved while they were read.
    Unverified,
    /// Userspace walks kept as their proven root.
    ProvenRoots,
    /// The userspace read threads' time in one state, ns.
    ThreadTime(&'static str),
    /// Hits of one unwinder cache.
    CacheHits(&'static str),
    /// Misses of one unwinder cache.
    CacheMisses(&'static str),
    /// 3.15 walks the frame cache could not hold.
    FrameCacheBypassed,
    /// Task-aware samples, by result.
    TaskSamples(&'static str),
    /// Processes profiled without task stacks (before 3.14).
    AsyncUnsupported,
    /// Native objects named from one source.
    NativeObjects(&'static str),
    /// Symbol sources of one kind refused.
    SymbolFilesRefused(&'static str),
}

/// Runs the service until `stop` is set.
pub fn run(
    config: &ServiceConfig,
    unwind: UnwindOptions,
    stop: &AtomicBool,
) -> Result<ServiceReport, ServiceError> {
    // What this run lacks is said once, before anything starts, never left to look like an
    // empty host.
    let lacks = Privileges::current().shortfalls();
    if let Some(fatal) = lacks.iter().find(|s| s.prevents_profiling()) {
        return Err(ServiceError::Privileges(fatal.clone()));
    }
    for lack in &lacks {
        tracing::warn!("{lack}");
    }
    let metrics = AgentMetrics::new();
    let server = serve(config.metrics_addr, &metrics)?;
    let sinks = SinkSet::start(
        config.output_dir.as_deref(),
        config.output_limits,
        config.upload(),
        &metrics,
    )?;
    let unwind = UnwindOptions {
        async_tasks: config.async_tasks,
        ..unwind
    };
    let host_config = HostConfig {
        mode: config.mode,
        rate_hz: config.rate_hz,
        off_cpu: config.off_cpu,
        native_stacks: config.native,
        debug_dirs: config.debug_dirs.clone(),
        pids: None,
        unwind,
        ..HostConfig::default()
    };
    let mut profiler = HostProfiler::new(host_config)?;
    if let Some(why) = profiler.fallback_reason() {
        tracing::warn!("eBPF sampler unavailable ({why}); using the userspace sampler");
        if config.off_cpu {
            tracing::warn!("off_cpu needs the eBPF sampler: profiling on-CPU time only");
        }
    }
    for note in profiler.kernel_notes() {
        tracing::warn!("{note}");
    }
    if let Some(why) = profiler.off_cpu_unavailable() {
        tracing::warn!("off-CPU profiling unavailable ({why}); profiling on-CPU time only");
    }
    if !config.stall_after.is_zero()
        && (!config.off_cpu || profiler.off_cpu_unavailable().is_some())
    {
        tracing::info!(
            "stalled threads are not watched: that needs off-CPU profiling (off_cpu = true)"
        );
    }
    tracing::info!(
        mode = profiler.mode_name(),
        metrics = %server.local_addr(),
        interval = ?config.interval,
        "pyagent service started"
    );
    let host = hostname();
    let mut services: HashMap<u32, ServiceSeries> = HashMap::new();
    let mut deltas: Deltas<Total> = Deltas::default();
    let mut profiles = 0u64;
    let mut next_cut = Instant::now() + config.interval;
    let rules = &config.service_names;
    let emit = |profiler: &mut HostProfiler,
                services: &mut HashMap<u32, ServiceSeries>,
                profiles: &mut u64| {
        let windows = profiler.cut();
        // Roles from the whole tree as it is now: a master is known by its workers.
        let roles = process_roles(
            profiler
                .process_infos()
                .chain(windows.iter().map(|(info, _)| info)),
            rules,
        );
        let role = |pid: u32| roles.get(&pid).copied();
        for (info, mut window) in windows {
            // Named again at every window: a process may publish its OpenTelemetry context
            // (and so its name) after it was found. Cheap: no read, string rules only.
            let series = series_of(&info, role(info.pid), rules);
            window.labels = process_labels(&info, &series.service, series.role, &host);
            metrics.add_window(&series, &window);
            let meta = ProfileMeta {
                service: series.service.clone(),
                pid: info.pid,
                start: window.start,
                end: window.start + window.duration,
                labels: window.labels.clone(),
            };
            services.insert(info.pid, series);
            sinks.submit(&window, &meta);
            *profiles += 1;
        }
        // Idle processes too: their threads count.
        for info in profiler.process_infos() {
            services.insert(info.pid, series_of(info, role(info.pid), rules));
        }
        let live = profiler.pids();
        services.retain(|pid, _| live.contains(pid));
        let threads: Vec<(&ServiceSeries, u64)> = profiler
            .python_threads()
            .into_iter()
            .filter_map(|(pid, n)| services.get(&pid).map(|s| (s, n)))
            .collect();
        metrics.set_service_threads(&threads);
        let versions: Vec<(&str, &str)> = services
            .values()
            .map(|s| (s.service.as_str(), s.python_version.as_str()))
            .collect();
        metrics.set_python_info(&versions);
    };
    let budget = match config.cpu_budget {
        CpuBudget::Limit(share) => Some(share),
        CpuBudget::Off => None,
    };
    // Its first window starts at the first cut, past the start-up's one-off costs (loading
    // the program, the first scan of every process).
    let mut governor =
        budget.map(|share| RateGovernor::new(share, config.rate_hz, config.interval / 2));
    metrics.set_rate(profiler.rate_hz(), budget);
    profiler.scan();
    // Metrics once a second, not every collection (10 a second in eBPF mode): a scrape
    // interval is seconds anyway.
    let mut next_metrics = Instant::now();
    let stall_watch = StallWatch {
        after: config.stall_after,
        dir: config.output_dir.as_deref(),
        rules: &config.service_names,
        unwind,
    };
    let mut throttling = ThrottlingWatch::new(&config.service_names);
    profiler.run(stop, None, |p| {
        if Instant::now() >= next_metrics {
            next_metrics = Instant::now() + METRICS_INTERVAL;
            update_metrics(p, &metrics, &mut deltas);
            stall_watch.check(p, &metrics, &mut services);
            throttling.check(p, &metrics, &mut services);
        }
        if Instant::now() >= next_cut {
            next_cut += config.interval;
            emit(p, &mut services, &mut profiles);
            if let Some(g) = &mut governor {
                keep_within_budget(p, g, &metrics);
            }
        }
    });
    // SIGTERM: the partial interval is flushed too.
    emit(&mut profiler, &mut services, &mut profiles);
    update_metrics(&profiler, &metrics, &mut deltas);
    let shutdown = sinks.shutdown(Duration::from_secs(10));
    // The whole run's losses, not only the shutdown's: a write failure at every interval must show here.
    let dropped = SINKS
        .iter()
        .map(|sink| metrics.sink(sink).dropped_total())
        .sum();
    let write_failures = SINKS
        .iter()
        .map(|sink| metrics.sink(sink).failures(FailureReason::Write))
        .sum();
    tracing::info!(
        profiles,
        delivered = shutdown.delivered,
        spilled = shutdown.spilled,
        dropped,
        write_failures,
        "pyagent service stopped"
    );
    server.shutdown();
    Ok(ServiceReport {
        profiles,
        written: metrics.sink("directory").successes(),
        uploaded: UPLOAD_SINKS
            .iter()
            .map(|sink| metrics.sink(sink).successes())
            .sum(),
        shutdown,
        dropped,
        write_failures,
        mode: profiler.mode_name(),
    })
}

/// At a window's end: what it cost, and the sampling rate of the next one (see
/// [`RateGovernor`]). Every change is logged; the rate is a metric and each window's period.
fn keep_within_budget(p: &mut HostProfiler, governor: &mut RateGovernor, metrics: &AgentMetrics) {
    let rate = p.rate_hz();
    let Some((cost, decision)) = governor.end_window(p.cost_reading(), rate) else {
        return;
    };
    // A change that failed left no perf event open (and the rate as it was): a window that
    // keeps the rate tries it again (one that changes it opens the events at the new rate), so
    // sampling resumes once the kernel takes a rate.
    if p.sampling_stopped() && decision == Decision::Keep {
        match p.set_rate(rate) {
            Ok(()) => tracing::info!(rate_hz = rate, "sampling again"),
            Err(e) => tracing::warn!("still cannot sample at {rate} Hz: {e:#}"),
        }
        governor.start(p.cost_reading());
        return;
    }
    metrics.set_window_cost(cost, decision == Decision::OverAtLowestRate);
    let budget = governor.budget();
    let used = format!("{:.2}%", cost.total() * 100.0);
    // What the decision was made on (see `RateGovernor`).
    let recent = format!("{:.2}%", cost.recent * 100.0);
    let samples = format!("{:.2}%", cost.per_sample * 100.0);
    let new_rate = match decision {
        Decision::Keep => return,
        Decision::OverAtLowestRate => {
            tracing::warn!(
                %budget, %used, %samples, %recent, rate_hz = rate,
                "over the CPU budget at the lowest sampling rate: what does not fall with the rate (processes, threads, off-CPU records) costs more than the budget"
            );
            return;
        }
        Decision::Lower(new_rate) => {
            tracing::info!(%budget, %used, %samples, %recent, from_hz = rate, to_hz = new_rate, "over the CPU budget: sampling less often");
            new_rate
        }
        Decision::Raise(new_rate) => {
            tracing::info!(%budget, %used, %samples, %recent, from_hz = rate, to_hz = new_rate, "room in the CPU budget: sampling more often");
            new_rate
        }
    };
    match p.set_rate(new_rate) {
        Ok(()) => metrics.set_rate(new_rate, Some(budget)),
        Err(e) => tracing::warn!("cannot change the sampling rate to {new_rate} Hz: {e:#}"),
    }
    // The change itself cost something: the next window is measured from after it.
    governor.start(p.cost_reading());
}

/// The names the sinks count under (see [`SinkSet::start`]).
const SINKS: [&str; 4] = ["directory", "pyroscope", "otlp", "encode"];

/// The names an upload sink counts under, whichever store it sends to.
const UPLOAD_SINKS: [&str; 2] = ["pyroscope", "otlp"];

/// How often the metrics are brought up to date.
const METRICS_INTERVAL: Duration = Duration::from_secs(1);

/// Copies the profiler's and the BPF program's counters into the metrics.
fn update_metrics(p: &HostProfiler, metrics: &AgentMetrics, deltas: &mut Deltas<Total>) {
    let states: Vec<(ProcessState, u64)> = p
        .process_states()
        .into_iter()
        .map(|(state, n)| (state, n as u64))
        .collect();
    metrics.set_process_states(&states);
    metrics.set_not_profiled(&p.not_profiled(NOT_PROFILED_SHOWN));
    let unsupported: Vec<_> = p
        .unsupported_counts()
        .into_iter()
        .map(|(reason, n)| (reason, n as u64))
        .collect();
    metrics.set_unsupported(&unsupported);
    let HostStats {
        torn,
        anchor_miss,
        incomplete,
        cyclic,
        untracked,
        unknown_thread,
        throttled,
        async_unsupported,
        ..
    } = p.stats();
    let unsupported = deltas.delta(Total::AsyncUnsupported, async_unsupported);
    if unsupported > 0 {
        metrics.add_async_unsupported(unsupported);
    }
    let mut lost = |reason: LossReason, total: u64| {
        let d = deltas.delta(Total::Lost(reason), total);
        if d > 0 {
            metrics.add_lost(reason, d);
        }
    };
    for (reason, total) in [
        (RecordLoss::TornRead, torn),
        (RecordLoss::AnchorMiss, anchor_miss),
        (RecordLoss::IncompleteStack, incomplete),
        (RecordLoss::CyclicChain, cyclic),
        (RecordLoss::UntrackedProcess, untracked),
        (RecordLoss::UnknownThread, unknown_thread),
        (RecordLoss::PerfThrottled, throttled),
    ] {
        lost(LossReason::Record(reason), total);
    }
    let userspace = p.userspace_unwind_stats();
    if let Some(u) = &userspace {
        for reason in StackLoss::ALL {
            lost(LossReason::Thread(reason), u.lost.get(reason));
        }
    }
    // A map that cannot be read this time leaves its totals as they were: counting it as 0
    // would count its whole history again on the next read.
    if let Some(sums) = p.bpf().and_then(|bpf| bpf.counter_sums().ok()) {
        let get = |c: Counter| sums[c.index() as usize];
        let read_failures = get(Counter::ReadFailTstate)
            + get(Counter::ReadFailCframe)
            + get(Counter::ReadFailFrame);
        lost(LossReason::Record(RecordLoss::BpfReadFailed), read_failures);
        lost(
            LossReason::Record(RecordLoss::BpfTruncated),
            get(Counter::Truncated),
        );
        metrics.set_bpf_counters(&sums);
        let run = p.bpf().and_then(|bpf| bpf.run_stats());
        metrics.set_bpf(run, get(Counter::RingbufDropped));
    }
    if let Some(u) = &userspace {
        metrics.add_unverified(deltas.delta(Total::Unverified, u.unverified));
        metrics.add_proven_roots(deltas.delta(Total::ProvenRoots, u.proven_roots));
    }
    if let Some(t) = p.stats().userspace.map(|s| s.time) {
        for (state, ns) in [
            ("sampled", t.sampled_ns),
            ("unread", t.lost_ns),
            ("runqueue", t.runqueue_ns),
            ("off_cpu", t.off_cpu_ns()),
        ] {
            metrics.add_userspace_thread_time(state, deltas.delta(Total::ThreadTime(state), ns));
        }
    }
    for (cache, (hits, misses)) in p.cache_stats() {
        let h = deltas.delta(Total::CacheHits(cache), hits);
        let m = deltas.delta(Total::CacheMisses(cache), misses);
        metrics.add_cache(cache, h, m);
    }
    metrics.set_cache_memory(&p.cache_memory());
    let symbols = crate::symbolize::native::symbol_source_stats();
    for (source, total) in symbols.objects_by_source() {
        let d = deltas.delta(Total::NativeObjects(source), total);
        if d > 0 {
            metrics.add_native_objects(source, d);
        }
    }
    for (kind, total) in symbols.refused_by_kind() {
        let d = deltas.delta(Total::SymbolFilesRefused(kind), total);
        if d > 0 {
            metrics.add_symbol_files_refused(kind, d);
        }
    }
    let u = p.unwind_stats();
    for (result, total) in [
        ("attributed", u.task_samples),
        ("unattributed", u.task_unattributed),
        ("ended", u.task_ended),
        ("waiting", u.task_waiting_samples),
    ] {
        let d = deltas.delta(Total::TaskSamples(result), total);
        if d > 0 {
            metrics.add_task_samples(result, d);
        }
    }
    let bypassed = deltas.delta(Total::FrameCacheBypassed, p.frame_cache_bypassed());
    if bypassed > 0 {
        metrics.add_cache_bypassed("frame", bypassed);
    }
}
