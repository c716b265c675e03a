//! Raw frames → symbolized frames: which frames a version reports, and the `<native>` and
//! `<GC>` markers between them, for walks read here, walks read by the BPF program, and the
//! frame cache's stored tails spliced below either.

use super::error::AttemptError;
use super::{walk, StackLoss};
use super::{CachedFrame, InterpreterInfo, RawFrame, Unwinder, WalkEnd};
use crate::memory::MemoryError;
use crate::offsets::Offsets;
use crate::symbolize::{bytecode_base, CodeInfo, Frame, FrameKind, ObjectError};

/// `owner` of a frame on a thread's data stack (`FRAME_OWNED_BY_THREAD`, 0 in every version).
const OWNED_BY_THREAD: u8 = 0;

impl Unwinder {
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
        self.resolve_frames(raw, interp, out, false)
            .map_err(|e| match e {
                AttemptError::Memory(e) => e,
                AttemptError::Lost(_) => MemoryError::Fault {
                    pid: self.target.pid,
                    addr: raw.first().map_or(0, |f| f.addr),
                    len: 0,
                },
            })
    }

    /// [`Unwinder::resolve`], telling a frame without a code object (a torn read) apart from
    /// memory that cannot be read. With `name_popped`, a frame that returned while the walk
    /// read it is named by its instruction pointer ([`Unwinder::popped_frame_code`]) instead of
    /// failing the walk, and counted in [`UnwindStats::popped_frames_named`].
    pub(in crate::unwind) fn resolve_frames(
        &mut self,
        raw: &[RawFrame],
        interp: &InterpreterInfo,
        out: &mut Vec<CachedFrame>,
        name_popped: bool,
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
            let (code, info) = match self.symbolizer.code_info(&mut self.mem, f.code) {
                Ok(Some(info)) => (f.code, info),
                Ok(None) => match self.popped_frame_code(f).filter(|_| name_popped) {
                    Some(found) => {
                        self.stats.popped_frames_named += 1;
                        found
                    }
                    // C boundaries were handled above: a frame without a code object on a live
                    // chain is one being set up or torn down while we read. Dropping just that
                    // frame would report a caller chain that never existed; reject the sample.
                    None => {
                        self.stats.non_code_frames += 1;
                        return Err(AttemptError::Lost(StackLoss::NonCodeFrame));
                    }
                },
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
            let base = bytecode_base(&mut self.mem, &o.code_object, code, f.tlbc_index)?;
            out.push(CachedFrame {
                addr: f.addr,
                frame: self.symbolizer.frame(&info, f.ip, base),
            });
            // 3.11 marks the first Python frame of each C-level evaluation instead.
            pending_native = self.options.native && f.is_entry;
        }
        Ok(pending_native)
    }

    /// The code object a frame ran when it returned while the walk read it, if that is what
    /// the frame is. 3.14+ clear a frame's executable as it returns but leave its `previous`
    /// and instruction pointer, so a walk that started while the frame was live reaches it
    /// through a whole chain. Rejecting that walk would bias the profile: the deeper a stack,
    /// the sooner its top returns, so the walks kept and their re-reads favour shallow stacks
    /// (3.15 on a tight recursion: 0.84 of samples inside it against 0.93 in BPF, which reads in
    /// the thread's own interrupt). The instruction pointer still lies in the bytecode of the
    /// code object it ran, which the symbolizer has seen (it named the frame in earlier walks),
    /// so the walk keeps the stack as it was when the thread state was read.
    fn popped_frame_code(&self, f: &RawFrame) -> Option<(u64, std::sync::Arc<CodeInfo>)> {
        if f.code != 0 || f.owner != OWNED_BY_THREAD {
            return None;
        }
        self.symbolizer.code_running_at(f.ip)
    }

    /// Appends cached frames below a resolved part, adding the `<native>` it left pending and
    /// the `<GC>` marker at the frame that started a running collection (3.15 `gc.frame`).
    pub(in crate::unwind) fn splice_tail(
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
    pub(in crate::unwind) fn append_tail(
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
    pub(in crate::unwind) fn gc_frame(&self, interp: &InterpreterInfo) -> Option<u64> {
        interp.gc_frame.filter(|_| self.options.gc)
    }
}

/// The pseudo-frame that goes above the cached frame at `addr`: `<GC>` if the running
/// collection started there (the cache never stores it: the collection that was running when a
/// stack was stored may be over, and one may have started since), else the `<native>` left
/// pending by the frames above (once, and not next to a cached pseudo-frame). A collection that called back
/// into Python shows as `<GC>` alone, as in a full walk.
pub(in crate::unwind) fn tail_marker(
    pending_native: &mut bool,
    gc_frame: Option<u64>,
    addr: u64,
) -> Option<Frame> {
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
/// part vouched for by the frame cache, hit the depth bound, or ended at the thread's first
/// evaluation: 3.15's base frame (checked for every walk), or before 3.15 a frame that starts a
/// C-level evaluation (3.11 `is_entry`, 3.12+ an entry frame owned by the C stack) where the
/// thread's verified walks end (`at_known_bottom`, see [`super::bottoms`]). A frame read after
/// it was popped and reused may have no caller yet, or point into reused C stack memory: such a
/// chain ends early, at a frame that is none of these.
pub(in crate::unwind) fn sound_end(
    o: &Offsets,
    end: WalkEnd,
    spliced: bool,
    raw: &[RawFrame],
    at_known_bottom: impl FnOnce(u64) -> bool,
) -> bool {
    match end {
        WalkEnd::Anchor => spliced,
        WalkEnd::DepthLimit => true,
        WalkEnd::Corrupt | WalkEnd::Cycle => false,
        WalkEnd::Bottom => {
            spliced
                || o.thread_state.base_frame.is_some()
                || raw
                    .last()
                    .is_some_and(|f| walk::starts_evaluation(o, f) && at_known_bottom(f.addr))
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
    use crate::offsets::{builtin_offsets, PythonVersion};

    fn frame(addr: u64, owner: u8) -> RawFrame {
        RawFrame {
            addr,
            code: 0x9000,
            ip: 0,
            previous: 0,
            owner,
            is_entry: false,
            tlbc_index: 0,
        }
    }

    #[test]
    fn a_moved_walk_before_3_15_is_whole_only_at_the_thread_s_known_first_evaluation() {
        let o = builtin_offsets(PythonVersion::new(3, 12, 1)).expect("table");
        let entry = o
            .frame
            .entry_owner
            .expect("3.12 marks entry frames by owner");
        let raw = [frame(0x10, 0), frame(0x7fff_0000, entry)];
        let bottom = |known: u64| move |addr: u64| addr == known;
        assert!(sound_end(
            &o,
            WalkEnd::Bottom,
            false,
            &raw,
            bottom(0x7fff_0000)
        ));
        // An entry frame with no caller read from reused C stack memory: not where this
        // thread's stack ends, so not a whole stack.
        assert!(!sound_end(
            &o,
            WalkEnd::Bottom,
            false,
            &raw,
            bottom(0x7ffe_0000)
        ));
        // A frame that starts no evaluation is never an end, known or not.
        let raw = [frame(0x10, 0), frame(0x20, 0)];
        assert!(!sound_end(&o, WalkEnd::Bottom, false, &raw, bottom(0x20)));
        assert!(sound_end(&o, WalkEnd::DepthLimit, false, &raw, bottom(0)));
        assert!(!sound_end(&o, WalkEnd::Corrupt, false, &raw, bottom(0x20)));
    }
}
