//! Native frames into a Python sample, for both samplers: a stack copy (a BPF record's native
//! section, or the userspace sampler's copy of a stopped thread) is unwound by the process's
//! [`NativeUnwinder`] and merged with the sample's Python frames ([`merge`]), and the outcome
//! counted.

use common::NativeSection;

use super::merge::{merge, Merge};
use super::NativeUnwinder;
use crate::unwind::ThreadSample;

/// How the native stacks merged with the Python ones, since the start.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NativeMix {
    /// samples whose Python and native frames merged whole
    pub merged: u64,
    /// merged, but the native unwind ended above the bottom of the stack
    pub cut: u64,
    /// more eval-loop frames than Python evaluations: the Python stack kept alone
    pub mismatch: u64,
    /// threads whose registers or stack could not be copied (userspace: a thread not stopped);
    /// their Python stack is kept alone
    pub not_copied: u64,
    /// frames outside every object their process maps (a library unloaded since the maps were
    /// read, a JIT), named `[unknown]`
    pub unmapped_frames: u64,
}

impl NativeMix {
    /// Replaces `sample`'s frames by the merge of its Python frames and the native frames the
    /// copy `section` unwinds to.
    pub fn merge_into(
        &mut self,
        unwinder: &mut NativeUnwinder,
        section: &NativeSection<'_>,
        sample: &mut ThreadSample,
    ) {
        let stack = unwinder.stack(section);
        self.unmapped_frames += u64::from(stack.unmapped_frames);
        let (frames, how) = merge(std::mem::take(&mut sample.frames), stack);
        sample.frames = frames;
        match how {
            Merge::Whole => self.merged += 1,
            Merge::NativeCut => self.cut += 1,
            Merge::Mismatch => self.mismatch += 1,
        }
    }
}
