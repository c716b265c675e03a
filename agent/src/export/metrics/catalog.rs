//! What every metric of [`AgentMetrics`] is called and means: names, help texts and labels, registered
//! once per [`AgentMetrics`] (so tests can run many agents in one process).

use std::sync::{Arc, Mutex};

use prometheus::{Counter, CounterVec, Gauge, GaugeVec, IntGauge, Opts, Registry};

use super::own_process;
use super::registration::{counter, counter_vec, gauge_vec, register};
use super::{
    AgentMetrics, BpfTotals, BudgetGauges, ServiceLabels, ServiceSeries, SinkFamilies,
    DEFAULT_MAX_SERVICES,
};

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
            samples_proven_root: counter(
                &registry,
                "pyagent_samples_proven_root_total",
                "Userspace walks the thread changed while they were read, kept as the frames a second read proved (from the bottom up) under a [stack moved while read] frame.",
            ),
            userspace_thread_time: register(
                &registry,
                CounterVec::new(
                    Opts::new(
                        "pyagent_userspace_thread_seconds_total",
                        "Userspace sampler: where the time of the threads it read went, between their reads, by state: sampled (on a CPU, in a stack), unread (on a CPU, the read gave no stack: see pyagent_samples_lost_total), runqueue (waiting for a CPU), off_cpu (blocked or sleeping). Together, the read threads' wall time: every tick accounted.",
                    ),
                    &["state"],
                )
                .expect("valid counter vec"),
            ),
            task_samples: counter_vec(
                &registry,
                "pyagent_task_samples_total",
                "asyncio task-aware samples (async = true), by result: attributed to the task the thread ran; unattributed (the thread ran a task that could not be placed, its plain stack kept); ended (eBPF: the task ended before its record was read, marked by its coroutine alone); waiting (userspace --async-mode all: samples of waiting tasks).",
                &["result"],
            ),
            native_objects: counter_vec(
                &registry,
                "pyagent_native_objects_total",
                "Native objects (executables, shared libraries) parsed for native stacks, by where their function names came from: own_symtab, debug_file (a separate debug file found by build ID or .gnu_debuglink), mini_debug_info (.gnu_debugdata), dynsym_only (stripped: other functions show as object+offset).",
                &["source"],
            ),
            symbol_files_refused: counter_vec(
                &registry,
                "pyagent_native_symbol_files_refused_total",
                "Symbol sources refused while naming native objects, by kind: mini_debug_info (a .gnu_debugdata section that is not valid xz or ELF, or too large), debug_file (a candidate debug file of another build ID or CRC-32).",
                &["kind"],
            ),
            async_unsupported: counter(
                &registry,
                "pyagent_async_unsupported_processes_total",
                "Processes profiled without asyncio task stacks although async = true: CPython before 3.14 has no task layout to read.",
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
                "Lookups in the agent's caches (page, frame, code; record: BPF records that repeated their thread's last stack below the top frame, against those resolved whole), by cache and result (hit, miss; bypassed: frame-cache walks beyond its bounds, done whole).",
                &["cache", "result"],
            ),
            memory: gauge_vec(
                &registry,
                "pyagent_agent_memory_bytes",
                "Heap bytes the agent's caches hold, by cache, estimated from what they hold: page (copies of target memory, per process), code (code objects' names and line tables, per process), frame (3.15 frame cache), record (eBPF: each thread's last stack), native_frames (native frames named per process), native_objects (native objects' symbol tables, shared by every process), profile (the open profile windows). Each per-process cache is bounded; compare with process_resident_memory_bytes.",
                &["cache"],
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
                "Thread samples per service, CPython version and process role (master or worker of a pre-forking server, empty for a lone process; services past the cap are counted as other).",
                &ServiceSeries::LABELS,
            ),
            service_gil_samples: counter_vec(
                &registry,
                "pyagent_service_gil_samples_total",
                "Thread samples per service, CPython version and process role taken while the thread held the GIL.",
                &ServiceSeries::LABELS,
            ),
            service_off_cpu: register(
                &registry,
                CounterVec::new(
                    Opts::new(
                        "pyagent_service_off_cpu_seconds_total",
                        "Time Python threads per service, CPython version and process role spent off the CPU, by wait reason (io, sleep, lock, gil, other; cpu: runnable, waiting for a CPU after a preemption). eBPF mode with off-CPU on; userspace mode gives cpu only. The share of wait=\"gil\" is the time spent waiting for the GIL.",
                    ),
                    &["service", "python_version", "process_role", "wait"],
                )
                .expect("valid counter vec"),
            ),
            python_wall: register(
                &registry,
                CounterVec::new(
                    Opts::new(
                        "pyagent_python_wall_seconds_total",
                        "Where the time of Python threads per service, CPython version and process role went, by reason: cpu_gil_held, cpu_no_gil (on a CPU), gil_wait, cpu_wait (runnable, waiting for a CPU), io, lock, sleep, other. On-CPU parts count sampled CPU time; the waits need off-CPU profiling (eBPF), or --idle style wall-clock samples. The split pyagent spans gives per span, for a dashboard.",
                    ),
                    &["service", "python_version", "process_role", "reason"],
                )
                .expect("valid counter vec"),
            ),
            service_threads: gauge_vec(
                &registry,
                "pyagent_service_threads",
                "Python threads per service, CPython version and process role at the last scan.",
                &ServiceSeries::LABELS,
            ),
            stalled_threads: gauge_vec(
                &registry,
                "pyagent_python_stalled_threads",
                "Python threads per service, CPython version and process role blocked in one stack for longer than stall_after (needs off-CPU profiling).",
                &ServiceSeries::LABELS,
            ),
            stalls: counter_vec(
                &registry,
                "pyagent_python_stalls_total",
                "Stalls reported per service, CPython version and process role: a thread blocked in one stack past stall_after counts once per wait.",
                &ServiceSeries::LABELS,
            ),
            cgroup_periods: counter_vec(
                &registry,
                "pyagent_cgroup_cpu_periods_total",
                "CFS enforcement periods of the CPU-limited cgroups of each service's processes (cpu.stat nr_periods, read every 10 s; a cgroup's first read is its baseline).",
                &["service"],
            ),
            cgroup_throttled_periods: counter_vec(
                &registry,
                "pyagent_cgroup_cpu_throttled_periods_total",
                "Of pyagent_cgroup_cpu_periods_total, the periods in which the cgroup used up its CPU limit and was throttled (cpu.stat nr_throttled).",
                &["service"],
            ),
            cgroup_throttled: register(
                &registry,
                CounterVec::new(
                    Opts::new(
                        "pyagent_cgroup_cpu_throttled_seconds_total",
                        "Time the CPU-limited cgroups of each service's processes were throttled by their limit (cpu.stat throttled_usec, v1 throttled_time): runnable, not run. Its rate beside pyagent_cgroup_cpu_limit_cores says whether the limit is what makes the service slow.",
                    ),
                    &["service"],
                )
                .expect("valid counter vec"),
            ),
            cgroup_limit: register(
                &registry,
                GaugeVec::new(
                    Opts::new(
                        "pyagent_cgroup_cpu_limit_cores",
                        "CPU limits of the cgroups of each service's processes, summed, in cores (cpu.max, v1 cpu.cfs_quota_us over cpu.cfs_period_us); services without one have no series.",
                    ),
                    &["service"],
                )
                .expect("valid gauge vec"),
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
            unsupported: gauge_vec(
                &registry,
                "pyagent_processes_unsupported",
                "CPython processes seen by discovery that pyagent does not read, by reason: unsupported_version (a release without a layout here, such as 2.7 or 3.5), pre_release (an alpha, beta or candidate).",
                &["reason"],
            ),
            budget: BudgetGauges {
                rate: register(
                    &registry,
                    IntGauge::new(
                        "pyagent_sample_rate_hz",
                        "Samples per second the agent takes now (per CPU in eBPF mode, per process in userspace mode): the configured rate, or lower to keep within cpu_budget.",
                    )
                    .expect("valid gauge name"),
                ),
                limit: register(
                    &registry,
                    Gauge::new(
                        "pyagent_cpu_budget_cores",
                        "The CPU the agent may cost, in cores (cpu_budget; 0: no budget).",
                    )
                    .expect("valid gauge name"),
                ),
                used: register(
                    &registry,
                    GaugeVec::new(
                        Opts::new(
                            "pyagent_cpu_used_cores",
                            "What the last profile window cost, in cores, by part: agent (its own CPU time), bpf (its BPF programs' run time).",
                        ),
                        &["part"],
                    )
                    .expect("valid gauge vec"),
                ),
                used_by_samples: register(
                    &registry,
                    Gauge::new(
                        "pyagent_cpu_used_by_samples_cores",
                        "Of pyagent_cpu_used_cores (both parts), what the last window's samples cost, in cores: the sampling program and the agent's handling of its records (eBPF), the sampling ticks (userspace). The rest does not depend on the rate.",
                    )
                    .expect("valid gauge name"),
                ),
                over_at_lowest_rate: counter(
                    &registry,
                    "pyagent_cpu_budget_exceeded_total",
                    "Profile windows that cost more than cpu_budget although the agent sampled at its lowest rate (1 Hz): costs that do not fall with the rate exceed the budget.",
                ),
            },
            sinks: Arc::new(SinkFamilies::register(&registry)),
            services: ServiceLabels::new(max_services),
            registry,
        }
    }
}
