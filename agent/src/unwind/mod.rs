//! Unwind stage: every thread of a CPython process → its Python stack.
//!
//! In: a located [`PythonTarget`]. Out: one [`ThreadSample`] per thread, frames innermost first.
//! Reads go through a [`PageCache`] (fresh each sample). On 3.15 the [`FrameCache`] keeps each
//! thread's last complete stack, anchored on `last_profiled_frame`, so a sample reads only the
//! frames pushed since the last one; writing that anchor is the only write pyagent makes into a
//! target, and only into a runtime validated as 3.15+.
//! Thread names (`threading.Thread.name`, else the OS name) are cached per thread and read again
//! for new threads and every 10 s (`thread_names`), not per sample.

mod asyncio;
mod bottoms;
mod decode;
mod error;
pub mod frame_cache;
mod gil_holder;
mod greenlets;
pub mod loss;
mod memory;
pub mod native;
mod options;
mod record;
mod reread;
mod resolve;
mod round;
mod sample;
mod thread_names;
mod thread_walk;
pub mod threads;
mod trace_context;
pub mod walk;

use std::sync::Arc;

pub use asyncio::{AsyncTask, AsyncioError, TaskFrame, TaskFrameOffsets};
pub use decode::{DecodedRecord, RecordKind};
pub use error::{LostThread, ThreadOutcome, UnwindError};
pub use frame_cache::{CachedFrame, FrameCache, ThreadKey};
pub use gil_holder::{holder_in_read, label_gil_waiters, HolderRead};
pub use greenlets::{Greenlet, GreenletError, GreenletState};
pub use loss::{LossCounts, LossReason, RecordLoss, StackLoss};
pub use memory::CacheMemory;
pub use options::{AsyncMode, CacheTotals, UnwindOptions, UnwindStats};
pub use record::{ExternalSkip, ExternalWalk};
pub use sample::{CpuState, GilHolder, GilState, SampleThread, ThreadSample, TraceContext};
pub use threads::{InterpreterInfo, ThreadInfo};
pub use walk::{RawFrame, WalkEnd};

use asyncio::AsyncioState;
use bottoms::ThreadBottoms;
use record::RecordContext;
use thread_names::ThreadNames;
use trace_context::TraceContexts;

use crate::discovery::thread_context::ThreadContextLayout;
use crate::discovery::PythonTarget;
use crate::memory::{MemoryError, PageCache, PageCacheStats, ProcessMemory, RemoteMemory};
use crate::offsets::Offsets;
use crate::symbolize::{Frame, Symbolizer, SymbolizerStats};

/// Resolves the Python stacks of every thread of one process.
#[derive(Debug)]
pub struct Unwinder {
    target: PythonTarget,
    mem: PageCache,
    symbolizer: Symbolizer,
    frame_cache: Option<FrameCache>,
    options: UnwindOptions,
    names: ThreadNames,
    /// the OTel thread context (OTEP 4947), where the process publishes one
    traces: TraceContexts,
    raw: Vec<RawFrame>,
    /// the ranges and bytes of a walk's frames read again to prove them current, kept for the
    /// next walk (one of each per sampled thread otherwise)
    recheck_ranges: Vec<(u64, usize)>,
    recheck_buf: Vec<u8>,
    /// a recheck's spans of frames that lie together (start, end)
    recheck_spans: Vec<(u64, u64)>,
    /// each walked frame's span and offset in it, for a recheck
    recheck_at: Vec<(usize, usize)>,
    /// where each recheck span's two copies start in the buffer
    recheck_span_at: Vec<(usize, usize)>,
    stats: UnwindStats,
    /// the main interpreter (the oldest, last in the list) as the last thread-list read found it
    main_interp: Option<InterpreterInfo>,
    /// what records walked by the BPF program are resolved against
    records: RecordContext,
    /// asyncio's table and task names (task-aware stacks)
    asyncio: AsyncioState,
    /// where each thread's verified walks ended: what a kept moved walk must end at
    bottoms: ThreadBottoms,
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
            traces: TraceContexts::default(),
            // Grows to the deepest walk: most processes' stacks are tens of frames.
            raw: Vec::new(),
            recheck_ranges: Vec::new(),
            recheck_buf: Vec::new(),
            recheck_spans: Vec::new(),
            recheck_at: Vec::new(),
            recheck_span_at: Vec::new(),
            stats: UnwindStats::default(),
            main_interp: None,
            records: RecordContext::default(),
            asyncio: AsyncioState::default(),
            bottoms: ThreadBottoms::default(),
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
    /// `threading` does not know it (cached: read again for a new thread and every 10 s).
    pub fn thread_name(&mut self, ns_tid: u32) -> Option<Arc<str>> {
        self.thread_name_at(ns_tid, std::time::Instant::now())
    }

    /// [`Unwinder::thread_name`], with the names' age measured at `now` (a batch's one clock
    /// reading).
    fn thread_name_at(&mut self, ns_tid: u32, now: std::time::Instant) -> Option<Arc<str>> {
        self.names.name(&self.target, ns_tid, now)
    }

    /// Reads of the `threading` names made so far (they are cached, not read per sample).
    pub fn thread_name_reads(&self) -> u64 {
        self.names.python_reads()
    }

    /// The layout of the process's CPython build.
    pub fn offsets(&self) -> &Offsets {
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

    /// The addresses of the GIL's state in the interpreter `interp` belongs to (a futex wait in
    /// there is a wait for the GIL); `None` on free-threaded builds.
    pub fn gil_words(&self, interp: &InterpreterInfo) -> Option<std::ops::Range<u64>> {
        use crate::offsets::{GilBase, GIL_WAIT_BYTES};
        let gil = self.target.offsets.gil;
        let (base, off) = gil.locked_word()?;
        let locked = match base {
            GilBase::Process => 0,
            GilBase::Runtime => self.target.runtime_addr,
            GilBase::Interpreter => interp.addr,
        }
        .checked_add(off)?;
        let start = gil.waits_start(locked);
        Some(start..start.saturating_add(GIL_WAIT_BYTES))
    }

    fn make_sample(&mut self, t: &ThreadInfo, frames: Vec<Frame>, truncated: bool) -> ThreadSample {
        let pid = self.target.pid;
        let name = self.thread_name(t.native_thread_id);
        let host_tid = self
            .host_tid(t.native_thread_id)
            .unwrap_or(t.native_thread_id);
        let trace = if self.options.trace_context {
            self.trace_context(t.pthread_id)
        } else {
            None
        };
        let mut thread = SampleThread::new(pid, t.native_thread_id, host_tid);
        thread.thread_name = name;
        thread.gil = t.holds_gil.map(GilState::from_held);
        thread.trace = trace;
        ThreadSample {
            thread,
            frames,
            truncated,
        }
    }

    /// Where the process publishes its threads' OTEP 4947 contexts, for a walker elsewhere (the
    /// BPF program): found once, looked for again with a growing wait while it publishes none.
    pub fn thread_context_layout(&mut self) -> Option<ThreadContextLayout> {
        self.traces.layout(self.target.pid)
    }

    /// Whether [`Unwinder::thread_context_layout`] would look for the context at `now`: none
    /// found yet, and the next look is due.
    pub fn thread_context_look_due(&self, now: std::time::Instant) -> bool {
        self.traces.look_due(now)
    }

    /// The trace context of the thread whose `pthread_t` is `pthread`, read through the
    /// sample's page cache: the same pages every sample, so they join its prefetch.
    fn trace_context(&mut self, pthread: u64) -> Option<TraceContext> {
        self.traces.read(self.target.pid, &mut self.mem, pthread)
    }
}
