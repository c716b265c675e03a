//! Unwind stage: every thread of a CPython process → its Python stack.
//!
//! In: a located [`PythonTarget`]. Out: one [`ThreadSample`] per thread, frames innermost first.
//! Reads go through a [`PageCache`] (fresh each sample). On 3.15 the [`FrameCache`] keeps each
//! thread's last complete stack, anchored on `last_profiled_frame`, so a sample reads only the
//! frames pushed since the last one; writing that anchor is the only write pyagent makes into a
//! target, and only into a runtime validated as 3.15+.
//! Thread names (`threading.Thread.name`, else the OS name) are cached per thread and read again
//! for new threads and once a second (`thread_names`), not per sample.

mod decode;
pub mod frame_cache;
pub mod loss;
mod record;
mod reread;
mod sample;
mod thread_names;
pub mod threads;
pub mod walk;

use std::sync::Arc;

pub use decode::{DecodedRecord, RecordKind};
pub use frame_cache::{CachedFrame, FrameCache, ThreadKey};
pub use loss::{LossCounts, StackLoss};
pub use record::{ExternalSkip, ExternalWalk};
pub use sample::{CpuState, GilState, ThreadSample};
pub use threads::{InterpreterInfo, ThreadInfo};
pub use walk::{RawFrame, WalkEnd};

use reread::{same_page, RereadBudget};
use thread_names::ThreadNames;

use crate::discovery::PythonTarget;
use crate::memory::{
    MemoryError, PageCache, PageCacheStats, ProcessMemory, RemoteMemory, StructBytes,
};
use crate::offsets::Offsets;
use crate::symbolize::{Frame, FrameKind, ObjectError, Symbolizer, SymbolizerStats};

/// Why a whole sample failed (a single thread's failure is counted, not returned).
#[derive(Debug, thiserror::Error)]
pub enum UnwindError {
    /// The process exited.
    #[error("process {pid} exited")]
    Gone {
        /// pid
        pid: u32,
    },
    /// Reading was refused.
    #[error(transparent)]
    Denied(MemoryError),
    /// The interpreter list could not be read (the runtime is shutting down, or garbage).
    // The cause is in the message, so it is not also a `#[source]` (it would print twice).
    #[error("reading the interpreter list of process {pid} failed: {error}")]
    Interpreters {
        /// pid
        pid: u32,
        /// the failed read
        error: MemoryError,
    },
}

impl UnwindError {
    fn from_memory(pid: u32, e: MemoryError) -> UnwindError {
        match e {
            MemoryError::Gone { .. } => UnwindError::Gone { pid },
            MemoryError::Denied { .. } => UnwindError::Denied(e),
            error => UnwindError::Interpreters { pid, error },
        }
    }
}

/// A sampled thread that yielded no stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostThread {
    /// thread id in the target's namespace
    pub tid: u32,
    /// thread name, if known
    pub thread_name: Option<Arc<str>>,
    /// why no stack came out
    pub reason: StackLoss,
}

/// What sampling one thread gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadOutcome {
    /// its stack
    Stack(ThreadSample),
    /// no stack, and why
    Lost(LostThread),
}

/// Why one attempt at a thread's stack failed: the target moved under the read (worth reading
/// again), or memory could not be read.
#[derive(Debug)]
enum AttemptError {
    Lost(StackLoss),
    Memory(MemoryError),
}

impl From<MemoryError> for AttemptError {
    fn from(e: MemoryError) -> AttemptError {
        AttemptError::Memory(e)
    }
}

impl AttemptError {
    /// Whether the process is gone or unreadable: no re-read can help.
    fn is_fatal(&self) -> bool {
        matches!(
            self,
            AttemptError::Memory(MemoryError::Gone { .. } | MemoryError::Denied { .. })
        )
    }

    /// What a failed attempt means for the thread: the process is gone or unreadable (the whole
    /// sample fails), or this thread's stack was lost for a reason.
    fn into_loss(self) -> Result<StackLoss, MemoryError> {
        match self {
            AttemptError::Lost(loss) => Ok(loss),
            AttemptError::Memory(e @ (MemoryError::Gone { .. } | MemoryError::Denied { .. })) => {
                Err(e)
            }
            // A frame or code object freed between the thread state read and ours.
            AttemptError::Memory(_) => Ok(StackLoss::ReadFault),
        }
    }
}

/// Unwinder knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnwindOptions {
    /// emit `<native>` where Python was re-entered from C
    pub native: bool,
    /// emit `<GC>` where the collector runs
    pub gc: bool,
    /// use the 3.15 frame cache (writes `last_profiled_frame` into the target)
    pub frame_cache: bool,
    /// most frames read per thread
    pub max_depth: usize,
    /// most reads of one thread's stack per sample: a walk the target moved under is read
    /// again, up to this many times (1: never re-read)
    pub read_attempts: u32,
    /// keep a walk whose top frame moved while it was read, when its chain is otherwise sound
    /// (see [`Unwinder::sample_thread`]); false re-reads it like any torn walk
    pub keep_moved_top: bool,
}

impl Default for UnwindOptions {
    fn default() -> Self {
        UnwindOptions {
            native: false,
            gc: true,
            frame_cache: true,
            max_depth: 4096,
            // A stack that changes every few dozen nanoseconds (a tight recursion) is still at
            // the depth it was read at in about 1 read in `depth`: 128 keep 95% of a 20-deep
            // one's ticks at ~5 µs a read.
            read_attempts: 128,
            keep_moved_top: true,
        }
    }
}

/// Counters of one [`Unwinder`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct UnwindStats {
    /// calls to `sample`
    pub samples: u64,
    /// thread stacks produced
    pub thread_samples: u64,
    /// frames read from memory
    pub frames_read: u64,
    /// frames taken from the frame cache
    pub frames_cached: u64,
    /// frame cache: top frame unchanged, whole stack from the cache
    pub cache_full_hits: u64,
    /// frame cache: read down to the anchor, rest from the cache
    pub cache_partial_hits: u64,
    /// frame cache: anchor found but the sequence check failed, walked on
    pub cache_misses: u64,
    /// stacks cut at the depth bound
    pub truncated: u64,
    /// external (BPF) walks dropped because a read failed or the chain was inconsistent
    pub torn: u64,
    /// sampled threads that yielded no stack, by reason (after every re-read)
    pub lost: LossCounts,
    /// re-reads of a thread's stack after a walk the target moved under
    pub rereads: u64,
    /// stacks kept although their top frame moved while they were read (see
    /// [`UnwindOptions::keep_moved_top`]): sound chains, not proven to be one instant's
    pub unverified: u64,
    /// frames whose executable is not a code object (the sample is rejected as torn)
    pub non_code_frames: u64,
    /// anchor writes made
    pub anchor_writes: u64,
    /// anchor writes after which the walked frames had changed (the stored stack is dropped)
    pub anchor_write_races: u64,
    /// 3.15 walks whose stack the frame cache could not hold (its thread or depth bound, a
    /// truncated walk): the thread's anchor is cleared, so BPF walks it whole
    pub uncached_walks: u64,
}

impl std::ops::AddAssign for UnwindStats {
    /// Sums the counters of two unwinders (a host's processes, live and exited).
    fn add_assign(&mut self, o: UnwindStats) {
        let UnwindStats {
            samples,
            thread_samples,
            frames_read,
            frames_cached,
            cache_full_hits,
            cache_partial_hits,
            cache_misses,
            truncated,
            torn,
            lost,
            rereads,
            unverified,
            non_code_frames,
            anchor_writes,
            anchor_write_races,
            uncached_walks,
        } = o;
        self.samples += samples;
        self.thread_samples += thread_samples;
        self.frames_read += frames_read;
        self.frames_cached += frames_cached;
        self.cache_full_hits += cache_full_hits;
        self.cache_partial_hits += cache_partial_hits;
        self.cache_misses += cache_misses;
        self.truncated += truncated;
        self.torn += torn;
        self.lost.merge(&lost);
        self.rereads += rereads;
        self.unverified += unverified;
        self.non_code_frames += non_code_frames;
        self.anchor_writes += anchor_writes;
        self.anchor_write_races += anchor_write_races;
        self.uncached_walks += uncached_walks;
    }
}

/// Resolves the Python stacks of every thread of one process.
#[derive(Debug)]
pub struct Unwinder {
    target: PythonTarget,
    mem: PageCache,
    symbolizer: Symbolizer,
    frame_cache: Option<FrameCache>,
    options: UnwindOptions,
    names: ThreadNames,
    raw: Vec<RawFrame>,
    stats: UnwindStats,
    /// the main interpreter (the oldest, last in the list) as the last thread-list read found it
    main_interp: Option<InterpreterInfo>,
}

impl Unwinder {
    /// An unwinder for `target`. With the frame cache on (and a 3.15+ target) it clears every
    /// thread's anchor first, so anchors left by an earlier profiler cost nothing.
    pub fn new(target: PythonTarget, options: UnwindOptions) -> Unwinder {
        let use_cache = options.frame_cache && target.offsets.has_frame_cache_anchor();
        let mut u = Unwinder {
            mem: PageCache::new(RemoteMemory::new(target.pid), 256),
            symbolizer: Symbolizer::new(target.offsets, target.code_type_addr),
            frame_cache: use_cache.then(FrameCache::new),
            target,
            options,
            names: ThreadNames::default(),
            raw: Vec::with_capacity(256),
            stats: UnwindStats::default(),
            main_interp: None,
        };
        if use_cache {
            u.clear_anchors();
        }
        u
    }

    /// The process being unwound.
    pub fn target(&self) -> &PythonTarget {
        &self.target
    }

    /// Unwinder counters.
    pub fn stats(&self) -> UnwindStats {
        self.stats
    }

    /// Page-cache counters.
    pub fn page_cache_stats(&self) -> PageCacheStats {
        self.mem.stats()
    }

    /// `process_vm_readv` calls made so far.
    pub fn remote_reads(&self) -> u64 {
        self.mem.syscalls()
    }

    /// Code-object cache counters.
    pub fn symbolizer_stats(&self) -> SymbolizerStats {
        self.symbolizer.stats()
    }

    /// Whether the 3.15 frame cache is in use.
    pub fn frame_cache_enabled(&self) -> bool {
        self.frame_cache.is_some()
    }

    /// Host TID of a thread given its in-namespace TID.
    pub fn host_tid(&mut self, ns_tid: u32) -> Option<u32> {
        self.names.host_tid(self.target.pid, ns_tid)
    }

    /// The name of the thread `ns_tid`: its `threading.Thread.name`, or the OS one when
    /// `threading` does not know it (cached: read again for a new thread and once a second).
    pub fn thread_name(&mut self, ns_tid: u32) -> Option<Arc<str>> {
        self.names.name(&self.target, ns_tid)
    }

    /// Reads of the `threading` names made so far (they are cached, not read per sample).
    pub fn thread_name_reads(&self) -> u64 {
        self.names.python_reads()
    }

    fn offsets(&self) -> &Offsets {
        &self.target.offsets
    }

    /// Every interpreter and thread of the process, read now.
    pub fn threads(&mut self) -> Result<Vec<(InterpreterInfo, Vec<ThreadInfo>)>, UnwindError> {
        let pid = self.target.pid;
        let o = self.target.offsets;
        let runtime = self.target.runtime_addr;
        let err = |e| UnwindError::from_memory(pid, e);
        let mut out = Vec::new();
        let mut interp_addr = self
            .mem
            .read_u64(runtime + o.runtime_state.interpreters_head)
            .map_err(err)?;
        while interp_addr != 0 && out.len() < threads::MAX_INTERPRETERS {
            let (interp, next) =
                threads::read_interpreter(&mut self.mem, &o, runtime, interp_addr).map_err(err)?;
            let mut list = Vec::new();
            let mut tstate = interp.threads_head;
            while tstate != 0 && list.len() < threads::MAX_THREADS {
                match threads::read_thread(&mut self.mem, &o, &interp, tstate) {
                    Ok(t) => {
                        tstate = t.next;
                        list.push(t);
                    }
                    Err(e @ (MemoryError::Gone { .. } | MemoryError::Denied { .. })) => {
                        return Err(err(e))
                    }
                    // A thread state freed while we read the list: the rest is unreachable.
                    Err(_) => {
                        self.stats.lost.add(StackLoss::ThreadListTorn);
                        break;
                    }
                }
                if list.iter().any(|t: &ThreadInfo| t.addr == tstate) {
                    break; // cycle
                }
            }
            let interp = InterpreterInfo {
                gc_thread: threads::collecting_thread(&interp, &list),
                ..interp
            };
            out.push((interp, list));
            if next == interp_addr || out.iter().any(|(i, _)| i.addr == next) {
                break;
            }
            interp_addr = next;
        }
        self.main_interp = out.last().map(|(interp, _)| *interp);
        Ok(out)
    }

    /// The main interpreter's GIL words (see [`Unwinder::gil_words`]) as of the last read of
    /// the thread list.
    pub fn main_gil_words(&self) -> Option<std::ops::Range<u64>> {
        self.gil_words(self.main_interp.as_ref()?)
    }

    /// One sample of every thread; `filter` gets a thread's host TID (None if the thread is
    /// not in /proc any more) and says whether to unwind it. Threads that yield no stack are
    /// left out (and counted in [`UnwindStats::lost`]).
    pub fn sample_filtered(
        &mut self,
        filter: impl FnMut(Option<u32>) -> bool,
    ) -> Result<Vec<ThreadSample>, UnwindError> {
        let outcomes = self.sample_round(filter)?;
        Ok(outcomes
            .into_iter()
            .filter_map(|o| match o {
                ThreadOutcome::Stack(s) => Some(s),
                ThreadOutcome::Lost(_) => None,
            })
            .collect())
    }

    /// One sample of every thread `filter` selects (as in [`Unwinder::sample_filtered`]), in
    /// thread-list order, with the threads that yielded no stack and why.
    pub fn sample_round(
        &mut self,
        mut filter: impl FnMut(Option<u32>) -> bool,
    ) -> Result<Vec<ThreadOutcome>, UnwindError> {
        self.mem.begin_sample();
        self.stats.samples += 1;
        let interpreters = self.threads()?;
        let mut out = Vec::new();
        for (interp, threads) in &interpreters {
            self.symbolizer.begin_sample(interp.code_generation);
            for t in threads {
                if !filter(self.host_tid(t.native_thread_id)) {
                    continue;
                }
                let outcome = match self.sample_thread_rereading(interp, t) {
                    Ok(s) => ThreadOutcome::Stack(s),
                    Err(e) => {
                        let reason = e.into_loss().map_err(|e| self.whole_sample_error(e))?;
                        ThreadOutcome::Lost(self.lost_thread(t.native_thread_id, reason))
                    }
                };
                out.push(outcome);
            }
        }
        if let Some(fc) = self.frame_cache.as_mut() {
            fc.end_round();
        }
        let stacks = out
            .iter()
            .filter(|o| matches!(o, ThreadOutcome::Stack(_)))
            .count();
        self.stats.thread_samples += stacks as u64;
        Ok(out)
    }

    /// One more read of the thread `ns_tid`, fresh from the process: for a caller that has
    /// stopped that thread since its sample lost it (`dump`). Not counted as a loss again.
    pub fn sample_thread_again(&mut self, ns_tid: u32) -> Result<ThreadOutcome, UnwindError> {
        self.mem.begin_sample();
        let interpreters = self.threads()?;
        let found = interpreters.iter().find_map(|(interp, threads)| {
            threads
                .iter()
                .find(|t| t.native_thread_id == ns_tid)
                .map(|t| (*interp, *t))
        });
        let Some((interp, t)) = found else {
            // The thread exited, or its thread state was freed: nothing left to read.
            return Ok(ThreadOutcome::Lost(
                self.lost_thread(ns_tid, StackLoss::ReadFault),
            ));
        };
        self.symbolizer.begin_sample(interp.code_generation);
        let outcome = match self.sample_thread(&interp, &t) {
            Ok(s) => ThreadOutcome::Stack(s),
            Err(e) => {
                let reason = e.into_loss().map_err(|e| self.whole_sample_error(e))?;
                ThreadOutcome::Lost(self.lost_thread(ns_tid, reason))
            }
        };
        Ok(outcome)
    }

    /// A memory error that ends a whole sample (the process exited or cannot be read).
    fn whole_sample_error(&self, e: MemoryError) -> UnwindError {
        match e {
            MemoryError::Denied { .. } => UnwindError::Denied(e),
            _ => UnwindError::Gone {
                pid: self.target.pid,
            },
        }
    }

    /// Counts a thread that yielded no stack and describes it.
    fn lost_thread(&mut self, ns_tid: u32, reason: StackLoss) -> LostThread {
        self.stats.lost.add(reason);
        let thread_name = self.thread_name(ns_tid);
        LostThread {
            tid: ns_tid,
            thread_name,
            reason,
        }
    }

    /// The stack of one thread, read again (thread state and frames, fresh from the process)
    /// while the target moves under the walk, within `read_attempts` walks and the re-read
    /// budget ([`reread::REREAD_CPU_BUDGET`], [`reread::REREAD_WALL_CAP`]). Each walk is
    /// validated in full: a re-read replaces a rejected walk, it never relaxes the checks.
    ///
    /// A walk whose top frame moved while it was read is kept when its chain is otherwise
    /// sound ([`UnwindOptions::keep_moved_top`]): holding out for a walk the thread stayed in
    /// its top frame through favours the frames it stays in longest (on a tight recursion the
    /// loop around it got about 10 times its share, measured against BPF walks, which stop the
    /// thread), a wrong profile; a kept walk is what the stack was as it was read.
    fn sample_thread_rereading(
        &mut self,
        interp: &InterpreterInfo,
        first: &ThreadInfo,
    ) -> Result<ThreadSample, AttemptError> {
        let mut budget = RereadBudget::start();
        let mut t = *first;
        let mut walks = 1;
        let mut cyclic_in_a_row = 0;
        loop {
            let err = match self.sample_thread(interp, &t) {
                Ok(s) => return Ok(s),
                Err(e) => e,
            };
            if matches!(err, AttemptError::Lost(StackLoss::CyclicChain)) {
                cyclic_in_a_row += 1;
            } else {
                cyclic_in_a_row = 0;
            }
            let out_of_tries = walks >= self.options.read_attempts.max(1)
                || cyclic_in_a_row >= reread::CYCLIC_WALKS_IN_A_ROW
                || budget.spent();
            if out_of_tries || err.is_fatal() {
                return Err(err);
            }
            walks += 1;
            self.stats.rereads += 1;
            t = self.reread_thread(interp, &t)?;
        }
    }

    /// The thread state at `t.addr` as it is now, with every page read again. The pages of
    /// this thread (its thread state, on 3.11/3.12 its `_PyCFrame`, the frames of the last walk)
    /// come back in one vectored read, the thread state first, as in a sample's first read;
    /// anything else is read fresh on demand.
    fn reread_thread(
        &mut self,
        interp: &InterpreterInfo,
        t: &ThreadInfo,
    ) -> Result<ThreadInfo, AttemptError> {
        let pages = self.thread_pages(t);
        self.mem.restart_with(&pages);
        let o = self.target.offsets;
        let now = threads::read_thread(&mut self.mem, &o, interp, t.addr)?;
        // The thread exited and its thread state went to another thread: not ours to read.
        if now.native_thread_id != t.native_thread_id {
            return Err(AttemptError::Lost(StackLoss::ReadFault));
        }
        Ok(now)
    }

    /// Addresses on every page a re-read of `t` needs, in the order to copy them: the thread
    /// state, its `_PyCFrame` (3.11/3.12), its top frame, then the frames of the last walk.
    fn thread_pages(&mut self, t: &ThreadInfo) -> Vec<u64> {
        let o = self.target.offsets;
        let ts = &o.thread_state;
        let mut pages = vec![t.addr, t.addr + o.thread_read_len() as u64 - 1];
        if let Some(off) = ts.cframe_current_frame {
            // Still cached from the read being repeated.
            if let Ok(cframe) = self.mem.read_u64(t.addr + ts.current_frame) {
                pages.push(cframe + off);
            }
        }
        let frame_end = o.frame_read_len() as u64 - 1;
        let frames = [t.top_frame]
            .into_iter()
            .chain(self.raw.iter().map(|f| f.addr))
            .flat_map(|a| [a, a + frame_end]);
        // Frames sit next to each other in a data-stack chunk: one entry per run of a page.
        for addr in frames {
            if pages.last().is_none_or(|&last| !same_page(last, addr)) {
                pages.push(addr);
            }
        }
        pages
    }

    /// The addresses of the GIL's state in the interpreter `interp` belongs to (a futex wait in
    /// there is a wait for the GIL); `None` on free-threaded builds.
    pub fn gil_words(&self, interp: &InterpreterInfo) -> Option<std::ops::Range<u64>> {
        use crate::offsets::{GilBase, GIL_BYTES_AFTER_LOCKED, GIL_BYTES_BEFORE_LOCKED};
        let (base, off) = self.target.offsets.gil.locked_word()?;
        let locked = match base {
            GilBase::Runtime => self.target.runtime_addr,
            GilBase::Interpreter => interp.addr,
        }
        .checked_add(off)?;
        Some(
            locked.saturating_sub(GIL_BYTES_BEFORE_LOCKED)
                ..locked.saturating_add(GIL_BYTES_AFTER_LOCKED),
        )
    }

    /// One sample of every thread.
    pub fn sample(&mut self) -> Result<Vec<ThreadSample>, UnwindError> {
        self.sample_filtered(|_| true)
    }

    fn make_sample(&mut self, t: &ThreadInfo, frames: Vec<Frame>, truncated: bool) -> ThreadSample {
        let pid = self.target.pid;
        let name = self.thread_name(t.native_thread_id);
        let host_tid = self
            .host_tid(t.native_thread_id)
            .unwrap_or(t.native_thread_id);
        ThreadSample {
            pid,
            tid: t.native_thread_id,
            host_tid,
            thread_name: name,
            gil: t.holds_gil.map(GilState::from_held),
            cpu: None,
            frames,
            truncated,
        }
    }

    /// Stack of one thread, read once; an inconsistent read is an [`AttemptError::Lost`].
    fn sample_thread(
        &mut self,
        interp: &InterpreterInfo,
        t: &ThreadInfo,
    ) -> Result<ThreadSample, AttemptError> {
        if t.top_frame == 0 {
            let frames = self
                .gc_marker_without_frame(interp, t)
                .into_iter()
                .collect();
            return Ok(self.make_sample(t, frames, false));
        }
        let key: ThreadKey = (t.addr, t.native_thread_id);
        let anchor = t.anchor.filter(|_| self.frame_cache.is_some());

        // Full hit: nothing returned past the anchor and the top frame is the anchor.
        if let Some((anchor_frame, seq)) = anchor.filter(|(a, _)| *a == t.top_frame) {
            let hit = self
                .frame_cache
                .as_mut()
                .and_then(|fc| fc.full_hit(key, anchor_frame, seq).map(<[_]>::len));
            if let Some(tail_len) = hit {
                // The top frame's line moves while it runs: always read it fresh.
                let top = walk::read_frame(&mut self.mem, &self.target.offsets, t.top_frame)?;
                let mut resolved = Vec::with_capacity(2);
                let pending_native = self.resolve_frames(&[top], interp, &mut resolved)?;
                if self.top_read_before_anchor(t) || self.anchor_unchanged(t, anchor_frame, seq)? {
                    return Ok(self.full_hit_sample(
                        interp,
                        t,
                        key,
                        resolved,
                        pending_native,
                        tail_len,
                    ));
                }
                // The anchor moved since the thread state was read: the top frame returned.
                // Walk the stack as it was read (below), which checks it like any other walk.
            }
        }

        let o = self.target.offsets;
        let max_depth = self.options.max_depth;
        let mut raw = std::mem::take(&mut self.raw);
        raw.clear();
        let stop_at = anchor.map(|(a, _)| a).filter(|&a| a != 0);
        let result = (|| -> Result<(Vec<CachedFrame>, WalkEnd, bool), AttemptError> {
            let mut end =
                walk::walk_frames(&mut self.mem, &o, t.top_frame, stop_at, max_depth, &mut raw)?;
            let mut spliced: Option<Vec<CachedFrame>> = None;
            if end == WalkEnd::Anchor {
                let (anchor_frame, seq) = anchor.expect("stopped at an anchor");
                let tail = self
                    .frame_cache
                    .as_mut()
                    .and_then(|fc| fc.splice(key, anchor_frame, seq).map(|s| s.to_vec()));
                match tail {
                    Some(tail) if self.anchor_unchanged(t, anchor_frame, seq)? => {
                        self.stats.cache_partial_hits += 1;
                        self.stats.frames_cached += tail.len() as u64;
                        spliced = Some(tail);
                        end = WalkEnd::Bottom;
                    }
                    _ => {
                        // Stale or foreign anchor: it only costs the rest of the walk.
                        self.stats.cache_misses += 1;
                        let previous = raw.last().map(|f| f.previous).unwrap_or(0);
                        end = if previous == 0 {
                            WalkEnd::Bottom
                        } else {
                            let left = max_depth.saturating_sub(raw.len());
                            walk::walk_frames(&mut self.mem, &o, previous, None, left, &mut raw)?
                        };
                    }
                }
            }
            self.stats.frames_read += raw.len() as u64;
            // The thread ran on while we read: if its top frame returned between the thread
            // state read and the frame read, the stale frame's `previous` may point at a frame
            // that now belongs to another call chain. Reject the sample unless the top is still
            // the same frame running the same code with the same caller.
            let moved = !self.top_still_current(t, raw.first())?;
            if moved
                && !(self.options.keep_moved_top && sound_end(&o, end, spliced.is_some(), &raw))
            {
                return Err(AttemptError::Lost(StackLoss::TopMoved));
            }
            // 3.15: a complete walk ends at the thread's base frame; anything else is torn.
            if spliced.is_none() && end == WalkEnd::Bottom {
                if let (Some(base), Some(last)) = (t.base_frame, raw.last()) {
                    if base != 0 && last.addr != base {
                        return Err(AttemptError::Lost(StackLoss::BrokenChain));
                    }
                }
            }
            match end {
                WalkEnd::Corrupt => return Err(AttemptError::Lost(StackLoss::BrokenChain)),
                WalkEnd::Cycle => return Err(AttemptError::Lost(StackLoss::CyclicChain)),
                WalkEnd::Bottom | WalkEnd::Anchor | WalkEnd::DepthLimit => {}
            }
            let mut resolved = Vec::with_capacity(raw.len() + 4);
            let pending_native = self.resolve_frames(&raw, interp, &mut resolved)?;
            if let Some(tail) = spliced {
                Self::splice_tail(&mut resolved, pending_native, self.gc_frame(interp), tail);
            }
            Ok((resolved, end, moved))
        })();
        self.raw = raw;
        // A torn sample writes no anchor and leaves the stored stacks alone: the sequence check
        // keeps them honest, and walks recorded against them may still be waiting.
        let (resolved, end, moved) = result?;
        let truncated = end == WalkEnd::DepthLimit;
        if truncated {
            self.stats.truncated += 1;
        }
        if moved {
            // Kept for the profile's sake, never cached: the next walk must not build on it.
            self.stats.unverified += 1;
            let frames = self.finish(interp, t, resolved);
            return Ok(self.make_sample(t, frames, truncated));
        }
        if let (Some(fc), Some((anchor_frame, seq))) = (self.frame_cache.as_mut(), anchor) {
            let stored = !truncated && fc.store(key, seq, resolved.iter().cloned());
            if !stored {
                // Nothing to splice under an anchor (a truncated walk, or a thread or stack
                // beyond the cache's bounds): a BPF walk that stopped at one would be lost.
                // Clear it, so that BPF walks this thread whole instead.
                fc.forget(key);
                self.stats.uncached_walks += 1;
                if anchor_frame != 0 {
                    self.write_anchor(t, 0);
                }
            } else if anchor_frame != t.top_frame && self.write_anchor(t, t.top_frame) {
                // The write lands after the walk. If the walked frames returned and others were
                // pushed at the same addresses in between (with the old anchor further down, no
                // sequence moves), the new anchor names a frame of another call chain, and the
                // stored stack would be spliced under it until that frame returns. Re-read the
                // walked frames and the anchor pair after the write and drop the stored stack if
                // the callers of the anchored frame are not the walked ones.
                if !self.walk_still_live(t.addr, seq)? {
                    self.stats.anchor_write_races += 1;
                    if let Some(fc) = self.frame_cache.as_mut() {
                        fc.forget(key);
                    }
                }
            }
        }
        let frames = self.finish(interp, t, resolved);
        Ok(self.make_sample(t, frames, truncated))
    }

    /// A sample made of the freshly read top frame and the stack cached below it.
    fn full_hit_sample(
        &mut self,
        interp: &InterpreterInfo,
        t: &ThreadInfo,
        key: ThreadKey,
        resolved: Vec<CachedFrame>,
        pending_native: bool,
        tail_len: usize,
    ) -> ThreadSample {
        self.stats.cache_full_hits += 1;
        self.stats.frames_read += 1;
        self.stats.frames_cached += tail_len as u64;
        let mut frames = Vec::with_capacity(tail_len + 3);
        frames.extend(self.gc_marker_without_frame(interp, t));
        frames.extend(resolved.into_iter().map(|c| c.frame));
        let gc_frame = self.gc_frame(interp);
        let tail = self
            .frame_cache
            .as_ref()
            .and_then(|fc| fc.stack(key))
            .map_or(&[][..], |s| &s[1..]);
        Self::append_tail(&mut frames, pending_native, gc_frame, tail);
        self.make_sample(t, frames, false)
    }

    /// Adds a `<GC>` marker for versions that only say "collecting" and drops addresses.
    fn finish(
        &self,
        interp: &InterpreterInfo,
        t: &ThreadInfo,
        resolved: Vec<CachedFrame>,
    ) -> Vec<Frame> {
        let mut frames = Vec::with_capacity(resolved.len() + 1);
        frames.extend(self.gc_marker_without_frame(interp, t));
        frames.extend(resolved.into_iter().map(|c| c.frame));
        frames
    }

    /// Before 3.15 there is no `gc.frame`: while the interpreter collects, the collection runs on
    /// top of the stack of the thread that runs it ([`threads::collecting_thread`]: the GIL
    /// holder, or on free-threaded builds the one attached thread).
    fn gc_marker_without_frame(&self, interp: &InterpreterInfo, t: &ThreadInfo) -> Option<Frame> {
        (self.options.gc && self.offsets().gc.frame.is_none() && interp.gc_thread == Some(t.addr))
            .then(|| Frame::pseudo(FrameKind::Gc))
    }

    /// Whether `top` (read through the page cache) is still the thread's current frame, with the
    /// same code and caller, read now without the cache.
    ///
    /// One vectored read: the thread state's frame pointer, on 3.11/3.12 the `_PyCFrame` field
    /// it leads to, then the frame. The check's window is what decides how often a walk of a
    /// fast-changing stack validates, and each syscall in it costs a microsecond. On 3.11/3.12
    /// the `_PyCFrame` is the one the page-cached thread state named; reading the pointer again
    /// in the same call proves it is still the thread's.
    fn top_still_current(
        &mut self,
        t: &ThreadInfo,
        top: Option<&RawFrame>,
    ) -> Result<bool, MemoryError> {
        let Some(top) = top else { return Ok(true) };
        let o = self.target.offsets;
        let ts = &o.thread_state;
        let frame_len = o.frame_read_len().min(128);
        let mut ranges: Vec<(u64, usize)> = Vec::with_capacity(3);
        ranges.push((t.addr + ts.current_frame, 8));
        let cframe = match ts.cframe_current_frame {
            Some(off) => {
                let cframe = self.mem.read_u64(t.addr + ts.current_frame)?;
                if cframe == 0 {
                    return Ok(false);
                }
                ranges.push((cframe + off, 8));
                Some(cframe)
            }
            None => None,
        };
        ranges.push((top.addr, frame_len));
        let mut b = [0u8; 8 + 8 + 128];
        let want = ranges.iter().map(|r| r.1).sum::<usize>();
        if self.mem.remote().read_ranges(&ranges, &mut b[..want])? < want {
            return Ok(false);
        }
        let (current, frame_at) = match cframe {
            Some(cframe) if b.u64_at(0) != cframe => return Ok(false),
            Some(_) => (b.u64_at(8), 16),
            None => (b.u64_at(0), 8),
        };
        if current != top.addr {
            return Ok(false);
        }
        let live = walk::parse_frame(&o, top.addr, &b[frame_at..frame_at + frame_len]);
        Ok(live.same_call(top))
    }

    /// Whether the top frame was copied before the thread state that named it as the anchor:
    /// then that thread state is the anchor re-check. The anchor only ever moves down the stack,
    /// one caller per pop, each move adding 1 to the sequence, so finding the same anchor and
    /// sequence we wrote proves the frame stayed on the stack from our write until the thread
    /// state was copied, and so when the frame itself was copied. The next prefetch is asked to
    /// keep that order.
    fn top_read_before_anchor(&mut self, t: &ThreadInfo) -> bool {
        let o = &self.target.offsets;
        let Some(anchor_off) = o.thread_state.last_profiled_frame else {
            return false;
        };
        self.mem.fetch_first(t.top_frame);
        let frame = self.mem.read_order(t.top_frame, o.frame_read_len());
        let anchor = self.mem.read_order(t.addr + anchor_off, 16);
        matches!((frame, anchor), (Some(f), Some(a)) if f < a)
    }

    /// Re-reads the live anchor pair, bypassing the page cache (one read when the two fields
    /// are adjacent, as in 3.15).
    fn anchor_unchanged(
        &mut self,
        t: &ThreadInfo,
        frame: u64,
        seq: u64,
    ) -> Result<bool, MemoryError> {
        let ts = &self.target.offsets.thread_state;
        let (Some(f_off), Some(s_off)) = (ts.last_profiled_frame, ts.last_profiled_frame_seq)
        else {
            return Ok(false);
        };
        let mut b = [0u8; 16];
        let ranges = [(t.addr + f_off, 8), (t.addr + s_off, 8)];
        if self.mem.remote().read_ranges(&ranges, &mut b)? < b.len() {
            return Err(MemoryError::Fault {
                pid: self.target.pid,
                addr: t.addr + f_off,
                len: b.len(),
            });
        }
        Ok(b.u64_at(0) == frame && b.u64_at(8) == seq)
    }

    /// Writes the anchor; returns whether it was written.
    fn write_anchor(&mut self, t: &ThreadInfo, frame: u64) -> bool {
        let Some(off) = self.target.offsets.thread_state.last_profiled_frame else {
            return false;
        };
        let written = self
            .mem
            .remote()
            .write(t.addr + off, &frame.to_le_bytes())
            .is_ok();
        self.stats.anchor_writes += u64::from(written);
        written
    }

    /// After an anchor write: whether the stored stack still describes the callers of the
    /// frame the anchor now names. Reads the frames of the last walk (`self.raw`), then the
    /// anchor pair, in one vectored read.
    fn walk_still_live(&mut self, tstate: u64, seq: u64) -> Result<bool, MemoryError> {
        let o = self.target.offsets;
        let ts = &o.thread_state;
        let (Some(f_off), Some(s_off)) = (ts.last_profiled_frame, ts.last_profiled_frame_seq)
        else {
            return Ok(true);
        };
        let len = o.frame_read_len();
        // Bounded like the walk; a longer chain is not cached anyway.
        let frames = &self.raw[..self.raw.len().min(frame_cache::MAX_CACHED_FRAMES)];
        let ranges: Vec<(u64, usize)> = frames
            .iter()
            .map(|f| (f.addr, len))
            .chain([(tstate + f_off, 8), (tstate + s_off, 8)])
            .collect();
        let mut bytes = vec![0u8; frames.len() * len + 16];
        if self.mem.remote().read_ranges(&ranges, &mut bytes)? < bytes.len() {
            return Ok(false);
        }
        // The anchor has moved k frames down since the write (k pops, each adding 1). Consumers
        // read the anchor frame itself fresh and take its callers from the stored stack, so what
        // must hold is that the frames below the anchor's position are the walked ones; being
        // callers of a frame alive since the write, they are what they were at the write.
        let pair = &bytes[frames.len() * len..];
        let (anchor, live_seq) = (pair.u64_at(0), pair.u64_at(8));
        let k = live_seq.wrapping_sub(seq);
        if k >= frames.len() as u64 {
            return Ok(true);
        }
        let k = k as usize;
        if anchor != frames[k].addr {
            return Ok(false);
        }
        Ok(frames.iter().enumerate().skip(k + 1).all(|(i, raw)| {
            walk::parse_frame(&o, raw.addr, &bytes[i * len..(i + 1) * len]).same_call(raw)
        }))
    }

    /// Writes 0 into every thread's anchor (at attach time).
    fn clear_anchors(&mut self) {
        self.mem.begin_sample();
        let Ok(interpreters) = self.threads() else {
            return;
        };
        for (_, threads) in interpreters {
            for t in threads {
                if t.anchor.is_some_and(|(a, _)| a != 0) {
                    self.write_anchor(&t, 0);
                }
            }
        }
    }

    /// Symbolizes raw frames (innermost first) into `out`, applying the version's rules for
    /// which frames are reported and inserting `<native>` / `<GC>` markers. Returns whether a
    /// `<native>` is still pending: a C boundary was crossed and it is shown only if Python frames
    /// follow further down (the caller splicing cached frames adds it).
    pub fn resolve(
        &mut self,
        raw: &[RawFrame],
        interp: &InterpreterInfo,
        out: &mut Vec<CachedFrame>,
    ) -> Result<bool, MemoryError> {
        self.resolve_frames(raw, interp, out).map_err(|e| match e {
            AttemptError::Memory(e) => e,
            AttemptError::Lost(_) => MemoryError::Fault {
                pid: self.target.pid,
                addr: raw.first().map_or(0, |f| f.addr),
                len: 0,
            },
        })
    }

    /// [`Unwinder::resolve`], telling a frame without a code object (a torn read) apart from
    /// memory that cannot be read.
    fn resolve_frames(
        &mut self,
        raw: &[RawFrame],
        interp: &InterpreterInfo,
        out: &mut Vec<CachedFrame>,
    ) -> Result<bool, AttemptError> {
        let o = self.target.offsets;
        let pseudo = |kind| CachedFrame {
            addr: 0,
            frame: Frame::pseudo(kind),
        };
        // Python below called into C, which called back into Python above.
        let mut pending_native = false;
        for f in raw {
            if self.options.gc && interp.gc_frame == Some(f.addr) {
                // A collection that called back into Python is shown as `<GC>` alone.
                out.push(pseudo(FrameKind::Gc));
                pending_native = false;
            }
            if o.frame.entry_owner == Some(f.owner) {
                pending_native |= self.options.native && out.last().is_some_and(|c| c.addr != 0);
                continue;
            }
            let info = match self.symbolizer.code_info(&mut self.mem, f.code) {
                Ok(Some(info)) => info,
                // C boundaries were handled above: a frame without a code object on a live
                // chain is one being set up or torn down while we read. Dropping just that
                // frame would report a caller chain that never existed; reject the sample.
                Ok(None) => {
                    self.stats.non_code_frames += 1;
                    return Err(AttemptError::Lost(StackLoss::NonCodeFrame));
                }
                Err(ObjectError::Memory(e)) => return Err(e.into()),
                // A code object freed and its memory reused as we read it.
                Err(ObjectError::Malformed { .. }) => {
                    return Err(AttemptError::Lost(StackLoss::ReadFault))
                }
            };
            // 3.13+ pushes a shim frame running `__init__` cleanup for specialised class calls;
            // it has no source and is not something the user wrote.
            if &*info.name.file == "__init__" && &*info.name.function == "__init__" {
                continue;
            }
            if std::mem::take(&mut pending_native) {
                out.push(pseudo(FrameKind::Native));
            }
            let base = self.bytecode_base(f)?;
            out.push(CachedFrame {
                addr: f.addr,
                frame: self.symbolizer.frame(&info, f.ip, base),
            });
            // 3.11 marks the first Python frame of each C-level evaluation instead.
            pending_native = self.options.native && f.is_entry;
        }
        Ok(pending_native)
    }

    /// Appends cached frames below a resolved part, adding the `<native>` it left pending and
    /// the `<GC>` marker at the frame that started a running collection (3.15 `gc.frame`).
    fn splice_tail(
        out: &mut Vec<CachedFrame>,
        pending_native: bool,
        gc_frame: Option<u64>,
        tail: Vec<CachedFrame>,
    ) {
        let mut pending = pending_native;
        for c in tail {
            let marker = tail_marker(&mut pending, gc_frame, c.addr);
            out.extend(marker.map(|frame| CachedFrame { addr: 0, frame }));
            out.push(c);
        }
    }

    /// [`Unwinder::splice_tail`] into a sample's frames, cloned straight out of the cache: the
    /// deep part of a stack is the bulk of a sample's cost once reads are down to one.
    fn append_tail(
        out: &mut Vec<Frame>,
        pending_native: bool,
        gc_frame: Option<u64>,
        tail: &[CachedFrame],
    ) {
        let mut pending = pending_native;
        for c in tail {
            out.extend(tail_marker(&mut pending, gc_frame, c.addr));
            out.push(c.frame.clone());
        }
    }

    /// The frame above which `<GC>` goes, when markers are on and the version says (3.15+).
    fn gc_frame(&self, interp: &InterpreterInfo) -> Option<u64> {
        interp.gc_frame.filter(|_| self.options.gc)
    }

    /// Where the bytecode that `f.ip` points into starts: the code object's own copy, or on
    /// free-threaded 3.14+ the thread-local copy selected by `tlbc_index`.
    fn bytecode_base(&mut self, f: &RawFrame) -> Result<u64, MemoryError> {
        let c = &self.target.offsets.code_object;
        let own = f.code + c.co_code_adaptive;
        match c.co_tlbc {
            Some(off) if f.tlbc_index > 0 => {
                let array = self.mem.read_u64(f.code + off)?;
                if array == 0 {
                    return Ok(own);
                }
                let size = self.mem.read_u64(array)?;
                if f.tlbc_index as u64 >= size.min(2048) {
                    return Ok(own);
                }
                let entry = self.mem.read_u64(array + 8 + 8 * f.tlbc_index as u64)?;
                Ok(if entry == 0 { own } else { entry })
            }
            _ => Ok(own),
        }
    }
}

/// The pseudo-frame that goes above the cached frame at `addr`: `<GC>` if the running
/// collection started there (the cache never stores it: the collection that was running when a
/// stack was stored may be over, and one may have started since), else the `<native>` left
/// pending by the frames above (once, and not next to a cached pseudo-frame). A collection that called back
/// into Python shows as `<GC>` alone, as in a full walk.
fn tail_marker(pending_native: &mut bool, gc_frame: Option<u64>, addr: u64) -> Option<Frame> {
    let native = std::mem::take(pending_native);
    if addr == 0 {
        return None;
    }
    if gc_frame == Some(addr) {
        Some(Frame::pseudo(FrameKind::Gc))
    } else {
        native.then(|| Frame::pseudo(FrameKind::Native))
    }
}

/// Whether a walk the target moved under still has the shape of a whole stack: it reached the
/// part vouched for by the frame cache, hit the depth bound, or ended at a frame that starts a
/// C-level evaluation (3.11 `is_entry`, 3.12+ an entry frame owned by the C stack; 3.15's base
/// frame is checked for every walk). A frame read after it was popped and reused may have no
/// caller yet: such a chain ends early, at a frame that is none of these.
fn sound_end(o: &Offsets, end: WalkEnd, spliced: bool, raw: &[RawFrame]) -> bool {
    match end {
        WalkEnd::Anchor => spliced,
        WalkEnd::DepthLimit => true,
        WalkEnd::Corrupt | WalkEnd::Cycle => false,
        WalkEnd::Bottom => {
            spliced
                || o.thread_state.base_frame.is_some()
                || raw.last().is_some_and(|f| walk::starts_evaluation(o, f))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(pending: bool, gc_frame: Option<u64>, addrs: &[u64]) -> Vec<Option<FrameKind>> {
        let mut pending = pending;
        addrs
            .iter()
            .map(|&a| tail_marker(&mut pending, gc_frame, a).map(|f| f.kind))
            .collect()
    }

    #[test]
    fn gc_marker_returns_above_the_frame_that_started_the_collection() {
        assert_eq!(
            kinds(false, Some(0x20), &[0x10, 0x20, 0x30]),
            [None, Some(FrameKind::Gc), None]
        );
    }

    #[test]
    fn pending_native_goes_once_above_the_first_real_frame_unless_gc_replaces_it() {
        assert_eq!(
            kinds(true, None, &[0x10, 0x20]),
            [Some(FrameKind::Native), None]
        );
        assert_eq!(kinds(true, Some(0x10), &[0x10]), [Some(FrameKind::Gc)]);
        // A cached `<native>` already stands there.
        assert_eq!(kinds(true, None, &[0, 0x10]), [None, None]);
    }
}
