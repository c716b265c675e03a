//! The conductor: host-wide profiling of every CPython process on the host (or a given set),
//! new ones as they start, through the BPF sampler or, where BPF cannot load, the userspace
//! sampler. It drives the stages in order and is the only module that knows them all.
//!
//! In: a [`HostConfig`]. Out: one [`ProfileWindow`] per process each time
//! [`HostProfiler::cut`] is called. Discovery ([`HostScanner`]) says which processes are ready;
//! each is handed to a backend ([`bpf`]: the program's maps and ring buffer; [`userspace`]: a
//! timer), whose samples go through the process's [`Unwinder`] into its aggregator
//! ([`process`]); off-CPU time waits in [`waits`] for the wake-up that ends it.

mod bpf;
mod budget;
mod process;
mod userspace;
mod waits;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use budget::{
    CoreShare, CostReading, CpuBudget, Decision, RateGovernor, WindowCost, LOWEST_RATE_HZ,
};
pub use process::{process_roles, ProcessInfo};
pub use waits::Stall;

use crate::aggregate::ProfileWindow;
use crate::discovery::host::{NotProfiled, ProcessKind, ProcessNotices, UnsupportedReason};
use crate::discovery::{HostScanner, PythonTarget};
use crate::sampler::bpf::{BpfConfig, BpfError, BpfSampler, ProgramBuild};
use crate::sampler::userspace::SamplerStats;
use crate::symbolize::native::DebugDirs;
use crate::unwind::native::{NativeMix, NativeUnwinder};
use crate::unwind::{CacheMemory, CacheTotals, ExternalSkip, UnwindOptions, UnwindStats, Unwinder};

use bpf::BpfBackend;
use process::Collected;
use userspace::UserspaceBackend;

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
    /// eBPF: mixed stacks: native and kernel frames with the Python ones (on-CPU samples)
    pub native_stacks: bool,
    /// native stacks: where stripped objects' separate debug files are looked for
    pub debug_dirs: DebugDirs,
    /// eBPF: load this build of the program whatever the kernel has (None: the one its
    /// helpers allow)
    pub bpf_build: Option<ProgramBuild>,
    /// userspace: stop each process's threads while it is read
    pub blocking: bool,
    /// userspace: read every thread at each tick, labelled on or off the CPU, not only those
    /// on a CPU
    pub idle: bool,
    /// with `pids`: their descendants too, as they start
    pub subprocesses: bool,
}

/// How often the BPF ring buffer is drained by default. Longer would spare each drain's fixed
/// cost (250 ms: about 0.07 points of a core with 50 busy processes at 99 Hz), but on 3.15 each
/// drain is followed by the walks that move the frame-cache anchors: at 250 ms, records taken
/// against older anchors missed more often under task churn (more than 1 in 20 on
/// `async_churn.py`, test `ebpf_frame_cache_keeps_event_loops_anchored`). A ring filling past
/// half wakes the agent before the timer (the program forces a wakeup).
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(100);

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            mode: Mode::Auto,
            rate_hz: 19,
            pids: None,
            unwind: UnwindOptions::default(),
            scan_interval: Duration::from_millis(500),
            drain_interval: DRAIN_INTERVAL,
            thread_search_max: common::THREAD_SEARCH_MAX,
            off_cpu: false,
            native_stacks: false,
            debug_dirs: DebugDirs::default(),
            bpf_build: None,
            blocking: false,
            idle: false,
            subprocesses: false,
        }
    }
}

/// Errors that stop the host profiler from starting.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// `--mode ebpf` and the program cannot be loaded: the error in one line, a verifier's
    /// refusal shortened to its last lines ([`BpfError::summary`]; the whole log runs to
    /// thousands of lines).
    #[error("eBPF sampler unavailable: {0}")]
    Bpf(String),
}

impl From<BpfError> for HostError {
    fn from(e: BpfError) -> Self {
        HostError::Bpf(e.summary())
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
    /// ticks the kernel throttled, so that the program never ran for them (eBPF; estimated
    /// from the perf events' throttle records: time throttled × rate)
    pub throttled: u64,
    /// walks the program could not write because the ring buffer was full (eBPF): the drain
    /// fell behind
    pub ring_full: u64,
    /// thread-map refreshes that failed
    pub refresh_failed: u64,
    /// off-CPU records resolved into a waiting stack
    pub off_cpu_waits: u64,
    /// threads found blocked when their process was tracked: waits begun before the recording,
    /// timed from then (no off-CPU record of their own)
    pub blocked_at_attach: u64,
    /// wake-up records whose wait had no resolved stack (its record was dropped or torn)
    pub unmatched_wakes: u64,
    /// off-CPU records carrying the time of repeated waits whose first one was not seen
    pub carried_lost: u64,
    /// native stacks: how they merged with the Python ones (eBPF records, or the userspace
    /// sampler's copies of stopped threads)
    pub native: NativeMix,
    /// task-aware stacks asked for: processes tracked without them (CPython before 3.14)
    pub async_unsupported: u64,
    /// eBPF: whole re-reads of a process's thread list (its tasks registered again)
    pub thread_list_reads: u64,
    /// eBPF: notices of a tracked process's threads (not its main one) exiting, one per process
    /// per take however many exited; each has the thread list read again
    pub thread_exit_notices: u64,
    /// userspace: the sampler's ticks and reads (none in eBPF mode)
    pub userspace: Option<SamplerStats>,
    /// CPU time (of the collecting thread, ns) spent draining and resolving records (eBPF) or
    /// taking samples (userspace, timed on one tick in eight): what samples cost the agent,
    /// whatever else runs on the host
    pub drain_cpu_ns: u64,
}

impl HostStats {
    /// Counts a record that yielded no sample under its reason.
    fn count_skip(&mut self, skip: ExternalSkip) {
        let counter = match skip {
            ExternalSkip::Torn => &mut self.torn,
            ExternalSkip::AnchorMiss => &mut self.anchor_miss,
            ExternalSkip::Incomplete => &mut self.incomplete,
            ExternalSkip::CyclicChain => &mut self.cyclic,
            ExternalSkip::UnknownThreadState => &mut self.untracked,
        };
        *counter += 1;
    }

    /// `N dropped: a torn, b anchor misses, c incomplete, d unknown thread, e cyclic chains,
    /// f throttled, g ring buffer full`: the ticks that yielded no sample, by reason, for the one-line summaries.
    pub fn dropped_summary(&self) -> String {
        let dropped = self.torn
            + self.anchor_miss
            + self.incomplete
            + self.unknown_thread
            + self.cyclic
            + self.throttled
            + self.ring_full;
        format!(
            "{dropped} dropped: {} torn, {} anchor misses, {} incomplete, {} unknown thread, {} cyclic chains, {} throttled by the kernel, {} ring buffer full",
            self.torn,
            self.anchor_miss,
            self.incomplete,
            self.unknown_thread,
            self.cyclic,
            self.throttled,
            self.ring_full
        )
    }
}

/// Where samples come from: one backend for the whole host.
enum Backend {
    Bpf(Box<BpfBackend>),
    Userspace(Box<UserspaceBackend>),
}

/// Profiles every CPython process of the host.
pub struct HostProfiler {
    config: HostConfig,
    backend: Backend,
    scanner: HostScanner,
    collected: Collected,
    fallback_reason: Option<String>,
    off_cpu_unavailable: Option<String>,
    /// The cache totals of processes no longer tracked, so that the host's totals only grow.
    retired: CacheTotals,
    /// The unwinder counters of those processes, for the same reason.
    retired_unwind: UnwindStats,
}

impl HostProfiler {
    /// Starts the backend the mode asks for.
    pub fn new(config: HostConfig) -> Result<HostProfiler, HostError> {
        let bpf_config = BpfConfig {
            rate_hz: config.rate_hz as u64,
            thread_search_max: config.thread_search_max,
            off_cpu: config.off_cpu,
            build: config.bpf_build,
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
                off_cpu_unavailable = Some(e.summary());
                Ok(sampler)
            }
            other => other,
        };
        let bpf =
            |s: BpfSampler| Backend::Bpf(Box::new(BpfBackend::new(s, config.debug_dirs.clone())));
        let backend = match config.mode {
            Mode::Userspace => Backend::Userspace(Box::new(UserspaceBackend::new(&config))),
            Mode::Ebpf => bpf(load()?),
            Mode::Auto => match load() {
                Ok(s) => bpf(s),
                Err(e) => {
                    fallback_reason = Some(e.summary());
                    if config.off_cpu {
                        off_cpu_unavailable =
                            Some("the userspace sampler cannot see a thread block".to_string());
                    }
                    Backend::Userspace(Box::new(UserspaceBackend::new(&config)))
                }
            },
        };
        let mut scanner = HostScanner::new(config.pids.as_deref());
        if config.subprocesses {
            scanner.follow_subprocesses();
        }
        if let Backend::Bpf(b) = &backend {
            scanner.use_notices(if b.sampler.notices_lifetimes() {
                ProcessNotices::Lifetimes
            } else if b.sampler.notices_execs() {
                ProcessNotices::Execs
            } else {
                ProcessNotices::None
            });
        }
        Ok(HostProfiler {
            scanner,
            config,
            backend,
            collected: Collected::default(),
            fallback_reason,
            off_cpu_unavailable,
            retired: CacheTotals::default(),
            retired_unwind: UnwindStats::default(),
        })
    }

    /// What the kernel lacks that the BPF program would use, and what replaces it, one line
    /// each (none with the userspace sampler, or on a kernel with everything).
    pub fn kernel_notes(&self) -> &[String] {
        match &self.backend {
            Backend::Bpf(b) => b.sampler.kernel_notes(),
            Backend::Userspace(_) => &[],
        }
    }

    /// Why off-CPU profiling was asked for and is off (the sampler runs on-CPU only).
    pub fn off_cpu_unavailable(&self) -> Option<&str> {
        self.off_cpu_unavailable.as_deref()
    }

    /// `ebpf` or `userspace`.
    pub fn mode_name(&self) -> &'static str {
        match self.backend {
            Backend::Bpf(_) => "ebpf",
            Backend::Userspace(_) => "userspace",
        }
    }

    /// Why `auto` fell back to userspace, if it did.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// Counters, as of the last collection.
    pub fn stats(&self) -> HostStats {
        self.collected.stats
    }

    /// The userspace sampler's unwinder counters since the start (threads sampled without a
    /// stack, by reason; stacks kept unverified); `None` in eBPF mode, whose losses are the
    /// dropped records of [`HostStats`].
    pub fn userspace_unwind_stats(&self) -> Option<UnwindStats> {
        match &self.backend {
            Backend::Userspace(_) => Some(self.unwind_stats()),
            Backend::Bpf(_) => None,
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

    /// Number of unsupported processes per reason (see [`HostScanner::unsupported_counts`]).
    pub fn unsupported_counts(&self) -> Vec<(UnsupportedReason, usize)> {
        self.scanner.unsupported_counts()
    }

    /// The processes that could not be inspected for lack of permission, in pid order.
    pub fn denied_processes(&self) -> Vec<u32> {
        self.scanner.denied_pids()
    }

    /// The BPF sampler, when that is the backend (for its counters and run statistics).
    pub fn bpf(&self) -> Option<&BpfSampler> {
        match &self.backend {
            Backend::Bpf(b) => Some(&b.sampler),
            Backend::Userspace(_) => None,
        }
    }

    /// Pids being profiled.
    pub fn pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.collected.profiles.keys().copied().collect();
        v.sort_unstable();
        v
    }

    fn period_ns(&self) -> u64 {
        1_000_000_000 / self.config.rate_hz.max(1) as u64
    }

    /// Samples per second now (per CPU in eBPF mode, per process in userspace mode).
    pub fn rate_hz(&self) -> u32 {
        self.config.rate_hz
    }

    /// Whether a failed rate change left the eBPF sampler without perf events: nothing is
    /// sampled until [`HostProfiler::set_rate`] succeeds (at any rate, the same one included).
    pub fn sampling_stopped(&self) -> bool {
        matches!(&self.backend, Backend::Bpf(b) if b.sampler.events_lost())
    }

    /// Samples `rate_hz` times a second from now on. Call it right after [`HostProfiler::cut`]:
    /// the windows that start then take the new period, so that every window has one period
    /// and its counts scale to CPU time exactly. (Records drained after the cut but taken
    /// before it, at most one drain interval's worth, count at the new period.)
    pub fn set_rate(&mut self, rate_hz: u32) -> Result<(), HostError> {
        let rate_hz = rate_hz.max(1);
        match &mut self.backend {
            Backend::Bpf(b) => b.sampler.set_rate(u64::from(rate_hz))?,
            Backend::Userspace(u) => u.sampler.set_rate(rate_hz),
        }
        self.config.rate_hz = rate_hz;
        let period_ns = self.period_ns();
        for p in self.collected.profiles.values_mut() {
            p.agg.set_period_ns(period_ns);
        }
        Ok(())
    }

    /// Time the BPF programs have run since they were loaded (the sampling program and the
    /// off-CPU one), from the kernel's statistics; zero in userspace mode or without them.
    pub fn bpf_run_time(&self) -> Duration {
        let (on_cpu, off_cpu) = self.bpf_run_times();
        Duration::from_nanos(on_cpu.saturating_add(off_cpu))
    }

    /// Run time in ns of the sampling program and of the off-CPU one.
    fn bpf_run_times(&self) -> (u64, u64) {
        let Backend::Bpf(b) = &self.backend else {
            return (0, 0);
        };
        (
            b.sampler.run_stats().map_or(0, |(ns, _)| ns),
            b.sampler.off_cpu_run_stats().map_or(0, |(ns, _)| ns),
        )
    }

    /// What the agent and its BPF programs have cost so far, and the part of it samples cost
    /// (the sampling program, and the agent's collecting: see [`HostStats::drain_cpu_ns`]),
    /// for the CPU budget.
    pub fn cost_reading(&self) -> CostReading {
        let (on_cpu, off_cpu) = self.bpf_run_times();
        let per_sample =
            Duration::from_nanos(on_cpu.saturating_add(self.collected.stats.drain_cpu_ns));
        CostReading::now(
            Duration::from_nanos(on_cpu.saturating_add(off_cpu)),
            per_sample,
        )
    }

    /// Scans for new and exited processes.
    pub fn scan(&mut self) {
        // The notices left since the last drain first: a listing must not find a process
        // before its notice says how it came (and a drain is up to 100 ms away).
        if let Backend::Bpf(b) = &mut self.backend {
            b.take_notices(&mut self.scanner, None);
        }
        let changes = self.scanner.scan();
        if !changes.gone.is_empty() {
            // Records of an exited process may still sit in the ring buffer: keep them.
            if let Backend::Bpf(b) = &mut self.backend {
                b.drain_records(&mut self.collected, Instant::now());
            }
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
        let mut unwind = self.config.unwind;
        if unwind.async_tasks && target.offsets.coroutines.is_none() {
            // Not an error: the process is profiled as any other, without task stacks (and
            // without what looking for tasks costs).
            tracing::info!(
                pid,
                version = %target.version(),
                "asyncio task stacks need CPython 3.14 or later: profiling this process without them"
            );
            self.collected.stats.async_unsupported += 1;
            unwind.async_tasks = false;
        }
        let info = ProcessInfo::of(&target);
        let period_ns = self.period_ns();
        match &mut self.backend {
            Backend::Bpf(b) => {
                if let Err(e) = b.track(target, unwind, self.config.native_stacks) {
                    self.scanner
                        .mark_failed(pid, format!("cannot track it in the BPF maps: {e}"));
                    return;
                }
                let off_cpu = self.config.off_cpu && self.off_cpu_unavailable.is_none();
                self.collected.start(info, period_ns, off_cpu);
                // Register its threads now: until then the program finds no thread state.
                b.refresh_threads(pid, true, &mut self.collected);
                if off_cpu {
                    b.seed_blocked_threads(pid, &mut self.collected);
                }
            }
            Backend::Userspace(u) => {
                self.collected.start(info, period_ns, false);
                u.track(Unwinder::new(target, unwind));
            }
        }
    }

    fn untrack(&mut self, pid: u32) {
        tracing::debug!(pid, "no longer profiling the process");
        let unwinder = match &mut self.backend {
            Backend::Bpf(b) => {
                b.weigh_carried(&mut self.collected, Some(pid));
                b.untrack(pid)
            }
            Backend::Userspace(u) => u.untrack(pid),
        };
        if let Some(u) = unwinder {
            self.retired.add(&u);
            self.retired_unwind += u.stats();
        }
        self.collected.finish(pid);
    }

    /// Drains the ring buffer and resolves every record (BPF), or takes one sample of every
    /// process (userspace).
    pub fn collect(&mut self) {
        match &mut self.backend {
            Backend::Bpf(b) => b.collect(&mut self.scanner, &mut self.collected),
            Backend::Userspace(u) => {
                let gone = u.collect(&mut self.collected);
                self.collected.stats.userspace = Some(u.stats());
                self.collected.stats.native = u.native_mix();
                // Its windows are cut now: a one-shot run ends as soon as its target exits.
                for pid in gone {
                    self.untrack(pid);
                }
            }
        }
    }

    /// Runs until `stop` is set or `until` passes, scanning, sampling and draining on
    /// schedule; `tick` runs after each collection (the service cuts windows there).
    pub fn run(
        &mut self,
        stop: &AtomicBool,
        until: Option<Instant>,
        mut tick: impl FnMut(&mut HostProfiler),
    ) {
        if let Backend::Bpf(b) = &mut self.backend {
            b.resume_recording(&mut self.collected);
        }
        let mut next_scan = Instant::now();
        let mut next_collect = Instant::now();
        while !stop.load(Ordering::Relaxed) && until.is_none_or(|u| Instant::now() < u) {
            let now = Instant::now();
            if now >= next_scan {
                self.scan();
                next_scan = now + self.config.scan_interval;
            }
            let drain_due = matches!(self.backend, Backend::Bpf(_)) && now >= next_collect;
            if drain_due {
                self.collect();
                tick(self);
                let every = self.config.drain_interval;
                next_collect += every;
                if next_collect < Instant::now() {
                    next_collect = Instant::now() + every;
                }
            }
            // At most 100 ms: the stop flag is read between waits.
            let now = Instant::now();
            let mut wake = next_scan.min(now + Duration::from_millis(100));
            if let Some(u) = until {
                wake = wake.min(u);
            }
            let sample_now = match &mut self.backend {
                // A ring filling up (a burst of off-CPU or native records) is drained at once,
                // not at the next drain.
                Backend::Bpf(b) => {
                    let d = wake.min(next_collect).saturating_duration_since(now);
                    if !d.is_zero() && b.sampler.wait_for_wakeup(d) {
                        next_collect = Instant::now();
                    }
                    false
                }
                // The sampler's timer decides when processes are read.
                Backend::Userspace(u) => u.wait(wake),
            };
            if sample_now {
                self.collect();
                // After the collection: the tick may change the rate.
                tick(self);
            }
        }
        // The run ends now: the program stops recording these processes, and what the ring
        // buffer holds is this run's (no per-record timestamp needed to tell).
        if let Backend::Bpf(b) = &mut self.backend {
            b.stop_recording();
            self.collect();
        }
    }

    /// One window per process with samples since the last cut (processes that exited
    /// included), labelled with pid, ns_pid and python_version.
    pub fn cut(&mut self) -> Vec<(ProcessInfo, ProfileWindow)> {
        // A process that did not publish its OpenTelemetry context when it was found may have
        // since: looked for again, less and less often (one maps read per look).
        let now = Instant::now();
        for (&pid, p) in &mut self.collected.profiles {
            if !p.info.env.published
                && p.context_look.due(now)
                && !p.info.env.look_for_published(pid)
            {
                p.context_look.missed(now);
            }
        }
        // Threads still blocked at a cut have waited since their stack was recorded (or the
        // last cut): that much goes into this window, and so does the time of the waits the
        // program timed without walking them.
        if let Backend::Bpf(b) = &mut self.backend {
            b.weigh_carried(&mut self.collected, None);
        }
        self.collected.weigh_waits(None);
        let mut out = std::mem::take(&mut self.collected.finished);
        for p in self.collected.profiles.values_mut() {
            if !p.agg.is_empty() {
                out.push((p.info.clone(), p.agg.cut()));
            }
        }
        out.sort_by_key(|(i, _)| i.pid);
        out
    }

    /// Threads blocked in one stack for at least `after`, each returned once per wait (a
    /// thread that wakes and blocks again is a new wait). Needs off-CPU profiling: without it
    /// nothing is known of waits and this is empty.
    pub fn take_new_stalls(&mut self, after: Duration) -> Vec<Stall> {
        // Waits the program only timed are known from its state, read a tenth of the stall
        // threshold apart (one map read per thread with a wait).
        if let Backend::Bpf(b) = &mut self.backend {
            b.weigh_carried_every(
                &mut self.collected,
                (after / 10).max(Duration::from_secs(1)),
            );
            // A stall seen at an older read is read again: it may have ended since.
            let candidates = self.collected.waits.carried_stall_candidates(after);
            b.weigh_carried_of(&mut self.collected, &candidates);
        }
        self.collected.waits.take_new_stalls(after)
    }

    /// Python threads (those with a thread state) of each process at its last thread-list read,
    /// by PID (eBPF mode; the userspace sampler keeps no count between samples).
    pub fn python_threads(&self) -> HashMap<u32, u64> {
        match &self.backend {
            Backend::Bpf(b) => b.python_threads(),
            Backend::Userspace(_) => HashMap::new(),
        }
    }

    /// What is known of tracked process `pid`.
    pub fn process_info(&self, pid: u32) -> Option<&ProcessInfo> {
        self.collected.profiles.get(&pid).map(|p| &p.info)
    }

    /// Every tracked process.
    pub fn process_infos(&self) -> impl Iterator<Item = &ProcessInfo> {
        self.collected.profiles.values().map(|p| &p.info)
    }

    /// Threads reported stalled and still blocked, per PID.
    pub fn stalled_threads(&self) -> HashMap<u32, u64> {
        self.collected.waits.stalled_threads()
    }

    /// Tracked processes with nothing counted since the last cut: no thread ran Python code on a
    /// CPU (nor, with off-CPU on, waited), so a cut gives them no window. By pid.
    pub fn idle_pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .collected
            .profiles
            .iter()
            .filter(|(_, p)| p.agg.is_empty())
            .map(|(&pid, _)| pid)
            .collect();
        pids.sort_unstable();
        pids
    }

    /// The windows of processes that exited since the last call (or cut), taken out so that a
    /// one-shot run can write them at once instead of holding them to its end.
    pub fn take_finished(&mut self) -> Vec<(ProcessInfo, ProfileWindow)> {
        std::mem::take(&mut self.collected.finished)
    }

    /// 3.15 thread walks the frame cache could not hold (beyond its thread or depth bound),
    /// whose threads BPF walks whole instead, since the start (processes that exited included).
    pub fn frame_cache_bypassed(&self) -> u64 {
        self.cache_totals().frame_cache_bypassed
    }

    /// Unwinder counters since the start (processes that exited included).
    pub fn unwind_stats(&self) -> UnwindStats {
        let mut total = self.retired_unwind;
        for u in self.unwinders() {
            total += u.stats();
        }
        total
    }

    /// Unwinder cache hits and misses since the start (processes that exited included), per
    /// cache: totals that only grow.
    pub fn cache_stats(&self) -> BTreeMap<&'static str, (u64, u64)> {
        self.cache_totals().caches
    }

    fn cache_totals(&self) -> CacheTotals {
        let mut totals = self.retired.clone();
        for u in self.unwinders() {
            totals.add(u);
        }
        totals
    }

    /// Whether any process was read with the 3.15 frame cache.
    pub fn frame_cache_used(&self) -> bool {
        self.unwinders().any(|u| u.frame_cache_enabled()) || self.retired_unwind.anchor_writes > 0
    }

    /// What the agent's caches hold now: every tracked process's unwinder, native unwinder and
    /// open profile window, and the native objects they share.
    pub fn cache_memory(&self) -> CacheMemory {
        let mut m = CacheMemory::default();
        for u in self.unwinders() {
            m.add_unwinder(u);
        }
        let native: Box<dyn Iterator<Item = &NativeUnwinder>> = match &self.backend {
            Backend::Bpf(b) => Box::new(b.native_unwinders()),
            Backend::Userspace(u) => Box::new(u.native_unwinders()),
        };
        m.native_frames = native.map(NativeUnwinder::bytes).sum();
        m.native_objects = crate::symbolize::native::ObjectCache::memory().1;
        m.profiles = self
            .collected
            .profiles
            .values()
            .map(|p| p.agg.bytes())
            .sum();
        m
    }

    fn unwinders(&self) -> Box<dyn Iterator<Item = &Unwinder> + '_> {
        match &self.backend {
            Backend::Bpf(b) => Box::new(b.unwinders()),
            Backend::Userspace(u) => Box::new(u.unwinders()),
        }
    }
}

/// This thread's CPU time in ns (0 if the clock cannot be read).
fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
            + u64::try_from(t.tv_nsec()).unwrap_or(0)
    })
}
