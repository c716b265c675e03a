//! One read of one thread's stack: the frame cache's full and partial hits, the walk, the
//! checks that reject a walk the target moved under, and storing what a sound walk found.

use super::error::AttemptError;
use super::frame_cache::anchor::can_anchor;
use super::resolve::sound_end;
use super::{
    walk, CachedFrame, InterpreterInfo, RawFrame, StackLoss, ThreadInfo, ThreadKey, ThreadSample,
    Unwinder, WalkEnd,
};
use crate::memory::{MemoryError, ProcessMemory, StructBytes};
use crate::symbolize::{Frame, FrameKind};

impl Unwinder {
    /// Stack of one thread, read once; an inconsistent read is an [`AttemptError::Lost`].
    pub(in crate::unwind) fn sample_thread(
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
                let pending_native = self.resolve_frames(&[top], interp, &mut resolved, false)?;
                if self.anchor_vouches(&top)
                    && (self.top_read_before_anchor(t)
                        || self.anchor_unchanged(t, anchor_frame, seq)?)
                {
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
        // The frames below the anchor a walk was spliced onto: reported, and the whole chain.
        let mut spliced_chain: Vec<u64> = Vec::new();
        let result = (|| -> Result<(Vec<CachedFrame>, WalkEnd, bool, bool), AttemptError> {
            let mut end =
                walk::walk_frames(&mut self.mem, &o, t.top_frame, stop_at, max_depth, &mut raw)?;
            let mut spliced: Option<Vec<CachedFrame>> = None;
            if end == WalkEnd::Anchor {
                let (anchor_frame, seq) = anchor.expect("stopped at an anchor");
                let tail = self
                    .frame_cache
                    .as_mut()
                    .and_then(|fc| fc.splice(key, anchor_frame, seq));
                let vouches = raw.last().is_some_and(|f| self.anchor_vouches(f));
                match tail {
                    Some(tail) if vouches && self.anchor_unchanged(t, anchor_frame, seq)? => {
                        self.stats.cache_partial_hits += 1;
                        self.stats.frames_cached += tail.frames.len() as u64;
                        spliced = Some(tail.frames);
                        spliced_chain = tail.chain;
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
            // A loop is judged before the recheck: the looping frames repeat in the walk, and the
            // running top's instruction, read again, differs from its repeat's, which would call
            // a standing loop a moved walk and re-read it for the whole budget of every tick.
            // A loop seen while the target moved is read again like any other failed walk.
            if end == WalkEnd::Cycle {
                return Err(AttemptError::Lost(StackLoss::CyclicChain));
            }
            // The thread ran on while we read: frames read after its top returned may belong
            // to another call chain pushed at the same addresses. The walk is one instant's
            // only if the thread is still in every frame it read.
            // Before 3.15 (which checks the base frame below), a walk that ends anywhere but where
            // an evaluation began read a frame being set up or torn down (a finished generator's,
            // one reused by the C stack): however still its bytes, not one instant's stack.
            let ends_short = spliced.is_none()
                && end == WalkEnd::Bottom
                && o.thread_state.base_frame.is_none()
                && !raw.last().is_some_and(|f| walk::starts_evaluation(&o, f));
            let recheck = self.recheck_walk(t, &raw)?;
            let moved = ends_short || !recheck.whole;
            let bottoms = &self.bottoms;
            let at_known_bottom = |addr| bottoms.is_bottom(key, addr);
            if moved
                && !(self.options.keep_moved_top
                    && sound_end(&o, end, spliced.is_some(), &raw, at_known_bottom))
            {
                return Err(AttemptError::Lost(StackLoss::TopMoved));
            }
            // A moved walk keeps only the frames proven by the recheck, from its bottom up: the
            // frames above them may come from another moment's chain at the same addresses (a
            // generator resumed by another caller, a freed frame reused), and a stack of two
            // moments is worse than a shorter one. What was left out is said by a pseudo-frame.
            let proven_from = if moved { recheck.proven_from } else { 0 };
            if proven_from == raw.len() && spliced.is_none() {
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
                WalkEnd::Bottom | WalkEnd::Anchor | WalkEnd::DepthLimit | WalkEnd::Cycle => {}
            }
            let mut resolved = Vec::with_capacity(raw.len() + 4);
            if proven_from > 0 {
                resolved.push(CachedFrame {
                    addr: 0,
                    frame: Frame::pseudo(FrameKind::Moved),
                });
            }
            // Frames that returned under the walk are named only at the top of a walk that
            // did not move (the thread state still names it: the stack is the one it is
            // returning from); a proven root has none.
            let named_before = self.stats.popped_frames_named;
            let name_popped = self.options.keep_moved_top && proven_from == 0;
            let pending_native =
                self.resolve_frames(&raw[proven_from..], interp, &mut resolved, name_popped)?;
            let moved = moved || self.stats.popped_frames_named != named_before;
            if let Some(tail) = spliced {
                Self::splice_tail(&mut resolved, pending_native, self.gc_frame(interp), tail);
            }
            Ok((resolved, end, moved, proven_from > 0))
        })();
        self.raw = raw;
        // A torn sample writes no anchor and leaves the stored stacks alone: the sequence check
        // keeps them honest, and walks recorded against them may still be waiting.
        let (resolved, end, moved, rooted) = result?;
        let truncated = end == WalkEnd::DepthLimit;
        if truncated {
            self.stats.truncated += 1;
        }
        if !moved && end == WalkEnd::Bottom && spliced_chain.is_empty() {
            if let Some(bottom) = self.raw.last() {
                self.bottoms.learn(key, bottom.addr);
            }
        }
        if moved {
            // Kept for the profile's sake, never cached: the next walk must not build on it.
            if !rooted {
                self.stats.unverified += 1;
            }
            return Ok(self.finish_sample(interp, t, resolved, truncated));
        }
        if let (Some(fc), Some((anchor_frame, seq))) = (self.frame_cache.as_mut(), anchor) {
            // The frame to anchor: the top, or deeper for a thread whose top frames return too
            // fast for a write to be proven. The stored sequence is set back by that depth, so
            // that the arithmetic counts from the anchored frame (no pop has moved it yet).
            let depth = fc.anchor_depth(key).min(self.raw.len().saturating_sub(1));
            // Never a generator's or an entry frame: the sequence cannot vouch for their callers
            // (see `anchor_vouches`).
            let depth = (depth..self.raw.len())
                .find(|&i| can_anchor(&o, &self.raw[i]))
                .unwrap_or(depth);
            let target = self.raw.get(depth).map_or(t.top_frame, |f| f.addr);
            let chain = self.raw.iter().map(|f| f.addr).chain(spliced_chain);
            let stored = !truncated
                && fc.store(
                    key,
                    seq.wrapping_sub(depth as u64),
                    resolved.iter().cloned(),
                    chain,
                );
            if !stored {
                // Nothing to splice under an anchor (a truncated walk, or a thread or stack
                // beyond the cache's bounds): a BPF walk that stopped at one would be lost.
                // Clear it, so that BPF walks this thread whole instead.
                fc.forget(key);
                self.stats.uncached_walks += 1;
                if anchor_frame != 0 {
                    self.write_anchor(t, 0);
                }
            } else if anchor_frame != target && self.write_anchor(t, target) {
                // The write lands after the walk: the thread may have returned from the walked
                // frames and called others at the same addresses in between, and the anchor then
                // names a frame the stored stack does not describe. Unless the re-read after the
                // write proves it does, the stored stack is dropped and the anchor cleared: BPF
                // walks the thread whole until the next refresh anchors it again, rather than
                // stopping at an anchor nothing vouches for.
                if !self.walk_still_live(t.addr, seq, depth)? {
                    self.stats.anchor_write_races += 1;
                    if let Some(fc) = self.frame_cache.as_mut() {
                        fc.forget(key);
                        fc.raced(key);
                    }
                    self.write_anchor(t, 0);
                }
            }
        }
        Ok(self.finish_sample(interp, t, resolved, truncated))
    }

    /// The sample of resolved frames: task-aware when asked for (the stored stack stays the
    /// thread's own), with the `<GC>` marker of versions that only say "collecting".
    fn finish_sample(
        &mut self,
        interp: &InterpreterInfo,
        t: &ThreadInfo,
        mut resolved: Vec<CachedFrame>,
        truncated: bool,
    ) -> ThreadSample {
        let task = if self.options.async_tasks {
            self.attribute_task(t, &mut resolved)
        } else {
            None
        };
        let frames = self.finish(interp, t, resolved);
        let mut sample = self.make_sample(t, frames, truncated);
        sample.thread.task = task;
        sample
    }

    /// A sample made of the freshly read top frame and the stack cached below it.
    pub(in crate::unwind) fn full_hit_sample(
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
        let gc_frame = self.gc_frame(interp);
        if self.options.async_tasks {
            // Task attribution finds the task's frame by address: keep them until it has.
            let tail = self
                .frame_cache
                .as_ref()
                .and_then(|fc| fc.stack(key))
                .map_or_else(Vec::new, |s| s[1..].to_vec());
            let mut all = resolved;
            Self::splice_tail(&mut all, pending_native, gc_frame, tail);
            return self.finish_sample(interp, t, all, false);
        }
        let mut frames = Vec::with_capacity(tail_len + 3);
        frames.extend(self.gc_marker_without_frame(interp, t));
        frames.extend(resolved.into_iter().map(|c| c.frame));
        let tail = self
            .frame_cache
            .as_ref()
            .and_then(|fc| fc.stack(key))
            .map_or(&[][..], |s| &s[1..]);
        Self::append_tail(&mut frames, pending_native, gc_frame, tail);
        self.make_sample(t, frames, false)
    }

    /// Adds a `<GC>` marker for versions that only say "collecting" and drops addresses.
    pub(in crate::unwind) fn finish(
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
    pub(in crate::unwind) fn gc_marker_without_frame(
        &self,
        interp: &InterpreterInfo,
        t: &ThreadInfo,
    ) -> Option<Frame> {
        (self.options.gc && self.offsets().gc.frame.is_none() && interp.gc_thread == Some(t.addr))
            .then(|| Frame::pseudo(FrameKind::Gc))
    }

    /// Reads the walked frames (read through the page cache, one after another while the
    /// thread ran) again now, in one vectored read without the cache, and says how much of the
    /// walk is still the thread's stack ([`Recheck`]).
    ///
    /// The walk is whole when the thread state still names the top frame, which runs the same
    /// code under the same caller, and every frame below it is in the same call (code, caller,
    /// call site). Checking the top alone let torn walks through: a chain that returns and is
    /// replaced at the same addresses by another with the same leaf (a generator resumed by
    /// another caller, a recursion re-entered at another depth) leaves the top as it was, while
    /// the frames read below it came from the other chain.
    ///
    /// On 3.11/3.12 the thread state's frame pointer leads through the `_PyCFrame` the
    /// page-cached thread state named; reading the pointer again in the same call proves it is
    /// still the thread's.
    pub(in crate::unwind) fn recheck_walk(
        &mut self,
        t: &ThreadInfo,
        raw: &[RawFrame],
    ) -> Result<Recheck, MemoryError> {
        let nothing = Recheck {
            whole: false,
            proven_from: raw.len(),
        };
        let Some(top) = raw.first() else {
            return Ok(Recheck {
                whole: true,
                proven_from: 0,
            });
        };
        let o = self.target.offsets;
        let ts = &o.thread_state;
        let frame_len = o.frame_read_len();
        let cframe = match ts.cframe_current_frame {
            Some(off) => {
                let cframe = self.mem.read_u64(t.addr + ts.current_frame)?;
                if cframe == 0 {
                    return Ok(nothing);
                }
                Some((cframe, off))
            }
            None => None,
        };
        // The frames bottom first, the thread state's frame pointer, then the frames again top
        // first: both orders, in one syscall. A walk torn between two chains (some frames read in
        // one, the others in the next, in whatever order the page cache read them) reads the
        // same here only if the thread went from one chain to the other and back within it.
        // Frames that lie together (a data stack chunk's, one after another) are copied as one
        // span, a copy of one instant; each span costs the read a page lookup, and the fewer
        // there are, the shorter the window the thread would have to go and come back in.
        let spans = &mut self.recheck_spans;
        spans.clear();
        let at_in_span = &mut self.recheck_at;
        at_in_span.clear();
        at_in_span.resize(raw.len(), (0, 0));
        for (i, f) in raw.iter().enumerate().rev() {
            let end = f.addr.wrapping_add(frame_len as u64);
            match spans.last_mut() {
                Some((start, span_end))
                    if f.addr >= *start && end >= f.addr && end - *start <= RECHECK_SPAN_MAX =>
                {
                    *span_end = (*span_end).max(end);
                }
                _ => spans.push((f.addr, end)),
            }
            let start = spans.last().expect("pushed").0;
            at_in_span[i] = (spans.len() - 1, (f.addr - start) as usize);
        }
        let ranges = &mut self.recheck_ranges;
        ranges.clear();
        ranges.extend(spans.iter().map(|&(s, e)| (s, (e - s) as usize)));
        let spans_len: usize = ranges.iter().map(|r| r.1).sum();
        ranges.push((t.addr + ts.current_frame, 8));
        if let Some((cframe, off)) = cframe {
            ranges.push((cframe + off, 8));
        }
        let pointers = ranges.len() - spans.len();
        ranges.extend(spans.iter().rev().map(|&(s, e)| (s, (e - s) as usize)));
        // Where each span's copies start in the buffer: the first pass in span order, the
        // second in reverse.
        let span_at = &mut self.recheck_span_at;
        span_at.clear();
        span_at.resize(spans.len(), (0, 0));
        let mut at = 0;
        for (k, &(s, e)) in spans.iter().enumerate() {
            span_at[k].0 = at;
            at += (e - s) as usize;
        }
        let pointers_at = spans_len;
        let mut at = pointers_at + pointers * 8;
        for (k, &(s, e)) in spans.iter().enumerate().rev() {
            span_at[k].1 = at;
            at += (e - s) as usize;
        }
        let want = at;
        let b = &mut self.recheck_buf;
        b.clear();
        b.resize(want, 0);
        let read = self.mem.remote().read_ranges(ranges, b)?;
        if read < want {
            return Ok(nothing);
        }
        let current = match cframe {
            Some((cframe, _)) if b.u64_at(pointers_at as u64) != cframe => None,
            Some(_) => Some(b.u64_at(pointers_at as u64 + 8)),
            None => Some(b.u64_at(pointers_at as u64)),
        };
        let at_in_span = &self.recheck_at;
        // How both reads of frame `i` compare with each other and with the walk.
        let agreement = |i: usize| {
            let walked = &raw[i];
            let (span, offset) = at_in_span[i];
            let at = self.recheck_span_at[span].0 + offset;
            let first = walk::parse_frame(&o, walked.addr, &b[at..at + frame_len]);
            let at = self.recheck_span_at[span].1 + offset;
            let second = walk::parse_frame(&o, walked.addr, &b[at..at + frame_len]);
            if !(first.same_call(&second) && first.same_call(walked)) {
                Agreement::None
            } else if first.ip == second.ip && first.ip == walked.ip {
                Agreement::Whole
            } else {
                Agreement::SameCall {
                    still: first.ip == second.ip,
                }
            }
        };
        // Whole: the thread state still names the top, whose instruction may move as it runs
        // (it read the same twice now), and every caller is at the call site it was walked at
        // (fixed while the callee runs).
        let whole = current == Some(top.addr)
            && (0..raw.len()).all(|i| match agreement(i) {
                Agreement::Whole => true,
                Agreement::SameCall { still } => i == 0 && still,
                Agreement::None => false,
            });
        if whole {
            return Ok(Recheck {
                whole,
                proven_from: 0,
            });
        }
        // Frames above the one the thread state names now have returned: their memory may
        // still hold a call of another moment, under frames that have changed since (a
        // recursion's deeper frames left by another chain above a leaf that now runs at their
        // caller's address). Nothing above the thread's top is kept, and a top the walk did not
        // read (it called on, or went elsewhere) proves nothing of the walk.
        let Some(live_from) = current.and_then(|c| raw.iter().position(|f| f.addr == c)) else {
            return Ok(nothing);
        };
        // From the bottom up, the frames that read the same three times, instruction included,
        // are each the call they were when walked, under callers that are too. The first that
        // is the same call at another instruction ran on past the walk: it is kept, at the
        // instruction it was walked at (its callers were there then too), and nothing above it,
        // whose frames may be of a call it made later.
        let mut proven_from = raw.len();
        for i in (0..raw.len()).rev() {
            match agreement(i) {
                Agreement::Whole => proven_from = i,
                Agreement::SameCall { .. } => {
                    proven_from = i;
                    break;
                }
                Agreement::None => break,
            }
        }
        Ok(Recheck {
            whole,
            proven_from: proven_from.max(live_from),
        })
    }
}

/// What reading a walk's frames again found ([`Unwinder::recheck_walk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::unwind) struct Recheck {
    /// the walk is one instant's: the thread is still in every frame it read
    pub whole: bool,
    /// the walk's frames from this index to its bottom read the same again, each with its
    /// instruction: a walk that is not whole keeps only these (all of them: none is proven)
    pub proven_from: usize,
}

/// How a walked frame read again compares with its walk ([`Unwinder::recheck_walk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agreement {
    /// the same call at the same instruction, in both reads
    Whole,
    /// the same call (code, caller) at another instruction; `still`: the two new reads agree
    SameCall { still: bool },
    /// another call, or a frame no longer there
    None,
}

/// Most bytes a recheck copies as one span of frames that lie together.
const RECHECK_SPAN_MAX: u64 = 16 * 1024;
