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
//! the caller has not registered, and, from a second program on the `sched_process_exec`
//! tracepoint, every process that called execve. The caller re-reads just those instead of
//! polling every process.
//!
//! [`pa_proc_for`] builds the [`PaProc`] of a process from its [`Offsets`]. The program reads
//! the 3.15 frame-cache anchor but never writes it: `bpf_probe_write_user` is refused under
//! kernel lockdown (forced on our machines) and fails in interrupt context anyway (see
//! `PA_PROC_ANCHOR` in `pyagent.h`).
//!
//! The program writes records without waking the reader (a wakeup costs 2–3 µs on our VMs), so
//! the caller drains on a timer (every ~100 ms). A reader blocked on [`BpfSampler::ring_fd`]
//! (poll, epoll, tokio's `AsyncFd`) is woken only when the buffer fills past
//! [`BpfConfig::wakeup_bytes`]: use both, the timer for latency, the descriptor against drops.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use aya::maps::{Array, HashMap, MapData, MapError, PerCpuArray, RingBuf};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::{BtfTracePoint, PerfEvent, ProgramError, RawTracePoint};
use aya::sys::{enable_stats, Stats};
use aya::{Btf, Ebpf, EbpfError, EbpfLoader};
use common::{
    Counter, CounterInfo, PaOffCpuThread, PaProc, PaProcSlot, PaThreadList, PaThreadSlot,
    ProcError, SampleRecord, COUNTERS, COUNTER_COUNT, GIL_HOLDER, GIL_NONE, GIL_THREAD_FLAG,
    MAX_FRAMES, OFF_CPU_RECORDED, PROC_ANCHOR, PROC_BASE_FRAME, PROC_CFRAME, PROC_SLOTS,
    THREAD_SEARCH_MAX, THREAD_SLOTS,
};

use crate::discovery::privileges::Privileges;
use crate::offsets::{GilLocation, Offsets};

use super::slots::{SlotContent, SlotIndex};

/// The compiled sampler (`ebpf/sampler.bpf.c`), built by `build.rs`.
static SAMPLER_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sampler.bpf.o"));

const PROGRAM: &str = "pa_sample";
const EXEC_PROGRAM: &str = "pa_exec";
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
    /// Off-CPU: a thread's wait that begins less than this after its last recorded wait is
    /// timed, not walked; its time goes to the thread's next recorded wait. Bounds the walks to
    /// one per thread per gap, whatever the rate of blocking (0: walk every wait).
    pub off_cpu_min_gap: std::time::Duration,
}

/// The default [`BpfConfig::off_cpu_min_gap`]: at most 20 stacks a second per blocking thread,
/// about the service's on-CPU rate (19 Hz). Measured with 50 processes blocking ~1,000 times a
/// second (`cargo xtask bench ebpf --only offcpu`): a 20 ms gap cost the agent 1.6% of a core,
/// every wait walked 7.6%.
pub const DEFAULT_OFF_CPU_MIN_GAP: std::time::Duration = std::time::Duration::from_millis(50);

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
        }
    }
}

/// Errors of the BPF sampler.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// The configuration is out of range.
    #[error("invalid BPF sampler configuration: {0}")]
    InvalidConfig(&'static str),
    /// The kernel refused for lack of privileges (EPERM/EACCES).
    #[error(
        "permission denied while {during}: the BPF sampler needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN{lacking} (run as root or grant them)"
    )]
    PermissionDenied {
        /// What was being done (`loading maps`, `loading the program`, `attaching to cpu 3`).
        during: String,
        /// `; CAP_PERFMON missing; kernel.perf_event_paranoid = 2` when this process's
        /// capabilities and the kernel's settings tell why.
        lacking: String,
        /// The kernel's error.
        #[source]
        source: io::Error,
    },
    /// Loading the object failed (map creation, relocation, verifier).
    #[error("loading the BPF sampler failed")]
    Load(#[source] Box<EbpfError>),
    /// Loading or attaching the program failed; the verifier log, if any, is in the source.
    #[error("{during} failed")]
    Program {
        /// What was being done.
        during: String,
        /// aya's error.
        #[source]
        source: Box<ProgramError>,
    },
    /// A map operation failed.
    #[error("BPF map {map} operation failed")]
    Map {
        /// The map's name.
        map: &'static str,
        /// aya's error.
        #[source]
        source: Box<MapError>,
    },
    /// The object lacks a map or program this module expects (build mismatch).
    #[error("BPF object has no {0}")]
    Missing(&'static str),
    /// Off-CPU profiling needs the kernel's BTF (`/sys/kernel/btf/vmlinux`) for its
    /// `tp_btf/sched_switch` program.
    #[error("off-CPU profiling needs the kernel's BTF at /sys/kernel/btf/vmlinux: {0}")]
    OffCpuUnavailable(String),
    /// Listing CPUs from sysfs failed.
    #[error("cannot read {path}")]
    Cpus {
        /// The sysfs file.
        path: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The process configuration would be refused by the program.
    #[error("invalid walk configuration for pid {pid}")]
    InvalidProc {
        /// The host tgid.
        pid: u32,
        /// What is wrong.
        #[source]
        source: ProcError,
    },
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
    counters: PerCpuArray<MapData, [u64; COUNTER_COUNT]>,
    notices: HashMap<MapData, u32, u32>,
    off_cpu_threads: HashMap<MapData, u32, PaOffCpuThread>,
    /// the exec program is attached
    exec_notices: bool,
    /// Holds the program and its perf-event links: dropping it detaches.
    ebpf: Ebpf,
    /// Keeps the kernel's run-time statistics on while it lives.
    stats: Option<OwnedFd>,
    cpus: Vec<u32>,
    malformed: u64,
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

    /// Loads the program (maps, verifier) without attaching it: nothing runs. For checking that
    /// the verifier accepts a configuration.
    pub fn load_detached(config: &BpfConfig) -> Result<Self, BpfError> {
        Self::load_inner(config, false)
    }

    fn load_inner(config: &BpfConfig, attach: bool) -> Result<Self, BpfError> {
        validate(config)?;
        let nr_cpus =
            aya::util::nr_cpus().map_err(|(path, source)| BpfError::Cpus { path, source })?;
        let nr_cpus =
            u32::try_from(nr_cpus).map_err(|_| BpfError::InvalidConfig("too many CPUs"))?;
        let min_gap_ns = u64::try_from(config.off_cpu_min_gap.as_nanos()).unwrap_or(u64::MAX);

        let mut ebpf = EbpfLoader::new()
            .override_global(KNOB_MAX_FRAMES, &config.max_frames, true)
            .override_global(KNOB_WAKEUP_BYTES, &config.wakeup_bytes, true)
            .override_global(KNOB_STOP_AFTER, &config.stop_after, true)
            .override_global(KNOB_THREAD_SEARCH_MAX, &config.thread_search_max, true)
            .override_global(KNOB_OFF_CPU, &u32::from(config.off_cpu), true)
            .override_global(KNOB_OFF_CPU_MIN_GAP, &min_gap_ns, true)
            .map_max_entries(MAP_SAMPLES, config.ring_bytes)
            .map_max_entries(MAP_SCRATCH, nr_cpus)
            .map_max_entries(MAP_PROCS, config.max_processes)
            .map_max_entries(MAP_THREADS, config.max_threads)
            .map_max_entries(MAP_THREAD_LISTS, config.max_processes)
            .load(SAMPLER_OBJ)
            .map_err(load_error)?;

        let program: &mut PerfEvent = ebpf
            .program_mut(PROGRAM)
            .ok_or(BpfError::Missing("program pa_sample"))?
            .try_into()
            .map_err(|e| program_error("loading the program", e))?;
        program
            .load()
            .map_err(|e| program_error("loading the program", e))?;

        // Statistics must be on before the first run to count it; optional (CAP_SYS_ADMIN).
        let stats = if config.enable_stats {
            enable_stats(Stats::RunTime).ok()
        } else {
            None
        };

        let mut cpus = Vec::new();
        if attach {
            cpus = aya::util::online_cpus()
                .map_err(|(path, source)| BpfError::Cpus { path, source })?;
            let scopes: Vec<(PerfEventScope, String)> = match config.only_thread {
                Some(tid) => vec![(
                    PerfEventScope::OneProcess {
                        pid: tid,
                        cpu: None,
                    },
                    format!("attaching to thread {tid}"),
                )],
                None => cpus
                    .iter()
                    .map(|&cpu| {
                        (
                            PerfEventScope::AllProcessesOneCpu { cpu },
                            format!("attaching to cpu {cpu}"),
                        )
                    })
                    .collect(),
            };
            for (scope, during) in scopes {
                program
                    .attach(
                        PerfEventConfig::Software(SoftwareEvent::CpuClock),
                        scope,
                        SamplePolicy::Frequency(config.rate_hz),
                        false,
                    )
                    .map_err(|e| program_error(&during, e))?;
            }
        }

        if config.off_cpu {
            attach_off_cpu(&mut ebpf, attach)?;
        }

        let exec: &mut RawTracePoint = ebpf
            .program_mut(EXEC_PROGRAM)
            .ok_or(BpfError::Missing("program pa_exec"))?
            .try_into()
            .map_err(|e| program_error("loading the exec program", e))?;
        exec.load()
            .map_err(|e| program_error("loading the exec program", e))?;
        // Without it the caller polls /proc for execs as before: worth a warning, not a failure.
        let exec_notices = attach
            && exec
                .attach("sched_process_exec")
                .inspect_err(|e| tracing::warn!("no exec notices (polling /proc instead): {e}"))
                .is_ok();

        let procs =
            HashMap::try_from(take_map(&mut ebpf, MAP_PROCS)?).map_err(map_error(MAP_PROCS))?;
        let threads =
            HashMap::try_from(take_map(&mut ebpf, MAP_THREADS)?).map_err(map_error(MAP_THREADS))?;
        let thread_lists = HashMap::try_from(take_map(&mut ebpf, MAP_THREAD_LISTS)?)
            .map_err(map_error(MAP_THREAD_LISTS))?;
        let proc_slots = Array::try_from(take_map(&mut ebpf, MAP_PROC_SLOTS)?)
            .map_err(map_error(MAP_PROC_SLOTS))?;
        let thread_slots = Array::try_from(take_map(&mut ebpf, MAP_THREAD_SLOTS)?)
            .map_err(map_error(MAP_THREAD_SLOTS))?;
        let ring =
            RingBuf::try_from(take_map(&mut ebpf, MAP_SAMPLES)?).map_err(map_error(MAP_SAMPLES))?;
        let counters = PerCpuArray::try_from(take_map(&mut ebpf, MAP_COUNTERS)?)
            .map_err(map_error(MAP_COUNTERS))?;
        let notices =
            HashMap::try_from(take_map(&mut ebpf, MAP_NOTICES)?).map_err(map_error(MAP_NOTICES))?;
        let off_cpu_threads = HashMap::try_from(take_map(&mut ebpf, MAP_OFF_CPU_THREADS)?)
            .map_err(map_error(MAP_OFF_CPU_THREADS))?;
        Ok(BpfSampler {
            procs,
            threads,
            thread_lists,
            proc_slots,
            thread_slots,
            proc_index: SlotIndex::new(PROC_SLOTS),
            thread_index: SlotIndex::new(THREAD_SLOTS),
            ring,
            counters,
            notices,
            off_cpu_threads,
            exec_notices,
            ebpf,
            stats,
            cpus,
            malformed: 0,
        })
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

    /// Takes the notices left since the last call: (host tgid, `NOTICE_*` bits) for each process
    /// that ran an unregistered thread or called execve.
    pub fn take_notices(&mut self) -> Vec<(u32, u32)> {
        let pids: Vec<u32> = self.notices.keys().filter_map(Result::ok).collect();
        pids.into_iter()
            .filter_map(|pid| {
                // Read, then delete: a bit set in between is lost, and the caller's slow
                // periodic pass covers it.
                let bits = self.notices.get(&pid, 0).ok()?;
                let _ = self.notices.remove(&pid);
                Some((pid, bits))
            })
            .collect()
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

/// Where the program looks for an unregistered thread of a process with layout `offsets`: the
/// thread list of the interpreter at `interpreter_addr`, matched by `native_thread_id` in the
/// process's PID namespace `pidns` (`st_dev`, `st_ino` of `/proc/PID/ns/pid`).
pub fn pa_thread_list_for(
    offsets: &Offsets,
    interpreter_addr: u64,
    pidns: (u64, u64),
) -> PaThreadList {
    let off = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    PaThreadList {
        threads_head_addr: interpreter_addr.saturating_add(offsets.interpreter_state.threads_head),
        pidns_dev: pidns.0,
        pidns_ino: pidns.1,
        thread_state_next: off(offsets.thread_state.next),
        thread_state_native_thread_id: off(offsets.thread_state.native_thread_id),
    }
}

/// The walk configuration of a process whose CPython layout is `offsets` (generation 0: the
/// caller sets [`PaProc::generation`]). Sets [`PROC_CFRAME`] when the current frame is behind
/// `tstate->cframe` (3.11, 3.12), [`PROC_BASE_FRAME`] when `base_frame` is known (3.15), and
/// [`PROC_ANCHOR`] when `use_anchor` is true and the layout has the 3.15 frame-cache anchor
/// ([`Offsets::has_frame_cache_anchor`]). An offset too large for the map is saturated, so that
/// [`PaProc::validate`] (and [`BpfSampler::track_process`]) refuses it.
pub fn pa_proc_for(offsets: &Offsets, use_anchor: bool) -> PaProc {
    let off = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    let t = &offsets.thread_state;
    let f = &offsets.interpreter_frame;
    let mut p = PaProc {
        generation: 0,
        executable_tag_mask: offsets.frame.executable_tag_mask,
        flags: 0,
        thread_state_current_frame: off(t.current_frame),
        cframe_current_frame: 0,
        thread_state_base_frame: 0,
        thread_state_last_profiled_frame: 0,
        thread_state_last_profiled_frame_seq: 0,
        interpreter_frame_previous: off(f.previous),
        interpreter_frame_executable: off(f.executable),
        interpreter_frame_instr_ptr: off(f.instr_ptr),
        interpreter_frame_owner: off(f.owner),
        ..PaProc::default()
    };
    if let Some(c) = t.cframe_current_frame {
        p.flags |= PROC_CFRAME;
        p.cframe_current_frame = off(c);
    }
    if let Some(b) = t.base_frame {
        p.flags |= PROC_BASE_FRAME;
        p.thread_state_base_frame = off(b);
    }
    if let (true, Some(a), Some(seq)) =
        (use_anchor, t.last_profiled_frame, t.last_profiled_frame_seq)
    {
        p.flags |= PROC_ANCHOR;
        p.thread_state_last_profiled_frame = off(a);
        p.thread_state_last_profiled_frame_seq = off(seq);
    }
    p
}

/// Tells the program of `proc` how to read whether a sampled thread holds the GIL: the main
/// interpreter's `locked`/`last_holder` pair (3.11 in `_PyRuntime` at `runtime_addr`, 3.12-3.14
/// in the interpreter at `interpreter_addr`), or the thread state's own flag (3.15). Threads of
/// sub-interpreters with their own GIL read as not holding the main one. Free-threaded builds
/// have no GIL: their records carry no GIL bits.
pub fn set_gil(proc: &mut PaProc, offsets: &Offsets, runtime_addr: u64, interpreter_addr: u64) {
    proc.gil_model = GIL_NONE;
    proc.gil_locked_addr = 0;
    proc.gil_holder_addr = 0;
    proc.thread_state_holds_gil = 0;
    let (base, locked, holder) = match offsets.gil {
        GilLocation::Runtime { locked, holder } => (runtime_addr, locked, holder),
        GilLocation::Interpreter { locked, holder } => (interpreter_addr, locked, holder),
        GilLocation::ThreadFlag { holds_gil, .. } => {
            if let Ok(off) = u32::try_from(holds_gil) {
                proc.gil_model = GIL_THREAD_FLAG;
                proc.thread_state_holds_gil = off;
            }
            return;
        }
        GilLocation::Disabled { .. } => return,
    };
    if let (Some(locked), Some(holder)) = (base.checked_add(locked), base.checked_add(holder)) {
        proc.gil_model = GIL_HOLDER;
        proc.gil_locked_addr = locked;
        proc.gil_holder_addr = holder;
    }
}

/// Loads the off-CPU program against the kernel's BTF and attaches it to `sched_switch`.
fn attach_off_cpu(ebpf: &mut Ebpf, attach: bool) -> Result<(), BpfError> {
    const DURING: &str = "loading the off-CPU program (tp_btf/sched_switch)";
    let btf = Btf::from_sys_fs().map_err(|e| BpfError::OffCpuUnavailable(e.to_string()))?;
    let program: &mut BtfTracePoint = ebpf
        .program_mut(OFF_CPU_PROGRAM)
        .ok_or(BpfError::Missing("program pa_switch"))?
        .try_into()
        .map_err(|e| program_error(DURING, e))?;
    program
        .load("sched_switch", &btf)
        .map_err(|e| program_error(DURING, e))?;
    if attach {
        program
            .attach()
            .map_err(|e| program_error("attaching to sched_switch", e))?;
    }
    Ok(())
}

fn validate(config: &BpfConfig) -> Result<(), BpfError> {
    if config.rate_hz == 0 {
        return Err(BpfError::InvalidConfig("rate_hz must be positive"));
    }
    if !config.ring_bytes.is_power_of_two() || config.ring_bytes < 4096 {
        return Err(BpfError::InvalidConfig(
            "ring_bytes must be a power of two of at least 4096",
        ));
    }
    if config.max_frames == 0 || config.max_frames > MAX_FRAMES {
        return Err(BpfError::InvalidConfig("max_frames must be in 1..=1024"));
    }
    if config.max_processes == 0 || config.max_threads == 0 {
        return Err(BpfError::InvalidConfig(
            "max_processes and max_threads must be positive",
        ));
    }
    if config.stop_after > common::STAGE_LAST {
        return Err(BpfError::InvalidConfig("stop_after must name a stage"));
    }
    if config.thread_search_max > MAX_FRAMES {
        return Err(BpfError::InvalidConfig(
            "thread_search_max must be in 0..=1024",
        ));
    }
    Ok(())
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

fn take_map(ebpf: &mut Ebpf, name: &'static str) -> Result<aya::maps::Map, BpfError> {
    ebpf.take_map(name).ok_or(BpfError::Missing(name))
}

fn map_error(map: &'static str) -> impl Fn(MapError) -> BpfError {
    move |e| BpfError::Map {
        map,
        source: Box::new(e),
    }
}

fn ignore_absent(r: Result<(), MapError>) -> Result<(), MapError> {
    match r {
        Err(MapError::KeyNotFound) => Ok(()),
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES))
}

/// The kernel said no: names the BPF capabilities this process lacks, if its set tells.
fn permission_denied(during: &str, source: io::Error) -> BpfError {
    let lacking: String = Privileges::current()
        .bpf_shortfalls()
        .iter()
        .map(|s| format!("; {}", s.brief()))
        .collect();
    BpfError::PermissionDenied {
        during: during.to_owned(),
        lacking,
        source,
    }
}

fn load_error(e: EbpfError) -> BpfError {
    match e {
        EbpfError::MapError(MapError::CreateError { io_error, .. }) if is_permission(&io_error) => {
            permission_denied("creating the BPF maps", io_error)
        }
        EbpfError::ProgramError(p) => program_error("loading the program", p),
        other => BpfError::Load(Box::new(other)),
    }
}

fn program_error(during: &str, e: ProgramError) -> BpfError {
    match e {
        // The verifier answers EACCES too when it rejects a program: with a log, that is what
        // it is, and the log must reach the user.
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } if is_permission(&io_error) && format!("{verifier_log}").trim().is_empty() => {
            permission_denied(during, io_error)
        }
        ProgramError::SyscallError(aya::sys::SyscallError { io_error, .. })
            if is_permission(&io_error) =>
        {
            permission_denied(during, io_error)
        }
        other => BpfError::Program {
            during: during.to_owned(),
            source: Box::new(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::offsets::{builtin_offsets, PythonVersion};

    /// 3.12: current frame behind `tstate->cframe`, no anchor even when asked for.
    #[test]
    fn pa_proc_for_312_uses_cframe() {
        let o = builtin_offsets(PythonVersion::new(3, 12, 1)).expect("3.12 table");
        let want = PaProc {
            generation: 0,
            executable_tag_mask: 0,
            flags: PROC_CFRAME,
            thread_state_current_frame: 56,
            cframe_current_frame: 0,
            thread_state_base_frame: 0,
            thread_state_last_profiled_frame: 0,
            thread_state_last_profiled_frame_seq: 0,
            interpreter_frame_previous: 8,
            interpreter_frame_executable: 0,
            interpreter_frame_instr_ptr: 56,
            interpreter_frame_owner: 70,
            ..PaProc::default()
        };
        assert_eq!(pa_proc_for(&o, false), want);
        assert!(!o.has_frame_cache_anchor());
        assert_eq!(pa_proc_for(&o, true), want, "no anchor fields in 3.12");
        want.validate().expect("3.12 PaProc is valid");
    }

    /// The GIL is read where each version keeps it: 3.12 in the main interpreter (its
    /// `last_holder` right before `locked`, so one read), 3.15 in the thread state's flag, and
    /// nowhere on a free-threaded build.
    #[test]
    fn set_gil_follows_the_version() {
        let o = builtin_offsets(PythonVersion::new(3, 12, 1)).expect("3.12 table");
        let GilLocation::Interpreter { locked, holder } = o.gil else {
            panic!("3.12 keeps its GIL in the interpreter: {:?}", o.gil);
        };
        let mut p = pa_proc_for(&o, false);
        set_gil(&mut p, &o, 0x1000, 0x20_0000);
        assert_eq!(p.gil_model, GIL_HOLDER);
        assert_eq!(p.gil_locked_addr, 0x20_0000 + locked);
        assert_eq!(p.gil_holder_addr, 0x20_0000 + holder);
        assert_eq!(
            p.gil_locked_addr,
            p.gil_holder_addr + 8,
            "one read covers both"
        );
        p.validate().expect("valid");

        let mut o315 = offsets_315();
        o315.gil = GilLocation::ThreadFlag {
            holds_gil: 232,
            locked: 16,
        };
        set_gil(&mut p, &o315, 0x1000, 0x20_0000);
        assert_eq!(
            (p.gil_model, p.thread_state_holds_gil, p.gil_locked_addr),
            (GIL_THREAD_FLAG, 232, 0)
        );

        o315.gil = GilLocation::Disabled { thread_state: 300 };
        set_gil(&mut p, &o315, 0x1000, 0x20_0000);
        assert_eq!(p.gil_model, GIL_NONE);
    }

    /// A 3.15 default-build layout (cpython-internals.md §6.1, §10), made from the 3.12 table.
    fn offsets_315() -> Offsets {
        let mut o = builtin_offsets(PythonVersion::new(3, 12, 1)).expect("3.12 table");
        o.version = PythonVersion::new(3, 15, 2);
        o.thread_state.current_frame = 72;
        o.thread_state.cframe_current_frame = None;
        o.thread_state.base_frame = Some(80);
        o.thread_state.last_profiled_frame = Some(88);
        o.thread_state.last_profiled_frame_seq = Some(96);
        o.interpreter_frame.size = 88;
        o.interpreter_frame.executable = 0;
        o.interpreter_frame.previous = 8;
        o.interpreter_frame.instr_ptr = 56;
        o.interpreter_frame.owner = 74;
        o.frame.executable_tag_mask = 3;
        o
    }

    #[test]
    fn pa_proc_for_315_uses_base_frame_and_anchor() {
        let o = offsets_315();
        assert!(o.has_frame_cache_anchor());
        let with = pa_proc_for(&o, true);
        assert_eq!(
            with,
            PaProc {
                generation: 0,
                executable_tag_mask: 3,
                flags: PROC_ANCHOR | PROC_BASE_FRAME,
                thread_state_current_frame: 72,
                cframe_current_frame: 0,
                thread_state_base_frame: 80,
                thread_state_last_profiled_frame: 88,
                thread_state_last_profiled_frame_seq: 96,
                interpreter_frame_previous: 8,
                interpreter_frame_executable: 0,
                interpreter_frame_instr_ptr: 56,
                interpreter_frame_owner: 74,
                ..PaProc::default()
            }
        );
        with.validate().expect("3.15 PaProc is valid");

        let without = pa_proc_for(&o, false);
        assert_eq!(without.flags, PROC_BASE_FRAME);
        assert_eq!(
            (
                without.thread_state_last_profiled_frame,
                without.thread_state_last_profiled_frame_seq
            ),
            (0, 0)
        );
        without.validate().expect("valid without the anchor");

        // Only one half of the anchor pair: no anchor.
        let mut half = o;
        half.thread_state.last_profiled_frame_seq = None;
        assert_eq!(pa_proc_for(&half, true).flags, PROC_BASE_FRAME);
    }

    /// Offsets beyond u32 saturate, and the program's checks (mirrored by validate) refuse them.
    #[test]
    fn pa_proc_for_saturates_huge_offsets() {
        let mut o = offsets_315();
        o.thread_state.last_profiled_frame_seq = Some(1 << 40);
        let p = pa_proc_for(&o, true);
        assert_eq!(p.thread_state_last_profiled_frame_seq, u32::MAX);
        assert!(p.validate().is_err());
    }

    /// The sampler moves into a tokio task (`AsyncFd<BpfSampler>`).
    #[test]
    fn sampler_is_send() {
        fn send<T: Send>() {}
        send::<BpfSampler>();
    }

    #[test]
    fn config_validation() {
        validate(&BpfConfig::default()).expect("default is valid");
        for bad in [
            BpfConfig {
                rate_hz: 0,
                ..BpfConfig::default()
            },
            BpfConfig {
                ring_bytes: 3 << 20,
                ..BpfConfig::default()
            },
            BpfConfig {
                ring_bytes: 1024,
                ..BpfConfig::default()
            },
            BpfConfig {
                max_frames: 0,
                ..BpfConfig::default()
            },
            BpfConfig {
                max_frames: MAX_FRAMES + 1,
                ..BpfConfig::default()
            },
            BpfConfig {
                max_threads: 0,
                ..BpfConfig::default()
            },
        ] {
            assert!(
                matches!(validate(&bad), Err(BpfError::InvalidConfig(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn permission_errors_name_the_capabilities() {
        let e = program_error(
            "attaching to cpu 1",
            ProgramError::SyscallError(aya::sys::SyscallError {
                call: "perf_event_open",
                io_error: io::Error::from_raw_os_error(libc::EACCES),
            }),
        );
        let msg = e.to_string();
        assert!(matches!(e, BpfError::PermissionDenied { .. }));
        assert!(
            msg.contains("CAP_BPF") && msg.contains("CAP_PERFMON") && msg.contains("CAP_SYS_ADMIN"),
            "{msg}"
        );
        let e = load_error(EbpfError::MapError(MapError::CreateError {
            name: "pa_procs".to_owned(),
            io_error: io::Error::from_raw_os_error(libc::EPERM),
        }));
        assert!(matches!(e, BpfError::PermissionDenied { .. }), "{e:?}");
    }
}
