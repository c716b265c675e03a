//! `record --native` in userspace mode: the registers and a copy of the stack of a thread this
//! process has stopped (ptrace), the same input the BPF program gives the native unwinder.
//!
//! In: a host TID stopped by [`super::blocking::PausedThreads`] (ptrace requests only work
//! from the thread that seized it). Out: ip, sp, bp and up to
//! [`common::NATIVE_STACK_BYTES`] of stack from `sp` up, read a page at a time so that a
//! window reaching past the stack's top keeps what lies below it: raw data, unwound and merged
//! with the thread's Python frames by [`crate::unwind::native::NativeMix`], as BPF records are.

use nix::sys::ptrace;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

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

impl UserRegs {
    /// The registers the native unwinder starts from, out of ptrace's register set.
    #[cfg(target_arch = "x86_64")]
    fn from_ptrace(r: &libc::user_regs_struct) -> Self {
        Self {
            ip: r.rip,
            sp: r.rsp,
            bp: r.rbp,
        }
    }

    /// The registers the native unwinder starts from, out of ptrace's `NT_PRSTATUS` set: x29 is
    /// the frame pointer (AAPCS64).
    #[cfg(target_arch = "aarch64")]
    fn from_ptrace(r: &libc::user_regs_struct) -> Self {
        Self {
            ip: r.pc,
            sp: r.sp,
            bp: r.regs[29],
        }
    }
}

/// Reads the registers of stopped thread `tid` and copies its stack from `sp` up into `buf`
/// (cleared first), at most [`common::NATIVE_STACK_BYTES`].
pub fn copy_stopped_thread(tid: u32, buf: &mut Vec<u8>) -> Result<UserRegs, CopyError> {
    let pid = Pid::from_raw(tid as i32);
    let r = ptrace::getregs(pid).map_err(|errno| CopyError::Registers { tid, errno })?;
    let regs = UserRegs::from_ptrace(&r);
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
