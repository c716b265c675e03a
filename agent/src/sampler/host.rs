//! Host-wide profiling: every CPython process on the host (or a given set), new ones as they
//! start, through the BPF sampler or, where BPF cannot load, the userspace sampler.
//!
//! In: a [`HostConfig`]. Out: one [`ProfileWindow`] per process each time [`HostProfiler::cut`]
//! is called. The BPF path: discovery registers each ready process's walk configuration in the
//! program's maps and keeps its thread map fresh; records drained from the ring buffer are
//! resolved by that process's [`Unwinder`] (code-object cache, page cache, 3.15 frame cache).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Counter, PaProc, SampleRecord, NOTICE_EXEC, NOTICE_UNKNOWN_THREAD};

use crate::aggregate::{Aggregator, ProfileWindow, WaitReason};
use crate::discovery::host::{NotProfiled, ProcessKind};
use crate::discovery::service_name::{ProcessIdentity, SERVICE_ENV};
use crate::discovery::{host_tids, HostScanner, PythonTarget};
use crate::sampler::bpf::{
    pa_proc_for, pa_thread_list_for, set_gil, BpfConfig, BpfError, BpfSampler,
};
use crate::sampler::off_cpu::{blocked_in, monotonic_ns, wait_reason, BlockedIn, Stall, Waiting};
use crate::sampler::userspace::{UserspaceConfig, UserspaceSampler};
use crate::sampler::waits::{Waits, Woke};
use crate::unwind::{
    DecodedRecord, ExternalSkip, InterpreterInfo, RecordKind, ThreadInfo, ThreadSample,
    UnwindOptions, UnwindStats, Unwinder,
};

/// Where samples come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// BPF if it loads, else userspace (with one line saying why).
    Auto,
    /// BPF or fail.
    Ebpf,
    /// The userspace sampler only.
    Userspace,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "ebpf" => Ok(Mode::Ebpf),
            "userspace" => Ok(Mode::Userspace),
            other => Err(format!("unknown mode {other:?} (auto, ebpf or userspace)")),
        }
    }
}

/// What to profile and how.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// sampler backend
    pub mode: Mode,
    /// samples per second per CPU (BPF) or per process (userspace)
    pub rate_hz: u32,
    /// only these pids; None: every process on the host
    pub pids: Option<Vec<u32>>,
    /// unwinder knobs (the frame cache also switches the BPF anchor on 3.15)
    pub unwind: UnwindOptions,
    /// how often /proc is scanned for new processes
    pub scan_interval: Duration,
    /// how often the ring buffer is drained and thread maps refreshed
    pub drain_interval: Duration,
    /// eBPF: thread states the program searches at most for a thread started since the last
    /// refresh (0: such threads are only counted as lost)
    pub thread_search_max: u32,
    /// eBPF: also profile the time threads spend blocked (off-CPU), with its wait reason
    pub off_cpu: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            mode: Mode::Auto,
            rate_hz: 19,
            pids: None,
            unwind: UnwindOptions::default(),
            scan_interval: Duration::from_millis(500),
            drain_interval: Duration::from_millis(100),
            thread_search_max: common::THREAD_SEARCH_MAX,
            off_cpu: false,
        }
    }
}

/// Errors that stop the host profiler from starting.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// `--mode ebpf` and the program cannot be loaded.
    #[error("eBPF sampler unavailable")]
    Bpf(#[from] BpfError),
}

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
    /// `PYAGENT_SERVICE` from its environment, if set
    pub service_env: Option<String>,
    /// cgroup path (container and pod ids are parsed from it)
    pub cgroup: String,
}

impl ProcessInfo {
    /// What its service name is made of (see [`crate::discovery::service_name`]).
    pub fn identity(&self) -> ProcessIdentity<'_> {
        ProcessIdentity {
            pid: self.pid,
            cmdline: &self.cmdline,
            service_env: self.service_env.as_deref(),
        }
    }

    fn of(target: &PythonTarget) -> ProcessInfo {
        let pid = target.pid;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let service_env = std::fs::read(format!("/proc/{pid}/environ"))
            .ok()
            .and_then(|env| {
                env.split(|&c| c == 0).find_map(|kv| {
                    kv.strip_prefix(SERVICE_ENV.as_bytes())
                        .and_then(|rest| rest.strip_prefix(b"="))
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                })
            });
        ProcessInfo {
            pid,
            ns_pid: target.ns_pid,
            version: target.version().to_string(),
            cmdline,
            service_env,
            cgroup: std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default(),
        }
    }
}

/// Counters of the host profiler.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HostStats {
    /// records drained from the ring buffer
    pub records: u64,
    /// samples added to a profile
    pub samples: u64,
    /// records of processes no longer tracked
    pub untracked: u64,
    /// records dropped: torn reads
    pub torn: u64,
    /// records dropped: 3.15 anchor not vouched for by the frame cache
    pub anchor_miss: u64,
    /// records dropped: walk did not reach the base frame
    pub incomplete: u64,
    /// ticks lost in the program: a thread neither registered nor found in its interpreter's
    /// thread list (eBPF)
    pub unknown_thread: u64,
    /// records dropped: the frame chain looped back on itself
    pub cyclic: u64,
    /// thread-map refreshes that failed
    pub refresh_failed: u64,
    /// off-CPU records resolved into a waiting stack
    pub off_cpu_waits: u64,
    /// wake-up records whose wait had no resolved stack (its record was dropped or torn)
    pub unmatched_wakes: u64,
    /// off-CPU records carrying the time of repeated waits whose first one was not seen
    pub carried_lost: u64,
}

/// A process's records are resolved against interpreter state and a code-object cache validated
/// at most this long ago. Re-validating every drain cost one remote read per process per drain:
/// most of the agent's time with many processes. A code object freed and another allocated at
/// its address within this window is shown under the old name until then (py-spy never
/// re-validates).
const RECORD_VALIDATE_INTERVAL: Duration = Duration::from_secs(2);

/// Every process's thread list is re-read at least this often, whatever the BPF program
/// reports: a thread state replaced under a known thread id sends no notice.
const THREAD_REFRESH_INTERVAL: Duration = Duration::from_secs(5);

struct BpfProcess {
    unwinder: Unwinder,
    /// host TIDs registered in the thread map
    threads: HashMap<u32, u64>,
    /// interpreter of each thread state, from the last refresh
    interp_of: HashMap<u64, InterpreterInfo>,
    /// when all of its tasks were last registered
    last_refresh: Instant,
    /// when the interpreter state and code-object cache were last validated
    last_validated: Instant,
    /// the process's PID namespace (`st_dev`, `st_ino`), in which `native_thread_id`s are
    /// given; `None` when unreadable (then the program cannot search for new threads)
    pidns: Option<(u64, u64)>,
    /// the interpreter whose thread list the program searches for unregistered threads: their
    /// records carry thread states the last refresh did not see
    searched_interp: Option<InterpreterInfo>,
    /// the walk configuration in the program's maps (its GIL addresses are set once the main
    /// interpreter is known)
    proc_config: PaProc,
}

impl BpfProcess {
    /// Records which interpreter each thread state belongs to, as just read.
    fn set_interpreters(&mut self, interpreters: &[(InterpreterInfo, Vec<ThreadInfo>)]) {
        self.interp_of.clear();
        for (interp, threads) in interpreters {
            self.interp_of
                .extend(threads.iter().map(|t| (t.addr, *interp)));
        }
    }
}

enum Backend {
    Bpf {
        sampler: Box<BpfSampler>,
        procs: HashMap<u32, BpfProcess>,
    },
    Userspace(Box<UserspaceSampler>),
}

struct Profile {
    info: ProcessInfo,
    agg: Aggregator,
}

/// Profiles every CPython process of the host.
pub struct HostProfiler {
    config: HostConfig,
    backend: Backend,
    scanner: HostScanner,
    profiles: HashMap<u32, Profile>,
    finished: Vec<(ProcessInfo, ProfileWindow)>,
    stats: HostStats,
    fallback_reason: Option<String>,
    off_cpu_unavailable: Option<String>,
    /// Threads off the CPU since their stack was recorded (off-CPU profiling).
    waits: Waits,
}

impl HostProfiler {
    /// Starts the backend the mode asks for.
    pub fn new(config: HostConfig) -> Result<HostProfiler, HostError> {
        let bpf_config = BpfConfig {
            rate_hz: config.rate_hz as u64,
            thread_search_max: config.thread_search_max,
            off_cpu: config.off_cpu,
            ..BpfConfig::default()
        };
        let mut fallback_reason = None;
        let mut off_cpu_unavailable = None;
        let mut load = || match BpfSampler::load(&bpf_config) {
            // A kernel without what off-CPU needs still gets on-CPU profiles.
            Err(e) if bpf_config.off_cpu => {
                let on_cpu = BpfConfig {
                    off_cpu: false,
                    ..bpf_config.clone()
                };
                let sampler = BpfSampler::load(&on_cpu)?;
                off_cpu_unavailable = Some(e.to_string());
                Ok(sampler)
            }
            other => other,
        };
        let backend = match config.mode {
            Mode::Userspace => Backend::Userspace(Box::new(Self::userspace(&config))),
            Mode::Ebpf => Backend::Bpf {
                sampler: Box::new(load()?),
                procs: HashMap::new(),
            },
            Mode::Auto => match load() {
                Ok(s) => Backend::Bpf {
                    sampler: Box::new(s),
                    procs: HashMap::new(),
                },
                Err(e) => {
                    fallback_reason = Some(e.to_string());
                    if config.off_cpu {
                        off_cpu_unavailable =
                            Some("the userspace sampler cannot see a thread block".to_string());
                    }
                    Backend::Userspace(Box::new(Self::userspace(&config)))
                }
            },
        };
        let mut scanner = HostScanner::new(config.pids.as_deref());
        if let Backend::Bpf { sampler, .. } = &backend {
            if sampler.notices_execs() {
                scanner.use_exec_notices();
            }
        }
        Ok(HostProfiler {
            scanner,
            config,
            backend,
            profiles: HashMap::new(),
            finished: Vec::new(),
            stats: HostStats::default(),
            fallback_reason,
            off_cpu_unavailable,
            waits: Waits::default(),
        })
    }

    /// Why off-CPU profiling was asked for and is off (the sampler runs on-CPU only).
    pub fn off_cpu_unavailable(&self) -> Option<&str> {
        self.off_cpu_unavailable.as_deref()
    }

    fn userspace(config: &HostConfig) -> UserspaceSampler {
        UserspaceSampler::empty(UserspaceConfig {
            rate_hz: config.rate_hz,
            duration: None,
            subprocesses: false,
            blocking: false,
            idle: false,
            unwind: config.unwind,
        })
    }

    /// `ebpf` or `userspace`.
    pub fn mode_name(&self) -> &'static str {
        match self.backend {
            Backend::Bpf { .. } => "ebpf",
            Backend::Userspace(_) => "userspace",
        }
    }

    /// Why `auto` fell back to userspace, if it did.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// Counters.
    pub fn stats(&self) -> HostStats {
        let mut stats = self.stats;
        if let Backend::Bpf { sampler, .. } = &self.backend {
            stats.unknown_thread = sampler.counter(Counter::ThreadUnknown).unwrap_or(0);
        }
        stats
    }

    /// The userspace sampler's unwinder counters since the start (threads sampled without a
    /// stack, by reason; stacks kept unverified); `None` in eBPF mode, whose losses are the
    /// dropped records of [`HostStats`].
    pub fn userspace_unwind_stats(&self) -> Option<UnwindStats> {
        match &self.backend {
            Backend::Userspace(s) => Some(s.unwind_stats()),
            Backend::Bpf { .. } => None,
        }
    }

    /// Processes per discovery state.
    pub fn process_states(&self) -> Vec<(ProcessKind, usize)> {
        self.scanner.counts()
    }

    /// The `limit` newest processes not profiled for a reason (see [`HostScanner::not_profiled`]).
    pub fn not_profiled(&self, limit: usize) -> Vec<NotProfiled> {
        self.scanner.not_profiled(limit)
    }

    /// Processes that could not be inspected for lack of permission.
    pub fn denied_processes(&self) -> usize {
        self.scanner.denied_count()
    }

    /// The BPF sampler, when that is the backend (for its counters and run statistics).
    pub fn bpf(&self) -> Option<&BpfSampler> {
        match &self.backend {
            Backend::Bpf { sampler, .. } => Some(sampler),
            Backend::Userspace(_) => None,
        }
    }

    /// Pids being profiled.
    pub fn pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.profiles.keys().copied().collect();
        v.sort_unstable();
        v
    }

    fn period_ns(&self) -> u64 {
        1_000_000_000 / self.config.rate_hz.max(1) as u64
    }

    /// Scans for new and exited processes.
    pub fn scan(&mut self) {
        let changes = self.scanner.scan();
        if !changes.gone.is_empty() {
            // Records of an exited process may still sit in the ring buffer: keep them.
            self.drain_records();
        }
        for pid in changes.gone {
            self.untrack(pid);
        }
        for target in changes.ready {
            self.track(target);
        }
    }

    fn track(&mut self, target: PythonTarget) {
        let pid = target.pid;
        let info = ProcessInfo::of(&target);
        let mut agg = Aggregator::new(self.period_ns());
        agg.set_label("pid", pid.to_string());
        if info.ns_pid != pid {
            agg.set_label("ns_pid", info.ns_pid.to_string());
        }
        agg.set_label("python_version", info.version.clone());
        match &mut self.backend {
            Backend::Bpf { sampler, procs } => {
                // 3.15: the program stops at `last_profiled_frame` and the agent splices its
                // cached stack. The anchor is written by the agent right after its own userspace
                // walk of the thread (every refresh), never late: a BPF program cannot write it
                // here (kernel lockdown refuses bpf_probe_write_user, which also fails in the
                // interrupt context of a cpu-clock event), and a write long after the walk would
                // let a reused frame address splice another call chain.
                let use_anchor =
                    self.config.unwind.frame_cache && target.offsets.has_frame_cache_anchor();
                let proc_config = pa_proc_for(&target.offsets, use_anchor);
                if let Err(e) = sampler.track_process(pid, &proc_config) {
                    self.scanner
                        .mark_failed(pid, format!("cannot track it in the BPF maps: {e}"));
                    return;
                }
                let options = UnwindOptions {
                    frame_cache: use_anchor,
                    ..self.config.unwind
                };
                let unwinder = Unwinder::new(target, options);
                procs.insert(
                    pid,
                    BpfProcess {
                        unwinder,
                        threads: HashMap::new(),
                        interp_of: HashMap::new(),
                        last_refresh: Instant::now(),
                        last_validated: Instant::now(),
                        pidns: pid_namespace(pid),
                        searched_interp: None,
                        proc_config,
                    },
                );
            }
            Backend::Userspace(s) => s.add_target(Unwinder::new(target, self.config.unwind)),
        }
        self.profiles.insert(pid, Profile { info, agg });
        // Register its threads now: until then the program finds no thread state.
        if let Backend::Bpf { .. } = self.backend {
            self.refresh_threads(pid, true);
            if self.config.off_cpu && self.off_cpu_unavailable.is_none() {
                self.seed_blocked_threads(pid);
            }
        }
    }

    fn untrack(&mut self, pid: u32) {
        tracing::debug!(pid, "no longer profiling the process");
        self.weigh_waits(Some(pid));
        match &mut self.backend {
            Backend::Bpf { sampler, procs } => {
                if let Some(p) = procs.remove(&pid) {
                    for tid in p.threads.into_keys() {
                        let _ = sampler.remove_thread(tid);
                    }
                }
                let _ = sampler.untrack_process(pid);
            }
            Backend::Userspace(s) => {
                s.remove_target(pid);
            }
        }
        if let Some(mut p) = self.profiles.remove(&pid) {
            if !p.agg.is_empty() {
                self.finished.push((p.info, p.agg.cut()));
            }
        }
    }

    /// Re-reads a process's thread list into the BPF thread map; with `all_tasks`, also
    /// registers its threads without a thread state (a /proc read of every task).
    fn refresh_threads(&mut self, pid: u32, all_tasks: bool) {
        let Backend::Bpf { sampler, procs } = &mut self.backend else {
            return;
        };
        let Some(p) = procs.get_mut(&pid) else { return };
        p.last_validated = Instant::now();
        if all_tasks {
            p.last_refresh = p.last_validated;
        }
        let refreshed = if p.unwinder.frame_cache_enabled() {
            p.unwinder.refresh_anchors()
        } else {
            p.unwinder.begin_batch()
        };
        let interpreters = match refreshed {
            Ok(i) => i,
            Err(e) => {
                self.stats.refresh_failed += 1;
                tracing::debug!(pid, "thread refresh failed: {e}");
                return;
            }
        };
        let mut now = HashMap::new();
        p.set_interpreters(&interpreters);
        Self::set_thread_list(sampler, pid, p, &interpreters);
        for (_, threads) in interpreters {
            for t in threads {
                let Some(host_tid) = p.unwinder.host_tid(t.native_thread_id) else {
                    continue;
                };
                // The sampler writes nothing for a thread that has not moved.
                if sampler.set_thread(host_tid, t.addr).is_ok() {
                    now.insert(host_tid, t.addr);
                }
            }
        }
        // The process's other threads (C extension workers, threads that never ran Python) go
        // in as "no thread state": the program then counts their samples without asking for
        // another refresh on every tick. One that starts running Python later is picked up by
        // the periodic refresh.
        let others = if all_tasks {
            host_tids(pid)
        } else {
            // Keep the ones registered before.
            p.threads
                .iter()
                .filter(|(_, ts)| **ts == 0)
                .map(|(tid, _)| *tid)
                .collect()
        };
        for tid in others {
            if now.contains_key(&tid) {
                continue;
            }
            if sampler.set_thread(tid, 0).is_ok() {
                now.insert(tid, 0);
            }
        }
        for gone in p.threads.keys().filter(|tid| !now.contains_key(tid)) {
            let _ = sampler.remove_thread(*gone);
            self.waits.forget_thread(*gone);
        }
        p.threads = now;
    }

    /// Points the program at the main interpreter (the oldest, last in the runtime's list): its
    /// thread list, where it finds threads started since this refresh, and its GIL.
    fn set_thread_list(
        sampler: &mut BpfSampler,
        pid: u32,
        p: &mut BpfProcess,
        interpreters: &[(InterpreterInfo, Vec<ThreadInfo>)],
    ) {
        let Some((main, _)) = interpreters.last() else {
            return;
        };
        let target = p.unwinder.target();
        if let Some(pidns) = p.pidns {
            p.searched_interp = Some(*main);
            let list = pa_thread_list_for(&target.offsets, main.addr, pidns);
            if let Err(e) = sampler.set_thread_list(pid, &list) {
                tracing::debug!(pid, "cannot set the thread list: {e}");
            }
        }
        let mut config = p.proc_config;
        set_gil(&mut config, &target.offsets, target.runtime_addr, main.addr);
        if config != p.proc_config {
            match sampler.track_process(pid, &config) {
                Ok(()) => p.proc_config = config,
                Err(e) => tracing::debug!(pid, "cannot set where the GIL is: {e}"),
            }
        }
    }

    /// Drains the ring buffer and resolves every record (BPF), or takes one sample of every
    /// process (userspace).
    pub fn collect(&mut self) {
        match &mut self.backend {
            Backend::Userspace(s) => {
                let profiles = &mut self.profiles;
                let stats = &mut self.stats;
                s.sample_once(&mut |sample| {
                    if let Some(p) = profiles.get_mut(&sample.pid) {
                        p.agg.add(sample);
                        stats.samples += 1;
                    }
                });
            }
            Backend::Bpf { .. } => {
                // Records first: on 3.15 they were walked against the anchors and cached stacks
                // of the last refresh, which the next refresh replaces.
                let sampled = self.drain_records();
                let Backend::Bpf { sampler, procs } = &mut self.backend else {
                    return;
                };
                let mut unknown_thread = HashSet::new();
                for (pid, bits) in sampler.take_notices() {
                    if bits & NOTICE_EXEC != 0 {
                        self.scanner.notice_exec(pid);
                    }
                    if bits & NOTICE_UNKNOWN_THREAD != 0 {
                        unknown_thread.insert(pid);
                    }
                }
                // Re-read a thread list only when it matters: the program met a thread it
                // cannot walk; a 3.15 process was sampled (its anchors move the next BPF walks'
                // stopping points up to now); or the slow pass is due.
                let due: Vec<(u32, bool)> = procs
                    .iter()
                    .filter_map(|(pid, p)| {
                        let full = unknown_thread.contains(pid)
                            || p.last_refresh.elapsed() >= THREAD_REFRESH_INTERVAL;
                        let anchors = p.unwinder.frame_cache_enabled() && sampled.contains(pid);
                        (full || anchors).then_some((*pid, full))
                    })
                    .collect();
                for (pid, full) in due {
                    self.refresh_threads(pid, full);
                }
            }
        }
    }

    /// Resolves the records in the ring buffer; returns the pids that had some.
    fn drain_records(&mut self) -> HashSet<u32> {
        let mut sampled = HashSet::new();
        let Backend::Bpf { sampler, procs } = &mut self.backend else {
            return sampled;
        };
        let mut batch: Vec<DecodedRecord> = Vec::new();
        sampler.drain(|rec: SampleRecord<'_>| batch.push(DecodedRecord::decode(&rec)));
        self.stats.records += batch.len() as u64;
        for DecodedRecord {
            pid,
            kind,
            walk,
            raw,
        } in batch
        {
            if let RecordKind::Wake { tid, at_ns } = kind {
                let mut profile = self.profiles.get_mut(&pid);
                let add = |s: &ThreadSample, w: WaitReason, ns: u64| {
                    profile.as_mut().is_some_and(|p| {
                        p.agg.add_off_cpu(s, w, ns);
                        true
                    })
                };
                match self.waits.woke(tid, at_ns, add) {
                    Woke::Weighed => {}
                    Woke::Unmatched => self.stats.unmatched_wakes += 1,
                    Woke::Untracked => self.stats.untracked += 1,
                }
                continue;
            }
            let (Some(p), Some(profile)) = (procs.get_mut(&pid), self.profiles.get_mut(&pid))
            else {
                self.stats.untracked += 1;
                continue;
            };
            if sampled.insert(pid) {
                if p.last_validated.elapsed() < RECORD_VALIDATE_INTERVAL {
                    p.unwinder.begin_cached_batch();
                } else {
                    // Fresh pages, code-object cache generation and interpreter state (one read
                    // on a steady process); the thread map is left alone.
                    p.last_validated = Instant::now();
                    match p.unwinder.begin_batch() {
                        Ok(interpreters) => p.set_interpreters(&interpreters),
                        Err(e) => {
                            self.stats.refresh_failed += 1;
                            tracing::debug!(pid, "reading the interpreters failed: {e}");
                        }
                    }
                }
            }
            // A thread state the last refresh did not see: the program found it in the
            // searched interpreter's thread list.
            let interp = p.interp_of.get(&walk.tstate).or(p.searched_interp.as_ref());
            let Some(interp) = interp.copied() else {
                self.stats.untracked += 1;
                continue;
            };
            match p.unwinder.resolve_external(&interp, &walk, &raw) {
                Ok(sample) => match kind {
                    RecordKind::OffCpu {
                        wait,
                        wait_addr,
                        at_ns,
                        carried_ns,
                    } => {
                        let wait = wait_reason(wait, wait_addr, p.unwinder.gil_words(&interp));
                        self.stats.off_cpu_waits += 1;
                        let waiting = Waiting::new(sample, wait, at_ns, None);
                        let add = |s: &ThreadSample, w: WaitReason, ns: u64| {
                            profile.agg.add_off_cpu(s, w, ns);
                            true
                        };
                        if !self.waits.blocked(walk.host_tid, waiting, carried_ns, add) {
                            self.stats.carried_lost += 1;
                        }
                    }
                    RecordKind::OnCpu | RecordKind::Wake { .. } => {
                        profile.agg.add(&sample);
                        self.stats.samples += 1;
                    }
                },
                Err(skip) => {
                    profile.agg.add_dropped(1);
                    match skip {
                        ExternalSkip::Torn => self.stats.torn += 1,
                        ExternalSkip::AnchorMiss => self.stats.anchor_miss += 1,
                        ExternalSkip::Incomplete => self.stats.incomplete += 1,
                        ExternalSkip::CyclicChain => self.stats.cyclic += 1,
                    }
                }
            }
        }
        sampled
    }

    /// Runs until `stop` is set or `until` passes, scanning, sampling and draining on
    /// schedule; `tick` runs after each collection (the service cuts windows there).
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        until: Option<Instant>,
        mut tick: impl FnMut(&mut HostProfiler),
    ) {
        let collect_every = match self.backend {
            Backend::Bpf { .. } => self.config.drain_interval,
            Backend::Userspace(_) => {
                Duration::from_secs_f64(1.0 / self.config.rate_hz.max(1) as f64)
            }
        };
        let mut next_scan = Instant::now();
        let mut next_collect = Instant::now();
        while !stop.load(Ordering::Relaxed) && until.is_none_or(|u| Instant::now() < u) {
            let now = Instant::now();
            if now >= next_scan {
                self.scan();
                next_scan = now + self.config.scan_interval;
            }
            if now >= next_collect {
                self.collect();
                tick(self);
                next_collect += collect_every;
                if next_collect < Instant::now() {
                    next_collect = Instant::now() + collect_every;
                }
            }
            let wake = next_scan.min(next_collect);
            let wake = until.map_or(wake, |u| wake.min(u));
            if let Some(d) = wake.checked_duration_since(Instant::now()) {
                std::thread::sleep(d.min(Duration::from_millis(100)));
            }
        }
        // The run ends now: the program stops recording these processes, and what the ring
        // buffer holds is this run's (no per-record timestamp needed to tell).
        if let Backend::Bpf { sampler, procs } = &mut self.backend {
            for pid in procs.keys() {
                let _ = sampler.untrack_process(*pid);
            }
        }
        self.collect();
    }

    /// One window per process with samples since the last cut (processes that exited
    /// included), labelled with pid, ns_pid and python_version.
    pub fn cut(&mut self) -> Vec<(ProcessInfo, ProfileWindow)> {
        self.weigh_ongoing_waits();
        let mut out = std::mem::take(&mut self.finished);
        for p in self.profiles.values_mut() {
            if !p.agg.is_empty() {
                out.push((p.info.clone(), p.agg.cut()));
            }
        }
        out.sort_by_key(|(i, _)| i.pid);
        out
    }

    /// Threads still blocked at a cut have waited since their stack was recorded (or the last
    /// cut): that much goes into this window, so a long wait (a stalled thread) shows in every
    /// window it spans, not only in the one it ends in.
    fn weigh_ongoing_waits(&mut self) {
        self.weigh_waits(None);
    }

    /// [`HostProfiler::weigh_ongoing_waits`] of every process, or only of `only` (which is
    /// leaving: its waits end with it).
    fn weigh_waits(&mut self, only: Option<u32>) {
        let profiles = &mut self.profiles;
        self.waits
            .weigh(only, |s: &ThreadSample, w: WaitReason, ns: u64| {
                profiles.get_mut(&s.pid).is_some_and(|p| {
                    p.agg.add_off_cpu(s, w, ns);
                    true
                })
            });
    }

    /// Threads already blocked when a process is tracked never switch out under the program
    /// until they wake: their stacks are read now, their waits start now, and the program is
    /// told to report their wake-up.
    fn seed_blocked_threads(&mut self, pid: u32) {
        let Backend::Bpf { sampler, procs } = &mut self.backend else {
            return;
        };
        let Some(p) = procs.get_mut(&pid) else { return };
        let blocked: HashMap<u32, BlockedIn> = p
            .threads
            .iter()
            .filter(|(_, tstate)| **tstate != 0)
            .filter_map(|(&tid, _)| blocked_in(pid, tid).map(|b| (tid, b)))
            .collect();
        tracing::debug!(
            pid,
            threads = p.threads.len(),
            blocked = blocked.len(),
            "threads blocked at attach"
        );
        if blocked.is_empty() {
            return;
        }
        let samples = match p
            .unwinder
            .sample_filtered(|host| host.is_some_and(|h| blocked.contains_key(&h)))
        {
            Ok(samples) => samples,
            Err(e) => {
                tracing::debug!(pid, "reading the threads blocked at attach failed: {e}");
                return;
            }
        };
        tracing::debug!(
            pid,
            stacks = samples.len(),
            "stacks of threads blocked at attach"
        );
        let now = monotonic_ns();
        for sample in samples {
            let Some(host_tid) = p.unwinder.host_tid(sample.tid) else {
                tracing::debug!(
                    pid,
                    tid = sample.tid,
                    "no host thread id for a blocked thread"
                );
                continue;
            };
            let (Some(b), Some(interp)) = (
                blocked.get(&host_tid),
                p.threads
                    .get(&host_tid)
                    .and_then(|tstate| p.interp_of.get(tstate)),
            ) else {
                tracing::debug!(
                    pid,
                    host_tid,
                    "no thread state or interpreter for a blocked thread"
                );
                continue;
            };
            let wait = wait_reason(b.class, b.wait_addr, p.unwinder.gil_words(interp));
            if sampler.expect_wake(host_tid, pid).is_err() {
                continue;
            }
            self.waits
                .found_blocked(host_tid, Waiting::new(sample, wait, now, Some(b.nr)));
        }
    }

    /// Threads blocked in one stack for at least `after`, each returned once per wait (a
    /// thread that wakes and blocks again is a new wait). Needs off-CPU profiling: without it
    /// nothing is known of waits and this is empty.
    pub fn take_new_stalls(&mut self, after: Duration) -> Vec<Stall> {
        self.waits.take_new_stalls(after)
    }

    /// Python threads (those with a thread state) of each process at its last thread-list read,
    /// by PID (eBPF mode; the userspace sampler keeps no count between samples).
    pub fn python_threads(&self) -> HashMap<u32, u64> {
        match &self.backend {
            Backend::Bpf { procs, .. } => procs
                .iter()
                .map(|(&pid, p)| {
                    (
                        pid,
                        p.threads.values().filter(|&&ts| ts != 0).count() as u64,
                    )
                })
                .collect(),
            Backend::Userspace(_) => HashMap::new(),
        }
    }

    /// What is known of tracked process `pid`.
    pub fn process_info(&self, pid: u32) -> Option<&ProcessInfo> {
        self.profiles.get(&pid).map(|p| &p.info)
    }

    /// Threads reported stalled and still blocked, per PID.
    pub fn stalled_threads(&self) -> HashMap<u32, u64> {
        self.waits.stalled_threads()
    }

    /// The windows of processes that exited since the last call (or cut), taken out so that a
    /// one-shot run can write them at once instead of holding them to its end.
    pub fn take_finished(&mut self) -> Vec<(ProcessInfo, ProfileWindow)> {
        std::mem::take(&mut self.finished)
    }

    /// 3.15 thread walks the frame cache could not hold (beyond its thread or depth bound),
    /// whose threads BPF walks whole instead, summed over the live processes.
    pub fn frame_cache_bypassed(&self) -> u64 {
        let bypassed = |u: &Unwinder| u.stats().uncached_walks;
        match &self.backend {
            Backend::Bpf { procs, .. } => procs.values().map(|p| bypassed(&p.unwinder)).sum(),
            Backend::Userspace(s) => s.unwinders().map(bypassed).sum(),
        }
    }

    /// Unwinder statistics summed over the live processes, per cache.
    pub fn cache_stats(&self) -> BTreeMap<&'static str, (u64, u64)> {
        let mut m: BTreeMap<&'static str, (u64, u64)> = BTreeMap::new();
        let mut add = |u: &Unwinder| {
            let p = u.page_cache_stats();
            let s = u.symbolizer_stats();
            let w = u.stats();
            let e = m.entry("page").or_default();
            e.0 += p.hits;
            // Pages read from the process, one by one or in a prefetch.
            e.1 += p.misses + p.prefetched;
            let e = m.entry("code").or_default();
            e.0 += s.hits;
            e.1 += s.misses;
            let e = m.entry("frame").or_default();
            e.0 += w.cache_full_hits + w.cache_partial_hits;
            e.1 += w.cache_misses;
        };
        match &self.backend {
            Backend::Bpf { procs, .. } => procs.values().for_each(|p| add(&p.unwinder)),
            Backend::Userspace(s) => s.unwinders().for_each(add),
        }
        m
    }
}

/// `st_dev` and `st_ino` of `/proc/PID/ns/pid`: the PID namespace the process's thread ids are
/// given in.
fn pid_namespace(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok()?;
    Some((m.dev(), m.ino()))
}
