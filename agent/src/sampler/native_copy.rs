//! `record --native` in userspace mode: the registers and a copy of the stack of a thread this
//! process has stopped (ptrace), the same input the BPF program gives the native unwinder.
//!
//! In: a host TID stopped by [`super::blocking::PausedThreads`] (ptrace requests only work
//! from the thread that seized it). Out: ip, sp, bp and up to
//! [`common::NATIVE_STACK_BYTES`] of stack from `sp` up, read a page at a time so that a
//! window reaching past the stack's top keeps what lies below it. [`NativeStacks`] unwinds the
//! copy and merges it with the thread's Python frames, as the eBPF path does with its records.

use std::collections::HashMap;

use common::NativeSection;
use nix::sys::ptrace;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

use crate::symbolize::native::DebugDirs;
use crate::unwind::native::merge::{merge, Merge};
use crate::unwind::native::NativeUnwinder;
use crate::unwind::ThreadSample;

const PAGE: u64 = 4096;

/// Why a thread's native stack could not be copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    /// Its registers could not be read (not stopped by us, or gone).
    #[error("reading the registers of thread {tid}: {errno}")]
    Registers {
        /// host TID
        tid: u32,
        /// what ptrace said
        errno: nix::errno::Errno,
    },
    /// Not a byte of its stack could be read.
    #[error("reading the stack of thread {tid}: {errno}")]
    Stack {
        /// host TID
        tid: u32,
        /// what process_vm_readv said
        errno: nix::errno::Errno,
    },
}

/// User registers of a stopped thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRegs {
    /// instruction pointer
    pub ip: u64,
    /// stack pointer: the address of the first copied byte
    pub sp: u64,
    /// frame pointer
    pub bp: u64,
}

/// Reads the registers of stopped thread `tid` and copies its stack from `sp` up into `buf`
/// (cleared first), at most [`common::NATIVE_STACK_BYTES`].
pub fn copy_stopped_thread(tid: u32, buf: &mut Vec<u8>) -> Result<UserRegs, CopyError> {
    let pid = Pid::from_raw(tid as i32);
    let r = ptrace::getregs(pid).map_err(|errno| CopyError::Registers { tid, errno })?;
    let regs = UserRegs {
        ip: r.rip,
        sp: r.rsp,
        bp: r.rbp,
    };
    let want = u64::from(common::NATIVE_STACK_BYTES);
    buf.clear();
    buf.resize(want as usize, 0);
    // One remote piece per page: a transfer stops at the first piece it cannot read whole.
    let mut remote = Vec::with_capacity((want / PAGE + 1) as usize);
    let (mut at, end) = (regs.sp, regs.sp.saturating_add(want));
    while at < end {
        let next = ((at / PAGE) + 1) * PAGE;
        let len = next.min(end) - at;
        remote.push(RemoteIoVec {
            base: at as usize,
            len: len as usize,
        });
        at += len;
    }
    let got = process_vm_readv(pid, &mut [std::io::IoSliceMut::new(&mut buf[..])], &remote)
        .map_err(|errno| CopyError::Stack { tid, errno })?;
    buf.truncate(got);
    Ok(regs)
}

/// Counters of the native stacks mixed into userspace samples.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MixStats {
    /// samples whose native and Python stacks merged whole
    pub merged: u64,
    /// merged down to where the native unwind stopped, the rest of the Python stack below it
    pub cut: u64,
    /// the two did not match: the Python frames are kept alone
    pub mismatch: u64,
    /// no copy could be taken (the thread was not stopped, or is gone): Python frames alone
    pub not_copied: u64,
    /// frames outside every object the process maps (a library unloaded since the maps were
    /// read, a JIT), named `[unknown]`
    pub unmapped_frames: u64,
}

/// The native unwinders of the sampled processes, and the copy buffer they share.
#[derive(Debug)]
pub struct NativeStacks {
    unwinders: HashMap<u32, NativeUnwinder>,
    buf: Vec<u8>,
    stats: MixStats,
    /// where stripped objects' debug files are looked for
    debug_dirs: DebugDirs,
}

impl NativeStacks {
    /// No process yet; their unwinders will look for debug files in `debug_dirs`.
    pub fn new(debug_dirs: DebugDirs) -> NativeStacks {
        NativeStacks {
            unwinders: HashMap::new(),
            buf: Vec::new(),
            stats: MixStats::default(),
            debug_dirs,
        }
    }

    /// Counters.
    pub fn stats(&self) -> MixStats {
        self.stats
    }

    /// Forgets process `pid` (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.unwinders.remove(&pid);
    }

    /// Replaces `sample`'s frames by the mix of its Python frames and the native frames of its
    /// thread, which must be stopped by this thread; leaves them alone if no copy can be taken.
    pub fn mix(&mut self, sample: &mut ThreadSample) {
        let regs = match copy_stopped_thread(sample.thread.tid, &mut self.buf) {
            Ok(regs) => regs,
            Err(e) => {
                self.stats.not_copied += 1;
                tracing::debug!(pid = sample.thread.pid, "no native stack: {e}");
                return;
            }
        };
        let section = NativeSection::from_user_copy(regs.ip, regs.sp, regs.bp, &self.buf);
        let unwinder = self
            .unwinders
            .entry(sample.thread.pid)
            .or_insert_with(|| NativeUnwinder::new(sample.thread.pid, self.debug_dirs.clone()));
        let stack = unwinder.stack(&section);
        self.stats.unmapped_frames += u64::from(stack.unmapped_frames);
        let (frames, how) = merge(std::mem::take(&mut sample.frames), stack);
        sample.frames = frames;
        match how {
            Merge::Whole => self.stats.merged += 1,
            Merge::NativeCut => self.stats.cut += 1,
            Merge::Mismatch => self.stats.mismatch += 1,
        }
    }
}
