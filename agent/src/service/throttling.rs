//! CPU throttling per service: each profiled process's `cpu` cgroup (shared by many processes:
//! read once), its throttled periods and time since the last read added to its service's
//! counters, and its CPU limit summed into the service's gauge. Read every
//! [`THROTTLING_INTERVAL`], not every metrics update: a host of a thousand containers would
//! otherwise read a thousand files a second, and the counters are cumulative anyway.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::config::ServiceNameRule;
use crate::discovery::cgroup_cpu::{
    outside_namespace, read_throttling, CpuControllerMounts, CpuThrottling,
};
use crate::export::metrics::{increase, AgentMetrics, ServiceSeries};
use crate::profiler::HostProfiler;

/// How often the cgroups are read.
pub(super) const THROTTLING_INTERVAL: Duration = Duration::from_secs(10);

/// The cgroups' last figures, to add their increase.
pub(super) struct ThrottlingWatch<'a> {
    rules: &'a [ServiceNameRule],
    mounts: CpuControllerMounts,
    last: HashMap<PathBuf, CpuThrottling>,
    next: Instant,
    /// processes whose cgroups lie outside the agent's cgroup namespace were reported
    reported_outside: bool,
}

impl<'a> ThrottlingWatch<'a> {
    /// A watch of the `cpu` controller mounted here (none: it reads nothing), naming services
    /// by `rules`.
    pub fn new(rules: &'a [ServiceNameRule]) -> ThrottlingWatch<'a> {
        ThrottlingWatch {
            rules,
            mounts: CpuControllerMounts::find(),
            last: HashMap::new(),
            next: Instant::now(),
            reported_outside: false,
        }
    }

    /// When due, reads the cgroups of `profiler`'s processes and updates the metrics.
    /// `services` is the service's cache of service names by PID, filled here too. A cgroup
    /// of processes of two services counts for the service of its lowest PID.
    pub fn check(
        &mut self,
        profiler: &HostProfiler,
        metrics: &AgentMetrics,
        services: &mut HashMap<u32, ServiceSeries>,
    ) {
        if Instant::now() < self.next || self.mounts == CpuControllerMounts::default() {
            return;
        }
        self.next = Instant::now() + THROTTLING_INTERVAL;
        super::fill_series(profiler, self.rules, services);
        let outside = profiler
            .process_infos()
            .filter(|info| outside_namespace(&info.cgroup))
            .count();
        if outside > 0 && !self.reported_outside {
            self.reported_outside = true;
            tracing::warn!(
                processes = outside,
                "their cgroups lie outside the agent's cgroup namespace: their CPU throttling is not read (run the agent in the host's cgroup namespace)"
            );
        }
        let mut cgroups: BTreeMap<PathBuf, (u32, &str)> = BTreeMap::new();
        for info in profiler.process_infos() {
            let (Some(dir), Some(series)) = (
                self.mounts.cgroup_dir(&info.cgroup),
                services.get(&info.pid),
            ) else {
                continue;
            };
            let entry = cgroups.entry(dir).or_insert((info.pid, &series.service));
            if info.pid < entry.0 {
                *entry = (info.pid, &series.service);
            }
        }
        let mut limits: BTreeMap<&str, f64> = BTreeMap::new();
        let mut seen = HashMap::with_capacity(cgroups.len());
        for (dir, (_, service)) in cgroups {
            let Ok(now) = read_throttling(&dir) else {
                // Kept: one failed read must not make the next one a new baseline.
                if let Some(last) = self.last.remove(&dir) {
                    seen.insert(dir, last);
                }
                continue;
            };
            // Without a limit nothing is throttled: no series for it.
            let Some(cores) = now.limit_cores else {
                continue;
            };
            *limits.entry(service).or_default() += cores;
            // A cgroup's first read is its baseline: what it was throttled before the agent
            // watched it is not this run's.
            if let Some(last) = self.last.get(&dir) {
                metrics.add_cpu_throttling(
                    service,
                    increase(last.periods, now.periods),
                    increase(last.throttled_periods, now.throttled_periods),
                    Duration::from_nanos(increase(nanos(last.throttled), nanos(now.throttled))),
                );
            } else {
                metrics.add_cpu_throttling(service, 0, 0, Duration::ZERO);
            }
            seen.insert(dir, now);
        }
        self.last = seen;
        metrics.set_cpu_limits(&limits.into_iter().collect::<Vec<_>>());
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
