//! The BPF backend of the host profiler: each tracked process's walk configuration and threads
//! in the program's maps, and the records drained from its ring buffer, handed to the process's
//! [`Unwinder`] and on to its profile.
//!
//! A record's path: [`BpfSampler::drain`] (ring buffer) → [`DecodedRecord::decode`] (wire
//! format → typed walk) → [`Unwinder::resolve_record`] (frames, through the code-object and
//! frame caches) → the process's aggregator (on-CPU), or [`Waits`] until its wake-up (off-CPU).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::{
    Counter, NativeSection, PaOffCpuThread, PaProc, SampleRecord, NOTICE_EXEC, NOTICE_EXIT,
    NOTICE_FORK, NOTICE_THREAD_EXIT, NOTICE_UNKNOWN_THREAD,
};

use crate::aggregate::WaitReason;
use crate::discovery::{host_tids, HostScanner, PythonTarget};
use crate::sampler::bpf::{
    pa_proc_for, pa_thread_list_for, set_gil, set_trace_context, BpfError, BpfSampler,
};
use crate::sampler::off_cpu::{blocked_in, monotonic_ns, wait_reason, BlockedIn};
use crate::symbolize::native::DebugDirs;
use crate::unwind::native::{NativeMixer, NativeUnwinder};
use crate::unwind::{
    DecodedRecord, ExternalSkip, InterpreterInfo, RecordKind, ThreadInfo, ThreadSample,
    UnwindOptions, Unwinder,
};

use super::process::{Collected, Profile};
use super::waits::{Waiting, Waits, Woke};
use super::HostStats;

/// Every process's thread list is re-read at least this often, whatever the BPF program
/// reports: a thread state replaced under a known thread id sends no notice, and without the
/// exit program neither does a thread that exits.
const THREAD_REFRESH_INTERVAL: Duration = Duration::from_secs(5);
/// [`THREAD_REFRESH_INTERVAL`] for a steady process ([`BpfProcess::steady`]) when threads'
/// exits are noticed: what is left unreported is a thread taking up or swapping a thread state,
/// which a steady process has not been seen doing. These re-reads were a tenth of the agent's
/// CPU with 50 processes at 5 s.
const THREAD_REFRESH_WHEN_STEADY: Duration = Duration::from_secs(30);
/// A thread's exit, or a due OpenTelemetry context look, has the process's thread list read
/// again at most this often: a process that runs a thread per request (or whose reads keep
/// failing, so the look stays due) would otherwise be read at every collection.
const REREAD_GAP: Duration = Duration::from_secs(1);

/// A collection reads the program's counters (one `bpf` syscall that copies every CPU's) at most
/// this often: the notices they gate are taken by every scan (500 ms) as well, and the totals
/// they give are for metrics and summaries, which the last collection reads exactly. Read at
/// every drain (100 ms) they were a twentieth of the agent's time with 50 processes.
const COUNTERS_EVERY: Duration = Duration::from_millis(500);

/// A process the program samples.
struct BpfProcess {
    unwinder: Unwinder,
    /// host TIDs registered in the thread map
    threads: HashMap<u32, u64>,
    /// when all of its tasks were last registered
    last_refresh: Instant,
    /// at that registration every task had a thread state, each the one it had before: none
    /// seems to take one up or swap it later (a C thread calling into Python through
    /// `PyGILState_Ensure`, which no notice reports), so the slow pass may be slower
    steady: bool,
    /// the process's PID namespace (`st_dev`, `st_ino`), in which `native_thread_id`s are
    /// given; `None` when unreadable (then the program cannot search for new threads)
    pidns: Option<(u64, u64)>,
    /// the walk configuration in the program's maps (its GIL addresses are set once the main
    /// interpreter is known, where its threads' OTel contexts are once the process publishes)
    proc_config: PaProc,
    /// whether the program reads the span each sampled thread is in (OTEP 4947)
    trace_context: bool,
    /// native stacks: unwinds the program's stack copies (`None`: Python frames only)
    native: Option<NativeUnwinder>,
}

/// The loaded program and the processes it samples.
pub(super) struct BpfBackend {
    pub sampler: BpfSampler,
    /// host PID → the process (looked up for every record: foldhash, not SipHash)
    /// (boxed: a process's state is kilobytes, and the table keeps room for more)
    procs: foldhash::HashMap<u32, Box<BpfProcess>>,
    /// processes that ran an unregistered thread, noticed since the last collection: their
    /// thread lists are re-read at once
    unknown_thread: HashSet<u32>,
    /// processes one of whose threads exited since their thread list was last read: it is
    /// read again, at most every [`REREAD_GAP`]
    thread_exited: HashSet<u32>,
    /// thread-exit notices taken so far
    thread_exit_notices: u64,
    /// when a collection last read the program's counters
    counters_read: Option<Instant>,
    /// the program no longer records (the run ends): every collection reads the counters
    stopped: bool,
    /// where the native unwinders look for stripped objects' debug files
    debug_dirs: DebugDirs,
    /// native stacks: merges them into the Python ones, keeping each thread's root frames
    mixer: NativeMixer,
    /// when the program's state of every thread with a wait was last read
    carried_read: Option<Instant>,
}

impl BpfBackend {
    pub fn new(sampler: BpfSampler, debug_dirs: DebugDirs) -> BpfBackend {
        BpfBackend {
            sampler,
            procs: foldhash::HashMap::default(),
            unknown_thread: HashSet::new(),
            thread_exited: HashSet::new(),
            thread_exit_notices: 0,
            counters_read: None,
            stopped: false,
            debug_dirs,
            mixer: NativeMixer::default(),
            carried_read: None,
        }
    }

    /// Starts sampling `target`: its walk configuration goes into the program's maps (an error
    /// says why it cannot be profiled).
    pub fn track(
        &mut self,
        target: PythonTarget,
        unwind: UnwindOptions,
        native_stacks: bool,
    ) -> Result<(), BpfError> {
        let pid = target.pid;
        // 3.15: the program stops at `last_profiled_frame` and the agent splices its cached
        // stack. The anchor is written by the agent right after its own userspace walk of the
        // thread (every refresh), never late: a BPF program cannot write it here (kernel
        // lockdown refuses bpf_probe_write_user, which also fails in the interrupt context of a
        // cpu-clock event), and a write long after the walk would let a reused frame address
        // splice another call chain.
        let use_anchor = unwind.frame_cache && target.offsets.has_frame_cache_anchor();
        let mut proc_config = pa_proc_for(&target.offsets, use_anchor);
        if native_stacks {
            proc_config.flags |= common::PROC_NATIVE;
        }
        let options = UnwindOptions {
            frame_cache: use_anchor,
            // The `<native>` markers are where the merge cuts the Python stack into
            // evaluations (`unwind/native/merge.rs`).
            native: unwind.native || native_stacks,
            // The program reads the span at the tick; the userspace walks of a BPF process
            // (3.15 anchors, threads blocked at attach) need none.
            trace_context: false,
            ..unwind
        };
        let mut unwinder = Unwinder::new(target, options);
        if unwind.trace_context {
            // Looked for before the first record, so that a publishing process's records all
            // carry their span; and not at the first thread refresh, whose GIL addresses it
            // would hold back (the look parses the symbols of every loaded object). A process
            // that publishes later is found by the looks of later refreshes.
            set_trace_context(&mut proc_config, unwinder.thread_context_layout().as_ref());
        }
        self.sampler.track_process(pid, &proc_config)?;
        self.procs.insert(
            pid,
            Box::new(BpfProcess {
                unwinder,
                threads: HashMap::new(),
                last_refresh: Instant::now(),
                steady: false,
                pidns: pid_namespace(pid),
                proc_config,
                trace_context: unwind.trace_context,
                native: native_stacks.then(|| NativeUnwinder::new(pid, self.debug_dirs.clone())),
            }),
        );
        Ok(())
    }

    /// Weighs the waits that the program timed without walking them (repeats of each thread's
    /// last recorded wait) into the profiles, from its state of each thread with a wait (of
    /// `only`, or of every process); also what the stall report knows of them. One map read
    /// per such thread.
    pub fn weigh_carried(&mut self, out: &mut Collected, only: Option<u32>) {
        if only.is_none() {
            self.carried_read = Some(Instant::now());
        }
        let tids = out.waits.threads(only);
        weigh_carried(&self.sampler, out, &tids);
    }

    /// [`weigh_carried`](Self::weigh_carried) of threads `tids` only.
    pub fn weigh_carried_of(&mut self, out: &mut Collected, tids: &[u32]) {
        weigh_carried(&self.sampler, out, tids);
    }

    /// [`weigh_carried`](Self::weigh_carried) of every process, if not done for `every`.
    pub fn weigh_carried_every(&mut self, out: &mut Collected, every: Duration) {
        if self.carried_read.is_none_or(|at| at.elapsed() >= every) {
            self.weigh_carried(out, None);
        }
    }

    /// Stops sampling `pid` and forgets its threads; returns its unwinder (for its totals).
    pub fn untrack(&mut self, pid: u32) -> Option<Unwinder> {
        let p = self.procs.remove(&pid);
        self.mixer.forget(pid);
        let _ = self.sampler.untrack_process(pid);
        let p = p?;
        for tid in p.threads.into_keys() {
            let _ = self.sampler.remove_thread(tid);
        }
        Some(p.unwinder)
    }

    /// The program stops recording every process (the run ends): what the ring buffer holds
    /// now is all there will be.
    pub fn stop_recording(&mut self) {
        for pid in self.procs.keys() {
            let _ = self.sampler.untrack_process(*pid);
        }
        self.stopped = true;
    }

    /// Records the tracked processes again after [`BpfBackend::stop_recording`] (`top`
    /// cuts a window a second and runs on): each process is handed to the program again, with
    /// its thread list read anew.
    pub fn resume_recording(&mut self, out: &mut Collected) {
        if !std::mem::take(&mut self.stopped) {
            return;
        }
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            let Some(p) = self.procs.get(&pid) else {
                continue;
            };
            if let Err(e) = self.sampler.track_process(pid, &p.proc_config) {
                tracing::debug!(pid, "cannot track the process again: {e}");
                continue;
            }
            self.refresh_threads(pid, true, out);
        }
    }

    /// The unwinders of the processes sampled.
    pub fn unwinders(&self) -> impl Iterator<Item = &Unwinder> {
        self.procs.values().map(|p| &p.unwinder)
    }

    /// The native unwinders of the processes sampled with native stacks.
    pub fn native_unwinders(&self) -> impl Iterator<Item = &NativeUnwinder> {
        self.procs.values().filter_map(|p| p.native.as_ref())
    }

    /// Python threads (those with a thread state) of each process at its last thread-list read.
    pub fn python_threads(&self) -> HashMap<u32, u64> {
        self.procs
            .iter()
            .map(|(&pid, p)| {
                let python = p.threads.values().filter(|&&ts| ts != 0).count();
                (pid, python as u64)
            })
            .collect()
    }

    /// Drains and resolves the ring buffer, passes on the program's notices, and re-reads the
    /// thread lists that need it.
    pub fn collect(&mut self, scanner: &mut HostScanner, out: &mut Collected) {
        // Records first: on 3.15 they were walked against the anchors and cached stacks of the
        // last refresh, which the next refresh replaces.
        let cpu_before = super::thread_cpu_ns();
        let sampled = self.drain_records(out, Instant::now());
        out.stats.drain_cpu_ns += super::thread_cpu_ns().saturating_sub(cpu_before);
        let now = Instant::now();
        if self.stopped
            || self
                .counters_read
                .is_none_or(|at| now.saturating_duration_since(at) >= COUNTERS_EVERY)
        {
            self.counters_read = Some(now);
            // A counter that cannot be read keeps its last value (a total never goes back to 0).
            let sums = self.sampler.counter_sums().ok();
            if let Some(sums) = &sums {
                out.stats.unknown_thread = sums[Counter::ThreadUnknown.index() as usize];
                out.stats.ring_full = sums[Counter::RingbufDropped.index() as usize];
            }
            self.take_notices(scanner, sums.map(|s| s[Counter::Notices.index() as usize]));
        }
        out.stats.throttled = self.sampler.throttling().lost_ticks;
        out.stats.thread_exit_notices = self.thread_exit_notices;
        let unknown_thread = std::mem::take(&mut self.unknown_thread);
        // Re-read a thread list only when it matters: the program met a thread it cannot walk;
        // one of the process's threads exited, or its OpenTelemetry thread context is due to be
        // looked for (the look is part of the read), at most every REREAD_GAP; a 3.15 process
        // was sampled (its anchors move the next BPF walks' stopping points up to
        // now); or the slow pass is due.
        let exits_noticed = self.sampler.notices_lifetimes();
        // Only tracked processes' exits wait for a read.
        let procs = &self.procs;
        self.thread_exited.retain(|pid| procs.contains_key(pid));
        let thread_exited = &self.thread_exited;
        let due: Vec<(u32, bool)> = self
            .procs
            .iter()
            .filter_map(|(pid, p)| {
                let slow_pass = if exits_noticed && p.steady {
                    THREAD_REFRESH_WHEN_STEADY
                } else {
                    THREAD_REFRESH_INTERVAL
                };
                let since = now.duration_since(p.last_refresh);
                let noticed = thread_exited.contains(pid)
                    || (p.trace_context && p.unwinder.thread_context_look_due(now));
                let full = unknown_thread.contains(pid)
                    || (noticed && since >= REREAD_GAP)
                    || since >= slow_pass;
                let anchors = p.unwinder.frame_cache_enabled() && sampled.contains(pid);
                (full || anchors).then_some((*pid, full))
            })
            .collect();
        for (pid, full) in &due {
            if *full {
                self.thread_exited.remove(pid);
            }
        }
        for (pid, full) in due {
            self.refresh_threads(pid, full, out);
        }
    }

    /// Takes the program's notices: execs, forks and exits go to the scanner, unregistered
    /// threads and threads' exits wait for the next collection.
    ///
    /// `posted`: the notice count, when the caller just read the counters.
    pub fn take_notices(&mut self, scanner: &mut HostScanner, posted: Option<u64>) {
        for (pid, bits) in self.sampler.take_notices(posted) {
            if bits & (NOTICE_EXEC | NOTICE_FORK | NOTICE_EXIT) != 0 {
                scanner.notice(pid);
            }
            if bits & NOTICE_UNKNOWN_THREAD != 0 {
                self.unknown_thread.insert(pid);
            }
            // A process whose main thread exited too is about to be dropped: no re-read.
            if bits & NOTICE_THREAD_EXIT != 0 && bits & NOTICE_EXIT == 0 {
                self.thread_exit_notices += 1;
                self.thread_exited.insert(pid);
            }
        }
    }

    /// Re-reads a process's thread list into the BPF thread map; with `all_tasks`, also
    /// registers its threads without a thread state (a /proc read of every task).
    pub fn refresh_threads(&mut self, pid: u32, all_tasks: bool, out: &mut Collected) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
        if all_tasks {
            p.last_refresh = Instant::now();
        }
        let interpreters = match p.unwinder.refresh_for_records() {
            Ok(i) => i,
            Err(e) => {
                out.stats.refresh_failed += 1;
                tracing::debug!(pid, "thread refresh failed: {e}");
                return;
            }
        };
        if all_tasks {
            out.stats.thread_list_reads += 1;
        }
        let sampler = &mut self.sampler;
        set_thread_list(sampler, pid, p, &interpreters);
        let mut now = HashMap::new();
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
        let gone: Vec<u32> = p
            .threads
            .keys()
            .filter(|tid| !now.contains_key(tid))
            .copied()
            .collect();
        // Their last waits' repeats, before the program's state of them goes.
        weigh_carried(sampler, out, &gone);
        for gone in gone {
            let _ = sampler.remove_thread(gone);
            out.waits.forget_thread(gone);
        }
        if all_tasks {
            // Two reads at least, the same thread states in both where a thread is in both.
            p.steady = !now.is_empty()
                && !p.threads.is_empty()
                && now.iter().all(|(tid, &ts)| {
                    ts != 0 && p.threads.get(tid).is_none_or(|&before| before == ts)
                });
        }
        p.threads = now;
        // Read seldom: its page buffers are not kept until the next read.
        p.unwinder.end_records();
    }

    /// Resolves the records in the ring buffer; returns the pids that had some. Each record
    /// is resolved where it lies in the ring buffer: its native section (up to 16 KiB of stack)
    /// is unwound in place, never copied out. `now` is the drain's one clock reading (when each
    /// process's batch begins).
    pub fn drain_records(&mut self, out: &mut Collected, now: Instant) -> HashSet<u32> {
        let mut sampled = HashSet::new();
        let procs = &mut self.procs;
        let mixer = &mut self.mixer;
        // One frame buffer for the whole drain: each record is decoded into the last one's.
        let mut spare_raw = Vec::new();
        let n = self.sampler.drain(|rec: SampleRecord<'_>| {
            let mut record = DecodedRecord::decode(&rec, std::mem::take(&mut spare_raw));
            if let RecordKind::Wake { tid, at_ns } = record.kind {
                woke(out, record.pid, tid, at_ns);
                spare_raw = record.raw;
                return;
            }
            let pid = record.pid;
            let (Some(p), Some(profile)) = (procs.get_mut(&pid), out.profiles.get_mut(&pid)) else {
                out.stats.untracked += 1;
                spare_raw = record.raw;
                return;
            };
            record.adopt_layout(p.unwinder.offsets());
            if sampled.insert(pid) {
                if let Err(e) = p.unwinder.begin_records(now) {
                    out.stats.refresh_failed += 1;
                    tracing::debug!(pid, "reading the interpreters failed: {e}");
                }
            }
            let native = p
                .native
                .as_mut()
                .zip(rec.native())
                .map(|(n, section)| (n, section, &mut *mixer));
            resolve(
                &mut p.unwinder,
                native,
                &record,
                profile,
                &mut out.stats,
                &mut out.waits,
            );
            spare_raw = record.raw;
        });
        out.stats.records += n as u64;
        out.stats.native = self.mixer.counts;
        for pid in &sampled {
            if let Some(p) = procs.get_mut(pid) {
                p.unwinder.end_records();
            }
        }
        sampled
    }

    /// Threads already blocked when a process is tracked never switch out under the program
    /// until they wake: their stacks are read now, their waits start now, and the program is
    /// told to report their wake-up.
    pub fn seed_blocked_threads(&mut self, pid: u32, out: &mut Collected) {
        let Some(p) = self.procs.get_mut(&pid) else {
            return;
        };
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
        let samples = p
            .unwinder
            .sample_filtered(|host| host.is_some_and(|h| blocked.contains_key(&h)));
        // Read once: its page buffers are not kept until the process's next batch (which,
        // for an idle process whose waits repeat, may be a window away).
        p.unwinder.end_records();
        let samples = match samples {
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
            let Some(host_tid) = p.unwinder.host_tid(sample.thread.ns_tid()) else {
                tracing::debug!(
                    pid,
                    tid = sample.thread.ns_tid(),
                    "no host thread id for a blocked thread"
                );
                continue;
            };
            let (Some(b), Some(interp)) = (
                blocked.get(&host_tid),
                p.threads
                    .get(&host_tid)
                    .and_then(|&tstate| p.unwinder.record_interpreter(tstate)),
            ) else {
                tracing::debug!(
                    pid,
                    host_tid,
                    "no thread state or interpreter for a blocked thread"
                );
                continue;
            };
            let wait = wait_reason(b.class, b.wait_addr, p.unwinder.gil_words(&interp));
            if self.sampler.expect_wake(host_tid, pid).is_err() {
                continue;
            }
            out.waits
                .found_blocked(host_tid, Waiting::new(sample, wait, now, Some(b.nr)));
            out.stats.blocked_at_attach += 1;
        }
    }
}

/// Weighs the waits of `tids` that the program timed without walking them into the profiles,
/// from its state of each thread (one map read per thread).
fn weigh_carried(sampler: &BpfSampler, out: &mut Collected, tids: &[u32]) {
    if !tids.is_empty() {
        out.weigh_carried(tids, |tid| stable_off_cpu_thread(sampler, tid));
    }
}

/// The program's state of thread `tid`, read until two reads agree (at most three): the kernel
/// copies an entry while the program may be updating it, and a copy that holds the new running
/// total with the old start of the wait it ended would count that wait twice.
fn stable_off_cpu_thread(sampler: &BpfSampler, tid: u32) -> Option<PaOffCpuThread> {
    let mut last = sampler.off_cpu_thread(tid).ok().flatten()?;
    for _ in 0..2 {
        let again = sampler.off_cpu_thread(tid).ok().flatten()?;
        if (again.carried_ns, again.blocked_ns) == (last.carried_ns, last.blocked_ns) {
            return Some(again);
        }
        last = again;
    }
    // Still moving: without the wait under way, which the next read counts.
    Some(PaOffCpuThread {
        blocked_ns: 0,
        ..last
    })
}

/// A wake-up record: the thread's recorded wait ends, and its time goes to the profile.
fn woke(out: &mut Collected, pid: u32, tid: u32, at_ns: u64) {
    let mut profile = out.profiles.get_mut(&pid);
    let add = |s: &ThreadSample, w: WaitReason, ns: u64| {
        profile.as_mut().is_some_and(|p| {
            p.agg.add_off_cpu(s, w, ns);
            true
        })
    };
    match out.waits.woke(tid, at_ns, add) {
        Woke::Weighed => {}
        Woke::Unmatched => out.stats.unmatched_wakes += 1,
        Woke::Untracked => out.stats.untracked += 1,
    }
}

/// An on- or off-CPU record of a tracked process: its stack into the profile, or into the
/// blocked threads until its wake-up; a record without a stack is counted by reason.
fn resolve(
    unwinder: &mut Unwinder,
    native: Option<(&mut NativeUnwinder, &NativeSection<'_>, &mut NativeMixer)>,
    record: &DecodedRecord,
    profile: &mut Profile,
    stats: &mut HostStats,
    waits: &mut Waits,
) {
    let DecodedRecord {
        kind, walk, raw, ..
    } = record;
    let sample = match unwinder.resolve_record(walk, raw) {
        Ok(mut sample) => {
            if let Some((n, section, mixer)) = native {
                let evaluations = unwinder.offsets().frame.evaluations();
                mixer.merge_into(n, section, &mut sample, evaluations);
            }
            sample
        }
        Err(skip) => {
            stats.count_skip(skip);
            // A record of no known interpreter is not this profile's tick to miss.
            if skip != ExternalSkip::UnknownThreadState {
                profile.agg.add_dropped(1);
            }
            return;
        }
    };
    match *kind {
        RecordKind::OffCpu {
            wait,
            wait_addr,
            at_ns,
            carried_ns,
            gil_holder,
        } => {
            let gil = unwinder
                .record_interpreter(walk.tstate)
                .and_then(|interp| unwinder.gil_words(&interp));
            let wait = wait_reason(wait, wait_addr, gil);
            stats.off_cpu_waits += 1;
            let mut waiting = Waiting::new(sample, wait, at_ns, None);
            if wait == WaitReason::Gil {
                waiting.sample.thread.gil_holder =
                    gil_holder.and_then(|read| unwinder.gil_holder(read));
            }
            let add = |s: &ThreadSample, w: WaitReason, ns: u64| {
                profile.agg.add_off_cpu(s, w, ns);
                true
            };
            if !waits.blocked(walk.host_tid, waiting, carried_ns, add) {
                stats.carried_lost += 1;
            }
        }
        RecordKind::OnCpu { queued_ns } => {
            profile.agg.add(&sample);
            stats.samples += 1;
            // Its wait for a CPU since its last tick, at the stack it resumed with.
            if queued_ns > 0 {
                profile.agg.add_off_cpu(&sample, WaitReason::Cpu, queued_ns);
            }
        }
        RecordKind::Wake { .. } => {
            profile.agg.add(&sample);
            stats.samples += 1;
        }
    }
}

/// Points the program at the main interpreter (the oldest, last in the runtime's list): its
/// thread list, where it finds threads started since this refresh, and its GIL; and at the
/// threads' OTel contexts, once the process publishes them (looked for with a growing wait).
fn set_thread_list(
    sampler: &mut BpfSampler,
    pid: u32,
    p: &mut BpfProcess,
    interpreters: &[(InterpreterInfo, Vec<ThreadInfo>)],
) {
    let Some((main, _)) = interpreters.last() else {
        return;
    };
    if let Some(pidns) = p.pidns {
        p.unwinder.search_unregistered_in(*main);
        let list = pa_thread_list_for(&p.unwinder.target().offsets, main.addr, pidns);
        if let Err(e) = sampler.set_thread_list(pid, &list) {
            tracing::debug!(pid, "cannot set the thread list: {e}");
        }
    }
    let target = p.unwinder.target();
    let mut config = p.proc_config;
    set_gil(&mut config, &target.offsets, target.runtime_addr, main.addr);
    if p.trace_context {
        set_trace_context(&mut config, p.unwinder.thread_context_layout().as_ref());
    }
    if let Some(offsets) = p.unwinder.task_frame_offsets() {
        config.thread_state_running_task = offsets.running_task;
        config.task_coro = offsets.task_coro;
        config.coroutine_iframe = offsets.coroutine_iframe;
        config.task_awaited_by = offsets.task_awaited_by;
    }
    if config != p.proc_config {
        match sampler.track_process(pid, &config) {
            Ok(()) => p.proc_config = config,
            Err(e) => tracing::debug!(pid, "cannot set where the GIL, spans and tasks are: {e}"),
        }
    }
}

/// `st_dev` and `st_ino` of `/proc/PID/ns/pid`: the PID namespace the process's thread ids are
/// given in.
fn pid_namespace(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok()?;
    Some((m.dev(), m.ino()))
}
