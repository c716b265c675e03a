//! `--blocking`: stop every thread of a process around one sample (ptrace seize + interrupt),
//! so the stacks read are consistent.
//!
//! A thread that cannot be seized because it exited after we listed it (ESRCH) or cannot be
//! traced (EPERM: traced by someone else, or no rights) is skipped and counted, never retried in
//! a loop (CPython gh-138122 / PR #143368 fixed exactly that endless retry in its own sampler).

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use crate::discovery::task_ids;

/// Counters of blocking-mode seizes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SeizeStats {
    /// threads stopped
    pub seized: u64,
    /// threads skipped because they were gone (ESRCH)
    pub skipped_gone: u64,
    /// threads skipped because tracing was refused (EPERM)
    pub skipped_denied: u64,
    /// other failures (the thread is skipped too)
    pub failed: u64,
}

/// Threads stopped for one sample; they resume when this is dropped.
#[derive(Debug)]
pub struct PausedThreads {
    seized: Vec<Pid>,
}

/// Why one thread could not be stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PauseError {
    /// It exited after it was listed (ESRCH).
    #[error("thread {tid} is gone")]
    Gone {
        /// host TID
        tid: u32,
    },
    /// Tracing it was refused (EPERM: traced by someone else, or no rights).
    #[error("not allowed to stop thread {tid} (traced by another process, or no CAP_SYS_PTRACE)")]
    Denied {
        /// host TID
        tid: u32,
    },
    /// Any other ptrace failure.
    #[error("stopping thread {tid} failed: {errno}")]
    Other {
        /// host TID
        tid: u32,
        /// what ptrace said
        errno: Errno,
    },
}

impl PauseError {
    fn count(self, stats: &mut SeizeStats) {
        match self {
            PauseError::Gone { .. } => stats.skipped_gone += 1,
            PauseError::Denied { .. } => stats.skipped_denied += 1,
            PauseError::Other { .. } => stats.failed += 1,
        }
    }
}

/// Seizes and stops one thread; on success it is traced by us and stopped (or already gone,
/// which detaching tolerates).
fn seize_and_stop(host_tid: u32) -> Result<Pid, PauseError> {
    let tid = Pid::from_raw(host_tid as i32);
    match ptrace::seize(tid, ptrace::Options::empty()) {
        Ok(()) => {}
        Err(Errno::ESRCH) => return Err(PauseError::Gone { tid: host_tid }),
        Err(Errno::EPERM) => return Err(PauseError::Denied { tid: host_tid }),
        Err(errno) => {
            return Err(PauseError::Other {
                tid: host_tid,
                errno,
            })
        }
    }
    if ptrace::interrupt(tid).is_ok() {
        // Wait for the group-stop; a thread that vanished reports ECHILD/ESRCH.
        let _ = waitpid(tid, Some(WaitPidFlag::__WALL));
    }
    Ok(tid)
}

impl PausedThreads {
    /// Stops every thread of `pid` that can be stopped.
    pub fn pause(pid: u32, stats: &mut SeizeStats) -> PausedThreads {
        let mut seized = Vec::new();
        for t in task_ids(pid) {
            match seize_and_stop(t.host_tid) {
                Ok(tid) => {
                    seized.push(tid);
                    stats.seized += 1;
                }
                Err(e) => e.count(stats),
            }
        }
        PausedThreads { seized }
    }

    /// Stops the one thread `host_tid` (the others keep running): for a consistent read of a
    /// stack that changes faster than it can be read while it runs.
    pub fn pause_thread(host_tid: u32) -> Result<PausedThreads, PauseError> {
        let tid = seize_and_stop(host_tid)?;
        Ok(PausedThreads { seized: vec![tid] })
    }
}

impl Drop for PausedThreads {
    fn drop(&mut self) {
        for &tid in &self.seized {
            let _ = ptrace::detach(tid, None);
        }
    }
}
