//! Native frames into a Python sample, for both samplers: a stack copy (a BPF record's native
//! section, or the userspace sampler's copy of a stopped thread) is unwound by the process's
//! [`NativeUnwinder`] and merged with the sample's Python frames ([`merge`]), and the outcome
//! counted.

use crate::offsets::Evaluations;
use std::collections::HashMap;

use common::NativeSection;

use super::merge::{merge, Merge, Merged};
use super::NativeUnwinder;
use crate::symbolize::Frame;
use crate::unwind::ThreadSample;

/// Threads whose root frames are kept at most: past it the memory starts again.
const MAX_ROOTS: usize = 4096;

/// Native stacks into Python ones, and the root frames of each thread whose stacks merged whole
/// (the frames below its bottom evaluation), which its cut stacks end with.
#[derive(Debug, Default)]
pub struct NativeMixer {
    /// how the merges went
    pub counts: NativeMix,
    /// (pid, host TID) → the thread's frames below its bottom evaluation
    roots: HashMap<(u32, u32), Vec<Frame>>,
}

/// How the native stacks merged with the Python ones, since the start.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NativeMix {
    /// samples whose Python and native frames merged whole
    pub merged: u64,
    /// merged, but the native unwind ended above the bottom of the stack
    pub cut: u64,
    /// of those, ended at code without unwind entries whose caller could not be proven
    pub cut_without_cfi: u64,
    /// more eval-loop frames than Python evaluations: the Python stack kept alone
    pub mismatch: u64,
    /// threads whose registers or stack could not be copied (userspace: a thread not stopped);
    /// their Python stack is kept alone
    pub not_copied: u64,
    /// frames outside every object their process maps (a library unloaded since the maps were
    /// read, a JIT), named `[unknown]`
    pub unmapped_frames: u64,
}

impl NativeMixer {
    /// Replaces `sample`'s frames by the merge of its Python frames (which divide into
    /// `evaluations` as its interpreter's do) and the native frames the copy `section` unwinds
    /// to.
    pub fn merge_into(
        &mut self,
        unwinder: &mut NativeUnwinder,
        section: &NativeSection<'_>,
        sample: &mut ThreadSample,
        evaluations: Evaluations,
    ) {
        let stack = unwinder.stack(section);
        let counts = &mut self.counts;
        counts.unmapped_frames += u64::from(stack.unmapped_frames);
        let thread = (sample.thread.pid, sample.thread.tid);
        let known = self.roots.get(&thread).map(Vec::as_slice);
        let Merged { frames, how, root } = merge(
            std::mem::take(&mut sample.frames),
            stack,
            known,
            evaluations,
        );
        sample.frames = frames;
        match how {
            Merge::Whole => counts.merged += 1,
            Merge::NativeCut => {
                counts.cut += 1;
                counts.cut_without_cfi += u64::from(stack.stopped_without_cfi);
            }
            Merge::Mismatch => counts.mismatch += 1,
        }
        if let Some(root) = root {
            if self.roots.len() >= MAX_ROOTS && !self.roots.contains_key(&thread) {
                self.roots.clear();
            }
            self.roots.insert(thread, root);
        }
    }

    /// Forgets the roots of process `pid`'s threads (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.roots.retain(|&(p, _), _| p != pid);
    }
}
