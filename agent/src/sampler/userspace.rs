//! The userspace sampler: a timer at whose ticks each tracked process's threads are read
//! through `process_vm_readv`, no BPF needed (unprivileged use, or kernels without BPF).
//!
//! In: a tick ([`UserspaceSampler::wait`]), then each tracked process with its unwinder. Out:
//! that process's [`ThreadSample`]s. The sampler decides when a process is read and how: which
//! of its threads are on a CPU (only those, or all of them with `idle`, labelled on or off the
//! CPU), whether it is stopped around the read (`blocking`), and, with native stacks, each
//! stopped thread's registers and stack copy. Which processes to read, and where their samples
//! go, is the conductor's ([`crate::profiler`]).

use crate::offsets::Evaluations;
use std::collections::{HashMap, HashSet};
use std::time::Instant;

use crate::aggregate::WaitReason;
use crate::sampler::blocking::{PausedThreads, SeizeStats};
use crate::sampler::cpu_time::{CpuTime, Credit};
use crate::sampler::native_copy::copy_stopped_thread;
use crate::sampler::off_cpu::{blocked_in, wait_reason};
use crate::sampler::run_state::RunStates;
use crate::sampler::tick::{TickSource, TickStats, Ticker, Wait};
use crate::symbolize::native::DebugDirs;
use crate::unwind::native::{NativeMix, NativeMixer, NativeUnwinder};
use crate::unwind::{label_gil_waiters, CpuState, GilState, ThreadSample, UnwindError, Unwinder};
use common::NativeSection;

/// How to sample.
#[derive(Debug, Clone)]
pub struct UserspaceConfig {
    /// samples per second
    pub rate_hz: u32,
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
}

/// Counters of a run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SamplerStats {
    /// timer ticks taken
    pub ticks: u64,
    /// ticks skipped because sampling fell behind the rate
    pub lagged: u64,
    /// process samples that failed (process gone mid-sample, unreadable interpreter list);
    /// threads that yielded no stack are counted by reason in the unwinder's statistics
    pub failed: u64,
    /// blocking-mode seize counters
    pub seize: SeizeStats,
    /// where the read threads' time went, between their reads
    pub time: ThreadTime,
    /// where the ticks came from (none before the first wait)
    pub tick_source: Option<TickSource>,
    /// how the ticks came
    pub tick: TickStats,
}

/// Where the time of the threads read went, from each read to the next (schedstat's clocks,
/// [`CpuTime`]): the ticks a profile stands for, accounted. For a thread read at every tick
/// its time on a CPU, waiting for one and off the CPU add up to its ticks (taken and lagged)
/// times the period; the profile's samples
/// are `sampled_ns` in whole periods, the remainder carried to the thread's next read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ThreadTime {
    /// ns on a CPU, credited to a stack that was read (or carried to the thread's next read)
    pub sampled_ns: u64,
    /// ns on a CPU, credited to a read that gave no stack (counted by reason in the unwinder's
    /// statistics; a thread with no Python frame counts here too)
    pub lost_ns: u64,
    /// ns waiting on a run queue for a CPU
    pub runqueue_ns: u64,
    /// ns of wall time between the reads
    pub elapsed_ns: u64,
    /// the sampling period these are measured in, ns
    pub period_ns: u64,
}

impl ThreadTime {
    /// `ns` in sampling periods.
    pub fn periods(&self, ns: u64) -> f64 {
        ns as f64 / self.period_ns.max(1) as f64
    }

    /// ns neither on a CPU nor waiting for one (blocked, sleeping). Summed before it is
    /// subtracted: schedstat's clocks move in steps of a scheduler tick, and a read's share
    /// taken apart would count each step's lag as time off the CPU.
    pub fn off_cpu_ns(&self) -> u64 {
        self.elapsed_ns
            .saturating_sub(self.sampled_ns + self.lost_ns + self.runqueue_ns)
    }

    /// Adds one read's credit, given whether the read gave a stack.
    fn add(&mut self, credit: &Credit, stack: bool) {
        if stack {
            self.sampled_ns += credit.ran_ns;
        } else {
            self.lost_ns += credit.ran_ns;
        }
        self.runqueue_ns += credit.runqueue_ns;
        self.elapsed_ns += credit.elapsed_ns;
    }
}

/// A thread's stack read at a tick, and what it stands for.
#[derive(Debug)]
pub struct ReadSample {
    /// the thread's stack
    pub sample: ThreadSample,
    /// sampling periods of CPU time it stands for: the CPU time the thread had since its last
    /// credit ([`CpuTime`]); with `idle`, 1 (a wall-clock sample, labelled on or off the CPU)
    pub periods: u64,
    /// ns the thread waited on a run queue since its last read, spent in this stack
    /// (`wait=cpu`; 0 with `idle`, whose samples carry the on/off-CPU label instead)
    pub runqueue_ns: u64,
}

/// What reading one process at a tick gave.
#[derive(Debug)]
pub enum ProcessRead {
    /// Its threads' stacks (those that had one).
    Samples(Vec<ReadSample>),
    /// The process exited.
    Gone,
    /// This read failed (counted in [`SamplerStats::failed`]); the process lives on.
    Failed,
}

/// Takes the samples of the userspace backend, one process at a time, at each tick.
pub struct UserspaceSampler {
    config: UserspaceConfig,
    /// started at the first wait, on the thread that samples (its perf event follows that
    /// thread's CPU)
    ticker: Option<Ticker>,
    /// each process's open thread-state files (not with `blocking`, which reads them all
    /// before stopping the process)
    run_states: HashMap<u32, RunStates>,
    /// each process's threads' CPU clocks, and what samples were credited of them
    cpu_times: HashMap<u32, CpuTime>,
    /// each process's native unwinder (native stacks only)
    native: HashMap<u32, NativeUnwinder>,
    native_mix: NativeMixer,
    stack_copy: Vec<u8>,
    stats: SamplerStats,
}

impl UserspaceSampler {
    /// A sampler whose first tick comes at the first [`UserspaceSampler::wait`].
    pub fn new(config: UserspaceConfig) -> UserspaceSampler {
        UserspaceSampler {
            config,
            ticker: None,
            run_states: HashMap::new(),
            cpu_times: HashMap::new(),
            native: HashMap::new(),
            native_mix: NativeMixer::default(),
            stack_copy: Vec::new(),
            stats: SamplerStats::default(),
        }
    }

    /// Waits for the next tick, until `until` at most (or a signal); true when it came.
    pub fn wait(&mut self, until: Option<Instant>) -> bool {
        let rate_hz = self.config.rate_hz;
        let ticker = self.ticker.get_or_insert_with(|| Ticker::new(rate_hz));
        let tick = match ticker.wait(until) {
            Wait::Tick { missed } => {
                self.stats.lagged += missed;
                self.stats.ticks += 1;
                true
            }
            Wait::Until | Wait::Interrupted => false,
        };
        self.stats.tick = ticker.stats();
        self.stats.tick_source = Some(ticker.source());
        tick
    }

    /// Ticks `rate_hz` times a second from the next wait on.
    pub fn set_rate(&mut self, rate_hz: u32) {
        if rate_hz != self.config.rate_hz {
            self.config.rate_hz = rate_hz;
            self.ticker = None;
        }
    }

    /// Run counters.
    pub fn stats(&self) -> SamplerStats {
        self.stats
    }

    /// Counters of the native stacks mixed in (`native_stacks`).
    pub fn native_mix(&self) -> NativeMix {
        self.native_mix.counts
    }

    /// The native unwinders of the processes whose stacks were copied.
    pub fn native_unwinders(&self) -> impl Iterator<Item = &NativeUnwinder> {
        self.native.values()
    }

    /// Forgets what is kept of a process no longer tracked.
    pub fn forget(&mut self, pid: u32) {
        self.run_states.remove(&pid);
        self.cpu_times.remove(&pid);
        self.native.remove(&pid);
        self.native_mix.forget(pid);
    }

    /// Reads the stacks of process `pid` through its unwinder: the threads on a CPU that had CPU
    /// time to credit or waited for a CPU, or every thread with `idle`.
    pub fn read_process(&mut self, pid: u32, unwinder: &mut Unwinder) -> ProcessRead {
        let idle = self.config.idle;
        let period_ns = 1_000_000_000 / u64::from(self.config.rate_hz.max(1));
        // Which threads are runnable now: to read only those, or with idle to label each
        // sample on or off the CPU. A process stopped around its sample (blocking, or native
        // stacks, whose registers are read by ptrace from stopped threads) has them all read
        // before (stopped is not R); otherwise each thread's state is read as it comes up.
        let stop = self.config.blocking || self.config.native_stacks;
        let runnable_before = stop.then(|| on_cpu_threads(pid));
        let _paused = stop.then(|| PausedThreads::pause(pid, &mut self.stats.seize));
        let mut states = (!stop).then(|| {
            let states = self
                .run_states
                .entry(pid)
                .or_insert_with(|| RunStates::new(pid));
            states.begin_tick();
            states
        });
        let cpu = self
            .cpu_times
            .entry(pid)
            .or_insert_with(|| CpuTime::new(pid));
        // What each thread read is worth, by host TID; every thread the interpreter lists.
        let mut credits: HashMap<u32, (Credit, bool)> = HashMap::new();
        let mut listed: HashSet<u32> = HashSet::new();
        let waiting_before = unwinder.stats().task_waiting_samples;
        let result = unwinder.sample_filtered(|host_tid| {
            let Some(tid) = host_tid else {
                return idle;
            };
            listed.insert(tid);
            let runnable = match (&runnable_before, states.as_deref_mut()) {
                (Some(before), _) => before.contains(&tid),
                (None, Some(states)) => states.is_running(tid),
                (None, None) => false,
            };
            if !runnable && !idle {
                return false;
            }
            // Without a clock (no schedstat), a runnable thread counts one period, as before.
            let credit = cpu.credit(tid, period_ns, runnable).unwrap_or(Credit {
                periods: u64::from(runnable),
                ..Credit::default()
            });
            credits.insert(tid, (credit, runnable));
            idle || credit.periods > 0 || credit.runqueue_ns > 0
        });
        let samples = match result {
            Ok(samples) => {
                // Only a whole read lists every thread: the others exited.
                cpu.retain(|tid| listed.contains(&tid));
                samples
            }
            Err(UnwindError::Gone { .. }) => return ProcessRead::Gone,
            Err(e) => {
                self.stats.failed += 1;
                tracing::debug!(pid, error = %e, "sample failed");
                return if crate::discovery::process_alive(pid) {
                    ProcessRead::Failed
                } else {
                    ProcessRead::Gone
                };
            }
        };
        // `--async-mode all`: the waiting tasks' samples come last (`sample_round`), on their
        // event loop's thread, but none of them is that thread's CPU time: each stands for one
        // tick, as a wall-clock sample does.
        let waiting = unwinder.stats().task_waiting_samples - waiting_before;
        let first_waiting = samples.len().saturating_sub(waiting as usize);
        let mut samples: Vec<(ThreadSample, bool)> = samples
            .into_iter()
            .enumerate()
            .map(|(i, s)| (s, i >= first_waiting))
            .filter(|(s, _)| !s.frames.is_empty())
            .collect();
        self.stats.time.period_ns = period_ns;
        for (tid, (credit, _)) in &credits {
            // A thread with less than a period to credit is not read: its CPU time is carried
            // to the stack of its next read.
            let read = idle || credit.periods > 0 || credit.runqueue_ns > 0;
            let stack = !read
                || samples
                    .iter()
                    .any(|(s, waiting)| !waiting && s.thread.tid == *tid);
            self.stats.time.add(credit, stack);
        }
        if self.config.native_stacks {
            let evaluations = unwinder.offsets().frame.evaluations();
            for (s, _) in &mut samples {
                self.mix_native(s, evaluations);
            }
        }
        let mut states = (!stop).then(|| self.run_states.get_mut(&pid)).flatten();
        let mut read: Vec<ReadSample> = samples
            .into_iter()
            .map(|(mut sample, waiting_task)| {
                let (credit, runnable) =
                    credits.get(&sample.thread.tid).copied().unwrap_or_default();
                if idle {
                    // On the CPU when its CPU time since the last such label adds up to a
                    // period: the labels add up to the CPU time the thread had, where a label
                    // by its state now would call a thread waiting on a run queue on the CPU.
                    // At its first read there is no time to judge by but its state.
                    let on_cpu = if credit.elapsed_ns == 0 {
                        runnable
                    } else {
                        credit.periods > 0
                    };
                    // Threads not stopped had their state files read this tick.
                    label_wall_state(pid, unwinder, on_cpu, states.as_deref_mut(), &mut sample);
                    ReadSample {
                        sample,
                        periods: 1,
                        runqueue_ns: 0,
                    }
                } else if waiting_task {
                    ReadSample {
                        sample,
                        periods: 1,
                        runqueue_ns: 0,
                    }
                } else {
                    ReadSample {
                        sample,
                        periods: credit.periods,
                        runqueue_ns: credit.runqueue_ns,
                    }
                }
            })
            .collect();
        if idle {
            // Every thread of the process was read at one instant: a waiter's holder is the
            // thread read holding the GIL.
            label_gil_waiters(read.iter_mut().map(|r| &mut r.sample));
        }
        ProcessRead::Samples(read)
    }

    /// Merges the native stack of a stopped thread into its sample.
    fn mix_native(&mut self, sample: &mut ThreadSample, evaluations: Evaluations) {
        let regs = match copy_stopped_thread(sample.thread.tid, &mut self.stack_copy) {
            Ok(regs) => regs,
            Err(e) => {
                self.native_mix.counts.not_copied += 1;
                tracing::debug!(pid = sample.thread.pid, "no native stack: {e}");
                return;
            }
        };
        let section = NativeSection::from_user_copy(regs.ip, regs.sp, regs.bp, &self.stack_copy);
        let pid = sample.thread.pid;
        let debug_dirs = &self.config.debug_dirs;
        let unwinder = self
            .native
            .entry(pid)
            .or_insert_with(|| NativeUnwinder::new(pid, debug_dirs.clone()));
        self.native_mix
            .merge_into(unwinder, &section, sample, evaluations);
    }
}

/// Labels a wall-clock (`idle`) sample on or off the CPU (`running`), and a
/// thread off the CPU without the GIL as waiting for it when it is blocked on the GIL's futex
/// (one read of its system call: only threads that are off the CPU and not holding the GIL pay
/// it). `states`: the process's open state files, read this tick (none when its threads were
/// stopped around the sample).
fn label_wall_state(
    pid: u32,
    unwinder: &mut Unwinder,
    running: bool,
    states: Option<&mut RunStates>,
    s: &mut ThreadSample,
) {
    s.thread.cpu = Some(if running {
        CpuState::OnCpu
    } else {
        CpuState::OffCpu
    });
    if running || s.thread.gil != Some(GilState::Released) {
        return;
    }
    let host_tid = s.thread.tid;
    let blocked = match states {
        Some(states) => states.blocked_in(host_tid),
        None => blocked_in(pid, host_tid),
    };
    let waits_for_gil = blocked.is_some_and(|b| {
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
