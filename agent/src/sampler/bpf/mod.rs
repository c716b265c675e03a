//! The BPF sampler: loads `ebpf/sampler.bpf.c` (built by `build.rs`), attaches it to a software
//! cpu-clock perf event on every online CPU, and hands out the records it writes.
//!
//! In: which processes to walk and how ([`BpfSampler::track_process`] with a [`PaProc`] built
//! from the process's offsets), and each thread's `PyThreadState` address
//! ([`BpfSampler::set_thread`], kept fresh by the caller from the interpreter's thread list).
//! Out: [`SampleRecord`]s (raw frame addresses, code pointers, instruction pointers; symbolized
//! later by `unwind`/`symbolize`) through [`BpfSampler::drain`], the program's counters, and
//! its cost from the kernel's BPF statistics. Caches nothing: the maps are the state.
//!
//! The program also leaves notices ([`BpfSampler::take_notices`]): processes that ran a thread
//! the caller has not registered, and, from programs on raw tracepoints, every process that
//! called execve (`sched_process_exec`), every new process forked by a tracked one
//! (`sched_process_fork`) and every tracked process whose main thread, or another of its
//! threads, exited (`sched_process_exit`). The caller re-reads just those instead of polling
//! every process.
//!
//! [`pa_proc_for`] builds the [`PaProc`] of a process from its [`Offsets`]. The program reads
//! the 3.15 frame-cache anchor but never writes it: `bpf_probe_write_user` is refused under
//! kernel lockdown (forced on our machines) and fails in interrupt context anyway (see
//! `PA_PROC_ANCHOR` in `pyagent.h`).
//!
//! The program writes records without waking the reader (a wakeup costs 2–3 µs on our VMs), so
//! the caller drains on a timer (every 100 ms). A reader blocked on [`BpfSampler::ring_fd`]
//! (epoll, tokio's `AsyncFd`) or in [`BpfSampler::wait_for_wakeup`] is woken only when the
//! buffer fills past [`BpfConfig::wakeup_bytes`]: use both, the timer for latency, the wakeup
//! against drops.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::perf_event::PerfEventScope;
use aya::programs::{BtfTracePoint, PerfEvent};
use aya::Ebpf;
use common::{
    Counter, CounterInfo, PaOffCpuThread, PaProc, PaProcSlot, PaThreadList, PaThreadSlot,
    SampleRecord, COUNTERS, COUNTER_COUNT, MAX_FRAMES, OFF_CPU_RECORDED, THREAD_SEARCH_MAX,
};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};

use super::slots::{SlotContent, SlotIndex};

mod clock;
mod error;
mod kernel;
mod load;
mod walk_config;

pub use clock::Throttling;
pub use error::BpfError;
pub use kernel::{Facility, KernelFacilities, ProgramBuild};
pub use walk_config::{pa_proc_for, pa_thread_list_for, set_gil, set_trace_context};

use error::{ignore_absent, map_error};

/// An epoll instance with the ring buffer's descriptor registered edge-triggered, so that a wait
/// returns on the program's forced wakeups only, not whenever records are waiting; `None` (and
/// a debug line) where it cannot be set up.
fn ring_wakeups(ring: &RingBuf<MapData>) -> Option<Epoll> {
    let setup = || -> nix::Result<Epoll> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        epoll.add(
            ring.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLET, 0),
        )?;
        Ok(epoll)
    };
    setup()
        .inspect_err(|e| {
            tracing::debug!("no ring-buffer wakeups (draining on the timer only): {e}")
        })
        .ok()
}

/// The compiled sampler (`ebpf/sampler.bpf.c`), built by `build.rs`.
static SAMPLER_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sampler.bpf.o"));
/// Its portable build, for kernels without the default build's helpers ([`kernel`]).
static SAMPLER_PORTABLE_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sampler-portable.bpf.o"));

const PROGRAM: &str = "pa_sample";
const EXEC_PROGRAM: &str = "pa_exec";
const FORK_PROGRAM: &str = "pa_fork";
const EXIT_PROGRAM: &str = "pa_exit";
const MAP_NOTICES: &str = "pa_notices";
const MAP_PROCS: &str = "pa_procs";
const MAP_THREADS: &str = "pa_threads";
const MAP_THREAD_LISTS: &str = "pa_thread_lists";
const MAP_PROC_SLOTS: &str = "pa_proc_slots";
const MAP_THREAD_SLOTS: &str = "pa_thread_slots";
const MAP_SAMPLES: &str = "pa_samples";
const MAP_SCRATCH: &str = "pa_scratch";
const MAP_COUNTERS: &str = "pa_counters";
const KNOB_MAX_FRAMES: &str = "pa_max_frames";
const KNOB_WAKEUP_BYTES: &str = "pa_wakeup_bytes";
const KNOB_STOP_AFTER: &str = "pa_stop_after";
const KNOB_THREAD_SEARCH_MAX: &str = "pa_thread_search_max";
const KNOB_OFF_CPU: &str = "pa_off_cpu_on";
const KNOB_OFF_CPU_MIN_GAP: &str = "pa_off_cpu_min_gap_ns";
const KNOB_OFF_CPU_MAX_CARRY: &str = "pa_off_cpu_max_carry_ns";
const KNOB_GIL_HOLDER: &str = "pa_gil_holder_on";
const MAP_OFF_CPU_THREADS: &str = "pa_off_cpu_threads";
const OFF_CPU_PROGRAM: &str = "pa_switch";

/// How to load the sampler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BpfConfig {
    /// Samples per second per CPU (`SamplePolicy::Frequency`).
    pub rate_hz: u64,
    /// Ring-buffer size in bytes: a power of two, at least one page.
    pub ring_bytes: u32,
    /// Force a reader wakeup once this many bytes are unconsumed (0: never; drain on a timer).
    pub wakeup_bytes: u64,
    /// Frames recorded per sample, `1..=MAX_FRAMES` (deeper stacks are flagged truncated).
    pub max_frames: u32,
    /// Capacity of the process map.
    pub max_processes: u32,
    /// Capacity of the thread map.
    pub max_threads: u32,
    /// Turn on the kernel's BPF run-time statistics for [`BpfSampler::run_stats`] (needs
    /// CAP_SYS_ADMIN; without it, statistics are silently unavailable).
    pub enable_stats: bool,
    /// Sample only this host thread (on whichever CPU it runs) instead of every CPU. For
    /// measuring the program's cost per walk: no runs on idle CPUs or other tasks.
    pub only_thread: Option<u32>,
    /// Benchmarks only: the program returns right after this stage (`common::STAGES`), so
    /// that the cost of each part of a run can be measured; 0 runs everything.
    pub stop_after: u32,
    /// Thread states the program searches at most, `0..=MAX_FRAMES`, for a thread not yet
    /// registered with [`BpfSampler::set_thread`] (0: such threads are not sampled, only
    /// counted as `ThreadUnknown`).
    pub thread_search_max: u32,
    /// Also record tracked threads' stacks as they block, and when they run again
    /// (`tp_btf/sched_switch`): off-CPU time.
    pub off_cpu: bool,
    /// Off-CPU: a thread's wait that repeats its last recorded one (same call, same futex
    /// word) and begins less than this after it is timed, not walked; its time goes to that
    /// recorded wait's stack. Bounds the walks to one per thread per gap, whatever the rate of
    /// blocking (0: only [`BpfConfig::off_cpu_max_carry`] applies).
    pub off_cpu_min_gap: std::time::Duration,
    /// Off-CPU: a wait that repeats the thread's last recorded one from the same place (the
    /// same top frame and caller, at the same instructions, in the same span) is timed, not
    /// walked, for this long after that recorded one. A thread that blocks in a loop costs
    /// one walk per this much time (0: only [`BpfConfig::off_cpu_min_gap`] applies).
    pub off_cpu_max_carry: std::time::Duration,
    /// Off-CPU records of a thread blocked waiting for the GIL name the thread holding it and
    /// the code it runs (the `gil_holder` label). Benchmarks turn it off to measure its cost.
    pub gil_holder: bool,
    /// Load this build whatever the kernel has (tests and benchmarks); `None`: the build the
    /// kernel's helpers allow ([`KernelFacilities`]).
    pub build: Option<ProgramBuild>,
}

/// The default [`BpfConfig::off_cpu_min_gap`]: at most 20 stacks a second per blocking thread,
/// about the service's on-CPU rate (19 Hz). Measured with 50 processes blocking ~1,000 times a
/// second (`cargo xtask bench ebpf --only offcpu`): a 20 ms gap cost the agent 1.6% of a core,
/// every wait walked 7.6%.
pub const DEFAULT_OFF_CPU_MIN_GAP: std::time::Duration = std::time::Duration::from_millis(50);

/// The default [`BpfConfig::off_cpu_max_carry`]: a window of the service's default interval,
/// so a thread that blocks from one place all along is walked about once a window.
pub const DEFAULT_OFF_CPU_MAX_CARRY: std::time::Duration = std::time::Duration::from_secs(10);

impl Default for BpfConfig {
    fn default() -> Self {
        let ring_bytes = 4 << 20;
        BpfConfig {
            rate_hz: 99,
            ring_bytes,
            wakeup_bytes: u64::from(ring_bytes / 2),
            max_frames: MAX_FRAMES,
            max_processes: 1024,
            max_threads: 16384,
            enable_stats: true,
            only_thread: None,
            stop_after: 0,
            thread_search_max: THREAD_SEARCH_MAX,
            off_cpu: false,
            off_cpu_min_gap: DEFAULT_OFF_CPU_MIN_GAP,
            off_cpu_max_carry: DEFAULT_OFF_CPU_MAX_CARRY,
            gil_holder: true,
            build: None,
        }
    }
}

/// The kernel's size figures for the loaded program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramSize {
    /// Instructions the verifier processed (`verified_insns`).
    pub verified_insns: Option<u32>,
    /// Size of the translated (post-verifier) program in bytes; 8 bytes per instruction.
    pub xlated_bytes: Option<u32>,
    /// Size of the JIT-compiled code in bytes.
    pub jited_bytes: u32,
}

/// The loaded and attached sampler. Dropping it detaches and unloads everything.
pub struct BpfSampler {
    procs: HashMap<MapData, u32, PaProc>,
    threads: HashMap<MapData, u32, u64>,
    thread_lists: HashMap<MapData, u32, PaThreadList>,
    proc_slots: Array<MapData, PaProcSlot>,
    thread_slots: Array<MapData, PaThreadSlot>,
    proc_index: SlotIndex<PaProc>,
    thread_index: SlotIndex<u64>,
    ring: RingBuf<MapData>,
    /// the ring's descriptor registered edge-triggered: woken by the program's forced wakeups
    /// only (`None` where epoll cannot be set up: the caller's timer alone then)
    ring_wakeups: Option<Epoll>,
    counters: PerCpuArray<MapData, [u64; COUNTER_COUNT]>,
    notices: HashMap<MapData, u32, u32>,
    off_cpu_threads: HashMap<MapData, u32, PaOffCpuThread>,
    /// the exec program is attached
    exec_notices: bool,
    /// the fork and exit programs are attached too
    lifetime_notices: bool,
    /// [`Counter::Notices`] when the notices were last taken: the map is looked through only
    /// when it moved (walking an empty hash map makes the kernel scan its 4,096 buckets)
    notices_taken: u64,
    /// Holds the program and its perf-event links: dropping it detaches.
    ebpf: Ebpf,
    /// Keeps the kernel's run-time statistics on while it lives.
    stats: Option<OwnedFd>,
    cpus: Vec<u32>,
    /// Where the sampling program is attached, and its perf events there (none when
    /// detached).
    scopes: Vec<PerfEventScope>,
    clock: Option<clock::ClockEvents>,
    /// Samples per second per scope the links were attached with.
    rate_hz: u64,
    malformed: u64,
    /// The build loaded.
    build: ProgramBuild,
    /// One line per facility the kernel lacks, or a refusal of the default build.
    kernel_notes: Vec<String>,
}

impl std::fmt::Debug for BpfSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpfSampler")
            .field("cpus", &self.cpus)
            .field("stats", &self.stats.is_some())
            .field("malformed", &self.malformed)
            .finish_non_exhaustive()
    }
}

impl BpfSampler {
    /// Loads the program with `config`'s knobs, and attaches it to a cpu-clock perf event at
    /// `config.rate_hz` on every online CPU.
    pub fn load(config: &BpfConfig) -> Result<Self, BpfError> {
        Self::load_inner(config, true)
    }

    /// The build of the program that runs.
    pub fn build(&self) -> ProgramBuild {
        self.build
    }

    /// What this kernel lacks and what replaces it, one line each (empty on a kernel with
    /// everything).
    pub fn kernel_notes(&self) -> &[String] {
        &self.kernel_notes
    }

    /// Loads the program (maps, verifier) without attaching it: nothing runs. For checking that
    /// the verifier accepts a configuration.
    pub fn load_detached(config: &BpfConfig) -> Result<Self, BpfError> {
        Self::load_inner(config, false)
    }

    /// Starts walking the Python threads of host process `tgid` with `proc`'s offsets (replaces
    /// an earlier configuration; the same one again costs nothing).
    pub fn track_process(&mut self, tgid: u32, proc: &PaProc) -> Result<(), BpfError> {
        proc.validate()
            .map_err(|source| BpfError::InvalidProc { pid: tgid, source })?;
        if self.proc_index.get(tgid) == Some(*proc) {
            return Ok(());
        }
        // The hash map first: a slot that turns shared sends the program there.
        self.procs
            .insert(tgid, *proc, 0)
            .map_err(map_error(MAP_PROCS))?;
        let (slot, content) = self.proc_index.insert(tgid, *proc);
        self.write_proc_slot(slot, content)
    }

    /// Stops walking process `tgid`; absent is fine. Its threads stay in the thread map until
    /// [`Self::remove_thread`].
    pub fn untrack_process(&mut self, tgid: u32) -> Result<(), BpfError> {
        // The slot first: it must not name a process the hash map no longer has.
        if let Some((slot, content)) = self.proc_index.remove(tgid) {
            self.write_proc_slot(slot, content)?;
        }
        ignore_absent(self.procs.remove(&tgid)).map_err(map_error(MAP_PROCS))?;
        ignore_absent(self.thread_lists.remove(&tgid)).map_err(map_error(MAP_THREAD_LISTS))
    }

    /// Tells the program where to find a thread of process `tgid` that is not registered yet
    /// (a thread younger than the last refresh). The same list again costs nothing.
    pub fn set_thread_list(&mut self, tgid: u32, list: &PaThreadList) -> Result<(), BpfError> {
        if self.thread_lists.get(&tgid, 0).ok() == Some(*list) {
            return Ok(());
        }
        self.thread_lists
            .insert(tgid, *list, 0)
            .map_err(map_error(MAP_THREAD_LISTS))
    }

    /// Records that host thread `tid` runs on the `PyThreadState` at `tstate_addr` (0: runs no
    /// Python). The same address again costs nothing.
    pub fn set_thread(&mut self, tid: u32, tstate_addr: u64) -> Result<(), BpfError> {
        if self.thread_index.get(tid) == Some(tstate_addr) {
            return Ok(());
        }
        self.threads
            .insert(tid, tstate_addr, 0)
            .map_err(map_error(MAP_THREADS))?;
        let (slot, content) = self.thread_index.insert(tid, tstate_addr);
        self.write_thread_slot(slot, content)
    }

    /// Forgets host thread `tid`; absent is fine.
    pub fn remove_thread(&mut self, tid: u32) -> Result<(), BpfError> {
        if let Some((slot, content)) = self.thread_index.remove(tid) {
            self.write_thread_slot(slot, content)?;
        }
        ignore_absent(self.threads.remove(&tid)).map_err(map_error(MAP_THREADS))?;
        // Its off-CPU state, which the program created at its first wait.
        ignore_absent(self.off_cpu_threads.remove(&tid)).map_err(map_error(MAP_OFF_CPU_THREADS))
    }

    fn write_proc_slot(&mut self, slot: u32, content: SlotContent<PaProc>) -> Result<(), BpfError> {
        let value = content.into_slot(|tgid, proc| PaProcSlot {
            proc,
            tgid,
            _pad: 0,
        });
        overwrite_slot(&mut self.proc_slots, slot, value, MAP_PROC_SLOTS)
    }

    fn write_thread_slot(&mut self, slot: u32, content: SlotContent<u64>) -> Result<(), BpfError> {
        let value = content.into_slot(|tid, tstate| PaThreadSlot {
            tstate,
            tid,
            _pad: 0,
        });
        overwrite_slot(&mut self.thread_slots, slot, value, MAP_THREAD_SLOTS)
    }

    /// Every (host tid, `PyThreadState` address) in the thread map, to reconcile with the
    /// interpreters' thread lists.
    pub fn threads(&self) -> Result<Vec<(u32, u64)>, BpfError> {
        self.threads
            .iter()
            .collect::<Result<_, _>>()
            .map_err(map_error(MAP_THREADS))
    }

    /// Off-CPU: the program's state of thread `tid` (its waits timed without a walk), `None`
    /// when it has none (it has not blocked since it was registered).
    pub fn off_cpu_thread(&self, tid: u32) -> Result<Option<PaOffCpuThread>, BpfError> {
        match self.off_cpu_threads.get(&tid, 0) {
            Ok(state) => Ok(Some(state)),
            Err(e) => ignore_absent(Err(e))
                .map(|()| None)
                .map_err(map_error(MAP_OFF_CPU_THREADS)),
        }
    }

    /// Off-CPU: asks the program to report when thread `tid` of `tgid`, found already blocked,
    /// runs again (as if its stack had been recorded as it blocked).
    pub fn expect_wake(&mut self, tid: u32, tgid: u32) -> Result<(), BpfError> {
        let waiting = PaOffCpuThread {
            tgid,
            flags: OFF_CPU_RECORDED,
            ..PaOffCpuThread::default()
        };
        self.off_cpu_threads
            .insert(tid, waiting, 0)
            .map_err(map_error(MAP_OFF_CPU_THREADS))
    }

    /// Whether execs are noticed (the `sched_process_exec` program is attached).
    pub fn notices_execs(&self) -> bool {
        self.exec_notices
    }

    /// Whether, besides execs, tracked processes' forks and exits are noticed (the
    /// `sched_process_fork` and `sched_process_exit` programs are attached): every new Python
    /// process then sends a notice (it execs, or a Python process forked it).
    pub fn notices_lifetimes(&self) -> bool {
        self.lifetime_notices
    }

    /// Takes the notices left since the last call: (host tgid, `NOTICE_*` bits) for each process
    /// that ran an unregistered thread, called execve, was forked by a tracked process, or one
    /// of whose threads (the main one or another) exited.
    ///
    /// `posted` is [`Counter::Notices`] if the caller just read the counters, else it is read.
    pub fn take_notices(&mut self, posted: Option<u64>) -> Vec<(u32, u32)> {
        // Counted after the map changed: a notice set after this read moves the count again.
        let posted = posted.or_else(|| {
            let sums = self.counter_sums().ok()?;
            Some(sums[Counter::Notices.index() as usize])
        });
        if posted.is_some_and(|posted| posted == self.notices_taken) {
            return Vec::new();
        }
        let mut whole = true;
        let mut pids = Vec::new();
        for key in self.notices.keys() {
            match key {
                Ok(pid) => pids.push(pid),
                Err(_) => whole = false,
            }
        }
        let taken = pids
            .into_iter()
            .filter_map(|pid| {
                // Read, then delete: a bit set in between is lost, and the caller's slow
                // periodic pass covers it.
                let Ok(bits) = self.notices.get(&pid, 0) else {
                    whole = false;
                    return None;
                };
                let _ = self.notices.remove(&pid);
                Some((pid, bits))
            })
            .collect();
        // An entry left in the map is looked for again at the next call, whatever the count.
        if let (true, Some(posted)) = (whole, posted) {
            self.notices_taken = posted;
        }
        taken
    }

    /// Hands every record now in the ring buffer to `f`, oldest first; returns how many. A
    /// record that does not parse (a build mismatch) is skipped and counted in
    /// [`Self::malformed_records`].
    pub fn drain(&mut self, mut f: impl FnMut(SampleRecord<'_>)) -> usize {
        let mut n = 0;
        while let Some(item) = self.ring.next() {
            match SampleRecord::parse(&item) {
                Ok(rec) => {
                    f(rec);
                    n += 1;
                }
                Err(_) => {
                    self.malformed += 1;
                }
            }
        }
        n
    }

    /// Records that failed to parse since load.
    pub fn malformed_records(&self) -> u64 {
        self.malformed
    }

    /// Waits up to `timeout` for the program to force a wakeup (the ring filled past
    /// [`BpfConfig::wakeup_bytes`]); whether it did. Records written without one wake nothing:
    /// the caller drains them on its timer. Without epoll this just sleeps.
    pub fn wait_for_wakeup(&self, timeout: Duration) -> bool {
        let Some(epoll) = &self.ring_wakeups else {
            std::thread::sleep(timeout);
            return false;
        };
        // Rounded up: a wait of less than a millisecond must not become a poll that returns at
        // once, over and over, until the caller's deadline.
        let ms = u16::try_from(timeout.as_micros().div_ceil(1000)).unwrap_or(u16::MAX);
        let mut events = [EpollEvent::empty()];
        // An interrupted wait (a signal: the caller checks its stop flag) is a wait without
        // a wakeup.
        matches!(epoll.wait(&mut events, ms), Ok(n) if n > 0)
    }

    /// The ring buffer's descriptor. `poll` reports it readable whenever records are waiting,
    /// but a blocked waiter (epoll, tokio's `AsyncFd`) is only woken when the program forces a
    /// wakeup past [`BpfConfig::wakeup_bytes`]; then call [`Self::drain`]. `BpfSampler` itself
    /// implements `AsFd`/`AsRawFd` with this descriptor, so `AsyncFd<BpfSampler>` works.
    pub fn ring_fd(&self) -> BorrowedFd<'_> {
        self.ring.as_fd()
    }

    /// The program's counters, summed over CPUs, in id order.
    pub fn counters(&self) -> Result<Vec<(&'static CounterInfo, u64)>, BpfError> {
        let sums = self.counter_sums()?;
        Ok(COUNTERS
            .iter()
            .map(|info| (info, sums[info.counter.index() as usize]))
            .collect())
    }

    /// One counter, summed over CPUs. Reads them all: for several, use
    /// [`Self::counter_sums`] once.
    pub fn counter(&self, counter: Counter) -> Result<u64, BpfError> {
        Ok(self.counter_sums()?[counter.index() as usize])
    }

    /// Every counter summed over CPUs, indexed by [`Counter::index`]: one map read.
    pub fn counter_sums(&self) -> Result<[u64; COUNTER_COUNT], BpfError> {
        let per_cpu = self.counters.get(&0, 0).map_err(map_error(MAP_COUNTERS))?;
        let mut sums = [0u64; COUNTER_COUNT];
        for cpu in per_cpu.iter() {
            for (sum, v) in sums.iter_mut().zip(cpu) {
                *sum = sum.wrapping_add(*v);
            }
        }
        Ok(sums)
    }

    /// Total run time in ns and run count of the program since load, from the kernel's BPF
    /// statistics; `None` when they could not be enabled (needs CAP_SYS_ADMIN).
    pub fn run_stats(&self) -> Option<(u64, u64)> {
        self.stats.as_ref()?;
        let info = self.program()?.info().ok()?;
        let ns = u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX);
        Some((ns, info.run_count()))
    }

    /// [`BpfSampler::run_stats`] of the off-CPU program (`None` when it is not loaded): runs
    /// on every context switch of the host, so its mean is the cost a switch pays.
    pub fn off_cpu_run_stats(&self) -> Option<(u64, u64)> {
        self.stats.as_ref()?;
        let program: &BtfTracePoint = self.ebpf.program(OFF_CPU_PROGRAM)?.try_into().ok()?;
        let info = program.info().ok()?;
        let ns = u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX);
        Some((ns, info.run_count()))
    }

    /// Size figures of the loaded program (verified instructions, translated and JIT size).
    pub fn program_size(&self) -> Option<ProgramSize> {
        let info = self.program()?.info().ok()?;
        Some(ProgramSize {
            verified_insns: info.verified_instruction_count(),
            xlated_bytes: info.size_translated(),
            jited_bytes: info.size_jitted(),
        })
    }

    /// The kernel's id of the loaded program (for `bpftool prog show id N`).
    pub fn program_id(&self) -> Option<u32> {
        Some(self.program()?.info().ok()?.id())
    }

    /// Samples per second per CPU the program runs at now.
    pub fn rate_hz(&self) -> u64 {
        self.rate_hz
    }

    /// Whether a failed rate change left the program without events ([`BpfError::NoEvents`]):
    /// it takes no sample until [`BpfSampler::set_rate`] succeeds, at any rate.
    pub fn events_lost(&self) -> bool {
        self.clock
            .as_ref()
            .is_some_and(clock::ClockEvents::is_empty)
    }

    /// Samples `rate_hz` times a second per CPU from now on: the perf events are detached and
    /// attached again at the new frequency (a few milliseconds without samples, never two
    /// events at once, which would count a tick twice). A sampler loaded detached stays so.
    pub fn set_rate(&mut self, rate_hz: u64) -> Result<(), BpfError> {
        if rate_hz == 0 {
            return Err(BpfError::InvalidConfig("rate_hz must be positive"));
        }
        // Asked again after a change that left no event open: open them.
        if (rate_hz == self.rate_hz && !self.events_lost()) || self.scopes.is_empty() {
            self.rate_hz = rate_hz;
            return Ok(());
        }
        let program: &PerfEvent = self
            .ebpf
            .program(PROGRAM)
            .ok_or(BpfError::Missing("program pa_sample"))?
            .try_into()
            .map_err(|e| error::program_error("changing the rate", e))?;
        let fd = program
            .fd()
            .map_err(|e| error::program_error("changing the rate", e))?
            .as_fd();
        if let Some(clock) = &mut self.clock {
            clock
                .reopen(fd, &self.scopes, rate_hz)
                .map_err(|e| error::rate_change_error(rate_hz, e))?;
        }
        self.rate_hz = rate_hz;
        Ok(())
    }

    /// What the kernel reported about the perf events since load: ticks it throttled (too many
    /// samples per scheduler tick for `kernel.perf_event_max_sample_rate`), which no walk saw.
    /// Reads the events' own rings: call it at each drain.
    pub fn throttling(&mut self) -> Throttling {
        self.clock
            .as_mut()
            .map(clock::ClockEvents::throttling)
            .unwrap_or_default()
    }

    /// CPUs the program is attached to (empty after [`Self::load_detached`]).
    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    fn program(&self) -> Option<&PerfEvent> {
        self.ebpf.program(PROGRAM)?.try_into().ok()
    }
}

impl AsFd for BpfSampler {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ring_fd()
    }
}

impl AsRawFd for BpfSampler {
    fn as_raw_fd(&self) -> RawFd {
        self.ring_fd().as_raw_fd()
    }
}

/// Zeroes `slot`, then writes `value` unless it is the zero value: a reader then sees a new
/// occupant's key only with its value (pyagent.h: the key is the last field).
fn overwrite_slot<T: aya::Pod + Default + PartialEq>(
    array: &mut Array<MapData, T>,
    slot: u32,
    value: T,
    name: &'static str,
) -> Result<(), BpfError> {
    array.set(slot, T::default(), 0).map_err(map_error(name))?;
    if value != T::default() {
        array.set(slot, value, 0).map_err(map_error(name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
