//! The userspace sampler: a timer that unwinds every target process through `process_vm_readv`,
//! no BPF needed (unprivileged use, or kernels without BPF).
//!
//! In: root PIDs, a rate. Out: [`ThreadSample`]s into an [`Aggregator`]. With `subprocesses` it
//! follows the children of the roots as they appear; with `blocking` it stops each process
//! around its sample. A process that exits is dropped from the set; the run ends when none
//! remain, the duration is over, or `stop` is set.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::aggregate::{Aggregator, WaitReason};
use crate::discovery::{children, exe_path, locate_runtime, DiscoveryError};
use crate::sampler::blocking::{PausedThreads, SeizeStats};
use crate::sampler::native_copy::{MixStats, NativeStacks};
use crate::sampler::off_cpu::{blocked_in, wait_reason};
use crate::sampler::run_state::RunStates;
use crate::sampler::tick::{TickSource, TickStats, Ticker, Wait};
use crate::symbolize::native::DebugDirs;
use crate::unwind::{
    CacheTotals, CpuState, GilState, ThreadSample, UnwindError, UnwindOptions, UnwindStats,
    Unwinder,
};

/// What to sample and how.
#[derive(Debug, Clone)]
pub struct UserspaceConfig {
    /// samples per second
    pub rate_hz: u32,
    /// stop after this long (None: until the targets exit or `stop` is set)
    pub duration: Option<Duration>,
    /// follow child processes
    pub subprocesses: bool,
    /// stop the threads of a process while it is sampled
    pub blocking: bool,
    /// also record threads that are not on a CPU
    pub idle: bool,
    /// native stacks: each process's threads are stopped around its sample (as with
    /// `blocking`), and each thread's registers and stack copy are unwound and merged with its
    /// Python frames
    pub native_stacks: bool,
    /// native stacks: where stripped objects' separate debug files are looked for
    pub debug_dirs: DebugDirs,
    /// unwinder knobs
    pub unwind: UnwindOptions,
}

/// Counters of a run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SamplerStats {
    /// timer ticks taken
    pub ticks: u64,
    /// ticks skipped because sampling fell behind the rate
    pub lagged: u64,
    /// thread stacks recorded
    pub samples: u64,
    /// process samples that failed (process gone mid-sample, unreadable interpreter list);
    /// threads that yielded no stack are counted by reason in [`UnwindStats::lost`]
    pub failed: u64,
    /// blocking-mode seize counters
    pub seize: SeizeStats,
    /// where the ticks came from (none before the run)
    pub tick_source: Option<TickSource>,
    /// how the ticks came
    pub tick: TickStats,
}

/// Samples a set of processes on a timer.
pub struct UserspaceSampler {
    config: UserspaceConfig,
    roots: Vec<u32>,
    targets: HashMap<u32, Unwinder>,
    /// each target's open thread-state files (not with `blocking`, which reads them all
    /// before stopping the process)
    run_states: HashMap<u32, RunStates>,
    /// pids found not to be Python, with the executable they ran then (retried after an exec)
    rejected: HashMap<u32, Option<PathBuf>>,
    stats: SamplerStats,
    /// unwinder counters of processes that already exited
    retired: Vec<UnwindStats>,
    /// cache counters of the targets that exited or were removed
    retired_caches: CacheTotals,
    last_scan: Option<Instant>,
    native: NativeStacks,
}

/// Errors that end a run before it starts.
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// The root process is not something we can profile.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
}

impl UserspaceSampler {
    /// A sampler with no targets yet (host-wide use adds them as discovery finds them).
    pub fn empty(config: UserspaceConfig) -> UserspaceSampler {
        let native = NativeStacks::new(config.debug_dirs.clone());
        UserspaceSampler {
            config,
            roots: Vec::new(),
            targets: HashMap::new(),
            run_states: HashMap::new(),
            rejected: HashMap::new(),
            stats: SamplerStats::default(),
            retired: Vec::new(),
            retired_caches: CacheTotals::default(),
            last_scan: None,
            native,
        }
    }

    /// Locates the runtime of each root pid; fails if any root is not a profilable CPython.
    /// With `subprocesses`, a root that is not Python (a shell, a launcher) is only watched for
    /// Python children, as py-spy does.
    pub fn new(roots: &[u32], config: UserspaceConfig) -> Result<UserspaceSampler, SamplerError> {
        let mut targets = HashMap::new();
        for &pid in roots {
            match locate_runtime(pid) {
                Ok(target) => {
                    targets.insert(pid, Unwinder::new(target, config.unwind));
                }
                Err(DiscoveryError::NotPython { .. }) if config.subprocesses => {
                    tracing::info!(pid, "not Python: following its Python subprocesses only");
                }
                Err(e) => return Err(e.into()),
            }
        }
        let native = NativeStacks::new(config.debug_dirs.clone());
        Ok(UserspaceSampler {
            config,
            roots: roots.to_vec(),
            targets,
            run_states: HashMap::new(),
            rejected: HashMap::new(),
            stats: SamplerStats::default(),
            retired: Vec::new(),
            retired_caches: CacheTotals::default(),
            last_scan: None,
            native,
        })
    }

    /// Processes currently sampled.
    pub fn pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.targets.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// The unwinder of a sampled process.
    pub fn unwinder(&self, pid: u32) -> Option<&Unwinder> {
        self.targets.get(&pid)
    }

    /// Whether any process is sampled with the 3.15 frame cache.
    pub fn frame_cache_used(&self) -> bool {
        self.targets.values().any(|u| u.frame_cache_enabled())
            || self.retired.iter().any(|s| s.anchor_writes > 0)
    }

    /// Run counters.
    pub fn stats(&self) -> SamplerStats {
        self.stats
    }

    /// Unwinder counters summed over every process sampled so far.
    pub fn unwind_stats(&self) -> UnwindStats {
        let mut total = UnwindStats::default();
        for s in self
            .retired
            .iter()
            .copied()
            .chain(self.targets.values().map(|u| u.stats()))
        {
            total += s;
        }
        total
    }

    /// Looks for new Python children of the roots (at most once a second).
    fn scan_children(&mut self) {
        if !self.config.subprocesses
            || self
                .last_scan
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.last_scan = Some(Instant::now());
        let mut queue: Vec<u32> = self.roots.clone();
        let mut seen = HashSet::new();
        while let Some(pid) = queue.pop() {
            if !seen.insert(pid) {
                continue;
            }
            let kids = children(pid);
            for &kid in &kids {
                // A child rejected before its exec (a shell's fork on its way to Python) is
                // looked at again once it runs another program.
                let exe = exe_path(kid);
                if self.targets.contains_key(&kid) || self.rejected.get(&kid) == Some(&exe) {
                    continue;
                }
                match locate_runtime(kid) {
                    Ok(t) => {
                        tracing::info!(pid = kid, version = %t.version(), "following subprocess");
                        self.targets
                            .insert(kid, Unwinder::new(t, self.config.unwind));
                    }
                    // Still starting up: try again at the next scan.
                    Err(DiscoveryError::NotInitialized { .. }) => {}
                    Err(e) => {
                        tracing::debug!(pid = kid, error = %e, "not following subprocess");
                        self.rejected.insert(kid, exe);
                    }
                }
            }
            queue.extend(kids);
        }
    }

    /// Counters of the native stacks mixed in (`native_stacks`).
    pub fn native_stats(&self) -> MixStats {
        self.native.stats()
    }

    /// Starts sampling another process.
    pub fn add_target(&mut self, unwinder: Unwinder) {
        self.targets.insert(unwinder.target().pid, unwinder);
    }

    /// Stops sampling a process (it exited or exec'd).
    pub fn remove_target(&mut self, pid: u32) -> Option<Unwinder> {
        self.run_states.remove(&pid);
        self.native.forget(pid);
        let u = self.targets.remove(&pid)?;
        self.retired.push(u.stats());
        self.retired_caches.add(&u);
        Some(u)
    }

    /// Cache hits and misses since the start, targets that exited included: totals that only
    /// grow.
    pub fn cache_totals(&self) -> CacheTotals {
        let mut totals = self.retired_caches.clone();
        for u in self.targets.values() {
            totals.add(u);
        }
        totals
    }

    /// The unwinders of every sampled process.
    pub fn unwinders(&self) -> impl Iterator<Item = &Unwinder> {
        self.targets.values()
    }

    /// Takes one sample of every process, handing each thread's stack to `sink`. Returns false
    /// when no process is left (with `subprocesses`: nor a live root that may start one).
    pub fn sample_once(&mut self, sink: &mut dyn FnMut(&ThreadSample)) -> bool {
        self.scan_children();
        self.stats.ticks += 1;
        let mut gone = Vec::new();
        let idle = self.config.idle;
        for (&pid, unwinder) in self.targets.iter_mut() {
            // Which threads are on a CPU: to sample only those, or with --idle to label each
            // sample on or off the CPU. A process stopped around its sample (blocking, or native
            // stacks, whose registers are read by ptrace from stopped threads) has them all read
            // before (stopped is not R); otherwise each thread's state is read as it comes up.
            let stop = self.config.blocking || self.config.native_stacks;
            let on_cpu_before = stop.then(|| on_cpu_threads(pid));
            let _paused = stop.then(|| PausedThreads::pause(pid, &mut self.stats.seize));
            let (result, on_cpu) = if let Some(on_cpu) = on_cpu_before {
                let result = unwinder.sample_filtered(|host_tid| {
                    idle || host_tid.is_some_and(|t| on_cpu.contains(&t))
                });
                (result, on_cpu)
            } else {
                let states = self
                    .run_states
                    .entry(pid)
                    .or_insert_with(|| RunStates::new(pid));
                states.begin_tick();
                let mut on_cpu = HashSet::new();
                let result = unwinder.sample_filtered(|host_tid| {
                    let running = host_tid.is_some_and(|t| states.is_running(t));
                    if running {
                        on_cpu.extend(host_tid);
                    }
                    idle || running
                });
                (result, on_cpu)
            };
            match result {
                Ok(mut samples) => {
                    if idle {
                        // Threads not stopped had their state files read this tick.
                        let mut states = (!stop).then(|| self.run_states.get_mut(&pid)).flatten();
                        for s in &mut samples {
                            label_wall_state(pid, unwinder, &on_cpu, states.as_deref_mut(), s);
                        }
                    }
                    if self.config.native_stacks {
                        for s in samples.iter_mut().filter(|s| !s.frames.is_empty()) {
                            self.native.mix(s);
                        }
                    }
                    for s in samples.iter().filter(|s| !s.frames.is_empty()) {
                        sink(s);
                        self.stats.samples += 1;
                    }
                }
                Err(UnwindError::Gone { .. }) => gone.push(pid),
                Err(e) => {
                    self.stats.failed += 1;
                    tracing::debug!(pid, error = %e, "sample failed");
                    if !crate::discovery::process_alive(pid) {
                        gone.push(pid);
                    }
                }
            }
        }
        for pid in gone {
            self.remove_target(pid);
        }
        // With subprocesses, a root that lives may start Python children yet.
        !self.targets.is_empty()
            || (self.config.subprocesses
                && self
                    .roots
                    .iter()
                    .any(|&pid| crate::discovery::process_alive(pid)))
    }

    /// Samples at the configured rate until the duration is over, every target exited, or
    /// `stop` is set. `progress` is called about 4 times a second.
    pub fn run(
        &mut self,
        agg: &mut Aggregator,
        stop: &AtomicBool,
        mut progress: impl FnMut(&SamplerStats, Duration),
    ) {
        let mut ticker = Ticker::new(self.config.rate_hz);
        self.stats.tick_source = Some(ticker.source());
        let start = Instant::now();
        let end = self.config.duration.map(|d| start + d);
        let mut last_progress = start;
        while !stop.load(Ordering::Relaxed) {
            if end.is_some_and(|end| Instant::now() >= end) {
                break;
            }
            match ticker.wait(end) {
                Wait::Tick { missed } => self.stats.lagged += missed,
                Wait::Until | Wait::Interrupted => continue,
            }
            let failed_before = self.stats.failed;
            if !self.sample_once(&mut |s| agg.add(s)) {
                break;
            }
            agg.add_dropped(self.stats.failed - failed_before);
            if last_progress.elapsed() >= Duration::from_millis(250) {
                last_progress = Instant::now();
                progress(&self.stats, start.elapsed());
            }
        }
        // Where the ticks came from, once the last wait is over.
        self.stats.tick = ticker.stats();
        self.stats.tick_source = Some(ticker.source());
    }
}

/// Labels a wall-clock (`--idle`) sample on or off the CPU, and a thread off the CPU without
/// the GIL as waiting for it when it is blocked on the GIL's futex (one read of its system call:
/// only threads that are off the CPU and not holding the GIL pay it). `states`: the process's
/// open state files, read this tick (none when its threads were stopped around the sample).
fn label_wall_state(
    pid: u32,
    unwinder: &mut Unwinder,
    on_cpu: &HashSet<u32>,
    states: Option<&mut RunStates>,
    s: &mut ThreadSample,
) {
    let host_tid = unwinder.host_tid(s.thread.ns_tid());
    let running = host_tid.is_some_and(|t| on_cpu.contains(&t));
    s.thread.cpu = Some(if running {
        CpuState::OnCpu
    } else {
        CpuState::OffCpu
    });
    if running || s.thread.gil != Some(GilState::Released) {
        return;
    }
    let waits_for_gil = host_tid
        .and_then(|tid| match states {
            Some(states) => states.blocked_in(tid),
            None => blocked_in(pid, tid),
        })
        .is_some_and(|b| {
            wait_reason(b.class, b.wait_addr, unwinder.main_gil_words()) == WaitReason::Gil
        });
    if waits_for_gil {
        s.thread.gil = Some(GilState::Waiting);
    }
}

/// Host TIDs of the threads of `pid` that are running or runnable (state R).
fn on_cpu_threads(pid: u32) -> HashSet<u32> {
    let tasks = i32::try_from(pid)
        .ok()
        .and_then(|pid| procfs::process::Process::new(pid).ok())
        .and_then(|p| p.tasks().ok());
    tasks
        .into_iter()
        .flatten()
        .flatten()
        .filter(|t| t.stat().is_ok_and(|s| s.state == 'R'))
        .map(|t| t.tid as u32)
        .collect()
}
