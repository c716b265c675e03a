//! Unwind stage: every thread of a CPython process → its Python stack.
//!
//! In: a located [`PythonTarget`]. Out: one [`ThreadSample`] per thread, frames innermost first.
//! Reads go through a [`PageCache`] (fresh each sample). On 3.15 the [`FrameCache`] keeps each
//! thread's last complete stack, anchored on `last_profiled_frame`, so a sample reads only the
//! frames pushed since the last one; writing that anchor is the only write pyagent makes into a
//! target, and only into a runtime validated as 3.15+.

pub mod frame_cache;
mod record;
mod sample;
pub mod threads;
pub mod walk;

// foldhash: these maps are looked up several times per sample, keyed by addresses.
use std::sync::Arc;

use foldhash::HashMap;

pub use frame_cache::{CachedFrame, FrameCache, ThreadKey};
pub use record::{ExternalSkip, ExternalWalk};
pub use sample::ThreadSample;
pub use threads::{InterpreterInfo, ThreadInfo};
pub use walk::{RawFrame, WalkEnd};

use crate::discovery::{task_ids, thread_name, PythonTarget};
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
}

impl Default for UnwindOptions {
    fn default() -> Self {
        UnwindOptions {
            native: false,
            gc: true,
            frame_cache: true,
            max_depth: 4096,
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
    /// thread stacks dropped because a read failed or the chain was inconsistent (torn read)
    pub torn: u64,
    /// frames whose executable is not a code object (the sample is rejected as torn)
    pub non_code_frames: u64,
    /// anchor writes made
    pub anchor_writes: u64,
    /// anchor writes after which the walked frames had changed (the stored stack is dropped)
    pub anchor_write_races: u64,
}

/// Host TIDs and thread names of a process, looked up in /proc when a new thread shows up.
#[derive(Debug, Default)]
struct ThreadNames {
    by_ns_tid: HashMap<u32, (u32, Option<Arc<str>>)>,
    /// host TID → namespace TID, for BPF records (which carry host TIDs)
    ns_of_host: HashMap<u32, u32>,
}

impl ThreadNames {
    fn lookup(&mut self, pid: u32, ns_tid: u32) -> Option<&(u32, Option<Arc<str>>)> {
        if !self.by_ns_tid.contains_key(&ns_tid) {
            self.reload(pid);
        }
        self.by_ns_tid.get(&ns_tid)
    }

    /// The namespace TID of a host TID (itself outside containers).
    fn ns_tid_of(&mut self, pid: u32, host_tid: u32) -> u32 {
        if !self.ns_of_host.contains_key(&host_tid) {
            self.reload(pid);
        }
        // A thread gone from /proc keeps its own id, without a /proc read per record.
        *self.ns_of_host.entry(host_tid).or_insert(host_tid)
    }

    fn reload(&mut self, pid: u32) {
        self.by_ns_tid = task_ids(pid)
            .into_iter()
            .map(|t| {
                (
                    t.ns_tid,
                    (t.host_tid, thread_name(pid, t.host_tid).map(Arc::from)),
                )
            })
            .collect();
        self.ns_of_host = self
            .by_ns_tid
            .iter()
            .map(|(ns, (host, _))| (*host, *ns))
            .collect();
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
        self.names.lookup(self.target.pid, ns_tid).map(|(h, _)| *h)
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
                        self.stats.torn += 1;
                        break;
                    }
                }
                if list.iter().any(|t: &ThreadInfo| t.addr == tstate) {
                    break; // cycle
                }
            }
            out.push((interp, list));
            if next == interp_addr || out.iter().any(|(i, _)| i.addr == next) {
                break;
            }
            interp_addr = next;
        }
        Ok(out)
    }

    /// One sample of every thread; `filter` gets a thread's host TID (None if the thread is
    /// not in /proc any more) and says whether to unwind it.
    pub fn sample_filtered(
        &mut self,
        mut filter: impl FnMut(Option<u32>) -> bool,
    ) -> Result<Vec<ThreadSample>, UnwindError> {
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
                match self.sample_thread(interp, t) {
                    Ok(Some(s)) => out.push(s),
                    Ok(None) => {}
                    Err(MemoryError::Gone { .. }) => {
                        return Err(UnwindError::Gone {
                            pid: self.target.pid,
                        })
                    }
                    Err(e @ MemoryError::Denied { .. }) => return Err(UnwindError::Denied(e)),
                    Err(_) => self.stats.torn += 1,
                }
            }
        }
        if let Some(fc) = self.frame_cache.as_mut() {
            fc.end_round();
        }
        self.stats.thread_samples += out.len() as u64;
        Ok(out)
    }

    /// One sample of every thread.
    pub fn sample(&mut self) -> Result<Vec<ThreadSample>, UnwindError> {
        self.sample_filtered(|_| true)
    }

    fn make_sample(&mut self, t: &ThreadInfo, frames: Vec<Frame>, truncated: bool) -> ThreadSample {
        let pid = self.target.pid;
        let name = self
            .names
            .lookup(pid, t.native_thread_id)
            .and_then(|(_, n)| n.clone());
        ThreadSample {
            pid,
            tid: t.native_thread_id,
            thread_name: name,
            holds_gil: t.holds_gil,
            frames,
            truncated,
        }
    }

    /// Stack of one thread; `Ok(None)` when the sample is inconsistent (counted as torn).
    fn sample_thread(
        &mut self,
        interp: &InterpreterInfo,
        t: &ThreadInfo,
    ) -> Result<Option<ThreadSample>, MemoryError> {
        if t.top_frame == 0 {
            let frames = self
                .gc_marker_without_frame(interp, t)
                .into_iter()
                .collect();
            return Ok(Some(self.make_sample(t, frames, false)));
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
                let pending_native = self.resolve(&[top], interp, &mut resolved)?;
                if !self.top_read_before_anchor(t)
                    && !self.anchor_unchanged(t, anchor_frame, seq)?
                {
                    return Ok(None);
                }
                self.stats.cache_full_hits += 1;
                self.stats.frames_read += 1;
                self.stats.frames_cached += tail_len as u64;
                let mut frames = Vec::with_capacity(tail_len + 3);
                frames.extend(self.gc_marker_without_frame(interp, t));
                frames.extend(resolved.into_iter().map(|c| c.frame));
                let tail = self
                    .frame_cache
                    .as_ref()
                    .and_then(|fc| fc.stack(key))
                    .map_or(&[][..], |s| &s[1..]);
                Self::append_tail(&mut frames, pending_native, tail);
                return Ok(Some(self.make_sample(t, frames, false)));
            }
        }

        let o = self.target.offsets;
        let max_depth = self.options.max_depth;
        let mut raw = std::mem::take(&mut self.raw);
        raw.clear();
        let stop_at = anchor.map(|(a, _)| a).filter(|&a| a != 0);
        let result = (|| -> Result<Option<(Vec<CachedFrame>, WalkEnd)>, MemoryError> {
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
            if !self.top_still_current(t, raw.first())? {
                return Ok(None);
            }
            // 3.15: a complete walk ends at the thread's base frame; anything else is torn.
            if spliced.is_none() && end == WalkEnd::Bottom {
                if let (Some(base), Some(last)) = (t.base_frame, raw.last()) {
                    if base != 0 && last.addr != base {
                        return Ok(None);
                    }
                }
            }
            if end == WalkEnd::Corrupt {
                return Ok(None);
            }
            let mut resolved = Vec::with_capacity(raw.len() + 4);
            let pending_native = self.resolve(&raw, interp, &mut resolved)?;
            if let Some(tail) = spliced {
                Self::splice_tail(&mut resolved, pending_native, tail);
            }
            Ok(Some((resolved, end)))
        })();
        self.raw = raw;
        // A torn sample writes no anchor and leaves the stored stacks alone: the sequence check
        // keeps them honest, and walks recorded against them may still be waiting.
        let Some((resolved, end)) = result? else {
            return Ok(None);
        };
        let truncated = end == WalkEnd::DepthLimit;
        if truncated {
            self.stats.truncated += 1;
        }
        if let (Some(fc), Some((anchor_frame, seq))) = (self.frame_cache.as_mut(), anchor) {
            if !truncated {
                fc.store(key, seq, resolved.iter().cloned());
            }
            if anchor_frame != t.top_frame && self.write_anchor(t, t.top_frame) {
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
        Ok(Some(self.make_sample(t, frames, truncated)))
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

    /// Before 3.15 there is no `gc.frame`: while the interpreter collects, the collecting thread
    /// is the one holding the GIL, and the collection runs on top of its stack.
    fn gc_marker_without_frame(&self, interp: &InterpreterInfo, t: &ThreadInfo) -> Option<Frame> {
        (self.options.gc
            && self.offsets().gc.frame.is_none()
            && interp.gc_collecting
            && t.holds_gil == Some(true))
        .then(|| Frame::pseudo(FrameKind::Gc))
    }

    /// Whether `top` (read through the page cache) is still the thread's current frame, with the
    /// same code and caller, read now without the cache.
    fn top_still_current(
        &mut self,
        t: &ThreadInfo,
        top: Option<&RawFrame>,
    ) -> Result<bool, MemoryError> {
        let Some(top) = top else { return Ok(true) };
        let ts = &self.target.offsets.thread_state;
        let mut b = [0u8; 8];
        self.mem.read_uncached(t.addr + ts.current_frame, &mut b)?;
        let mut current = u64::from_le_bytes(b);
        if let Some(off) = ts.cframe_current_frame {
            if current != 0 {
                self.mem.read_uncached(current + off, &mut b)?;
                current = u64::from_le_bytes(b);
            }
        }
        if current != top.addr {
            return Ok(false);
        }
        let live = walk::read_frame(self.mem.remote(), &self.target.offsets, top.addr)?;
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
                    return Err(MemoryError::Fault {
                        pid: self.target.pid,
                        addr: f.addr,
                        len: 0,
                    });
                }
                Err(ObjectError::Memory(e)) => return Err(e),
                Err(ObjectError::Malformed { addr }) => {
                    return Err(MemoryError::Fault {
                        pid: self.target.pid,
                        addr,
                        len: 0,
                    })
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

    /// Appends cached frames below a resolved part, adding the `<native>` it left pending.
    fn splice_tail(out: &mut Vec<CachedFrame>, pending_native: bool, tail: Vec<CachedFrame>) {
        if pending_native && tail.first().is_some_and(|c| c.addr != 0) {
            out.push(CachedFrame {
                addr: 0,
                frame: Frame::pseudo(FrameKind::Native),
            });
        }
        out.extend(tail);
    }

    /// [`Unwinder::splice_tail`] into a sample's frames, cloned straight out of the cache: the
    /// deep part of a stack is the bulk of a sample's cost once reads are down to one.
    fn append_tail(out: &mut Vec<Frame>, pending_native: bool, tail: &[CachedFrame]) {
        if pending_native && tail.first().is_some_and(|c| c.addr != 0) {
            out.push(Frame::pseudo(FrameKind::Native));
        }
        out.extend(tail.iter().map(|c| c.frame.clone()));
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
