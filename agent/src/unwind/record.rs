//! Stacks walked by someone else (the BPF program): raw frame addresses in, symbolized
//! [`ThreadSample`] out, through the same symbolizer and 3.15 frame cache as userspace walks.
//!
//! Records come in batches (one ring-buffer drain). The unwinder keeps what they are resolved
//! against between batches ([`RecordContext`]): which interpreter each thread state belongs to,
//! and when that and the code-object cache were last validated against the process.

use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    CachedFrame, InterpreterInfo, RawFrame, SampleThread, ThreadInfo, ThreadKey, ThreadSample,
    UnwindError, Unwinder,
};
use crate::symbolize::{bytecode_base, CodeInfo, Frame, FrameKind};

/// A process's records are resolved against interpreter state and a code-object cache validated
/// at most this long ago. Re-validating every drain cost one remote read per process per drain:
/// most of the agent's time with many processes. A code object freed and another allocated at
/// its address within this window is shown under the old name until then (py-spy never
/// re-validates).
const RECORD_VALIDATE_INTERVAL: Duration = Duration::from_secs(2);

/// Threads whose last stack is kept, at most (all are dropped at each validation).
const MAX_LAST_STACKS: usize = 4096;

/// What the records of one process are resolved against, kept between batches.
#[derive(Debug)]
pub(super) struct RecordContext {
    /// interpreter of each thread state, from the last read of the thread list
    interp_of: HashMap<u64, InterpreterInfo>,
    /// thread id (in the target's namespace) of each thread state, from the same read
    tid_of: HashMap<u64, u32>,
    /// the interpreter whose thread list the BPF program searches for threads not registered
    /// with it: their records carry thread states the last read did not see
    searched: Option<InterpreterInfo>,
    /// when the interpreter state and code-object cache were last validated
    last_validated: Instant,
    /// when the batch being resolved began: the clock its records' thread names are checked
    /// against (one reading per batch, not one per record)
    batch_began: Instant,
    /// host TID → the thread's last stack resolved from a whole walk since the last validation
    last_stacks: HashMap<u32, LastStack>,
    /// the thread of the batch's last record: its host TID, namespace TID and name (a busy
    /// process's records mostly come from one thread, and each lookup probes two maps)
    last_thread: Option<(u32, u32, Option<Arc<str>>)>,
}

impl Default for RecordContext {
    fn default() -> Self {
        RecordContext {
            interp_of: HashMap::new(),
            tid_of: HashMap::new(),
            searched: None,
            last_validated: Instant::now(),
            batch_began: Instant::now(),
            last_stacks: HashMap::new(),
            last_thread: None,
        }
    }
}

impl RecordContext {
    /// The namespace TID and name of host thread `host_tid`, if the batch's last record was
    /// its.
    fn last_thread_of(&self, host_tid: u32) -> Option<(u32, Option<Arc<str>>)> {
        self.last_thread
            .as_ref()
            .filter(|(host, _, _)| *host == host_tid)
            .map(|(_, ns, name)| (*ns, name.clone()))
    }

    /// Heap bytes of the maps and of the threads' last stacks.
    pub(super) fn bytes(&self) -> u64 {
        use std::mem::size_of;
        let stacks: usize = self
            .last_stacks
            .values()
            .map(|l| {
                l.raw.capacity() * size_of::<RawFrame>() + l.frames.capacity() * size_of::<Frame>()
            })
            .sum();
        let maps = self.interp_of.capacity() * size_of::<(u64, InterpreterInfo)>()
            + self.tid_of.capacity() * size_of::<(u64, u32)>()
            + self.last_stacks.capacity() * size_of::<(u32, LastStack)>();
        (stacks + maps) as u64
    }

    /// The thread id (in the target's namespace) of thread state `tstate`, as last read.
    pub(super) fn thread_of(&self, tstate: u64) -> Option<u32> {
        self.tid_of.get(&tstate).copied()
    }

    /// Records which interpreter each thread state belongs to, and its thread, as just read.
    fn set_interpreters(&mut self, interpreters: &[(InterpreterInfo, Vec<ThreadInfo>)]) {
        self.interp_of.clear();
        self.tid_of.clear();
        for (interp, threads) in interpreters {
            self.interp_of
                .extend(threads.iter().map(|t| (t.addr, *interp)));
            self.tid_of
                .extend(threads.iter().map(|t| (t.addr, t.native_thread_id)));
        }
        // A stack resolved against the code objects as validated before is not reused after.
        self.last_stacks.clear();
    }
}

/// A thread's last stack resolved from a whole walk (no anchor), kept for the next record whose
/// walk differs from it at most in the top frame's instruction: a thread looping in its leaf
/// sends such records most of the time, and each would otherwise resolve every frame again
/// (a code-object lookup and a line lookup per frame, most of the agent's work per record).
#[derive(Debug)]
struct LastStack {
    tstate: u64,
    ended: WalkEnding,
    raw: Vec<RawFrame>,
    frames: Vec<Frame>,
    /// the top raw frame's code and where its bytecode starts, when the top resolved frame is
    /// that frame's (no `<GC>`, entry or shim frame before it): its line is all a repeat must
    /// look up
    top_code: Option<(Arc<CodeInfo>, u64)>,
}

/// How a walk ended, as far as its resolved stack depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WalkEnding {
    complete: bool,
    reached_base: bool,
    truncated: bool,
}

impl WalkEnding {
    fn of(walk: &ExternalWalk) -> WalkEnding {
        WalkEnding {
            complete: walk.complete,
            reached_base: walk.reached_base,
            truncated: walk.truncated,
        }
    }
}

impl LastStack {
    /// Whether a walk of `raw` repeats this stack but for the top frame's instruction.
    fn repeated_by(&self, walk: &ExternalWalk, raw: &[RawFrame]) -> bool {
        let (Some(top), Some(last_top)) = (raw.first(), self.raw.first()) else {
            return false;
        };
        self.top_code.is_some()
            && self.tstate == walk.tstate
            && self.ended == WalkEnding::of(walk)
            && raw.len() == self.raw.len()
            && RawFrame { ip: 0, ..*top } == RawFrame { ip: 0, ..*last_top }
            && raw[1..] == self.raw[1..]
    }
}

/// How the external walk ended, and the 3.15 anchor it saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExternalWalk {
    /// `PyThreadState*` of the thread
    pub tstate: u64,
    /// host TID of the thread
    pub host_tid: u32,
    /// reached a NULL `previous`
    pub complete: bool,
    /// the last frame is the thread's base frame (3.15)
    pub reached_base: bool,
    /// cut at the walker's depth bound
    pub truncated: bool,
    /// a read failed mid-walk
    pub read_failed: bool,
    /// stopped where a frame's `previous` looped back to a recent frame
    pub cyclic: bool,
    /// stopped right after the frame that was the anchor
    pub anchor_hit: bool,
    /// anchor and sequence read at the start of the walk
    pub anchor: (u64, u64),
    /// the coroutine frame of the asyncio task the thread ran, and whether something awaited
    /// the task, read by the walker at the same instant (3.14+, with task-aware stacks, once
    /// the program has imported asyncio)
    pub task_frame: Option<(u64, bool)>,
    /// the thread and the GIL when the walk was taken (`None`: no GIL, or not read)
    pub gil: Option<super::GilState>,
    /// the span the thread was in, read by the walker at the same instant (OTEP 4947; `None`:
    /// the process publishes none, or the thread was in no span)
    pub trace: Option<super::TraceContext>,
}

/// Why an external stack was not turned into a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExternalSkip {
    /// a read failed in the walk or while symbolizing (torn)
    Torn,
    /// stopped at an anchor the frame cache could not vouch for
    AnchorMiss,
    /// a 3.15 walk that did not end at the base frame
    Incomplete,
    /// the chain loops back on itself (corrupt memory): a stack that never existed
    CyclicChain,
    /// a thread state of no interpreter known: not read since the process's last thread-list
    /// read, and not in the interpreter the program searches
    UnknownThreadState,
}

/// Whether a walk cut at the depth bound names a frame twice: a loop longer than the BPF
/// program's own check, which would otherwise be shown as a deep stack repeating itself. Only
/// truncated walks are checked: one that ended any other way did not loop.
fn names_a_frame_twice(raw: &[RawFrame]) -> bool {
    let mut seen = foldhash::HashSet::default();
    !raw.iter().all(|f| seen.insert(f.addr))
}

impl Unwinder {
    /// Reads every thread for the BPF program's maps (and on 3.15 walks each through the frame
    /// cache, moving its anchor: see [`Unwinder::refresh_anchors`]); records resolved from now
    /// on use these interpreters.
    pub fn refresh_for_records(
        &mut self,
    ) -> Result<Vec<(InterpreterInfo, Vec<ThreadInfo>)>, UnwindError> {
        self.records.last_validated = Instant::now();
        let interpreters = if self.frame_cache_enabled() {
            self.refresh_anchors()?
        } else {
            self.begin_batch()?
        };
        self.records.set_interpreters(&interpreters);
        Ok(interpreters)
    }

    /// Records of threads the last read did not see belong to `interp`: the BPF program found
    /// them by searching its thread list.
    pub fn search_unregistered_in(&mut self, interp: InterpreterInfo) {
        self.records.searched = Some(interp);
    }

    /// Starts a batch of records. At most every [`RECORD_VALIDATE_INTERVAL`] the interpreter
    /// state and the code-object cache are validated again (one read on a steady process); in
    /// between nothing is read up front. `now` is when the batch began (the caller's clock reading,
    /// taken once for every process of a drain). An error means the old interpreters are kept.
    pub fn begin_records(&mut self, now: Instant) -> Result<(), UnwindError> {
        self.records.batch_began = now;
        // Names are as old as the batch: a new batch looks them up again.
        self.records.last_thread = None;
        if now.saturating_duration_since(self.records.last_validated) < RECORD_VALIDATE_INTERVAL {
            self.begin_cached_batch();
        } else {
            self.records.last_validated = now;
            let interpreters = self.begin_batch()?;
            self.records.set_interpreters(&interpreters);
        }
        if self.options.async_tasks {
            // Every drain: a task created since the last one must be known to its records.
            let tstates = self.records.interp_of.keys().copied().collect();
            self.index_task_frames(tstates);
        }
        Ok(())
    }

    /// The interpreter a record's thread state belongs to: as last read, else the searched one.
    pub fn record_interpreter(&self, tstate: u64) -> Option<InterpreterInfo> {
        self.records
            .interp_of
            .get(&tstate)
            .or(self.records.searched.as_ref())
            .copied()
    }

    /// Turns one record's walk into a sample, in the interpreter its thread state belongs to.
    pub fn resolve_record(
        &mut self,
        walk: &ExternalWalk,
        raw: &[RawFrame],
    ) -> Result<ThreadSample, ExternalSkip> {
        let interp = self
            .record_interpreter(walk.tstate)
            .ok_or(ExternalSkip::UnknownThreadState)?;
        self.resolve_external(&interp, walk, raw)
    }

    /// Resets per-batch state and reads the interpreters (for `<GC>`, the code-object cache
    /// generation and the thread map): call once before resolving a batch of records.
    pub fn begin_batch(&mut self) -> Result<Vec<(InterpreterInfo, Vec<ThreadInfo>)>, UnwindError> {
        self.mem.begin_sample();
        let interpreters = self.threads()?;
        if let Some((interp, _)) = interpreters.first() {
            self.symbolizer.begin_sample(interp.code_generation);
        }

        Ok(interpreters)
    }

    /// Ends a batch of records: the page buffers it read into, and the re-read buffers of its
    /// walks, are freed until the next one (a process's records come in a batch per drain; see
    /// [`crate::memory::PageCache::release`]). Beside a thousand idle processes, kilobytes
    /// each kept between batches were most of the agent's heap.
    pub fn end_records(&mut self) {
        self.mem.release();
        self.recheck_ranges = Vec::new();
        self.recheck_buf = Vec::new();
        self.recheck_spans = Vec::new();
        self.recheck_at = Vec::new();
        self.recheck_span_at = Vec::new();
    }

    /// Starts a batch of records without reading anything: the code-object cache stays as the
    /// last [`Unwinder::begin_batch`] validated it, and cached pages are dropped, so whatever
    /// the batch must read (a code object not seen before) is read fresh.
    pub fn begin_cached_batch(&mut self) {
        self.mem.begin_without_prefetch();
    }

    /// Turns an external walk of `raw` frames (innermost first; `previous` of the last frame
    /// may be unknown) into a sample.
    pub fn resolve_external(
        &mut self,
        interp: &InterpreterInfo,
        walk: &ExternalWalk,
        raw: &[RawFrame],
    ) -> Result<ThreadSample, ExternalSkip> {
        if walk.read_failed {
            self.stats.torn += 1;
            return Err(ExternalSkip::Torn);
        }
        if walk.cyclic || (walk.truncated && names_a_frame_twice(raw)) {
            return Err(ExternalSkip::CyclicChain);
        }
        // Keyed like userspace walks, which fill the frame cache.
        let ns_tid = match self.records.last_thread_of(walk.host_tid) {
            Some((ns, _)) => ns,
            None => self.names.ns_tid_of(self.target.pid, walk.host_tid),
        };
        let key: ThreadKey = (walk.tstate, ns_tid);
        let has_base = self.target.offsets.thread_state.base_frame.is_some();
        // A complete chain ends at the thread's first frame: 3.15's base frame, or before it
        // the frame that started the thread's first evaluation. One that ends at any other
        // frame was read as a frame left it: a generator yielding clears its frame's
        // `previous`, and a record taken then names the generator alone, under none of its
        // callers.
        let ends_at_first = if has_base {
            walk.reached_base
        } else {
            raw.last()
                .is_some_and(|f| super::walk::starts_evaluation(&self.target.offsets, f))
        };
        if walk.complete && !ends_at_first {
            self.stats.torn += 1;
            return Err(ExternalSkip::Incomplete);
        }
        // Task attribution reads memory for each record: no shortcut for it.
        let reusable = !walk.anchor_hit && !self.options.async_tasks;
        if reusable {
            if let Some(frames) = self.repeat_last_stack(walk, raw) {
                self.stats.records_repeated += 1;
                return Ok(self.record_sample(walk, ns_tid, frames, None));
            }
        }
        let mut resolved: Vec<CachedFrame> = Vec::with_capacity(raw.len() + 4);
        let pending_native = match self.resolve(raw, interp, &mut resolved) {
            Ok(pending) => pending,
            Err(_) => {
                self.stats.torn += 1;
                return Err(ExternalSkip::Torn);
            }
        };
        self.stats.frames_read += raw.len() as u64;
        // Task attribution finds a task's frame by address, in the cached part too: keep the
        // addresses until it has (the plain path clones frames straight out of the cache).
        let with_addresses = self.options.async_tasks;
        let mut frames: Vec<_> = if with_addresses {
            Vec::new()
        } else {
            std::mem::take(&mut resolved)
                .into_iter()
                .map(|c| c.frame)
                .collect()
        };
        if walk.anchor_hit {
            let (anchor, seq) = walk.anchor;
            let gc_frame = self.gc_frame(interp);
            let vouches = raw.last().is_some_and(|f| self.anchor_vouches(f));
            let tail = self
                .frame_cache
                .as_mut()
                .filter(|_| vouches)
                .and_then(|fc| fc.splice_external(key, anchor, seq));
            let Some(tail) = tail else {
                // The walk stopped at an anchor this cache cannot vouch for: a record taken in
                // the instant between a refresh's walk and its anchor write, or an anchor left
                // by another profiler (the next refresh replaces it). Only this sample is lost;
                // the cached stack stays valid for the others.
                self.stats.cache_misses += 1;
                if self
                    .frame_cache
                    .as_mut()
                    .is_some_and(|fc| fc.demote_after_misses(key))
                {
                    self.write_anchor_at(walk.tstate, 0);
                }
                return Err(ExternalSkip::AnchorMiss);
            };
            if raw.len() == 1 {
                self.stats.cache_full_hits += 1;
            } else {
                self.stats.cache_partial_hits += 1;
            }
            self.stats.frames_cached += tail.len() as u64;
            if with_addresses {
                let tail = tail.to_vec();
                Self::splice_tail(&mut resolved, pending_native, gc_frame, tail);
            } else {
                frames.reserve(tail.len() + 1);
                Self::append_tail(&mut frames, pending_native, gc_frame, tail);
            }
        } else if walk.truncated {
            self.stats.truncated += 1;
        }
        let mut task = None;
        if with_addresses {
            task = self.attribute_record(walk.tstate, walk.task_frame, raw, &mut resolved);
            frames = resolved.into_iter().map(|c| c.frame).collect();
        }
        if reusable {
            self.stats.records_resolved += 1;
            self.keep_last_stack(walk, raw, &frames);
        }
        Ok(self.record_sample(walk, ns_tid, frames, task))
    }

    /// The frames of a record that repeats its thread's last stack but for the top frame's
    /// instruction: the last frames with the top one's line looked up again.
    fn repeat_last_stack(&mut self, walk: &ExternalWalk, raw: &[RawFrame]) -> Option<Vec<Frame>> {
        let last = self.records.last_stacks.get_mut(&walk.host_tid)?;
        if !last.repeated_by(walk, raw) {
            return None;
        }
        let ip = raw[0].ip;
        if ip != last.raw[0].ip {
            let (info, base) = last.top_code.as_ref()?;
            last.frames[0] = self.symbolizer.frame(info, ip, *base);
            last.raw[0].ip = ip;
        }
        let frames = last.frames.clone();
        self.stats.frames_read += raw.len() as u64;
        if walk.truncated {
            self.stats.truncated += 1;
        }
        Some(frames)
    }

    /// Keeps a record's resolved stack as its thread's last, for [`Unwinder::repeat_last_stack`].
    fn keep_last_stack(&mut self, walk: &ExternalWalk, raw: &[RawFrame], frames: &[Frame]) {
        // The top frame's line can be looked up again only when the top resolved frame is the
        // top raw frame's own: a Python frame of that code, with nothing put before it.
        // (A `<GC>` marker or a skipped entry or shim frame makes the top resolved frame another
        // kind or another code's.)
        let entry_owner = self.target.offsets.frame.entry_owner;
        let top_code = raw.first().and_then(|f| {
            let top_frame = frames.first()?;
            if top_frame.kind != FrameKind::Python || entry_owner == Some(f.owner) {
                return None;
            }
            let info = self.symbolizer.cached_code_info(f.code)?;
            if !Arc::ptr_eq(&info.name, &top_frame.code) {
                return None;
            }
            let o = &self.target.offsets.code_object;
            let base = bytecode_base(&mut self.mem, o, f.code, f.tlbc_index).ok()?;
            Some((info, base))
        });
        if self.records.last_stacks.len() >= MAX_LAST_STACKS {
            // Threads that came and went while no validation cleared them.
            self.records.last_stacks.clear();
        }
        let last = LastStack {
            tstate: walk.tstate,
            ended: WalkEnding::of(walk),
            raw: raw.to_vec(),
            frames: frames.to_vec(),
            top_code,
        };
        self.records.last_stacks.insert(walk.host_tid, last);
    }

    /// A record's sample: its frames, with the thread's name and what the walk read with them.
    fn record_sample(
        &mut self,
        walk: &ExternalWalk,
        ns_tid: u32,
        frames: Vec<Frame>,
        task: Option<Arc<str>>,
    ) -> ThreadSample {
        let name = match self.records.last_thread_of(walk.host_tid) {
            Some((_, name)) => name,
            None => {
                let name = self.thread_name_at(ns_tid, self.records.batch_began);
                self.records.last_thread = Some((walk.host_tid, ns_tid, name.clone()));
                name
            }
        };
        // The span comes with the walk, read at the same tick. Read here instead, it would be
        // the thread's context at the drain, up to one drain interval after the stack was
        // taken: with spans of 50 ms, only 48% of such samples carried the span they ran under.
        let mut thread = SampleThread::new(self.target.pid, ns_tid, walk.host_tid);
        thread.thread_name = name;
        thread.gil = walk.gil;
        thread.trace = walk.trace;
        thread.task = task;
        ThreadSample {
            thread,
            frames,
            truncated: walk.truncated,
        }
    }
}
