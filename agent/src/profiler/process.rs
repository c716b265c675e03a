//! A profiled process as the exporters see it ([`ProcessInfo`]), and what its samples go into
//! until the next cut.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::aggregate::{Aggregator, ProfileWindow, WaitReason};
use crate::discovery::look_again::LookAgain;
use crate::discovery::process_env::ProcessEnv;
use crate::discovery::service_name::{is_worker, ProcessIdentity, ProcessRole, ServiceNameRule};
use crate::discovery::PythonTarget;
use crate::unwind::ThreadSample;

use super::waits::Waits;
use super::HostStats;

/// A profiled process, as the exporters label it.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    /// host pid
    pub pid: u32,
    /// pid in its own namespace
    pub ns_pid: u32,
    /// CPython version
    pub version: String,
    /// command line
    pub cmdline: Vec<String>,
    /// What its environment says about it (service names, a few OpenTelemetry resource
    /// attributes; nothing else is read)
    pub env: ProcessEnv,
    /// cgroup path (container and pod ids are parsed from it)
    pub cgroup: String,
    /// parent's host pid when it was found (0: unknown)
    pub ppid: u32,
    /// the parent's command line when it was found (a worker's parent runs the same program)
    pub parent_cmdline: Vec<String>,
}

impl ProcessInfo {
    /// What its service name is made of (see [`crate::discovery::service_name`]).
    pub fn identity(&self) -> ProcessIdentity<'_> {
        ProcessIdentity {
            pid: self.pid,
            cmdline: &self.cmdline,
            service_env: self.env.pyagent_service.as_deref(),
            otel_service: self.env.otel_service.as_deref(),
        }
    }

    /// Whether it is a worker: its parent runs the same program (see
    /// [`crate::discovery::service_name::is_worker`]).
    pub fn is_worker(&self, rules: &[ServiceNameRule]) -> bool {
        self.ppid > 1 && is_worker(&self.cmdline, &self.parent_cmdline, rules)
    }

    pub(super) fn of(target: &PythonTarget) -> ProcessInfo {
        let pid = target.pid;
        let ppid = parent_pid(pid).unwrap_or(0);
        ProcessInfo {
            pid,
            ns_pid: target.ns_pid,
            version: target.version().to_string(),
            cmdline: cmdline(pid),
            env: ProcessEnv::of(pid),
            cgroup: std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default(),
            ppid,
            parent_cmdline: if ppid > 1 { cmdline(ppid) } else { Vec::new() },
        }
    }
}

/// `/proc/PID/cmdline`, split at NULs (empty when it cannot be read).
fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The parent's pid, the field after the state in `/proc/PID/stat` (after the last `)`: the
/// command name may hold any character).
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The role of each of `processes` in its service: a worker runs its parent's program, and
/// that parent is its master. Lone processes are left out.
pub fn process_roles<'a>(
    processes: impl IntoIterator<Item = &'a ProcessInfo>,
    rules: &[ServiceNameRule],
) -> HashMap<u32, ProcessRole> {
    let mut roles = HashMap::new();
    let mut masters = Vec::new();
    for p in processes {
        if p.is_worker(rules) {
            roles.insert(p.pid, ProcessRole::Worker);
            masters.push(p.ppid);
        }
    }
    for pid in masters {
        // A worker with workers of its own stays a worker: the tree's root is the master.
        roles.entry(pid).or_insert(ProcessRole::Master);
    }
    roles
}

/// One tracked process's samples since the last cut.
pub(super) struct Profile {
    pub info: ProcessInfo,
    pub agg: Aggregator,
    /// When to look again for the OpenTelemetry context the process may publish later.
    pub context_look: LookAgain,
}

/// The first wait before looking again for a process's OpenTelemetry context (its SDK
/// publishes it as it starts, seconds in), and the longest: with 200 processes that never
/// publish, a look at every window was a fifth of the agent's CPU.
const CONTEXT_LOOK: (Duration, Duration) = (Duration::from_secs(5), Duration::from_secs(300));

/// Where both backends put what they resolve: each process's profile, the windows of processes
/// that have exited, the blocked threads whose time is still running, and the counters.
#[derive(Default)]
pub(super) struct Collected {
    /// host PID → its profile (looked up for every record: foldhash, not SipHash)
    pub profiles: foldhash::HashMap<u32, Profile>,
    pub finished: Vec<(ProcessInfo, ProfileWindow)>,
    pub waits: Waits,
    pub stats: HostStats,
}

impl Collected {
    /// Starts the profile of a newly tracked process, labelled with its pid, namespace pid and
    /// Python version.
    pub fn start(&mut self, info: ProcessInfo, period_ns: u64, off_cpu: bool) {
        let mut agg = Aggregator::new(period_ns);
        if off_cpu {
            agg.trace_off_cpu();
        }
        agg.set_label("pid", info.pid.to_string());
        if info.ns_pid != info.pid {
            agg.set_label("ns_pid", info.ns_pid.to_string());
        }
        agg.set_label("python_version", info.version.clone());
        let mut context_look = LookAgain::new(CONTEXT_LOOK.0, CONTEXT_LOOK.1);
        if !info.env.published {
            // Discovery has just looked.
            context_look.missed(Instant::now());
        }
        self.profiles.insert(
            info.pid,
            Profile {
                info,
                agg,
                context_look,
            },
        );
    }

    /// Ends the profile of a process no longer tracked: its waits end with it, and what it
    /// collected since the last cut waits for the next one.
    pub fn finish(&mut self, pid: u32) {
        self.weigh_waits(Some(pid));
        if let Some(mut p) = self.profiles.remove(&pid) {
            if !p.agg.is_empty() {
                self.finished.push((p.info, p.agg.cut()));
            }
        }
    }

    /// Threads still blocked have waited since their stack was recorded (or the last cut): that
    /// much goes into the current window, so a long wait (a stalled thread) shows in every
    /// window it spans, not only in the one it ends in. `only`: just that process's threads.
    pub fn weigh_waits(&mut self, only: Option<u32>) {
        self.waits.weigh(only, off_cpu_into(&mut self.profiles));
    }

    /// Weighs the waits of `tids` that the program timed without walking them into the
    /// profiles, from its state of each thread (`read`).
    pub fn weigh_carried(
        &mut self,
        tids: &[u32],
        read: impl FnMut(u32) -> Option<common::PaOffCpuThread>,
    ) {
        let now = crate::sampler::off_cpu::monotonic_ns();
        self.waits
            .weigh_carried(tids, now, read, off_cpu_into(&mut self.profiles));
    }

    /// `n` samples of process `pid` lost (its read failed), counted in its profile.
    pub fn add_dropped(&mut self, pid: u32, n: u64) {
        if let Some(p) = self.profiles.get_mut(&pid) {
            p.agg.add_dropped(n);
        }
    }

    /// A sample standing for `n` sampling periods into its process's profile (none: the process
    /// is no longer tracked); nothing for 0.
    pub fn add_periods(&mut self, sample: &ThreadSample, n: u64) {
        if n == 0 {
            return;
        }
        if let Some(p) = self.profiles.get_mut(&sample.thread.pid) {
            p.agg.add_count(sample, n);
            self.stats.samples += n;
        }
    }

    /// `ns` of off-CPU time waiting for `wait` in this stack, into its process's profile.
    pub fn add_off_cpu(&mut self, sample: &ThreadSample, wait: WaitReason, ns: u64) {
        if let Some(p) = self.profiles.get_mut(&sample.thread.pid) {
            p.agg.add_off_cpu(sample, wait, ns);
        }
    }
}

/// Hands a wait's time to the profile of its process (`false`: it has none).
fn off_cpu_into(
    profiles: &mut foldhash::HashMap<u32, Profile>,
) -> impl FnMut(&ThreadSample, WaitReason, u64) -> bool + '_ {
    |s: &ThreadSample, w: WaitReason, ns: u64| {
        profiles.get_mut(&s.thread.pid).is_some_and(|p| {
            p.agg.add_off_cpu(s, w, ns);
            true
        })
    }
}
